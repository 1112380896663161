"""Head rankings: which heads become constant first.

* ``gates`` — the paper's method: every head mixes ``σ(λ_h) A_h(x) + (1 − σ(λ_h)) C̃_h`` (C̃ masked
  and row-normalised), ``λ`` initialised to 0 and trained jointly with the probe while the encoder
  and the constants stay frozen (live encoder, train mode, as the official sorting run); the
  ranking is ascending ``λ`` over all layers at once (most weight on the constant first).
* ``deviation`` — training-free, from the estimation pass: each head's mean squared deviation of
  its per-input attention from its constant, ascending (the most input-independent heads first).
* ``random`` — a seeded permutation: the baseline a ranking has to beat. ``random-<n>`` names the ordering of
  seed ``n`` (``random-1``, ``random-2`` ... give several orderings; plain ``random`` uses the ``seed`` argument).

Every ranking lists all ``(layer, head)`` pairs once and is saved as JSON by :func:`papa.core.heads.save_ranking`.
"""

from __future__ import annotations

import time

import torch

from papa.core.constants import load_constants
from papa.core.errors import PapaError
from papa.core.heads import random_ranking, ranking_from_scores
from papa.core.models import LoadedModel, load_model, pick_device
from papa.core.patching import gate_lambdas, patch_gates, unpatch
from papa.core.provenance import provenance
from papa.probing.probe import (
    LiveSource,
    ProbeConfig,
    build_probe,
    seed_everything,
    train_probe,
)
from papa.probing.task_inputs import TaskInputs, make_evaluator, prepare_inputs

METHODS = ("gates", "deviation", "random")


def split_method(method: str) -> tuple[str, int | None]:
    """``("random", 7)`` for ``"random-7"``; ``(method, None)`` for a plain method; anything else is a :class:`PapaError`."""
    base, dash, suffix = str(method).partition("-")
    if base in METHODS and not dash:
        return base, None
    if base == "random" and suffix.isdigit():
        return base, int(suffix)
    raise PapaError(f"Unknown ranking method {method!r}", f"Use one of {', '.join(METHODS)}, or random-<seed> (e.g. random-1) for a seeded random ordering.")


def rank_gates(lm: LoadedModel, inputs: TaskInputs, constants: torch.Tensor, config: ProbeConfig, device) -> tuple[list, dict]:
    """Train gates + probe; returns (ranking, meta with the final λ ``[layers, heads]`` and per-epoch scores)."""
    seed_everything(config.seed)
    lambdas = patch_gates(lm.model, constants)
    try:
        train = LiveSource(lm.model, inputs.train, inputs.spec.is_token_task, device, train_mode=True, grad=True)
        evaluation = LiveSource(lm.model, inputs.eval, inputs.spec.is_token_task, device, train_mode=False)
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
            inputs = prepare_inputs(lm, task, constant_set.max_length, relayout, max_train_examples, max_eval_examples, data_seed, data_dir)
            config = ProbeConfig(lr=lr, epochs=epochs, batch_size=batch_size, seed=seed)
            ranking, extra = rank_gates(lm, inputs, constant_set.constants, config, torch_device)
            meta.update(extra, epochs_trained=epochs, lr=lr, data=inputs.data_record())
    meta["provenance"] = dict(provenance(torch_device, seed, time.perf_counter() - started), weights_fingerprint=lm.fingerprint)
    return ranking, meta
