"""The PAPA re-layout with the embedded MiniLM (BERT WordPiece) tokenizer."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer

from papa.core.errors import PapaError
from papa.core.layout import IGNORE_INDEX, encode_sequences, encode_words
from papa.core.models import resolve_model_path

CLS, SEP, PAD = 101, 102, 0
L = 16
HALF = L // 2


@pytest.fixture(scope="module")
def tok():
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("minilm-l6")[0])
    assert (tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id) == (CLS, SEP, PAD)
    return tokenizer


def _words(n, start=0):
    names = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()
    return " ".join(names[(start + i) % len(names)] for i in range(n))


def test_pair_exact(tok):
    enc = encode_sequences(tok, ["a fine film"], ["a dull one"], max_length=L)
    assert enc["input_ids"].tolist() == [[101, 1037, 2986, 2143, 0, 0, 0, 0, 102, 1037, 10634, 2028, 0, 0, 0, 102]]
    assert enc["attention_mask"].tolist() == [[1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1]]
    # token types move with their tokens (the first [SEP] belongs to segment 1)
    assert enc["token_type_ids"].tolist() == [[0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 1]]
    assert all(v.dtype == torch.long and v.shape == (1, L) for v in enc.values())


def test_single_exact(tok):
    enc = encode_sequences(tok, ["a fine film"], max_length=L)
    assert enc["input_ids"].tolist() == [[101, 1037, 2986, 2143] + [0] * 11 + [102]]
    assert enc["attention_mask"].tolist() == [[1, 1, 1, 1] + [0] * 11 + [1]]
    assert enc["token_type_ids"].tolist() == [[0] * L]


def _segments(tok, first, second):
    """Segment pieces as the plain (truncating) tokenizer keeps them."""
    args = (first,) if second is None else (first, second)
    ids = tok(*args, truncation=True, max_length=L)["input_ids"]
    seps = [i for i, t in enumerate(ids) if t == SEP]
    if second is None:
        return ids[1 : seps[0]], None
    return ids[1 : seps[0]], ids[seps[0] + 1 : seps[-1]]


CASES = [
    (_words(2), _words(3, 5)),  # short pair
    (_words(20), _words(2, 3)),  # long first segment
    (_words(2), _words(20, 3)),  # long second segment
    (_words(20), _words(20, 7)),  # both long
    (_words(5), ""),  # empty second segment
    (_words(3), None),  # short single
    (_words(30), None),  # long single
    (_words(HALF - 1), None),  # single that exactly fills the first half
]


@pytest.mark.parametrize("first,second", CASES)
def test_relayout_positions(tok, first, second):
    enc = encode_sequences(tok, [first], None if second is None else [second], max_length=L)
    ids, mask = enc["input_ids"][0].tolist(), enc["attention_mask"][0].tolist()
    seg1, seg2 = _segments(tok, first, second)
    kept1 = seg1[: HALF - 1]
    assert ids[0] == CLS and ids[L - 1] == SEP
    assert ids[1 : 1 + len(kept1)] == kept1
    if second is None:
        assert ids[1 + len(kept1) : L - 1] == [PAD] * (L - 2 - len(kept1))
        assert ids.count(SEP) == 1
    else:
        kept2 = seg2[: HALF - 2]
        assert ids[HALF] == SEP and ids.count(SEP) == 2
        assert ids[1 + len(kept1) : HALF] == [PAD] * (HALF - 1 - len(kept1))
        assert ids[HALF + 1 : HALF + 1 + len(kept2)] == kept2
        assert ids[HALF + 1 + len(kept2) : L - 1] == [PAD] * (L - 2 - HALF - len(kept2))
        assert enc["token_type_ids"][0, HALF + 1 : HALF + 1 + len(kept2)].tolist() == [1] * len(kept2)
        assert enc["token_type_ids"][0, : HALF + 1].tolist() == [0] * (HALF + 1)
    assert mask == [int(t != PAD) for t in ids]


def test_batch_of_mixed_lengths(tok):
    firsts = [_words(n) for n in (1, 4, 9, 25)]
    seconds = [_words(n, 2) for n in (30, 1, 6, 2)]
    enc = encode_sequences(tok, firsts, seconds, max_length=L)
    assert enc["input_ids"].shape == (4, L)
    assert torch.all(enc["input_ids"][:, 0] == CLS) and torch.all(enc["input_ids"][:, HALF] == SEP)
    assert torch.all(enc["input_ids"][:, -1] == SEP)
    assert torch.equal(enc["attention_mask"], (enc["input_ids"] != PAD).long())


@pytest.mark.parametrize("pairs", [False, True])
def test_no_relayout_is_plain_tokenisation(tok, pairs):
    firsts = [_words(2), _words(25), "a fine film"]
    seconds = [_words(3), _words(1), _words(30)] if pairs else None
    enc = encode_sequences(tok, firsts, seconds, max_length=L, relayout=False)
    args = (firsts,) if seconds is None else (firsts, seconds)
    plain = tok(*args, padding="max_length", truncation=True, max_length=L, return_tensors="pt")
    assert set(enc) == {"input_ids", "attention_mask", "token_type_ids"}
    for key in enc:
        assert torch.equal(enc[key], plain[key]), key


def test_encode_words(tok):
    words = [["Hello", "world", "unbelievably"], ["ok"]]
    tags = [[1, 2, 3], [4]]
    enc = encode_words(tok, words, tags, max_length=L)
    plain = tok(words, is_split_into_words=True, padding="max_length", truncation=True, max_length=L)
    for n in range(2):
        ids, mask, labels = (enc[k][n].tolist() for k in ("input_ids", "attention_mask", "labels"))
        word_ids = plain.word_ids(n)
        firsts = [i for i, w in enumerate(word_ids) if w is not None and (i == 0 or word_ids[i - 1] != w)]
        assert [labels[i] for i in firsts] == tags[n]
        assert all(label == IGNORE_INDEX for i, label in enumerate(labels) if i not in firsts)
        pieces = [i for i, w in enumerate(word_ids) if w is not None]
        assert ids[: 1 + len(pieces)] == plain["input_ids"][n][: 1 + len(pieces)]  # words keep their positions
        assert ids[0] == CLS and ids[L - 1] == SEP and mask[L - 1] == 1 and ids.count(SEP) == 1
        assert mask == [int(t != PAD) for t in ids]
    # "unbelievably" is split: only its first piece is labelled
    assert len([w for w in plain.word_ids(0) if w == 2]) > 1


def test_encode_words_truncated_and_unlabelled(tok):
    words = [_words(30).split()]
    enc = encode_words(tok, words, [list(range(30))], max_length=L)
    ids, labels = enc["input_ids"][0].tolist(), enc["labels"][0].tolist()
    assert ids[0] == CLS and ids[-1] == SEP and ids.count(SEP) == 1 and PAD not in ids
    kept = [label for label in labels if label != IGNORE_INDEX]
    assert kept == list(range(len(kept))) and 0 < len(kept) < 30
    assert labels[0] == labels[-1] == IGNORE_INDEX
    bare = encode_words(tok, words, max_length=L)
    assert "labels" not in bare and torch.equal(bare["input_ids"], enc["input_ids"])
    plain = encode_words(tok, [["a", "b"]], max_length=L, relayout=False)
    reference = tok(
        [["a", "b"]], is_split_into_words=True, padding="max_length", truncation=True, max_length=L, return_tensors="pt"
    )
    assert torch.equal(plain["input_ids"], reference["input_ids"])
    assert torch.equal(plain["attention_mask"], reference["attention_mask"])


@pytest.mark.parametrize("bad", [15, 2, 0, True, 16.0])
def test_bad_max_length(tok, bad):
    with pytest.raises(PapaError):
        encode_sequences(tok, ["a"], max_length=bad)
    with pytest.raises(PapaError):
        encode_words(tok, [["a"]], max_length=bad)
