"""Tokenisation at a fixed length ``L`` with the PAPA re-layout (official ``--use_papa_preprocess``).

Constants are indexed by position, so estimating and applying them must lay inputs out alike:

* sequence tasks: ``[CLS]`` + segment 1 from ``0`` (cut at ``L/2``); the separator and segment 2 from ``L/2``; the
  final ``[SEP]`` at ``L − 1``; pads between (a single sentence: ``0 .. L/2 − 1`` and ``L − 1``).
* token tasks: the words keep their positions; the ``[SEP]`` moves to ``L − 1``.

``relayout=False``: plain ``padding="max_length", truncation=True``. Unlike the official code, ``token_type_ids``
move with their tokens. Functions return ``[N, L]`` tensors: ``input_ids``, ``attention_mask`` (1 = real),
``token_type_ids`` when the tokenizer makes them, and for token tasks ``labels`` (``-100`` on every piece but a
word's first).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase

from papa.core.errors import PapaError

IGNORE_INDEX = -100


def check_max_length(max_length: int, model_positions: int | None = None) -> int:
    if not isinstance(max_length, int) or isinstance(max_length, bool) or max_length < 4:
        raise PapaError(f"max_length must be an integer of at least 4, got {max_length!r}", "The paper uses 64.")
    if max_length % 2:
        raise PapaError(f"max_length must be even for the PAPA layout, got {max_length}", "The paper uses 64.")
    if model_positions is not None and max_length > model_positions:
        raise PapaError(
            f"max_length {max_length} exceeds the model's {model_positions} positions",
            f"Use at most {model_positions}.",
        )
    return max_length


def _relayout_sequence(ids: list[int], types: list[int] | None, sep_id: int, pad_id: int, length: int):
    """Move one example's tokens to the PAPA positions. Returns (ids, mask, types)."""
    seps = [i for i, t in enumerate(ids) if t == sep_id]
    if not seps:
        raise PapaError("A tokenised input has no separator token", "Use a tokenizer with a sep_token (BERT-like).")
    first_sep, last_sep, half = seps[0], seps[-1], length // 2
    new_ids, new_mask = [pad_id] * length, [0] * length
    new_types = [0] * length if types is not None else None
    moves = [(j, j) for j in range(min(first_sep, half))]
    for j in range(first_sep, last_sep):
        target = half + j - first_sep
        if target == length - 1:
            break
        moves.append((j, target))
    moves.append((last_sep, length - 1))
    for source, target in moves:
        new_ids[target], new_mask[target] = ids[source], 1
        if new_types is not None:
            new_types[target] = types[source]
    return new_ids, new_mask, new_types


def encode_sequences(
    tokenizer: PreTrainedTokenizerBase,
    first: Sequence[str],
    second: Sequence[str] | None = None,
    max_length: int = 64,
    relayout: bool = True,
) -> dict[str, torch.Tensor]:
    """Tokenise sentences (or sentence pairs) to ``[N, L]`` tensors."""
    check_max_length(max_length)
    args = (list(first),) if second is None else (list(first), list(second))
    enc = tokenizer(*args, padding="max_length", truncation=True, max_length=max_length)
    out = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    if "token_type_ids" in enc:
        out["token_type_ids"] = enc["token_type_ids"]
    if relayout:
        ids_out, mask_out, types_out = [], [], []
        types_in = out.get("token_type_ids")
        for n, ids in enumerate(out["input_ids"]):
            ids_n, mask_n, types_n = _relayout_sequence(
                ids,
                None if types_in is None else types_in[n],
                tokenizer.sep_token_id,
                tokenizer.pad_token_id,
                max_length,
            )
            ids_out.append(ids_n), mask_out.append(mask_n), types_out.append(types_n)
        out["input_ids"], out["attention_mask"] = ids_out, mask_out
        if types_in is not None:
            out["token_type_ids"] = types_out
    return {key: torch.tensor(value, dtype=torch.long) for key, value in out.items()}


def encode_words(
    tokenizer: PreTrainedTokenizerBase,
    words: Sequence[Sequence[str]],
    tags: Sequence[Sequence[int]] | None = None,
    max_length: int = 64,
    relayout: bool = True,
) -> dict[str, torch.Tensor]:
    """Tokenise pre-split words; with ``tags`` adds ``labels`` on each word's first piece."""
    check_max_length(max_length)
    enc = tokenizer(
        [list(w) for w in words], is_split_into_words=True, padding="max_length", truncation=True, max_length=max_length
    )
    input_ids, attention_mask = enc["input_ids"], enc["attention_mask"]
    labels = []
    for n in range(len(input_ids)):
        word_ids = enc.word_ids(n)
        row, previous = [], None
        for word in word_ids:
            first_piece = word is not None and word != previous
            row.append(int(tags[n][word]) if (tags is not None and first_piece) else IGNORE_INDEX)
            previous = word
        labels.append(row)
        if relayout:
            ids = input_ids[n]
            sep = ids.index(tokenizer.sep_token_id) if tokenizer.sep_token_id in ids else None
            if sep is None:
                raise PapaError("A tokenised input has no separator token", "Use a tokenizer with a sep_token.")
            ids[sep], attention_mask[n][sep] = tokenizer.pad_token_id, 0
            ids[-1], attention_mask[n][-1] = tokenizer.sep_token_id, 1
            row[sep], row[-1] = IGNORE_INDEX, IGNORE_INDEX
    out = {"input_ids": input_ids, "attention_mask": attention_mask}
    if "token_type_ids" in enc:
        out["token_type_ids"] = enc["token_type_ids"]
    if tags is not None:
        out["labels"] = labels
    return {key: torch.tensor(value, dtype=torch.long) for key, value in out.items()}
