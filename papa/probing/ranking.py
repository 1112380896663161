"""Head rankings: which heads become constant first.

* ``gates`` (the paper's): every head mixes ``σ(λ_h) A_h(x) + (1 − σ(λ_h)) C̃_h`` (C̃ masked and row-normalised),
  ``λ`` from 0 trained with the probe, encoder and constants frozen (live encoder, train mode, as the official
  sorting run); ascending ``λ`` over all layers (most weight on C̃ first);
* ``deviation``: training-free, from the estimation pass: ascending mean squared deviation of each head's attention
  from its constant (the most input-independent first);
* ``random``: a seeded permutation, the baseline; ``random-<n>`` uses seed ``n``.

Every ranking lists all ``(layer, head)`` pairs once (:func:`papa.core.heads.save_ranking`). The gates' encoder passes
run on each batch's real slots (:class:`CompactLiveSource`) where :func:`papa.core.compact.supports_compact`, else
padded (:class:`papa.probing.probe.LiveSource`); same batches, same order. The gates act on ``C[:, slots][:, :,
slots]`` (:meth:`papa.core.head_patch.HeadPatch.constant_matrices`), so with dropout off the real positions' states,
logits, loss and λ gradients equal the padded pass's to float rounding (≤ 1e-5; tested, also final λ and ranking);
with dropout on, ``[B, P, ...]`` tensors draw other masks than ``[B, L, ...]``: another sample of the same training.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from papa.core.compact import compact_forward, supports_compact
from papa.core.constants import load_constants
from papa.core.errors import PapaError
from papa.core.heads import random_ranking, ranking_from_scores
from papa.core.layout import IGNORE_INDEX
from papa.core.models import LoadedModel, load_model, pick_device
from papa.core.patching import gate_lambdas, patch_gates, unpatch
from papa.core.provenance import provenance
from papa.probing.probe import (
    FeatureSource,
    LiveSource,
    ProbeConfig,
    build_probe,
    seed_everything,
    select_states,
    train_probe,
)
from papa.probing.task_inputs import TaskInputs, make_evaluator, prepare_inputs

METHODS = ("gates", "deviation", "random")


def split_method(method: str) -> tuple[str, int | None]:
    """``("random", 7)`` for ``"random-7"``, ``(method, None)`` for a plain method; else a :class:`PapaError`."""
    base, dash, suffix = str(method).partition("-")
    if base in METHODS and not dash:
        return base, None
    if base == "random" and suffix.isdigit():
        return base, int(suffix)
    raise PapaError(
        f"Unknown ranking method {method!r}",
        f"Use one of {', '.join(METHODS)}, or random-<seed> (e.g. random-1) for a seeded random ordering.",
    )


def scatter_slots(states: torch.Tensor, slots: torch.Tensor, length: int, mask: torch.Tensor) -> torch.Tensor:
    """Compact ``states [B, S, P, H]`` at ``slots [P]`` placed in the padded ``[B, S, L, H]`` (``L = length``), 0
    where ``mask [B, L]`` marks pad. Differentiable in ``states``."""
    real = mask[:, slots].to(states.dtype)[:, None, :, None]  # [B, 1, P, 1]
    full = states.new_zeros(states.shape[0], states.shape[1], length, states.shape[3])
    full[:, :, slots] = states * real
    return full


class CompactLiveSource(LiveSource):
    """Batches from the live encoder, each run on its real slots only (``P ≤ L``, real in one of its rows, so the
    cost follows the real tokens); built as :class:`papa.probing.probe.LiveSource` (``train_mode`` turns dropout on,
    ``grad`` keeps the graph: gate training)."""

    def batch(self, indices: torch.Tensor) -> tuple[tuple, torch.Tensor]:
        """``indices [B]`` → the probe's inputs and labels, as :class:`papa.probing.probe.LiveSource` gives them:
        sequence tasks ``(states [B, S, L, H], attention_mask [B, L])`` (compact states scattered back, 0 at pads);
        token tasks ``(states [T, S, H],)`` of the labelled tokens in (row, position) order, labels ``[T]``."""
        self.model.train(self.train_mode)
        mask = self.encoded["attention_mask"][indices].bool()  # [B, L]
        slots = mask.any(0).nonzero().flatten().to(self.device)  # [P]
        inputs = {k: v[indices].to(self.device) for k, v in self.encoded.items() if k != "labels"}
        labels = self.encoded["labels"][indices].to(self.device)
        with torch.set_grad_enabled(self.grad):
            states = torch.stack(
                compact_forward(self.model, inputs, slots, output_hidden_states=True).hidden_states, dim=1
            )  # [B, S, P, H]
            if not self.token_task:
                length = self.encoded["input_ids"].shape[1]
                full = scatter_slots(
                    select_states(states, self.probe_input), slots, length, inputs["attention_mask"].bool()
                )
                return (full, inputs["attention_mask"]), labels
            keep = labels[:, slots] != IGNORE_INDEX  # [B, P]; every labelled token is real, so among the slots
            return (select_states(states.permute(0, 2, 1, 3)[keep], self.probe_input),), labels[:, slots][keep]


def live_source(
    model: nn.Module,
    encoded: dict[str, torch.Tensor],
    token_task: bool,
    device,
    train_mode: bool,
    probe_input: str = "all",
    grad: bool = False,
    compact: bool = True,
) -> FeatureSource:
    """A live-encoder source: :class:`CompactLiveSource` when ``compact`` and supported, else the padded
    :class:`papa.probing.probe.LiveSource` (same arguments)."""
    if compact and supports_compact(model):
        return CompactLiveSource(model, encoded, token_task, device, train_mode, probe_input, grad)
    return LiveSource(model, encoded, token_task, device, train_mode, probe_input, grad)


def rank_gates(
    lm: LoadedModel, inputs: TaskInputs, constants: torch.Tensor, config: ProbeConfig, device, compact: bool = True
) -> tuple[list, dict]:
    """Train gates + probe on ``constants [layers, heads, L, L]``: (ranking, meta with the final λ ``[layers, heads]``
    and per-epoch scores). ``compact``: encoder passes on each batch's real slots where supported (False: padded)."""
    seed_everything(config.seed)
    lambdas = patch_gates(lm.model, constants)
    token_task = inputs.spec.is_token_task
    try:
        train = live_source(
            lm.model,
            inputs.train,
            token_task,
            device,
            train_mode=True,
            probe_input=config.probe_input,
            grad=True,
            compact=compact,
        )
        evaluation = live_source(
            lm.model, inputs.eval, token_task, device, train_mode=False, probe_input=config.probe_input, compact=compact
        )
        probe = build_probe(
            inputs.spec.is_token_task,
            lm.num_layers + 1,
            inputs.max_length,
            lm.model.config.hidden_size,
            len(inputs.label_names),
            config,
        ).to(device)
        history = train_probe(probe, train, make_evaluator(inputs, evaluation), config, extra_parameters=lambdas)
        final = gate_lambdas(lm.model)
    finally:
        unpatch(lm.model)
    return ranking_from_scores(final, ascending=True), {"lambdas": final.tolist(), "epochs": history.epochs}


