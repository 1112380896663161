"""The frozen-encoder probe (official ``FreezeExtractPoller``) and its training loop.

:class:`SequenceProbe`: for each of the ``S = layers + 1`` hidden states, position weights ``w_s ∈ R^L`` (initialised
to ``1/L``, times the padding mask, not renormalised) pool ``[L, H] → [H]``; the ``S`` pooled vectors concatenated →
``Linear(S·H → H)`` → tanh → dropout → ``Linear(H → labels)``. :class:`TokenProbe`
(``FreezeExtractPollerTokenClassification``): a token's ``S`` states concatenated → ``Linear(S·H → H)`` → tanh →
``Linear(H → labels)``. ``probe_input="embeddings"`` reads only the embedding layer: the *attention-free floor*.

Training as the official runs: AdamW (weight decay 0), lr 2e-5, constant schedule, batch 16, 15 epochs, seed 42, dev
scored after every epoch, the final epoch reported. The main grid instead stops after ``patience`` epochs
without a strict gain on held-out *training* examples (``epochs`` the cap), restores the best held-out epoch's probe
(earliest among ties) and scores it once on dev. Features come from a :class:`FeatureSource`: cached states
(:mod:`papa.probing.features`) or the live encoder (``faithful``: train mode, dropout on, every batch recomputed).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from papa.core.errors import PapaError
from papa.core.layout import IGNORE_INDEX
from papa.probing.features import Features, memory_budget_bytes

PROBE_INPUTS = ("all", "embeddings")


@dataclass
class ProbeConfig:
    """Probe and optimiser settings (defaults: the official runs)."""

    lr: float = 2e-5
    epochs: int = 15
    batch_size: int = 16
    weight_decay: float = 0.0
    seed: int = 42
    dropout: float = 0.1
    probe_input: str = "all"

    patience: int | None = None  # None: train all ``epochs``; else stop after this many without a held-out gain

    def __post_init__(self):
        if self.patience is not None and (
            isinstance(self.patience, bool) or not isinstance(self.patience, int) or self.patience < 1
        ):
            raise PapaError(f"patience must be a positive integer or null, got {self.patience!r}", "Use e.g. 3.")
        if self.probe_input not in PROBE_INPUTS:
            raise PapaError(f"Unknown probe_input {self.probe_input!r}", f"Use one of {', '.join(PROBE_INPUTS)}.")
        if not (self.lr > 0 and self.epochs >= 1 and self.batch_size >= 1):
            raise PapaError("lr, epochs and batch_size must be positive", "Check the probe settings.")

    def check_heldout(self, heldout: bool) -> None:
        """A :class:`PapaError` when early stopping (``patience``) is asked for without held-out examples."""
        if self.patience is not None and not heldout:
            raise PapaError(
                "Early stopping (patience) needs held-out training examples", "Train with selection: heldout."
            )


class SequenceProbe(nn.Module):
    """``states [B, S, L, H]``, ``mask [B, L]`` (or ``P`` kept positions) → logits ``[B, labels]``."""

    def __init__(self, num_states: int, length: int, hidden: int, num_labels: int, dropout: float = 0.1):
        super().__init__()
        self.position_weights = nn.Parameter(torch.full((num_states, length), 1.0 / length))
        self.dense = nn.Linear(num_states * hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden, num_labels)

    def forward(
        self,
        states: torch.Tensor,
        mask: torch.Tensor,
        positions: torch.Tensor | None = None,
        dropout_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``positions [P]``: the positions ``states``/``mask`` hold when not all ``L`` (cached features).
        ``dropout_mask [B, H]``: replaces :attr:`dropout` after the tanh (the probe's own random stream while it
        trains beside others: :mod:`papa.probing.stacked_training`)."""
        position_weights = self.position_weights if positions is None else self.position_weights[:, positions]
        weights = position_weights[None] * mask[:, None, :].to(states.dtype)  # [B, S, P]
        pooled = torch.einsum("bsl,bslh->bsh", weights, states).flatten(1)  # [B, S*H]
        hidden = torch.tanh(self.dense(pooled))
        return self.classifier(self.dropout(hidden) if dropout_mask is None else hidden * dropout_mask)


