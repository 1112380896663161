"""Compact encoder passes (papa.core.compact) against the padded computation: the same hidden states at real
positions (≤ 1e-5), the same constants (≤ 1e-6) and the same cached features, for every architecture in the
adapter table, with 0, some and all heads constant, on single sentences, PAPA-layout pairs and token tasks."""

from __future__ import annotations

import pytest
import torch
from test_models import CONFIGS, _build
from tiny import HEADS, LAYERS, VOCAB, L

import papa.probing.extraction as extraction_module
from papa.core.architectures import ADAPTERS
from papa.core.compact import compact_forward, natural_position_ids, plan_batches, supports_compact
from papa.core.constants import estimate_constants
from papa.core.heads import all_heads
from papa.core.layout import IGNORE_INDEX
from papa.core.patching import patch_constant_heads, prune_qk, unpatch
from papa.probing.extraction import extract_features

KINDS = ("single", "pair", "token")
HEAD_SETS = {"none": [], "some": [(0, 1), (1, 0), (1, 3)], "all": all_heads(LAYERS, HEADS)}


def papa_layout_batch(arch: str, kind: str, rows: int = 13, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random inputs ``[rows, L]`` laid out as the PAPA layout does: segment 1 from slot 0, segment 2 (pairs)
    from ``L/2``, the final separator at ``L − 1``, pads in between; token tasks label some real slots."""
    config = CONFIGS[arch]()
    pad = config.pad_token_id if config.pad_token_id is not None else 0
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(rows, L, dtype=torch.long)
    for row in range(rows):
        first = int(torch.randint(1, L // 2, (1,), generator=g))
        second = int(torch.randint(1, L // 2 - 1, (1,), generator=g)) if kind == "pair" else 0
        mask[row, :first], mask[row, L // 2 : L // 2 + second], mask[row, L - 1] = 1, 1, 1
    ids = torch.randint(5, VOCAB, (rows, L), generator=g).masked_fill(mask == 0, pad)
    batch = {"input_ids": ids, "attention_mask": mask}
    if arch in ("bert", "electra") and kind == "pair":
        batch["token_type_ids"] = (torch.arange(L) >= L // 2).long().expand(rows, L) * mask
    if kind == "token":
        labels = torch.randint(0, 5, (rows, L), generator=g)
        labels[(mask == 0) | (torch.rand(rows, L, generator=g) < 0.3)] = IGNORE_INDEX
        labels[:, [0, L - 1]] = IGNORE_INDEX
        batch["labels"] = labels
    else:
        batch["labels"] = torch.randint(0, 2, (rows,), generator=g)
    return batch


COMPACT_ARCHS = [arch for arch in CONFIGS if supports_compact(_build(arch))]


def test_every_architecture_but_deberta_v1_runs_compact():
    assert sorted(COMPACT_ARCHS) == sorted(set(CONFIGS) - {"deberta"})
    assert ADAPTERS["xlm-roberta"] == ADAPTERS["roberta"]  # covered by the roberta row


@pytest.mark.parametrize("heads", list(HEAD_SETS))
@pytest.mark.parametrize("kind", ["single", "pair"])
@pytest.mark.parametrize("arch", COMPACT_ARCHS)
def test_compact_hidden_states_equal_the_padded_ones(arch, kind, heads):
    model = _build(arch)
    batch = {k: v for k, v in papa_layout_batch(arch, kind).items() if k != "labels"}
    constants = estimate_constants(model, batch, batch_size=4, compact=False).constants
    if HEAD_SETS[heads]:
        patch_constant_heads(model, constants, HEAD_SETS[heads])
    try:
        with torch.no_grad():
            padded = torch.stack(model(**batch, output_hidden_states=True).hidden_states, 1)  # [N, S, L, H]
            plan = plan_batches(batch["attention_mask"], 4)
            seen = torch.zeros(len(batch["input_ids"]), dtype=torch.long)
            for part in plan:
                rows = {k: v[part.rows] for k, v in batch.items()}
                compact = torch.stack(
                    compact_forward(model, rows, part.slots, output_hidden_states=True).hidden_states, 1
                )  # [B, S, P, H]
                real = rows["attention_mask"][:, part.slots].bool()[:, None, :, None].expand_as(compact)
                assert (compact - padded[part.rows][:, :, part.slots])[real].abs().max() <= 1e-5
                seen[part.rows] += 1
    finally:
        unpatch(model)
    assert seen.eq(1).all()  # every row in exactly one batch
    assert len(plan) == 4 and max(len(p.slots) for p in plan) < L  # a batch of short rows keeps fewer slots


@pytest.mark.parametrize("arch", COMPACT_ARCHS)
def test_compact_passes_with_pruned_qk_equal_the_padded_ones(arch):
    model = _build(arch)
    batch = {k: v for k, v in papa_layout_batch(arch, "pair", seed=3).items() if k != "labels"}
    patch_constant_heads(model, torch.rand(LAYERS, HEADS, L, L) + 0.01, HEAD_SETS["some"])
    prune_qk(model)
    try:
        assert_compact_equals_padded(model, batch, 5)
    finally:
        unpatch(model)


def assert_compact_equals_padded(model, batch: dict, batch_size: int, tolerance: float = 1e-5) -> None:
    """Every compact batch of ``batch`` gives the padded pass's last hidden states at its real positions."""
    with torch.no_grad():
        padded = model(**batch).last_hidden_state
        for part in plan_batches(batch["attention_mask"], batch_size):
            rows = {k: v[part.rows] for k, v in batch.items()}
            out = compact_forward(model, rows, part.slots).last_hidden_state
            real = rows["attention_mask"][:, part.slots].bool()
            assert (out - padded[part.rows][:, part.slots])[real].abs().max() <= tolerance


@pytest.mark.parametrize("kind", ["single", "pair"])
@pytest.mark.parametrize("arch", list(CONFIGS))
def test_compact_estimate_equals_the_padded_estimate(arch, kind):
    model = _build(arch)
    batch = papa_layout_batch(arch, kind, seed=1)
    padded = estimate_constants(model, batch, batch_size=4, compact=False)
    compact = estimate_constants(model, batch, batch_size=4)
    assert torch.equal(padded.counts, compact.counts)
    assert (padded.constants - compact.constants).abs().max() <= 1e-6
    assert (padded.deviation - compact.deviation).abs().max() <= 1e-6
    assert padded.counts[L // 2 - 1, L // 2 - 1] < len(batch["input_ids"])  # some slots are pad in some rows


@pytest.mark.parametrize("stream", [False, True], ids=["ram", "streamed"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("arch", list(CONFIGS))
def test_compact_features_equal_the_padded_features(arch, kind, stream, monkeypatch, tmp_path):
    monkeypatch.setenv("PAPA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(extraction_module, "STREAM_WINDOW", 5)  # several windows of rows
    model = _build(arch)
    batch = papa_layout_batch(arch, kind, seed=2)
    token = kind == "token"
    constants = estimate_constants(model, batch, batch_size=4, compact=False).constants
    patch_constant_heads(model, constants, HEAD_SETS["some"])
    try:
        padded = extract_features(model, batch, token, batch_size=4, compact=False)
        if stream:
            monkeypatch.setenv("PAPA_MEMORY_BUDGET_GB", "1e-9")
        compact = extract_features(model, batch, token, batch_size=4)
    finally:
        unpatch(model)
    assert compact.streamed == stream
    assert torch.equal(padded.labels, compact.labels)
    if token:
        assert torch.equal(padded.example, compact.example)
        real = torch.ones(padded.states.shape, dtype=torch.bool)
    else:
        assert torch.equal(padded.mask, compact.mask) and torch.equal(padded.positions, compact.positions)
        real = padded.mask[:, None, :, None].expand_as(padded.states)
    if arch == "deberta":  # runs padded: the very same bytes
        assert torch.equal(padded.states, compact.states)
    # float16 features: at most one rounding step apart where the float32 states differ by ≤ 1e-5
    assert torch.allclose(padded.states.float()[real], compact.states.float()[real], rtol=1e-3, atol=1e-5)
    if not token:
        assert compact.states.float()[~real].abs().max() <= padded.states.float().abs().max()  # finite, masked


def test_plan_batches_sorts_rows_by_length_within_windows():
    mask = torch.zeros(5, 8, dtype=torch.long)
    for row, n in enumerate([3, 1, 4, 2, 1]):
        mask[row, :n] = 1
        mask[row, 7] = 1
    plan = plan_batches(mask, batch_size=2)
    assert [p.rows.tolist() for p in plan] == [[1, 4], [3, 0], [2]]
    assert [p.slots.tolist() for p in plan] == [[0, 7], [0, 1, 2, 7], [0, 1, 2, 3, 7]]
    windowed = plan_batches(mask, batch_size=2, window=3)
    assert [p.rows.tolist() for p in windowed] == [[1, 0], [2], [4, 3]]


def test_natural_position_ids_follow_each_architectures_rule():
    ids = torch.tensor([[0, 7, 1, 1, 8, 2], [0, 9, 1, 5, 1, 2]])  # pad id 1 in the middle (RoBERTa's pad)
    roberta, bert = _build("roberta"), _build("bert")
    assert natural_position_ids(roberta, ids).tolist() == [[2, 3, 1, 1, 4, 5], [2, 3, 1, 4, 1, 5]]
    assert natural_position_ids(bert, ids).tolist() == [[0, 1, 2, 3, 4, 5]] * 2
