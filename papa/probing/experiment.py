"""One probing run: (model, task, constants, head ordering, k, seed, mode, sizes) → a scored result.

:func:`run_probe` patches the first ``k`` heads of a ranking with their constants, gets the encoder's features
(``cached``: once, in eval mode, possibly from the on-disk cache; ``faithful``: the live encoder in train mode, every
batch), trains the probe and returns ``{"config", "task", "metric", "score", "metrics", "epochs", "floors", "timings",
"data", "provenance"}``; ``score`` is the main metric of the reported epoch (``selected_epoch``: the final one, or
with ``selection="heldout"`` the best on held-out training examples). The main grid's protocol (issue 14; lr from
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
from collections.abc import Sequence

from papa.core.constants import ConstantSet, load_constants
from papa.core.errors import PapaError
from papa.core.heads import all_heads, count_for, first_k, load_ranking
from papa.core.models import LoadedModel, load_model, pick_device
from papa.core.patching import patch_constant_heads, unpatch
from papa.probing.extraction import get_features
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
    mode: str = "cached",
    seed: int = 42,
    epochs: int = 15,
    lr: float = 2e-5,
    **options,
) -> dict:
    """Train and score one probe (the result: module docstring): :func:`run_probes` with one seed.

    ``selection="heldout"`` holds out a seeded ``heldout_fraction`` of the training subset (the same for every seed)
    and reports the epoch best on it. ``score_dev=False`` never touches the dev split (lr selection: ``score`` None,
    no ``dev``); ``eval_chunk_examples`` (cached, ``dev_every_epoch=False``) scores it that many examples at a time.
    """
    return run_probes(
        model, task, constants, ranking, constant_heads, mode, seeds=[seed], epochs=epochs, lr=lr, **options
    )[0]


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
    """One result per probe, ``lrs × seeds`` in that order (``lrs`` None: ``[lr]``), the train and dev features
    extracted (or read from the cache) once for all. Each result is what :func:`run_probe` gives its (lr, seed)
    alone (same draw, init, order and scores; tested); its ``timings`` hold its share of the shared work.
    ``replacement``: what replaces the ``k`` heads (:data:`papa.core.head_patch.REPLACEMENTS`; ``mean`` needs
    constants estimated with their mean outputs)."""
    started = time.perf_counter()
    protocol = ProbeProtocol(
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
            runs = train_together(lm, inputs, configs, protocol, train_pool, eval_source, torch_device)
        else:
            runs = [
                train_one(lm, inputs, config, protocol, train_pool, eval_source, torch_device) for config in configs
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
            result_record(
                lm, inputs, config, protocol, run, (k, heads, ranking, constants), cache, timings, torch_device
            )
        )
    return results