class TokenProbe(nn.Module):
    """``states [T, S, H]`` → logits ``[T, labels]``."""

    def __init__(self, num_states: int, hidden: int, num_labels: int):
        super().__init__()
        self.dense = nn.Linear(num_states * hidden, hidden)
        self.classifier = nn.Linear(hidden, num_labels)

    def forward(self, states: torch.Tensor, dropout_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``dropout_mask [T, H]``: a multiplier after the tanh (the official token probe has no dropout; only a
        stacked training with dropout passes one)."""
        hidden = torch.tanh(self.dense(states.flatten(1)))
        return self.classifier(hidden if dropout_mask is None else hidden * dropout_mask)


class FeatureSource(Protocol):
    """Gives probe inputs for a batch of example indices."""

    num_examples: int

    def batch(self, indices: torch.Tensor) -> tuple[tuple, torch.Tensor]: ...


def select_states(states: torch.Tensor, probe_input: str) -> torch.Tensor:
    """The states ``[N, S, ...]`` the probe reads: all ``S``, or only the embeddings' (``[N, 1, ...]``)."""
    return states[:, :1] if probe_input == "embeddings" else states


def _on_device(features: Features, device: torch.device | str | None) -> Features:
    """``features`` moved to a CUDA ``device`` when they fit in 80% of its free memory (batches then gathered there,
    no host copy per batch); otherwise, or on the CPU, unchanged."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type != "cuda":
        return features
    tensors = features.as_tensors()
    needed = sum(t.numel() * t.element_size() for t in tensors.values())
    free, _ = torch.cuda.mem_get_info(device)
    if needed > 0.8 * free:
        return features
    moved = {name: t.to(device, non_blocking=True) for name, t in tensors.items()}
    return Features(moved["states"], moved["labels"], moved.get("mask"), moved.get("example"), moved.get("positions"))


def _in_probe_dtype(features: Features, probe_input: str) -> Features | None:
    """The states the probe reads, converted once to float32 (same values, no conversion per batch) when the copy
    fits ``PAPA_MEMORY_BUDGET_GB`` beside the float16 features; ``None`` when not, or when they stream from disk."""
    states = select_states(features.states, probe_input)
    needed = states.numel() * 4 + features.states.numel() * features.states.element_size()
    if features.streamed or states.dtype == torch.float32 or needed > memory_budget_bytes():
        return None
    return dataclasses.replace(features, states=states.float(), file=None, _scratch=None)


class CachedSource:
    """Batches from cached :class:`Features`, gathered on a CUDA ``device`` when they fit there, else on the CPU.
    ``float32``: convert the read states once (:func:`_in_probe_dtype`), else float16 → float32 per batch."""

    def __init__(
        self,
        features: Features,
        probe_input: str = "all",
        device: torch.device | str | None = None,
        float32: bool = False,
    ):
        converted = _in_probe_dtype(features, probe_input) if float32 else None
        self.selected = converted is not None  # the states hold only what the probe reads
        features = _on_device(converted if converted is not None else features, device)
        self.features, self.probe_input = features, probe_input
        self.num_examples = features.num_examples
        if features.is_token:
            example = features.example.cpu()
            self._order = torch.argsort(example, stable=True)
            counts = torch.bincount(example, minlength=self.num_examples)
            self._starts = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)])

    def rows(self, examples: torch.Tensor) -> torch.Tensor:
        """The feature rows ``[M]`` of ``examples``: themselves (sequence tasks) or their labelled tokens in order."""
        if not self.features.is_token:
            return examples
        examples = examples.cpu()
        counts = self._starts[examples + 1] - self._starts[examples]
        offsets = torch.arange(int(counts.sum())) - torch.repeat_interleave(counts.cumsum(0) - counts, counts)
        return self._order[torch.repeat_interleave(self._starts[examples], counts) + offsets]

    def _states(self, rows: torch.Tensor) -> torch.Tensor:
        states = self.features.states[rows].float()
        return states if self.selected else select_states(states, self.probe_input)

    def batch(self, indices: torch.Tensor):
        f = self.features
        if not f.is_token:
            indices = indices.to(f.states.device)
            return (self._states(indices), f.mask[indices], f.positions), f.labels[indices]
        rows = self.rows(indices).to(f.states.device)
        return (self._states(rows),), f.labels[rows]


class LiveSource:
    """Batches from the live encoder (``faithful`` mode); ``train_mode`` turns its dropout on."""

    def __init__(
        self,
        model: nn.Module,
        encoded: dict[str, torch.Tensor],
        token_task: bool,
        device,
        train_mode: bool,
        probe_input: str = "all",
        grad: bool = False,
    ):
        self.model, self.encoded, self.token_task, self.device = model, encoded, token_task, torch.device(device)
        self.train_mode, self.probe_input, self.grad = train_mode, probe_input, grad
        self.num_examples = encoded["input_ids"].shape[0]

    def batch(self, indices: torch.Tensor):
        self.model.train(self.train_mode)
        inputs = {k: v[indices].to(self.device) for k, v in self.encoded.items() if k != "labels"}
        with torch.set_grad_enabled(self.grad):
            states = torch.stack(self.model(**inputs, output_hidden_states=True).hidden_states, dim=1)
        labels = self.encoded["labels"][indices].to(self.device)
        if not self.token_task:
            return (select_states(states, self.probe_input), inputs["attention_mask"]), labels
        keep = labels != IGNORE_INDEX
        return (select_states(states.permute(0, 2, 1, 3)[keep], self.probe_input),), labels[keep]


def build_probe(
    token_task: bool, num_states: int, length: int, hidden: int, num_labels: int, config: ProbeConfig
) -> nn.Module:
    """A fresh :class:`TokenProbe` or :class:`SequenceProbe` over ``num_states`` states (1 for ``embeddings``)."""
    states = 1 if config.probe_input == "embeddings" else num_states
    if token_task:
        return TokenProbe(states, hidden, num_labels)
    return SequenceProbe(states, length, hidden, num_labels, config.dropout)


def make_optimizer(params: list[nn.Parameter], config: ProbeConfig) -> torch.optim.Optimizer:
    """AdamW (``config.weight_decay``, constant lr), fused where every parameter is a float32 CPU or CUDA tensor:
    the same update (≤ 1e-6 from the per-tensor loop after hundreds of steps, tested)."""
    fused = all(p.dtype == torch.float32 and p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay, fused=fused or None)


@dataclass
class TrainHistory:
    """Per-epoch record of a probe's training."""

    epochs: list[dict] = field(default_factory=list)  # {"epoch", "train_loss", metrics..., heldout_<metric>...}
    seconds_train: float = 0.0
    seconds_eval: float = 0.0
    best_epoch: int | None = None  # the best held-out epoch (earliest among ties); None without held-out scores
    best_state: dict | None = field(default=None, repr=False)  # the probe's state_dict at best_epoch (CPU copies)
    stopped_early: bool = False

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "best_state"}

    def add(
        self,
        record: dict,
        probe: nn.Module,
        config: ProbeConfig,
        tracked: bool,
        on_epoch: Callable[[dict], None] | None = None,
    ) -> bool:
        """Append epoch ``record["epoch"]``'s ``record`` (a :class:`PapaError` when its ``train_loss`` is not finite),
        then call ``on_epoch(record)``. ``tracked`` (``record`` holds ``heldout_main``): keep ``probe``'s state at a
        strict held-out gain; returns whether ``config.patience`` epochs without one stop the training here."""
        epoch = record["epoch"]
        if not math.isfinite(record["train_loss"]):
            raise PapaError(
                f"The probe's training loss became {record['train_loss']} at epoch {epoch}", "Lower the learning rate."
            )
        self.epochs.append(record)
        if on_epoch is not None:
            on_epoch(record)
        if not tracked:
            return False
        best = None if self.best_epoch is None else self.epochs[self.best_epoch - 1]["heldout_main"]
        if best is None or record["heldout_main"] > best:
            self.best_epoch = epoch
            self.best_state = {name: value.detach().to("cpu", copy=True) for name, value in probe.state_dict().items()}
        elif config.patience is not None and epoch - self.best_epoch >= config.patience and epoch < config.epochs:
            self.stopped_early = True
            return True
        return False


