"""The gates ranking on compact batches (papa.probing.ranking) against the padded path: the probe's inputs
(hidden states at real positions ≤ 1e-5, pad positions 0, the same labels) and the gradients reaching λ, for every
architecture that runs compact, in eval mode and in train mode with dropout off; and whole gate trainings with
dropout off give the same final λ (≤ 1e-5) and the same ranking, on tiny models and on minilm-l6 / mpnet-base.

With dropout on, the two layouts draw different dropout masks (different tensor shapes): that case is measured
(the stacked-probes benchmark's report), not asserted equal."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_compact import COMPACT_ARCHS, papa_layout_batch
from test_models import _build
from tiny import HEADS, LAYERS, L
from torch import nn

from papa.core.layout import IGNORE_INDEX
from papa.core.models import LoadedModel, load_model
from papa.core.patching import patch_gates, unpatch
from papa.core.tasks import get_task
from papa.probing.probe import LiveSource, ProbeConfig, SequenceProbe, TokenProbe
from papa.probing.ranking import CompactLiveSource, live_source, rank_gates, scatter_slots
from papa.probing.task_inputs import TaskInputs, prepare_inputs

#: Tolerance on hidden states, λ gradients and final λ between the compact and the padded path (float32 rounding).
ATOL = 1e-5


def without_dropout(model: nn.Module) -> nn.Module:
    """``model`` with every dropout probability set to 0, so that train mode computes what eval mode does."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    return model


def test_scatter_slots_places_each_state_at_its_slot_and_zeros_every_pad_position():
    mask = torch.tensor([[1, 0, 0, 1, 0], [1, 1, 0, 1, 0]]).bool()  # slots real somewhere: 0, 1, 3
    slots = torch.tensor([0, 1, 3])
    states = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])[:, None, :, None]  # [B=2, S=1, P=3, H=1]
    full = scatter_slots(states, slots, 5, mask)
    assert full.shape == (2, 1, 5, 1)
    assert full[:, 0, :, 0].tolist() == [[1.0, 0.0, 0.0, 3.0, 0.0], [4.0, 5.0, 0.0, 6.0, 0.0]]  # row 0's slot 1 is pad


def _gated(arch: str, seed: int = 0) -> nn.Module:
    """A tiny ``arch`` model, dropout off, every head gated with random constants and random λ."""
    model = without_dropout(_build(arch))
    g = torch.Generator().manual_seed(seed)
    lambdas = patch_gates(model, torch.rand(LAYERS, HEADS, L, L, generator=g) + 0.01)
    with torch.no_grad():
        for parameter in lambdas:
            parameter.copy_(torch.randn(HEADS, generator=g))
    return model


def _lambda_grads(model: nn.Module, probe: nn.Module, inputs: tuple, labels: torch.Tensor) -> torch.Tensor:
    """``[layers, heads]``: d(cross-entropy of ``probe(*inputs)``)/dλ."""
    model.zero_grad(set_to_none=True)
    F.cross_entropy(probe(*inputs), labels).backward()
    return torch.stack([module.papa_patch.lambdas.grad for module in model.modules() if hasattr(module, "papa_patch")])


@pytest.mark.parametrize("train_mode", [False, True], ids=["eval", "train-no-dropout"])
@pytest.mark.parametrize("kind", ["single", "pair", "token"])
@pytest.mark.parametrize("arch", COMPACT_ARCHS)
def test_compact_source_gives_the_padded_probe_inputs_and_lambda_gradients(arch, kind, train_mode):
    model = _gated(arch)
    encoded = papa_layout_batch(arch, kind)
    token = kind == "token"
    rows = torch.tensor([1, 4, 6, 11])
    padded = LiveSource(model, encoded, token, "cpu", train_mode=train_mode, grad=True)
    compact = CompactLiveSource(model, encoded, token, "cpu", train_mode=train_mode, grad=True)
    try:
        (want, *want_rest), want_labels = padded.batch(rows)
        (got, *got_rest), got_labels = compact.batch(rows)
        assert got.shape == want.shape and torch.equal(got_labels, want_labels)
        if token:
            assert (got - want).abs().max() <= ATOL
            probe = TokenProbe(LAYERS + 1, want.shape[-1], 5)
        else:
            assert bool(encoded["attention_mask"][rows].bool().any(0).sum() < L)  # the batch really is compact
            (want_mask,), (got_mask,) = want_rest, got_rest
            assert torch.equal(got_mask, want_mask)
            real = want_mask.bool()[:, None, :, None].expand_as(want)
            assert (got - want)[real].abs().max() <= ATOL
            assert got[~real].abs().max() == 0  # every pad position holds 0
            probe = SequenceProbe(LAYERS + 1, L, want.shape[-1], 2, dropout=0.0)
        grad_padded = _lambda_grads(model, probe, (want, *want_rest), want_labels)
        grad_compact = _lambda_grads(model, probe, (got, *got_rest), got_labels)
        assert grad_padded.abs().max() > 0 and (grad_compact - grad_padded).abs().max() <= ATOL
    finally:
        unpatch(model)


