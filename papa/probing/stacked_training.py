"""The probes of one run trained as one batched model on cached features: :func:`train_stacked`.

Each probe (a seed; during the lr choice, an (lr, seed) pair) is a :class:`StackedMember`, initialised as alone. Per
step every probe still training takes its own batch (gathered together) and its own forward (:func:`_each_logits`),
under one backward; it keeps everything it would have alone:

* data order: its own ``torch.Generator`` seeded with its seed, one ``randperm`` per epoch;
* dropout: masks from its own random stream (:class:`DropoutStreams`);
* updates: its own AdamW (:func:`~papa.probing.probe.make_optimizer`: lr, moments, step count) over views of the
  stacked parameters; a probe without a batch at a step gets no step, a stopped one leaves the stack
  (:meth:`ProbeStack.restack`);
* scores: held-out (its own) and dev (shared) in one pass each (:func:`~papa.probing.stacked.predict_stacked`),
  early stopping on its own held-out curve.

So each history is the one :func:`~papa.probing.probe.train_probe` gives alone (to float rounding; tested).
``seconds_train`` / ``seconds_eval``: each epoch's time split equally among the probes in it, so shares add up.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from papa.core.errors import PapaError
from papa.probing.probe import CachedSource, ProbeConfig, TrainHistory, make_optimizer
from papa.probing.stacked import EVAL_BATCH, ProbeStack, StateGatherer, padded_rows, predict_stacked, stacked_inputs

Metrics = Callable[[torch.Tensor, torch.Tensor], dict]  # (flat predictions, labels) → metrics with "main"


def device_rng_state(device: torch.device | str) -> torch.Tensor:
    """The random state that draws on ``device`` (what a probe's dropout consumes there)."""
    device = torch.device(device)
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()


def _set_device_rng_state(state: torch.Tensor, device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.set_rng_state(state)


@dataclass
class StackedMember:
    """One probe of a stacked training (module docstring): ``fit [N]`` / ``heldout [M]`` index the training source;
    ``heldout_metrics`` (None: no held-out scores, no early stopping); ``rng_state`` right after its initialisation."""

    probe: nn.Module
    config: ProbeConfig
    fit: torch.Tensor
    rng_state: torch.Tensor
    heldout: torch.Tensor | None = None
    heldout_metrics: Metrics | None = None


class DropoutStreams:
    """Each member's dropout masks from its own random stream: its saved state swapped in for its draw."""

    def __init__(self, states: Sequence[torch.Tensor], device: torch.device, p: float):
        self.states, self.device, self.p = list(states), device, p

    def masks(self, members: Sequence[int], rows: Sequence[int], width: int, hidden: int) -> torch.Tensor:
        """Multipliers ``[len(members), width, hidden]``: ``members[i]``'s own ``[rows[i], hidden]`` dropout mask (as
        ``nn.Dropout`` draws it alone, scaled by ``1 / (1 - p)``), padded with ones."""
        saved = device_rng_state(self.device)
        out = torch.ones(len(members), width, hidden, device=self.device)
        try:
            for i, (member, count) in enumerate(zip(members, rows)):
                if count:
                    _set_device_rng_state(self.states[member], self.device)
                    out[i, :count] = F.dropout(torch.ones(count, hidden, device=self.device), self.p, training=True)
                    self.states[member] = device_rng_state(self.device)
        finally:
            _set_device_rng_state(saved, self.device)
        return out


def _check_members(members: Sequence[StackedMember]) -> ProbeConfig:
    if not members:
        raise PapaError("A stacked training needs at least one probe", "Pass e.g. seeds=[42].")
    first = members[0].config
    shared = ("epochs", "batch_size", "patience", "probe_input", "dropout")
    for member in members:
        if any(getattr(member.config, name) != getattr(first, name) for name in shared):
            raise PapaError(
                f"The probes trained together must share {', '.join(shared)}",
                "Train probes with other settings in separate runs.",
            )
        member.config.check_heldout(member.heldout is not None)
        if (member.heldout is None) != (members[0].heldout is None) or (
            member.heldout is not None and member.heldout_metrics is None
        ):
            raise PapaError(
                "The probes trained together must all have held-out examples and their metrics, or none",
                "Draw held-out examples for every seed.",
            )
        if len(member.fit) < 1:
            raise PapaError("A probe needs at least one training example", "Raise max_train_examples.")
    return first


def train_stacked(
    members: Sequence[StackedMember], source: CachedSource, dev: tuple[CachedSource, Metrics] | None = None
) -> list[TrainHistory]:
    """Train every member's probe on ``source`` together: one history each, as
    :func:`~papa.probing.probe.train_probe` records it. ``dev``: the dev split and its metrics, scored every epoch
    (None: not). The probes end with their final parameters, each in its own tensors again."""
    config = _check_members(members)
    device = next(members[0].probe.parameters()).device
    stack = ProbeStack([m.probe for m in members], bind=True)
    optimizers = [make_optimizer(list(m.probe.parameters()), m.config) for m in members]
    generators = [torch.Generator().manual_seed(m.config.seed) for m in members]
    streams = DropoutStreams([m.rng_state for m in members], device, stack.dropout)
    hidden = stack.stacked["dense.bias"].shape[-1]
    histories = [TrainHistory() for _ in members]
    gather = StateGatherer(source, len(members) * max(config.batch_size, EVAL_BATCH))
    dev_gather = StateGatherer(dev[0], EVAL_BATCH) if dev is not None else None
    active = list(range(len(members)))
    try:
        for epoch in range(1, config.epochs + 1):
            if not active:
                break
            if active != stack.members:
                stack.restack(active)
            started = time.perf_counter()
            orders = [torch.randperm(len(members[r].fit), generator=generators[r]) for r in active]
            losses = _train_epoch(
                stack, members, optimizers, streams, source, gather, orders, config.batch_size, hidden
            )
            for r in active:
                histories[r].seconds_train += (time.perf_counter() - started) / len(active)
            started = time.perf_counter()
            records = {r: {"epoch": epoch, "train_loss": losses[i]} for i, r in enumerate(active)}
            if dev is not None:
                predictions, labels = predict_stacked(stack, dev[0], gather=dev_gather)
                for i, r in enumerate(active):
                    records[r].update(dev[1](predictions[i], labels[i]))
            if members[0].heldout is not None:
                predictions, labels = predict_stacked(
                    stack, source, [members[r].heldout for r in active], gather=gather
                )
                for i, r in enumerate(active):
                    records[r].update(
                        {
                            f"heldout_{name}": value
                            for name, value in members[r].heldout_metrics(predictions[i], labels[i]).items()
                        }
                    )
            for r in active:
                histories[r].seconds_eval += (time.perf_counter() - started) / len(active)
            active = [
                r
                for r in active
                if not histories[r].add(records[r], members[r].probe, config, members[r].heldout is not None)
            ]
    finally:
        stack.release()
    return histories


def _train_epoch(
    stack: ProbeStack,
    members,
    optimizers,
    streams: DropoutStreams,
    source: CachedSource,
    gather,
    orders,
    batch_size: int,
    hidden: int,
) -> list[float]:
    """One epoch of every stacked probe; each one's mean training loss (its batches' mean losses averaged)."""
    totals, counts = [0.0] * len(orders), [0] * len(orders)
    device = stack.stacked["dense.bias"].device
    for start in range(0, max(len(order) for order in orders), batch_size):
        examples = [members[r].fit[order[start : start + batch_size]] for r, order in zip(stack.members, orders)]
        index, real = padded_rows([source.rows(e) for e in examples])
        inputs, labels = stacked_inputs(source, gather, index)
        sizes = real.sum(1).tolist()
        dropout = streams.masks(stack.members, sizes, index.shape[1], hidden) if stack.dropout > 0 else None
        inputs = [x.to(device) for x in inputs]
        probes = [members[r].probe for r in stack.members]
        logits = _each_logits(probes, stack.sequence, inputs, dropout)  # [R, M, labels]
        per_row = F.cross_entropy(logits.flatten(0, 1), labels.flatten().to(device), reduction="none").view(real.shape)
        real = real.to(device)
        loss = (per_row * real).sum(1) / real.sum(1).clamp(min=1)  # [R]: each probe's mean over its own rows
        for r in stack.members:
            optimizers[r].zero_grad(set_to_none=True)
        loss.sum().backward()
        values = loss.detach().tolist()
        for i, r in enumerate(stack.members):
            if sizes[i]:
                optimizers[r].step()
                totals[i] += values[i]
                counts[i] += 1
    return [total / max(count, 1) for total, count in zip(totals, counts)]


def _each_logits(
    probes: Sequence[nn.Module], sequence: bool, inputs: list, dropout: torch.Tensor | None
) -> torch.Tensor:
    """Logits ``[R, M, labels]``: each probe's own forward on its own rows, ``dropout [R, M, H]`` its multiplier
    after the tanh. Per probe because on the CPU one batched product per layer (:meth:`ProbeStack.forward`) costs 2
    to 3 times as much (``benchmarks/stack_step.py``)."""
    out = []
    for i, probe in enumerate(probes):
        rows = (inputs[0][i], inputs[1][i], inputs[2]) if sequence else (inputs[0][i],)
        out.append(probe(*rows, dropout_mask=None if dropout is None else dropout[i]))
    return torch.stack(out)
