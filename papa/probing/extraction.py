"""Encoder passes that compute :class:`~papa.probing.features.Features`: every hidden state of the frozen (possibly
patched) encoder, in eval mode, at the positions the probe reads.

:func:`extract_features` runs *compact* passes where the architecture allows (:mod:`papa.core.compact`: each batch on
its real slots, rows sorted by length), else padded ones, and assembles rows in order: all at once in RAM, or
:data:`STREAM_WINDOW` rows at a time when they stream to disk (:func:`papa.probing.features.stream_features`).
:func:`get_features` gives a split's features for a head set from the on-disk cache or by extraction; only head sets
other runs share (none or every head replaced) are written to the cache.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from papa.core.compact import compact_forward, plan_batches, supports_compact
from papa.core.constants import ConstantSet
from papa.core.layout import IGNORE_INDEX
from papa.core.models import LoadedModel
from papa.core.patching import patch_constant_heads, prune_qk, unpatch
from papa.probing.features import (
    FEATURE_DTYPE,
    Features,
    cached_features_key,
    encoded_sha256,
    feature_bytes,
    load_cached,
    memory_budget_bytes,
    store_cached,
    stream_features,
)
from papa.probing.task_inputs import TaskInputs


def iter_hidden_states(
    model: torch.nn.Module, encoded: dict[str, torch.Tensor], batch_size: int, device: torch.device
) -> Iterator[tuple[slice, torch.Tensor]]:
    """Yield ``(rows, states [B, S, L, H])`` batch by batch, padded (the caller sets the mode). Gradients are off
    only around each pass, never across a ``yield``: a consumer stopping early must not leave them disabled."""
    total = encoded["input_ids"].shape[0]
    inputs = {k: v for k, v in encoded.items() if k != "labels"}
    for start in range(0, total, batch_size):
        rows = slice(start, min(start + batch_size, total))
        batch = {k: v[rows].to(device) for k, v in inputs.items()}
        with torch.no_grad():
            states = torch.stack(model(**batch, output_hidden_states=True).hidden_states, dim=1)
        yield rows, states


def iter_compact_states(
    model: torch.nn.Module, encoded: dict[str, torch.Tensor], batch_size: int, device: torch.device
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Yield ``(rows [B], slots [P], states [B, S, P, H])``: compact passes (:mod:`papa.core.compact`) over the rows
    sorted by length; a row's real slots equal the padded pass's (≤ 1e-5), its pad slots hold whatever they got."""
    inputs = {k: v for k, v in encoded.items() if k != "labels"}
    for batch in plan_batches(inputs["attention_mask"], batch_size):
        rows = {k: v[batch.rows].to(device) for k, v in inputs.items()}
        with torch.no_grad():
            states = torch.stack(
                compact_forward(model, rows, batch.slots.to(device), output_hidden_states=True).hidden_states, dim=1
            )
        yield batch.rows, batch.slots, states


#: Rows assembled at a time when compact features stream to disk (features in RAM are one window).
STREAM_WINDOW = 512


