"""Head rankings: which heads become constant first.

* ``gates`` (the paper's): every head mixes ``σ(λ_h) A_h(x) + (1 − σ(λ_h)) C̃_h`` (C̃ masked and row-normalised),
  ``λ`` from 0 trained with the probe, encoder and constants frozen (live encoder, train mode, as the official
  sorting run); ascending ``λ`` over all layers (most weight on C̃ first);
* ``deviation``: training-free, from the estimation pass: ascending mean squared deviation of each head's attention
  from its constant (the most input-independent first);
* ``random``: a seeded permutation, the baseline; ``random-<n>`` uses seed ``n``.

Gate draws: ``gates-<n>`` is one gate run at seed ``n`` (probe init, order, dropout); :func:`combine_draws`
ranks by the draws' mean λ. A :class:`WarmStart` first trains the gate probe on cached k = 0 features of the run's
own examples (cheap), so the gate epochs start from a probe that knows the task; every gate run records its probe's
final score against its floor (:func:`probe_check`) and is flagged ``near_floor`` when it has not learned the task.

Every ranking lists all ``(layer, head)`` pairs once (:func:`papa.core.heads.save_ranking`). The gates' encoder passes
run on each batch's real slots (:class:`CompactLiveSource`) where :func:`papa.core.compact.supports_compact`, else
padded (:class:`papa.probing.probe.LiveSource`); same batches, same order. The gates act on ``C[:, slots][:, :,
slots]`` (:meth:`papa.core.head_patch.HeadPatch.constant_matrices`), so with dropout off the real positions' states,
logits, loss and λ gradients equal the padded pass's to float rounding (≤ 1e-5; tested, also final λ and ranking);
with dropout on, ``[B, P, ...]`` tensors draw other masks than ``[B, L, ...]``: another sample of the same training.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

import torch
from torch import nn

from papa.core.compact import compact_forward, supports_compact
from papa.core.constants import load_constants
from papa.core.errors import PapaError
from papa.core.heads import load_ranking, random_ranking, ranking_from_scores
from papa.core.layout import IGNORE_INDEX
from papa.core.models import LoadedModel, load_model, pick_device
from papa.core.patching import gate_lambdas, patch_gates, unpatch
from papa.core.provenance import provenance
from papa.probing.extraction import get_features
from papa.probing.params import ProbeSettings
from papa.probing.probe import (
    CachedSource,
    FeatureSource,
    LiveSource,
    ProbeConfig,
    SubsetSource,
    build_probe,
    seed_everything,
    select_states,
    train_probe,
)
from papa.probing.task_inputs import TaskInputs, floors, make_evaluator, prepare_inputs, split_heldout

METHODS = ("gates", "deviation", "random")
#: The methods with a seeded form ``<method>-<seed>``: a random ordering, one gate draw.
SEEDED = ("gates", "random")
#: A gate probe whose final score closes less than this share of the gap between its floor and a perfect score has
#: not learned the task (its ranking is flagged ``near_floor``): CoLA MCC 0.074 (floor 0) is flagged, MNLI accuracy
#: 0.345 (floor 0.35) too, MRPC accuracy 0.75 (floor 0.68: 22% of the gap) is not.
NEAR_FLOOR_SHARE = 0.1
#: The warm start holds out this share of its examples and stops after this many epochs without a held-out gain.
WARM_HELDOUT, WARM_PATIENCE = 0.1, 3


def split_method(method: str) -> tuple[str, int | None]:
    """``("random", 7)`` for ``"random-7"``, ``("gates", 43)`` for ``"gates-43"``, ``(method, None)`` for a plain
    method; else a :class:`PapaError`."""
    base, dash, suffix = str(method).partition("-")
    if base in METHODS and not dash:
        return base, None
    if base in SEEDED and suffix.isdigit():
        return base, int(suffix)
    raise PapaError(
        f"Unknown ranking method {method!r}",
        f"Use one of {', '.join(METHODS)}, random-<seed> (e.g. random-1) for a seeded random ordering, or "
        "gates-<seed> (e.g. gates-43) for one gate draw.",
    )


@dataclass(frozen=True)
class WarmStart:
    """The gate probe's start: at most ``epochs`` on cached k = 0 features of ``examples`` training examples (the
    same seeded subset as the probes' pool of that size, so the grid extracts its features once; None: the gate run's
    own examples) at ``lr``, the best epoch on held-out ones kept (:func:`warm_probe`; the dev split chooses nothing:
    a fixed 4 epochs ended minilm-l6 CoLA at eval MCC 0.007, one epoch after 0.14). Then the gate epochs train the λ
    alone (at the gate lr) on a frozen probe: trained on with the live encoder's dropout on a few hundred examples,
    the probe lost what it knew (minilm-l6 CoLA: eval MCC 0.14 after the warm start, −0.03 after two joint gate
    epochs). ``epochs`` 0: a fresh probe trained with the λ, both at the gate lr (earlier books' single draw)."""

    epochs: int = 0
    lr: float = 1e-3
    examples: int | None = None


def probe_check(inputs: TaskInputs, final: float) -> dict:
    """The gate probe's final eval score (main metric) against its floor: ``{"final", "floor"`` (majority class),
    ``"chance"`` (uniform guessing: 1 / labels for accuracy, else 0), ``"near_floor"}``; near its floor when it
    closes less than :data:`NEAR_FLOOR_SHARE` of the gap from ``max(floor, chance)`` to a perfect score of 1."""
    floor = float(floors(inputs)["main"])
    chance = 1 / len(inputs.label_names) if inputs.spec.main_metric == "accuracy" else 0.0
    base = max(floor, chance)
    return {
        "final": final,
        "floor": floor,
        "chance": chance,
        "near_floor": final - base < NEAR_FLOOR_SHARE * (1 - base),
    }


def warm_probe(lm: LoadedModel, inputs: TaskInputs, probe: nn.Module, config: ProbeConfig, device) -> list[dict]:
    """Train ``probe`` in place on cached k = 0 features (``get_features``: a compact eval-mode pass, stored as a
    shared set) of ``inputs.train``, as the main grid's probes train: :data:`WARM_HELDOUT` of the examples held out
    (seeded by ``config.seed``), early stopping after :data:`WARM_PATIENCE` epochs without a held-out gain (at most
    ``config.epochs``), the best held-out epoch's state kept; the eval split is scored after each epoch and chooses
    nothing. Returns the epochs' records."""
    train = CachedSource(get_features(lm, inputs, "train", [], None, device)[0], config.probe_input, device)
    evaluation = CachedSource(get_features(lm, inputs, "eval", [], None, device)[0], config.probe_input, device)
    fit, held = split_heldout(train.num_examples, WARM_HELDOUT, config.seed)
    held_encoded = {key: value[held] for key, value in inputs.train.items()}  # regroups token predictions
    heldout = make_evaluator(inputs, SubsetSource(train, held), held_encoded)
    stopping = replace(config, patience=WARM_PATIENCE)
    history = train_probe(
        probe, SubsetSource(train, fit), make_evaluator(inputs, evaluation), stopping, heldout=heldout
    )
    probe.load_state_dict(history.best_state)
    return [record | {"best": record["epoch"] == history.best_epoch} for record in history.epochs]


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
    lm: LoadedModel,
    inputs: TaskInputs,
    constants: torch.Tensor,
    config: ProbeConfig,
    device,
    compact: bool = True,
    warm: WarmStart | None = None,
    warm_inputs: TaskInputs | None = None,
) -> tuple[list, dict]:
    """Train gates + probe on ``constants [layers, heads, L, L]``: (ranking, meta with the final λ ``[layers, heads]``,
    per-epoch scores, the warm start's and :func:`probe_check`). ``compact``: encoder passes on each batch's real
    slots where supported (False: padded); ``warm``: the probe first trains on cached k = 0 features of
    ``warm_inputs``' training examples (None: of ``inputs``')."""
    seed_everything(config.seed)
    probe = build_probe(
        inputs.spec.is_token_task,
        lm.num_layers + 1,
        inputs.max_length,
        lm.model.config.hidden_size,
        len(inputs.label_names),
        config,
    ).to(device)
    warm = warm or WarmStart()
    warm_config = replace(config, lr=warm.lr, epochs=max(warm.epochs, 1))
    warmed = warm_probe(lm, warm_inputs or inputs, probe, warm_config, device) if warm.epochs else []
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
        probe.requires_grad_(not warm.epochs)  # warm: the probe that knows the task stays as it is, λ alone moves
        history = train_probe(probe, train, make_evaluator(inputs, evaluation), config, extra_parameters=lambdas)
        final = gate_lambdas(lm.model)
    finally:
        unpatch(lm.model)
        probe.requires_grad_(True)
    meta = {"lambdas": final.tolist(), "epochs": history.epochs, "warm_start": {**asdict(warm), "history": warmed}}
    meta["probe_check"] = probe_check(inputs, history.epochs[-1]["main"])
    return ranking_from_scores(final, ascending=True), meta


