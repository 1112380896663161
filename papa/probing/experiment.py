"""One probing run: (model, task, constants, head ordering, k, seed, mode, sizes) → a scored result.

:func:`run_probe` patches the first ``k`` heads of a ranking with their constants, gets the encoder's features
(``cached``: once, in eval mode, possibly from the on-disk cache; ``faithful``: the live encoder in train mode, every
batch), trains the probe and returns ``{"config", "task", "metric", "score", "metrics", "epochs", "floors", "timings",
"data", "provenance"}``; ``score`` is the main metric of the reported epoch (``selected_epoch``: the final one, or
with ``selection="heldout"`` the best on held-out training examples). The main grid's protocol (lr from
:mod:`papa.probing.protocol`) adds:

* ``pool_examples``: features extracted once for a training *pool*, from which each seed draws its own
  ``max_train_examples`` + ``heldout_examples`` (:func:`~papa.probing.task_inputs.draw_from_pool`);
* ``patience``: early stopping on the held-out score (``epochs`` the cap), restoring the best held-out probe
  (``convergence`` records its flag and held-out curve);
* ``dev_every_epoch=False``: the dev split scored once, by the reported probe.

Every result stores ``dev``: the reported probe's dev predictions and labels (token tasks: flat over labelled tokens,
``lengths`` per sentence) and ``label_names``, for :mod:`papa.analysis.bootstrap`'s paired bootstrap.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from papa.core.constants import ConstantSet, load_constants
from papa.core.errors import PapaError
from papa.core.heads import all_heads, count_for, first_k, load_ranking
from papa.core.models import LoadedModel, load_model, pick_device
from papa.core.patching import patch_constant_heads, unpatch
from papa.probing.extraction import get_features
from papa.probing.params import ProbeSettings, one_seed
from papa.probing.probe import (
    CachedSource,
    LiveSource,
    ProbeConfig,
)
from papa.probing.run_training import ProbeProtocol, result_record, train_one, train_together
from papa.probing.stacked import predict_eval_in_chunks
from papa.probing.task_inputs import TaskInputs, prepare_inputs, score_predictions


def resolve_heads(
    lm: LoadedModel, ranking_path: str | None, constant_heads: int | float | str, constants: ConstantSet | None
):
    """``(k, heads)``: the first ``k`` ``(layer, head)`` pairs of the ranking (``constant_heads``: a count, a fraction
    or ``"all"``, :func:`papa.core.heads.count_for`); all heads need no ranking."""
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
    settings: ProbeSettings | None = None,
    *,
    seed: int | None = None,
    **options,
) -> dict:
    """Train and score one probe (the result: module docstring): :func:`run_probes` with one seed (``seed``, else
    the settings' only one; by default 42). ``options``: as :func:`run_probes`'.

    ``selection="heldout"`` holds out a seeded ``heldout_fraction`` of the training subset (the same for every seed)
    and reports the epoch best on it. ``score_dev=False`` never touches the dev split (lr selection: ``score`` None,
    no ``dev``); ``eval_chunk_examples`` (cached, ``dev_every_epoch=False``) scores it that many examples at a time.
    """
    runtime = {key: options.pop(key) for key in ("inputs", "device") if key in options}
    chosen = one_seed((settings or ProbeSettings()).with_options(**options), seed)
    return run_probes(model, task, constants, ranking, constant_heads, chosen, **runtime)[0]


def run_probes(
    model: str | LoadedModel = "minilm-l6",
    task: str = "sst2",
    constants: str | None = None,
    ranking: str | None = None,
    constant_heads: int | float | str = 0,
    settings: ProbeSettings | None = None,
    *,
    inputs: TaskInputs | None = None,
    device: str | None = None,
    **options,
) -> list[dict]:
    """One result per probe, ``lrs × seeds`` in that order, the train and dev features extracted (or read from the
    cache) once for all. Each result is what :func:`run_probe` gives its (lr, seed) alone (same draw, init, order
    and scores; tested); its ``timings`` hold its share of the shared work.

    ``settings``: how the probes train and which examples they read (:class:`~papa.probing.params.ProbeSettings`,
    default the paper's probe); ``options`` override its fields by name (``seeds=[42, 43]``, ``lr=1e-3``,
    ``max_train_examples=500``, ``replacement="uniform"``: :data:`papa.core.replacements.REPLACEMENTS`; ``mean``
    needs constants estimated with their mean outputs). ``inputs``: prepared task inputs
    (:func:`~papa.probing.task_inputs.prepare_inputs`; None: prepared from the settings' data); ``device``: a torch
    device (None: the best available)."""
    started = time.perf_counter()
    chosen = (settings or ProbeSettings()).with_options(**options)
    data = chosen.data
    protocol = ProbeProtocol(
        chosen.mode, chosen.replacement, chosen.selection, data.heldout_fraction, data.data_seed, data.pool_examples,
        data.max_train_examples, data.heldout_examples, chosen.dev_every_epoch, chosen.score_dev,
        chosen.eval_chunk_examples, chosen.epochs, chosen.patience, chosen.use_cache,
    )  # fmt: skip
    protocol.check()
    configs = [
        ProbeConfig(
            lr=float(rate),
            epochs=chosen.epochs,
            batch_size=chosen.batch_size,
            seed=int(seed),
            probe_input=chosen.probe_input,
            patience=chosen.patience,
        )
        for rate in chosen.rates
        for seed in chosen.seeds
    ]
    if not configs:
        raise PapaError("run_probes needs at least one seed and one lr", "Pass e.g. seeds=[42].")
    torch_device = pick_device(device)
    lm = model if isinstance(model, LoadedModel) else load_model(model, torch_device)
    constant_set = load_constants(constants) if constants else None
    if inputs is None:
        train_examples = data.pool_examples if protocol.pooled else data.max_train_examples
        inputs = prepare_inputs(
            lm, task, data.max_length, data.relayout, train_examples, data.max_eval_examples, data.data_seed,
            data.data_dir,
        )  # fmt: skip
    if constant_set is not None:
        constant_set.check_compatible(
            lm.fingerprint, lm.num_layers, lm.num_heads, inputs.max_length, inputs.relayout, chosen.replacement
        )
    k, heads = resolve_heads(lm, ranking, constant_heads, constant_set)
    run = _Run(lm, inputs, heads, constant_set, torch_device, chosen, protocol)
    runs, shared, cache = _train_and_score(run, configs)
    share = {name: seconds / len(runs) for name, seconds in shared.items()}
    overhead = (time.perf_counter() - started - sum(shared.values()) - sum(r["seconds"] for r in runs)) / len(runs)
    results = []
    for config, trained in zip(configs, runs):
        history = trained["history"]
        timings = {
            "features": share["features"],
            "train": history.seconds_train,
            "eval": history.seconds_eval + trained["seconds_dev"] + share["eval"],
        }
        timings["total"] = trained["seconds"] + share["features"] + share["eval"] + overhead
        head_record = (k, heads, ranking, constants)
        results.append(result_record(lm, inputs, config, protocol, trained, head_record, cache, timings, torch_device))
    return results


@dataclass(frozen=True)
class _Run:
    """What the steps of one :func:`run_probes` call share: the encoder, inputs, constant heads and settings."""

    lm: LoadedModel
    inputs: TaskInputs
    heads: list
    constant_set: ConstantSet | None
    device: torch.device
    settings: ProbeSettings
    protocol: ProbeProtocol


def _train_and_score(run: _Run, configs: list[ProbeConfig]) -> tuple[list[dict], dict, dict]:
    """``(runs, shared seconds, cache record)``: the features, every probe trained, the dev split scored."""
    shared, cache = {}, {"hits": {}, "keys": []}
    t0 = time.perf_counter()
    runs = []
    try:  # faithful mode patches the live encoder: unpatched whatever fails below
        train_pool, eval_source = _sources(run, cache)
        shared["features"] = time.perf_counter() - t0
        lm, inputs, protocol, torch_device = run.lm, run.inputs, run.protocol, run.device
        if run.settings.mode == "cached":
            runs = train_together(lm, inputs, configs, protocol, train_pool, eval_source, torch_device)
        else:
            runs = [
                train_one(lm, inputs, config, protocol, train_pool, eval_source, torch_device) for config in configs
            ]
        t0 = time.perf_counter()
        if run.settings.score_dev and protocol.chunked:
            _score_in_chunks(run, runs, cache)
        shared["eval"] = time.perf_counter() - t0
    finally:
        unpatch(run.lm.model)
    return runs, shared, cache


def _sources(run: _Run, cache: dict) -> tuple[CachedSource | LiveSource, CachedSource | LiveSource | None]:
    """``(training pool, dev source)``: cached features (the dev split's only where it is scored whole), or the live
    encoder with its constant heads patched (faithful; the caller unpatches)."""
    lm, inputs, settings, torch_device = run.lm, run.inputs, run.settings, run.device
    probe_input, eval_source = settings.probe_input, None
    if settings.mode == "cached":
        options = dict(use_cache=settings.use_cache, keys=cache["keys"], replacement=settings.replacement)
        features, cache["hits"]["train"] = get_features(
            lm, inputs, "train", run.heads, run.constant_set, torch_device, **options
        )
        train_pool = CachedSource(features, probe_input, torch_device, float32=True)
        del features
        if (settings.score_dev and not run.protocol.chunked) or settings.dev_every_epoch:
            features, cache["hits"]["eval"] = get_features(
                lm, inputs, "eval", run.heads, run.constant_set, torch_device, **options
            )
            eval_source = CachedSource(features, probe_input, torch_device)
        return train_pool, eval_source
    if run.heads:  # faithful: the live encoder, patched until the caller's ``finally``
        constant_set = run.constant_set
        patch_constant_heads(
            lm.model,
            constant_set.constants,
            run.heads,
            replacement=settings.replacement,
            output_means=constant_set.output_means,
        )
    train_pool = LiveSource(lm.model, inputs.train, inputs.spec.is_token_task, torch_device, True, probe_input)
    eval_source = LiveSource(lm.model, inputs.eval, inputs.spec.is_token_task, torch_device, False, probe_input)
    return train_pool, eval_source


def _score_in_chunks(run: _Run, runs: list[dict], cache: dict) -> None:
    """Score every trained probe on the dev split ``eval_chunk_examples`` examples at a time, in place."""
    probes = [trained["probe"] for trained in runs]
    predictions, labels, chunk_hits = predict_eval_in_chunks(
        run.lm, run.inputs, run.heads, run.constant_set, probes, run.device, run.settings, cache["keys"]
    )
    cache["hits"]["eval"] = all(chunk_hits.values())
    for trained, preds in zip(runs, predictions):
        trained["metrics"], trained["dev"] = score_predictions(run.inputs, preds, labels)