def compute_ranking(
    method: str,
    model: str | LoadedModel = "minilm-l6",
    task: str = "sst2",
    constants: str | None = None,
    seed: int = 42,
    epochs: int = 15,
    lr: float = 2e-5,
    batch_size: int = 16,
    max_train_examples: int | None = 1000,
    max_eval_examples: int | None = None,
    data_seed: int = 0,
    data_dir: str | None = None,
    device: str | None = None,
) -> tuple[list, dict]:
    """Compute a ranking by ``method``; returns ``(ranking, meta)`` (meta holds config and provenance)."""
    method, ordering_seed = split_method(method)
    seed = seed if ordering_seed is None else ordering_seed
    started = time.perf_counter()
    torch_device = pick_device(device)
    lm = model if isinstance(model, LoadedModel) else load_model(model, torch_device)
    meta: dict = {"method": method, "model": lm.name, "task": task, "seed": seed}
    if method == "random":
        ranking = random_ranking(lm.num_layers, lm.num_heads, seed)
    else:
        if constants is None:
            raise PapaError(f"The {method} ranking needs a constants file", "Pass --constants (from `papa estimate`).")
        constant_set = load_constants(constants)
        relayout = bool(constant_set.meta.get("relayout", True))
        constant_set.check_compatible(lm.fingerprint, lm.num_layers, lm.num_heads)
        meta["constants"] = constant_set.meta.get("sha256")
        if method == "deviation":
            ranking = ranking_from_scores(constant_set.deviation, ascending=True)
            meta["deviation"] = constant_set.deviation.tolist()
        else:
            inputs = prepare_inputs(
                lm, task, constant_set.max_length, relayout, max_train_examples, max_eval_examples, data_seed, data_dir
            )
            config = ProbeConfig(lr=lr, epochs=epochs, batch_size=batch_size, seed=seed)
            ranking, extra = rank_gates(lm, inputs, constant_set.constants, config, torch_device)
            meta.update(extra, epochs_trained=epochs, lr=lr, data=inputs.data_record())
    meta["provenance"] = dict(
        provenance(torch_device, seed, time.perf_counter() - started), weights_fingerprint=lm.fingerprint
    )
    return ranking, meta