def compute_ranking(
    method: str,
    model: str | LoadedModel = "minilm-l6",
    task: str = "sst2",
    constants: str | None = None,
    settings: ProbeSettings | None = None,
    *,
    seed: int = 42,
    device: str | None = None,
    warm: WarmStart | None = None,
    **options: object,
) -> tuple[list, dict]:
    """Compute a ranking by ``method``; returns ``(ranking, meta)`` (meta holds config and provenance).

    ``settings``: the gate probe's training (``lr``, ``epochs``, ``batch_size``) and examples
    (``max_train_examples``, ``max_eval_examples``, ``data_seed``, ``data_dir``) as a
    :class:`~papa.probing.params.ProbeSettings` (default the paper's probe; its seeds, layout and other fields are not
    read: the layout is the constants'); ``options`` override its fields by name (``lr=1e-3``,
    ``max_train_examples=500``). ``seed``: the ordering's or gate run's seed (``random-<n>``/``gates-<n>``: ``n``);
    ``device``: a torch device (None: the best available); ``warm``: the gate probe's :class:`WarmStart` (None: a
    fresh probe)."""
    chosen = (settings or ProbeSettings()).with_options(**options)
    epochs, lr, data = chosen.epochs, chosen.lr, chosen.data
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
                lm, task, constant_set.max_length, relayout, data.max_train_examples, data.max_eval_examples,
                data.data_seed, data.data_dir,
            )  # fmt: skip
            config = ProbeConfig(lr=lr, epochs=epochs, batch_size=chosen.batch_size, seed=seed)
            warm_inputs = None
            if warm is not None and warm.epochs and warm.examples is not None:
                sizes = (warm.examples, data.max_eval_examples, data.data_seed, data.data_dir)
                warm_inputs = prepare_inputs(lm, task, constant_set.max_length, relayout, *sizes)
            gates = (constant_set.constants, config, torch_device)
            ranking, extra = rank_gates(lm, inputs, *gates, warm=warm, warm_inputs=warm_inputs)
            meta.update(extra, epochs_trained=epochs, lr=lr, data=inputs.data_record())
    meta["provenance"] = dict(
        provenance(torch_device, seed, time.perf_counter() - started), weights_fingerprint=lm.fingerprint
    )
    return ranking, meta