def test_live_source_runs_padded_where_the_architecture_cannot_run_compact():
    encoded = papa_layout_batch("bert", "single")
    assert isinstance(live_source(_build("bert"), encoded, False, "cpu", train_mode=False), CompactLiveSource)
    assert type(live_source(_build("bert"), encoded, False, "cpu", train_mode=False, compact=False)) is LiveSource
    assert (
        type(live_source(_build("deberta"), papa_layout_batch("deberta", "single"), False, "cpu", train_mode=False))
        is LiveSource
    )


def _tiny_inputs(arch: str, task: str) -> TaskInputs:
    """An sst2- or ner-shaped :class:`TaskInputs` of PAPA-layout rows for a tiny ``arch`` model."""
    spec = get_task(task)
    kind = "token" if spec.is_token_task else "single"
    train, evals = papa_layout_batch(arch, kind, rows=24, seed=1), papa_layout_batch(arch, kind, rows=12, seed=2)
    names = ["negative", "positive"] if kind == "single" else ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    return TaskInputs(spec, names, train, evals, list(range(24)), list(range(12)), L, True)


def _same_training(
    lm: LoadedModel, inputs: TaskInputs, constants: torch.Tensor, config: ProbeConfig
) -> tuple[list, list]:
    """``(padded, compact)`` rank_gates results on the same model, inputs and seed."""
    return [rank_gates(lm, inputs, constants, config, "cpu", compact=compact) for compact in (False, True)]


@pytest.mark.parametrize("task", ["sst2", "ner"])
@pytest.mark.parametrize("arch", COMPACT_ARCHS)
def test_compact_gate_training_gives_the_padded_lambdas_and_ranking(arch, task):
    lm = LoadedModel(
        arch, without_dropout(_build(arch)), tokenizer=None, source="local", fingerprint="0123456789abcdef"
    )
    constants = torch.rand(LAYERS, HEADS, L, L, generator=torch.Generator().manual_seed(3)) + 0.01
    (padded, padded_meta), (compact, compact_meta) = _same_training(
        lm, _tiny_inputs(arch, task), constants, ProbeConfig(lr=5e-2, epochs=2, batch_size=8, dropout=0.0)
    )
    want, got = torch.tensor(padded_meta["lambdas"]), torch.tensor(compact_meta["lambdas"])
    assert want.abs().max() > 1e-2  # the gates trained (λ starts at 0)
    assert (got - want).abs().max() <= ATOL
    assert compact == padded
    assert [e["train_loss"] for e in compact_meta["epochs"]] == pytest.approx(
        [e["train_loss"] for e in padded_meta["epochs"]], abs=ATOL
    )


@pytest.mark.data
@pytest.mark.slow
@pytest.mark.parametrize("model", ["minilm-l6", "mpnet-base"])
def test_compact_gate_training_on_a_real_model_gives_the_padded_lambdas_and_ranking(model, data_dir):
    lm = load_model(model, "cpu")
    without_dropout(lm.model)
    inputs = prepare_inputs(lm, "sst2", 64, True, 48, 24)
    assert int(inputs.train["attention_mask"].sum(1).max()) < 40  # SST-2's sentences leave most of L = 64 as pad
    constants = torch.rand(lm.num_layers, lm.num_heads, 64, 64, generator=torch.Generator().manual_seed(0)) + 0.01
    (padded, padded_meta), (compact, compact_meta) = _same_training(
        lm, inputs, constants, ProbeConfig(lr=1e-2, epochs=1, batch_size=16, dropout=0.0)
    )
    want, got = torch.tensor(padded_meta["lambdas"]), torch.tensor(compact_meta["lambdas"])
    assert want.abs().max() > 1e-3
    assert (got - want).abs().max() <= ATOL
    assert compact == padded
    assert compact_meta["epochs"][0]["main"] == padded_meta["epochs"][0]["main"]  # the same dev predictions' score


def test_compact_token_labels_are_the_labelled_tokens_in_row_then_position_order():
    """Hand-made: the labels a compact token batch returns, in order, against the labelled slots read by hand."""
    arch = "bert"
    encoded = papa_layout_batch(arch, "token")
    rows = torch.tensor([2, 0])
    _, labels = CompactLiveSource(_build(arch), encoded, True, "cpu", train_mode=False).batch(rows)
    by_hand = [
        int(encoded["labels"][r, s]) for r in rows.tolist() for s in range(L) if encoded["labels"][r, s] != IGNORE_INDEX
    ]
    assert labels.tolist() == by_hand and len(by_hand) > 0
