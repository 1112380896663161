"""One probing run: (model, task, constants, head ordering, k, seed, mode, sizes) → a scored result.

:func:`~papa.probing.task_inputs.prepare_inputs` loads and encodes a task once; :func:`run_probe` patches the first
``k`` heads of a ranking with their constants, gets the encoder's features (``cached``: once, in eval mode, from the
on-disk cache when another run computed them; ``faithful``: the live encoder in train mode, every batch of every
epoch), trains the probe and returns ``{"config", "task", "metric", "score", "metrics", "epochs", "floors", "timings",
"data", "provenance"}``. ``score`` is the main metric of the reported epoch (``selected_epoch``: the final one, or
with ``selection="heldout"`` the best on held-out training examples); ``epochs``: every epoch's losses and metrics.

The main grid's protocol (issue 14; :mod:`papa.probing.protocol` chooses its lr) adds:

* ``pool_examples``: the training subset is a *pool* (features extracted once per head set); each probe seed draws
  its own ``max_train_examples`` + ``heldout_examples`` from it (:func:`~papa.probing.probe.draw_from_pool`);
* ``patience``: early stopping on the held-out score (``epochs`` the cap), restoring the best held-out probe;
  ``convergence`` records its flag and held-out curve;
* ``dev_every_epoch=False``: the dev split is scored once, by the reported probe (it never chooses anything).

Every result stores ``dev``: the reported probe's dev predictions and labels as lists of ints (token tasks: flat over
labelled tokens, ``lengths`` per sentence) and ``label_names``, for :mod:`papa.analysis.stats`' paired bootstrap.
NER and POS share sentences: their cached features are keyed by the CoNLL folder and relabelled on load.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from papa.core.constants import ConstantSet, load_constants
from papa.core.errors import PapaError
from papa.core.head_patch import get_replacement
from papa.core.heads import all_heads, count_for, first_k, load_ranking
from papa.core.models import LoadedModel, load_model, pick_device
from papa.core.patching import patch_constant_heads, unpatch
from papa.core.provenance import provenance
from papa.probing.extraction import get_features
from papa.probing.probe import (
    SELECTIONS,
    CachedSource,
    LiveSource,
    ProbeConfig,
    SubsetSource,
    build_probe,
    convergence,
    draw_from_pool,
    predict,
    seed_everything,
    select_epoch,
    split_heldout,
    train_probe,
)
from papa.probing.stacked import ProbeStack, predict_eval_in_chunks, predict_stacked
from papa.probing.stacked_training import StackedMember, device_rng_state, train_stacked
from papa.probing.task_inputs import TaskInputs, floors, make_evaluator, prepare_inputs, score_predictions

#: The patience that defines ``converged`` for held-out runs trained without early stopping.
CONVERGENCE_PATIENCE = 3

MODES = ("cached", "faithful")


def resolve_heads(
    lm: LoadedModel, ranking_path: str | None, constant_heads: int | float | str, constants: ConstantSet | None
):
    total = lm.num_layers * lm.num_heads
    k = count_for(constant_heads, total)
    if k == 0:
        return 0, []
    if constants is None:
        raise PapaError(f"{k} constant heads need a constants file", "Pass --constants (from `papa estimate`).")
    if k == total and ranking_path is None:
        return k, all_heads(lm.num_layers, lm.num_heads)  # every ordering gives the same head set
    if ranking_path is None:
        raise PapaError(f"{k} constant heads need a head ranking", "Pass --ranking (from `papa rank`).")
    ranking, _ = load_ranking(ranking_path, lm.num_layers, lm.num_heads)
    return k, first_k(ranking, k)


def run_probe(
    model: str | LoadedModel = "minilm-l6",
    task: str = "sst2",
    constants: str | None = None,
    ranking: str | None = None,
    constant_heads: int | float | str = 0,
    mode: str = "cached",
    seed: int = 42,
    epochs: int = 15,
    lr: float = 2e-5,
    **options,
) -> dict:
    """Train and score one probe (the result: module docstring): :func:`run_probes` with one seed.

    ``selection="final"`` reports the last epoch; ``"heldout"`` trains on all but a seeded ``heldout_fraction`` of the
    training subset (the same for every seed) and reports the epoch best on those held-out *training* examples. The
    main grid adds ``pool_examples``, ``patience`` and ``dev_every_epoch=False`` (module docstring).
    ``score_dev=False`` never touches the dev split (lr selection: ``score`` None, no ``dev``);
    ``eval_chunk_examples`` (cached, ``dev_every_epoch=False``) scores it that many examples at a time, bounding memory.
    """
    return run_probes(
        model, task, constants, ranking, constant_heads, mode, seeds=[seed], epochs=epochs, lr=lr, **options
    )[0]


@dataclass(frozen=True)
class _Protocol:
    """How every probe of a :func:`run_probes` call is trained and scored (its settings beside the probe's own)."""

    mode: str
    replacement: str
    selection: str
    heldout_fraction: float
    data_seed: int
    pool_examples: int | None
    max_train_examples: int | None
    heldout_examples: int | None
    dev_every_epoch: bool
    score_dev: bool
    eval_chunk_examples: int | None
    epochs: int
    patience: int | None
    use_cache: bool

    @property
    def pooled(self) -> bool:
        return self.pool_examples is not None

    @property
    def chunked(self) -> bool:
        return self.eval_chunk_examples is not None

    def check(self) -> None:
        if self.mode not in MODES:
            raise PapaError(f"Unknown mode {self.mode!r}", f"Use one of {', '.join(MODES)}.")
        get_replacement(self.replacement, has_output_means=True)  # the name only; means: with the constants
        if self.selection not in SELECTIONS:
            raise PapaError(f"Unknown epoch selection {self.selection!r}", f"Use one of {', '.join(SELECTIONS)}.")
        chunk = self.eval_chunk_examples
        if self.chunked and (
            self.mode != "cached"
            or self.dev_every_epoch
            or isinstance(chunk, bool)
            or not isinstance(chunk, int)
            or chunk < 1
        ):
            raise PapaError(
                f"eval_chunk_examples={chunk!r} needs a positive integer, cached mode and dev_every_epoch false",
                "Score the dev split in chunks only with the main grid's protocol.",
            )
        if (self.patience is not None or not self.score_dev) and self.selection != "heldout":
            raise PapaError(
                "patience and score_dev=False need selection: heldout",
                "Set selection: heldout (the epoch is chosen on held-out training examples).",
            )
        if self.pooled and (self.heldout_examples is None or self.max_train_examples is None):
            raise PapaError(
                "A training pool needs max_train_examples and heldout_examples (what each seed draws)",
                "Set e.g. max_train_examples: 2000, heldout_examples: 200.",
            )


def run_probes(
    model: str | LoadedModel = "minilm-l6",
    task: str = "sst2",
    constants: str | None = None,
    ranking: str | None = None,
    constant_heads: int | float | str = 0,
    mode: str = "cached",
    seeds: Sequence[int] = (42,),
    epochs: int = 15,
    lr: float = 2e-5,
    lrs: Sequence[float] | None = None,
    batch_size: int = 16,
    probe_input: str = "all",
    max_length: int = 64,
    relayout: bool = True,
    max_train_examples: int | None = 1000,
    max_eval_examples: int | None = None,
    data_seed: int = 0,
    data_dir: str | None = None,
    device: str | None = None,
    inputs: TaskInputs | None = None,
    use_cache: bool = True,
    selection: str = "final",
    heldout_fraction: float = 0.1,
    patience: int | None = None,
    pool_examples: int | None = None,
    heldout_examples: int | None = None,
    dev_every_epoch: bool = True,
    score_dev: bool = True,
    eval_chunk_examples: int | None = None,
    replacement: str = "papa",
) -> list[dict]:
    """One result per probe, ``lrs × seeds`` in that order (``lrs`` None: ``[lr]``), sharing the encoder's work: the
    training features are extracted (or read from the cache) once, held as float32
    (:class:`~papa.probing.probe.CachedSource`), and the dev split is extracted once for every probe. Each result is
    what :func:`run_probe` gives for its (lr, seed) alone (same draw, init, order and scores; tested); its ``timings``
    hold its share of the shared work. ``replacement``: what replaces the ``k`` heads
    (:data:`papa.core.head_patch.REPLACEMENTS`; ``mean`` needs constants estimated with their mean outputs)."""
    started = time.perf_counter()
    protocol = _Protocol(
        mode, replacement, selection, heldout_fraction, data_seed, pool_examples, max_train_examples, heldout_examples,
        dev_every_epoch, score_dev, eval_chunk_examples, epochs, patience, use_cache,
    )  # fmt: skip
    protocol.check()
    configs = [
        ProbeConfig(
            lr=float(rate),
            epochs=epochs,
            batch_size=batch_size,
            seed=int(seed),
            probe_input=probe_input,
            patience=patience,
        )
        for rate in (lrs if lrs is not None else [lr])
        for seed in seeds
    ]
    if not configs:
        raise PapaError("run_probes needs at least one seed and one lr", "Pass e.g. seeds=[42].")
    torch_device = pick_device(device)
    lm = model if isinstance(model, LoadedModel) else load_model(model, torch_device)
    constant_set = load_constants(constants) if constants else None
    if inputs is None:
        inputs = prepare_inputs(
            lm,
            task,
            max_length,
            relayout,
            pool_examples if protocol.pooled else max_train_examples,
            max_eval_examples,
            data_seed,
            data_dir,
        )
    if constant_set is not None:
        constant_set.check_compatible(
            lm.fingerprint, lm.num_layers, lm.num_heads, inputs.max_length, inputs.relayout, replacement
        )
    k, heads = resolve_heads(lm, ranking, constant_heads, constant_set)
    shared, cache = {}, {"hits": {}, "keys": []}
    t0 = time.perf_counter()
    eval_source, runs = None, []
    try:  # faithful mode patches the live encoder: unpatched whatever fails below
        if mode == "cached":
            features, cache["hits"]["train"] = get_features(
                lm,
                inputs,
                "train",
                heads,
                constant_set,
                torch_device,
                use_cache=use_cache,
                keys=cache["keys"],
                replacement=replacement,
            )
            train_pool = CachedSource(features, probe_input, torch_device, float32=True)
            del features
            if (score_dev and not protocol.chunked) or dev_every_epoch:
                features, cache["hits"]["eval"] = get_features(
                    lm,
                    inputs,
                    "eval",
                    heads,
                    constant_set,
                    torch_device,
                    use_cache=use_cache,
                    keys=cache["keys"],
                    replacement=replacement,
                )
                eval_source = CachedSource(features, probe_input, torch_device)
        else:  # faithful: the live encoder, patched until the ``finally`` below
            if heads:
                patch_constant_heads(
                    lm.model,
                    constant_set.constants,
                    heads,
                    replacement=replacement,
                    output_means=constant_set.output_means,
                )
            train_pool = LiveSource(lm.model, inputs.train, inputs.spec.is_token_task, torch_device, True, probe_input)
            eval_source = LiveSource(lm.model, inputs.eval, inputs.spec.is_token_task, torch_device, False, probe_input)
        shared["features"] = time.perf_counter() - t0
        if mode == "cached":
            runs = _train_together(lm, inputs, configs, protocol, train_pool, eval_source, torch_device)
        else:
            runs = [
                _train_one(lm, inputs, config, protocol, train_pool, eval_source, torch_device) for config in configs
            ]
        t0 = time.perf_counter()
        if score_dev and protocol.chunked:
            probes = [run["probe"] for run in runs]
            predictions, labels, chunk_hits = predict_eval_in_chunks(
                lm,
                inputs,
                heads,
                constant_set,
                probes,
                probe_input,
                torch_device,
                eval_chunk_examples,
                use_cache,
                cache["keys"],
                replacement,
            )
            cache["hits"]["eval"] = all(chunk_hits.values())
            for run, preds in zip(runs, predictions):
                run["metrics"], run["dev"] = score_predictions(inputs, preds, labels)
        shared["eval"] = time.perf_counter() - t0
    finally:
        unpatch(lm.model)
    share = {name: seconds / len(runs) for name, seconds in shared.items()}
    overhead = (time.perf_counter() - started - sum(shared.values()) - sum(run["seconds"] for run in runs)) / len(runs)
    results = []
    for config, run in zip(configs, runs):
        history = run["history"]
        timings = {
            "features": share["features"],
            "train": history.seconds_train,
            "eval": history.seconds_eval + run["seconds_dev"] + share["eval"],
        }
        timings["total"] = run["seconds"] + share["features"] + share["eval"] + overhead
        results.append(
            _result(lm, inputs, config, protocol, run, (k, heads, ranking, constants), cache, timings, torch_device)
        )
    return results


def _draw(
    inputs: TaskInputs, config: ProbeConfig, protocol: _Protocol, num_examples: int
) -> tuple[torch.Tensor | None, torch.Tensor | None, dict]:
    """A probe's training examples ``fit`` (None: all of the training source) and held-out examples ``held`` (None:
    none scored), indices into the training source, and the record of its draw from the pool."""
    if protocol.pooled:  # the seed's own draw; with selection "final" (the literal setting) held-out goes unused
        fit, held = draw_from_pool(num_examples, protocol.max_train_examples, protocol.heldout_examples, config.seed)
        digest = lambda xs: hashlib.sha256(
            ",".join(str(inputs.train_indices[i]) for i in xs.tolist()).encode()
        ).hexdigest()[:16]  # noqa: E731
        drawn = {
            "pool_examples": num_examples,
            "train_examples": len(fit),
            "heldout_examples": len(held),
            "fit_indices_sha": digest(fit),
            "heldout_indices_sha": digest(held),
        }
    elif protocol.selection == "heldout":
        (fit, held), drawn = split_heldout(num_examples, protocol.heldout_fraction, protocol.data_seed), {}
    else:
        fit, held, drawn = None, None, {}
    return fit, (held if protocol.selection == "heldout" else None), drawn


def _build(lm: LoadedModel, inputs: TaskInputs, config: ProbeConfig, torch_device) -> torch.nn.Module:
    """The probe of ``config``, initialised from its seed (as every route builds it), on ``torch_device``."""
    seed_everything(config.seed)
    model_config = lm.model.config
    probe = build_probe(
        inputs.spec.is_token_task,
        model_config.num_hidden_layers + 1,
        inputs.max_length,
        model_config.hidden_size,
        len(inputs.label_names),
        config,
    )
    return probe.to(torch_device)


def _train_together(
    lm: LoadedModel,
    inputs: TaskInputs,
    configs: list[ProbeConfig],
    protocol: _Protocol,
    train_pool: CachedSource,
    eval_source,
    torch_device,
) -> list[dict]:
    """Draw, train as one stacked model (:func:`~papa.probing.stacked_training.train_stacked`) and score in one pass
    (unless the dev split is chunked) every probe of a cached run; ``seconds``, ``seconds_dev``: equal shares."""
    started = time.perf_counter()
    members, records = [], []
    for config in configs:
        fit, held, drawn = _draw(inputs, config, protocol, train_pool.num_examples)
        probe = _build(lm, inputs, config, torch_device)
        metrics = None if held is None else _metrics(inputs, {k: v[held] for k, v in inputs.train.items()})
        fit = torch.arange(train_pool.num_examples) if fit is None else fit
        members.append(StackedMember(probe, config, fit, device_rng_state(torch_device), held, metrics))
        records.append(drawn)
    histories = train_stacked(
        members, train_pool, (eval_source, _metrics(inputs, None)) if protocol.dev_every_epoch else None
    )
    probes = [member.probe for member in members]
    if protocol.selection == "heldout":
        for probe, history in zip(probes, histories):
            probe.load_state_dict(history.best_state)  # the reported probe: the best held-out epoch's
    t0 = time.perf_counter()
    scored = [({}, None)] * len(probes)
    if protocol.score_dev and not protocol.chunked:
        scored = [
            score_predictions(inputs, preds, labels)
            for preds, labels in zip(*predict_stacked(ProbeStack(probes), eval_source))
        ]
    seconds_dev = (time.perf_counter() - t0) / len(probes)
    seconds = (time.perf_counter() - started) / len(probes)
    return [
        {
            "probe": probe,
            "history": history,
            "chosen": select_epoch(history.epochs, protocol.selection),
            "drawn": drawn,
            "metrics": metrics,
            "dev": dev,
        }
        | {"seconds_dev": seconds_dev, "seconds": seconds}
        for probe, history, drawn, (metrics, dev) in zip(probes, histories, records, scored)
    ]


def _metrics(inputs: TaskInputs, encoded: dict[str, torch.Tensor] | None):
    """``(predictions, labels) → metrics`` on the examples ``encoded`` (None: the dev split)."""
    return lambda preds, labels: score_predictions(inputs, preds, labels, encoded)[0]


def _train_one(
    lm: LoadedModel, inputs: TaskInputs, config: ProbeConfig, protocol: _Protocol, train_pool, eval_source, torch_device
) -> dict:
    """Draw, train (:func:`~papa.probing.probe.train_probe`) and score one probe (faithful mode: the live encoder)."""
    started = time.perf_counter()
    fit, held, drawn = _draw(inputs, config, protocol, train_pool.num_examples)
    heldout = None
    if held is not None:
        scoring_source = LiveSource(
            lm.model, inputs.train, inputs.spec.is_token_task, torch_device, False, config.probe_input
        )
        heldout = make_evaluator(
            inputs, SubsetSource(scoring_source, held), {k_: v[held] for k_, v in inputs.train.items()}
        )
    train_source = train_pool if fit is None else SubsetSource(train_pool, fit)
    probe = _build(lm, inputs, config, torch_device)
    history = train_probe(
        probe,
        train_source,
        make_evaluator(inputs, eval_source) if protocol.dev_every_epoch else None,
        config,
        heldout=heldout,
    )
    chosen = select_epoch(history.epochs, protocol.selection)
    if protocol.selection == "heldout":
        probe.load_state_dict(history.best_state)  # the reported probe: the best held-out epoch's
    t0 = time.perf_counter()
    score_now = protocol.score_dev and not protocol.chunked
    metrics, dev = score_predictions(inputs, *predict(probe, eval_source)) if score_now else ({}, None)
    run = {
        "probe": probe,
        "history": history,
        "chosen": chosen,
        "drawn": drawn,
        "metrics": metrics,
        "dev": dev,
        "seconds_dev": time.perf_counter() - t0,
    }
    run["seconds"] = time.perf_counter() - started
    return run


def _result(
    lm: LoadedModel,
    inputs: TaskInputs,
    config: ProbeConfig,
    protocol: _Protocol,
    run: dict,
    head_set: tuple,
    cache: dict,
    timings: dict,
    torch_device,
) -> dict:
    """The result record of one probe (module docstring); ``head_set``: ``(k, heads, ranking, constants)``."""
    k, heads, ranking, constants = head_set
    result_config = {
        "model": lm.name,
        "task": inputs.spec.name,
        "constant_heads": k,
        "total_heads": lm.num_layers * lm.num_heads,
        "ranking": Path(ranking).name if ranking else None,
        "constants": Path(constants).name if constants else None,
        "mode": protocol.mode,
        "replacement": protocol.replacement,
        "seed": config.seed,
        **{key: value for key, value in vars(config).items() if key != "seed"},
        "max_length": inputs.max_length,
        "relayout": inputs.relayout,
        "data_seed": protocol.data_seed,
        "selection": protocol.selection,
        **(
            {"heldout_fraction": protocol.heldout_fraction}
            if protocol.selection == "heldout" and not protocol.pooled
            else {}
        ),
        **(
            {"pool_examples": protocol.pool_examples, "heldout_examples": protocol.heldout_examples}
            if protocol.pooled
            else {}
        ),
        "dev_every_epoch": protocol.dev_every_epoch,
    }
    history, metrics = run["history"], run["metrics"]
    converged = (
        convergence(history.epochs, protocol.patience or CONVERGENCE_PATIENCE, protocol.epochs)
        if protocol.selection == "heldout"
        else None
    )
    return {
        "config": result_config,
        "task": inputs.spec.name,
        "metric": inputs.spec.main_metric,
        "score": metrics.get("main"),
        "metrics": metrics,
        "selected_epoch": run["chosen"]["epoch"],
        "epochs": history.epochs,
        "convergence": converged,
        "dev": run["dev"],
        "floors": {"majority": floors(inputs)},
        "heads": [list(h) for h in heads],
        "feature_cache_hits": dict(cache["hits"]),
        "feature_cache_keys": list(dict.fromkeys(cache["keys"])) if protocol.use_cache else [],
        "timings": {key: round(value, 3) for key, value in timings.items()},
        "data": {**inputs.data_record(), **run["drawn"]},
        "provenance": dict(provenance(torch_device, config.seed, timings["total"]), weights_fingerprint=lm.fingerprint),
    }


def save_result(path: str | Path, result: dict) -> Path:
    """Write a result JSON atomically, with a checksum (read back by :mod:`papa.analysis.results`)."""
    from papa.core.io import atomic_write_json

    return atomic_write_json(path, result)