def _passes(
    model, encoded, batch_size, device, compact: bool
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """:func:`iter_compact_states`, or the padded passes in the same form (``slots``: all ``L``)."""
    if compact:
        yield from iter_compact_states(model, encoded, batch_size, device)
        return
    every = torch.arange(encoded["input_ids"].shape[1])
    for rows, states in iter_hidden_states(model, encoded, batch_size, device):
        yield torch.arange(rows.start, rows.stop), every, states


def _windows(encoded: dict[str, torch.Tensor], window: int) -> Iterator[tuple[int, dict[str, torch.Tensor]]]:
    total = encoded["input_ids"].shape[0]
    for start in range(0, total, window):
        yield start, {k: v[start : start + window] for k, v in encoded.items()}


def _sequence_states(
    model, encoded, batch_size, device, positions: torch.Tensor, compact: bool, window: int
) -> Iterator[torch.Tensor]:
    """``states [W, S, P, H]`` (float16) at the kept ``positions [P]``, per window of rows in row order; 0 where a
    compact row's batch did not reach (pad for that row, masked)."""
    for _, part in _windows(encoded, window):
        out = None
        for rows, slots, batch in _passes(model, part, batch_size, device, compact):
            if out is None:
                out = torch.zeros(
                    part["input_ids"].shape[0], batch.shape[1], len(positions), batch.shape[-1], dtype=FEATURE_DTYPE
                )
            index = torch.searchsorted(positions, slots).clamp_max(len(positions) - 1)
            kept = positions[index] == slots  # a compact batch's slots are all kept; a padded one's not
            full = torch.zeros(len(rows), *out.shape[1:], dtype=FEATURE_DTYPE)
            full[:, :, index[kept]] = batch[:, :, kept.to(batch.device)].to("cpu", FEATURE_DTYPE)
            out[rows] = full
        yield out


def _token_states(
    model, encoded, batch_size, device, keep: torch.Tensor, compact: bool, window: int
) -> Iterator[torch.Tensor]:
    """``states [T_w, S, H]`` (float16) of the labelled tokens ``keep [N, L]``, per window, in (row, position) order."""
    for start, part in _windows(encoded, window):
        labelled = keep[start : start + part["input_ids"].shape[0]]  # [W, L]
        first = torch.cat([torch.zeros(1, dtype=torch.long), labelled.sum(1).cumsum(0)])  # each row's first token
        out = None
        for rows, slots, batch in _passes(model, part, batch_size, device, compact):
            chosen = labelled[rows][:, slots]  # [B, P]
            tokens = batch.permute(0, 2, 1, 3)[chosen.to(batch.device)].to("cpu", FEATURE_DTYPE)  # [t, S, H] by row
            if out is None:
                out = torch.zeros(int(first[-1]), batch.shape[1], batch.shape[-1], dtype=FEATURE_DTYPE)
            counts = chosen.sum(1)
            target = (
                torch.cat([torch.arange(first[r], first[r] + n) for r, n in zip(rows.tolist(), counts.tolist())])
                if len(tokens)
                else torch.empty(0, dtype=torch.long)
            )
            out[target] = tokens
        yield (
            out
            if out is not None
            else torch.empty(0, model.config.num_hidden_layers + 1, model.config.hidden_size, dtype=FEATURE_DTYPE)
        )


def extract_features(
    model: torch.nn.Module,
    encoded: dict[str, torch.Tensor],
    token_task: bool,
    batch_size: int = 64,
    device: torch.device | str = "cpu",
    compact: bool = True,
) -> Features:
    """Run the frozen encoder once in eval mode over ``encoded``; its states (float16) held in RAM within
    ``PAPA_MEMORY_BUDGET_GB``, else streamed to a memory-mapped file (same values). Sequence tasks: ``states [N, S,
    P, H]`` at the ``P`` positions real in some example; token tasks: ``states [T, S, H]`` of the labelled tokens in
    (example, position) order. ``compact`` (where supported): real positions equal the padded pass's (≤ 1e-5 before
    float16, tested); other positions hold 0 or the pass's pad value (masked)."""
    device = torch.device(device)
    was_training = model.training
    model.eval()
    config = model.config
    num_states, hidden = config.num_hidden_layers + 1, config.hidden_size
    total, length = encoded["input_ids"].shape
    labels = encoded["labels"]
    compact = compact and supports_compact(model)
    try:
        if not token_task:
            mask = encoded["attention_mask"].bool()
            positions = mask.any(0).nonzero().flatten()
            shape = [total, num_states, len(positions), hidden]
            small = {"labels": labels.clone(), "mask": mask[:, positions].clone(), "positions": positions}
            if feature_bytes(total, num_states, len(positions), hidden, False) > memory_budget_bytes():
                return stream_features(
                    _sequence_states(model, encoded, batch_size, device, positions, compact, STREAM_WINDOW),
                    small,
                    shape,
                )
            parts = list(_sequence_states(model, encoded, batch_size, device, positions, compact, max(total, 1)))
            states = (
                parts[0] if len(parts) == 1 else torch.cat(parts) if parts else torch.empty(shape, dtype=FEATURE_DTYPE)
            )
            return Features(states, small["labels"], mask=small["mask"], positions=positions)
        keep = labels != IGNORE_INDEX  # [N, L]
        example = torch.arange(total)[:, None].expand(total, length)[keep].clone()
        count = int(keep.sum())
        if count * num_states * hidden * 2 > memory_budget_bytes():
            return stream_features(
                _token_states(model, encoded, batch_size, device, keep, compact, STREAM_WINDOW),
                {"labels": labels[keep].clone(), "example": example},
                [count, num_states, hidden],
            )
        parts = list(_token_states(model, encoded, batch_size, device, keep, compact, max(total, 1)))
        return Features(
            torch.cat(parts) if count else torch.empty(0, num_states, hidden, dtype=FEATURE_DTYPE),
            labels[keep].clone(),
            example=example,
        )
    finally:
        model.train(was_training)


def get_features(
    lm: LoadedModel,
    inputs: TaskInputs,
    split: str,
    heads,
    constants: ConstantSet | None,
    device,
    batch_size: int = 64,
    use_cache: bool = True,
    keys: list[str] | None = None,
    replacement: str = "papa",
) -> tuple[Features, bool]:
    """(features, from_cache) of ``split`` ("train"/"eval") with ``heads`` replaced by ``replacement``
    (:data:`papa.core.replacements.REPLACEMENTS`); the cache key is appended to ``keys`` when given (the run's record).
    A partial head set (0 < k < all: one ranking's k for one task, read by no other run) is read from the cache but
    never written to it: writing it cost a checksum and a copy of every state, and its entry was deleted after the
    run. Sets with no or every head replaced (k = 0, the floor, lr selection) are shared and stored."""
    encoded = inputs.train if split == "train" else inputs.eval
    record = inputs.data_record()
    token = inputs.spec.is_token_task
    key = cached_features_key(
        fingerprint=lm.fingerprint,
        task=inputs.spec.local_folder if token else inputs.spec.name,  # NER and POS share the CoNLL sentences
        split=split,
        indices=record[f"{split}_indices_sha"],
        max_length=inputs.max_length,
        relayout=inputs.relayout,
        heads=sorted(map(list, heads)),
        constants=constants.meta.get("sha256") if (heads and constants) else None,
        replacement=replacement if heads else None,
        encoded=encoded_sha256(encoded, with_labels=not token),
    )
    if keys is not None:
        keys.append(str(key))
    if use_cache and (hit := load_cached(key)) is not None:
        if not token:
            return hit, True
        labels = encoded["labels"][encoded["labels"] != IGNORE_INDEX]  # this task's tags at the same word positions
        if labels.shape == hit.labels.shape:
            return Features(hit.states, labels.clone(), hit.mask, hit.example, hit.positions), True
    if heads:
        patch_constant_heads(
            lm.model, constants.constants, heads, replacement=replacement, output_means=constants.output_means
        )
        prune_qk(lm.model)
    try:
        features = extract_features(lm.model, encoded, inputs.spec.is_token_task, batch_size, device)
    finally:
        unpatch(lm.model)
    if use_cache and not 0 < len(heads) < lm.num_layers * lm.num_heads:
        store_cached(key, features)
    return features, False