def draw_agreement(first: Sequence, second: Sequence) -> dict:
    """How two rankings of the same ``n`` heads agree: ``{"overlap"`` (heads both put in their first ``n // 2``),
    ``"overlap_chance"`` (its expectation for two random orderings: ``(n // 2)² / n``), ``"spearman"`` (ρ of the
    heads' positions; 0 by chance)}. 72 heads: 36 first, 18 shared by chance."""
    n, half = len(first), len(first) // 2
    if sorted(map(tuple, first)) != sorted(map(tuple, second)):
        raise PapaError("The two rankings do not list the same heads", "Compare rankings of the same model.")
    position = {tuple(head): i for i, head in enumerate(second)}
    overlap = len({tuple(h) for h in first[:half]} & {tuple(h) for h in second[:half]})
    squares = sum((i - position[tuple(head)]) ** 2 for i, head in enumerate(first))
    spearman = 1 - 6 * squares / (n * (n * n - 1)) if n > 1 else 1.0
    return {"overlap": overlap, "overlap_chance": half * half / n if n else 0.0, "spearman": spearman}


def combine_draws(paths: Sequence[str]) -> tuple[list, dict]:
    """The gates ranking of several draws (``gates-<seed>`` ranking files of one model and task): ascending mean λ
    ``[layers, heads]`` over the draws. Mean λ, not mean rank: λ is the paper's score, every draw shares its lr,
    epochs and examples (so its scale), and a draw whose gates barely moved (a probe that had not learned the task)
    weighs less than one whose gates separated. Meta: the draws (seed, file, :func:`probe_check`), their pairwise
    :func:`draw_agreement`, ``near_floor`` (how many draws are flagged) and the mean λ."""
    if len(paths) < 2:
        raise PapaError(f"Combining gate draws needs at least 2, got {len(paths)}", "List two or more draw files.")
    started = time.perf_counter()
    loaded = [load_ranking(path) for path in paths]
    first = loaded[0][1]
    for path, (_, meta) in zip(paths, loaded):
        if meta.get("method") != "gates" or "lambdas" not in meta:
            raise PapaError(
                f"{path} is not a gate draw (no λ)", "Combine rankings written by `papa rank` gates-<seed>."
            )
        if (meta.get("model"), meta.get("task")) != (first.get("model"), first.get("task")):
            raise PapaError(
                f"{path} ranks {meta.get('model')} {meta.get('task')}, not {first.get('model')} {first.get('task')}",
                "Combine the draws of one model and task.",
            )
    mean = torch.tensor([meta["lambdas"] for _, meta in loaded], dtype=torch.float64).mean(0)
    draws = [
        {"seed": meta.get("seed"), "file": str(path), **(meta.get("probe_check") or {})}
        for path, (_, meta) in zip(paths, loaded)
    ]
    agreement = [
        {"seeds": [draws[i]["seed"], draws[j]["seed"]], **draw_agreement(loaded[i][0], loaded[j][0])}
        for i in range(len(loaded))
        for j in range(i + 1, len(loaded))
    ]
    meta = {"method": "gates", "model": first.get("model"), "task": first.get("task"), "combine": "mean λ"}
    meta |= {"draws": draws, "agreement": agreement, "near_floor": sum(bool(d.get("near_floor")) for d in draws)}
    meta |= {"lambdas": mean.tolist(), "provenance": provenance("cpu", None, time.perf_counter() - started)}
    return ranking_from_scores(mean, ascending=True), meta