#: Examples scored per forward pass: a probe's logits for one example do not depend on the others in its batch.
PREDICT_BATCH = 256


@torch.no_grad()
def predict(
    probe: nn.Module, source: FeatureSource, batch_size: int = PREDICT_BATCH
) -> tuple[torch.Tensor, torch.Tensor]:
    """Predicted and true labels over a whole source (probe in eval mode)."""
    probe.eval()
    preds, labels = [], []
    device = next(probe.parameters()).device
    for start in range(0, source.num_examples, batch_size):
        inputs, y = source.batch(torch.arange(start, min(start + batch_size, source.num_examples)))
        preds.append(probe(*[x.to(device) for x in inputs]).argmax(-1).cpu())
        labels.append(y.cpu())
    return torch.cat(preds), torch.cat(labels)


def train_probe(
    probe: nn.Module,
    train: FeatureSource,
    evaluate: Callable[[nn.Module], dict] | None,
    config: ProbeConfig,
    extra_parameters: list[nn.Parameter] | None = None,
    on_epoch: Callable[[dict], None] | None = None,
    heldout: Callable[[nn.Module], dict] | None = None,
) -> TrainHistory:
    """Train ``probe`` (and ``extra_parameters``, e.g. gate λ) on ``train``, scoring it after every epoch.

    ``evaluate``: the dev split (None: not per epoch); ``heldout``: training examples kept out of ``train``, recorded
    as ``heldout_<name>`` (:func:`~papa.probing.run_training.select_epoch` chooses on them). With them the history
    keeps the best held-out epoch's state (``best_state``); ``config.patience`` stops after that many epochs without
    a strict gain.
    """
    config.check_heldout(heldout is not None)
    generator = torch.Generator().manual_seed(config.seed)
    params = list(probe.parameters()) + list(extra_parameters or [])
    optimizer = make_optimizer(params, config)
    device = next(probe.parameters()).device
    history = TrainHistory()
    for epoch in range(1, config.epochs + 1):
        started = time.perf_counter()
        probe.train()
        order = torch.randperm(train.num_examples, generator=generator)
        total_loss, batches = 0.0, 0
        for start in range(0, train.num_examples, config.batch_size):
            inputs, labels = train.batch(order[start : start + config.batch_size])
            logits = probe(*[x.to(device) for x in inputs])
            loss = F.cross_entropy(logits, labels.to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total_loss += float(loss.detach())
            batches += 1
        history.seconds_train += time.perf_counter() - started
        started = time.perf_counter()
        record = {
            "epoch": epoch,
            "train_loss": total_loss / max(batches, 1),
            **(evaluate(probe) if evaluate is not None else {}),
        }
        if heldout is not None:
            record.update({f"heldout_{name}": value for name, value in heldout(probe).items()})
        history.seconds_eval += time.perf_counter() - started
        if history.add(record, probe, config, heldout is not None, on_epoch):
            break
    return history


class SubsetSource:
    """The examples ``indices [M]`` of another :class:`FeatureSource`, renumbered ``0 .. M-1``."""

    def __init__(self, source: FeatureSource, indices: torch.Tensor):
        self.source, self.indices = source, indices
        self.num_examples = len(indices)

    def batch(self, indices: torch.Tensor):
        return self.source.batch(self.indices[indices])


def seed_everything(seed: int) -> None:
    """Seed torch, ``random`` and numpy."""
    torch.manual_seed(seed)
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
