"""One probing run: (model, task, constants, head ordering, k, seed, mode, sizes) → a scored result.

:func:`~papa.probing.task_inputs.prepare_inputs` loads and encodes a task once; :func:`run_probe` patches the first ``k``
heads of a ranking with their constants, gets the encoder's features (``cached``: once, in eval
mode, from the on-disk cache when another run already computed them; ``faithful``: the live
encoder in train mode for every batch of every epoch), trains the probe and returns a result dict:

``{"config", "task", "metric", "score", "metrics", "epochs", "floors", "timings", "data", "provenance"}``

``score`` is the main metric of the reported epoch (``selected_epoch``: the final one, or with
``selection="heldout"`` the best on held-out training examples); ``epochs`` holds every epoch's train
loss and metrics (and held-out metrics).

The main grid's protocol (issue 14; :mod:`papa.probing.protocol` chooses its lr) adds:

* ``pool_examples``: the training subset is a *pool* (features extracted once per head set); each probe seed
  draws its own ``max_train_examples`` training and ``heldout_examples`` held-out examples from it
  (:func:`~papa.probing.probe.draw_from_pool`), so seeds vary the data as well as the init and order;
* ``patience``: early stopping on the held-out score, ``epochs`` being the cap; the best held-out probe is
  restored; ``convergence`` records its flag and held-out curve;
* ``dev_every_epoch=False``: the dev split is scored once, by the reported probe (it never chooses anything).

Every result stores ``dev``: the reported probe's dev predictions and the labels as lists of ints (token tasks:
flat over the labelled tokens, with ``lengths`` per sentence) and ``label_names``, so that
:mod:`papa.analysis.stats` can bootstrap paired differences across k. NER and POS share their sentences: their
cached features are keyed by the CoNLL folder, not the task, and relabelled on load.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from pathlib import Path

import torch

from papa.core.constants import ConstantSet, load_constants
from papa.core.errors import PapaError
from papa.core.heads import all_heads, count_for, first_k, load_ranking
from papa.core.layout import IGNORE_INDEX
from papa.core.models import LoadedModel, load_model, pick_device
from papa.core.patching import patch_constant_heads, prune_qk, unpatch
from papa.core.provenance import provenance
from papa.probing.encoding import encode_split, estimate_task_constants  # noqa: F401  (re-exported: the interface before the split)
from papa.probing.features import (
    Features,
    cached_features_key,
    encoded_sha256,
    extract_features,
    load_cached,
    store_cached,
)
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
from papa.probing.task_inputs import (  # noqa: F401  (re-exported: this module's interface before the split)
    TaskInputs,
    floors,
    make_evaluator,
    prepare_inputs,
    score_predictions,
)

#: The patience that defines ``converged`` for held-out runs trained without early stopping.
CONVERGENCE_PATIENCE = 3

MODES = ("cached", "faithful")


def get_features(
    lm: LoadedModel,
    inputs: TaskInputs,
    split: str,
    heads,
    constants: ConstantSet | None,
    device,
    batch_size: int = 64,
    use_cache: bool = True,
    keys: list[str] | None = None,
) -> tuple[Features, bool]:
    """Features of ``split`` ("train"/"eval") with ``heads`` constant; returns (features, from_cache). The cache
    key is appended to ``keys`` when given (a run records the entries it used)."""
    encoded = inputs.train if split == "train" else inputs.eval
    record = inputs.data_record()
    token = inputs.spec.is_token_task
    key = cached_features_key(
        fingerprint=lm.fingerprint,
        task=inputs.spec.local_folder if token else inputs.spec.name,  # NER and POS share the CoNLL sentences
        split=split,
        indices=record[f"{split}_indices_sha"],
        max_length=inputs.max_length,
        relayout=inputs.relayout,
        heads=sorted(map(list, heads)),
        constants=constants.meta.get("sha256") if (heads and constants) else None,
        encoded=encoded_sha256(encoded, with_labels=not token),
    )
    if keys is not None:
        keys.append(str(key))
    if use_cache and (hit := load_cached(key)) is not None:
        if not token:
            return hit, True
        labels = encoded["labels"][encoded["labels"] != IGNORE_INDEX]  # this task's tags at the same word positions
        if labels.shape == hit.labels.shape:
            return Features(hit.states, labels.clone(), hit.mask, hit.example, hit.positions), True
    if heads:
        patch_constant_heads(lm.model, constants.constants, heads)
        prune_qk(lm.model)
    try:
        features = extract_features(lm.model, encoded, inputs.spec.is_token_task, batch_size, device)
    finally:
        unpatch(lm.model)
    if use_cache:
        store_cached(key, features)
    return features, False


def predict_eval_in_chunks(
    lm: LoadedModel, inputs: TaskInputs, heads, constants: ConstantSet | None, probe, probe_input: str, device, chunk: int, use_cache: bool = True, keys: list[str] | None = None
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """The probe's flat predictions and labels on the whole eval split, ``chunk`` examples at a time: each chunk's
    features are extracted (or read from the cache, keyed by that chunk's indices) and dropped before the next, so
    a large dev split (MNLI's 9,815 pairs on a 768-wide, 13-state encoder: 12.5 GB) never sits in memory at once.
    Returns ``(predictions, labels, cache hits per chunk)``."""
    preds, labels, hits = [], [], {}
    total = len(inputs.eval_indices)
    for start in range(0, total, chunk):
        rows = slice(start, min(start + chunk, total))
        part = dataclasses.replace(inputs, eval={k: v[rows] for k, v in inputs.eval.items()}, eval_indices=inputs.eval_indices[rows])
        features, hits[f"eval_{start}"] = get_features(lm, part, "eval", heads, constants, device, use_cache=use_cache, keys=keys)
        p, y = predict(probe, CachedSource(features, probe_input, device))
        preds.append(p)
        labels.append(y)
        del features
    return torch.cat(preds), torch.cat(labels), hits


def resolve_heads(lm: LoadedModel, ranking_path: str | None, constant_heads: int | float | str, constants: ConstantSet | None):
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
) -> dict:
    """Train and score one probe (see the module docstring for the result).

    ``selection="final"`` reports the last epoch (the official runs); ``"heldout"`` trains on all but
    a seeded ``heldout_fraction`` of the training subset (the same for every probe seed) and reports
    the dev scores of the epoch that scores best on those held-out *training* examples.

    The main grid's protocol: ``selection="heldout"``, ``pool_examples`` (the training subset is a pool of
    this size; each seed draws ``max_train_examples`` + ``heldout_examples`` from it), ``patience`` (early
    stopping; ``epochs`` is the cap) and ``dev_every_epoch=False``. ``score_dev=False`` never touches the dev
    split (lr selection): ``score`` is then None and there is no ``dev`` record. ``eval_chunk_examples`` (cached
    mode, ``dev_every_epoch=False``) scores the dev split that many examples at a time
    (:func:`predict_eval_in_chunks`), bounding the memory of a large dev split.
    """
    started = time.perf_counter()
    if mode not in MODES:
        raise PapaError(f"Unknown mode {mode!r}", f"Use one of {', '.join(MODES)}.")
    if selection not in SELECTIONS:
        raise PapaError(f"Unknown epoch selection {selection!r}", f"Use one of {', '.join(SELECTIONS)}.")
    pooled = pool_examples is not None
    chunked = eval_chunk_examples is not None
    if chunked and (mode != "cached" or dev_every_epoch or isinstance(eval_chunk_examples, bool) or not isinstance(eval_chunk_examples, int) or eval_chunk_examples < 1):
        raise PapaError(
            f"eval_chunk_examples={eval_chunk_examples!r} needs a positive integer, cached mode and dev_every_epoch false",
            "Score the dev split in chunks only with the main grid's protocol.",
        )
    if (patience is not None or not score_dev) and selection != "heldout":
        raise PapaError("patience and score_dev=False need selection: heldout", "Set selection: heldout (the epoch is chosen on held-out training examples).")
    if pooled and (heldout_examples is None or max_train_examples is None):
        raise PapaError("A training pool needs max_train_examples and heldout_examples (what each seed draws)", "Set e.g. max_train_examples: 2000, heldout_examples: 200.")
    probe_config = ProbeConfig(lr=lr, epochs=epochs, batch_size=batch_size, seed=seed, probe_input=probe_input, patience=patience)
    torch_device = pick_device(device)
    lm = model if isinstance(model, LoadedModel) else load_model(model, torch_device)
    constant_set = load_constants(constants) if constants else None
    if inputs is None:
        train_subset = pool_examples if pooled else max_train_examples
        inputs = prepare_inputs(lm, task, max_length, relayout, train_subset, max_eval_examples, data_seed, data_dir)
    if constant_set is not None:
        constant_set.check_compatible(lm.fingerprint, lm.num_layers, lm.num_heads, inputs.max_length, inputs.relayout)
    k, heads = resolve_heads(lm, ranking, constant_heads, constant_set)
    seed_everything(seed)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    config = lm.model.config
    cache_hits, cache_keys = {}, []
    eval_source = None
    try:  # faithful mode patches the live encoder: unpatched whatever fails below
        if mode == "cached":
            train_features, cache_hits["train"] = get_features(lm, inputs, "train", heads, constant_set, torch_device, use_cache=use_cache, keys=cache_keys)
            train_source = CachedSource(train_features, probe_input, torch_device)
            if (score_dev and not chunked) or dev_every_epoch:
                eval_features, cache_hits["eval"] = get_features(lm, inputs, "eval", heads, constant_set, torch_device, use_cache=use_cache, keys=cache_keys)
                eval_source = CachedSource(eval_features, probe_input, torch_device)
        else:  # faithful: the live encoder, patched until the ``finally`` below
            if heads:
                patch_constant_heads(lm.model, constant_set.constants, heads)
            train_source = LiveSource(lm.model, inputs.train, inputs.spec.is_token_task, torch_device, True, probe_input)
            eval_source = LiveSource(lm.model, inputs.eval, inputs.spec.is_token_task, torch_device, False, probe_input)
        timings["features"] = time.perf_counter() - t0
        heldout, drawn = None, {}
        if pooled:  # the seed's own examples; with selection "final" (the literal setting) the held-out ones go unused
            fit, held = draw_from_pool(train_source.num_examples, max_train_examples, heldout_examples, seed)
            digest = lambda xs: hashlib.sha256(",".join(str(inputs.train_indices[i]) for i in xs.tolist()).encode()).hexdigest()[:16]  # noqa: E731
            drawn = {
                "pool_examples": train_source.num_examples,
                "train_examples": len(fit),
                "heldout_examples": len(held),
                "fit_indices_sha": digest(fit),
                "heldout_indices_sha": digest(held),
            }
        elif selection == "heldout":
            fit, held = split_heldout(train_source.num_examples, heldout_fraction, data_seed)
        if selection == "heldout":
            scoring_source = train_source if mode == "cached" else LiveSource(lm.model, inputs.train, inputs.spec.is_token_task, torch_device, False, probe_input)
            heldout = make_evaluator(inputs, SubsetSource(scoring_source, held), {k_: v[held] for k_, v in inputs.train.items()})
        if pooled or selection == "heldout":
            train_source = SubsetSource(train_source, fit)
        num_labels = len(inputs.label_names)
        seed_everything(seed)
        probe = build_probe(inputs.spec.is_token_task, config.num_hidden_layers + 1, inputs.max_length, config.hidden_size, num_labels, probe_config).to(torch_device)
        history = train_probe(probe, train_source, make_evaluator(inputs, eval_source) if dev_every_epoch else None, probe_config, heldout=heldout)
        chosen = select_epoch(history.epochs, selection)
        if selection == "heldout":
            probe.load_state_dict(history.best_state)  # the reported probe: the best held-out epoch's
        t0 = time.perf_counter()
        if score_dev and chunked:
            preds, labels, chunk_hits = predict_eval_in_chunks(lm, inputs, heads, constant_set, probe, probe_input, torch_device, eval_chunk_examples, use_cache, cache_keys)
            cache_hits["eval"] = all(chunk_hits.values())
            metrics, dev = score_predictions(inputs, preds, labels)
        else:
            metrics, dev = score_predictions(inputs, *predict(probe, eval_source)) if score_dev else ({}, None)
        timings["eval"] = time.perf_counter() - t0
    finally:
        unpatch(lm.model)
    timings.update(train=history.seconds_train, eval=history.seconds_eval + timings["eval"])
    result_config = {
        "model": lm.name,
        "task": inputs.spec.name,
        "constant_heads": k,
        "total_heads": lm.num_layers * lm.num_heads,
        "ranking": Path(ranking).name if ranking else None,
        "constants": Path(constants).name if constants else None,
        "mode": mode,
        "seed": seed,
        **{key: value for key, value in vars(probe_config).items() if key != "seed"},
        "max_length": inputs.max_length,
        "relayout": inputs.relayout,
        "data_seed": data_seed,
        "selection": selection,
        **({"heldout_fraction": heldout_fraction} if selection == "heldout" and not pooled else {}),
        **({"pool_examples": pool_examples, "heldout_examples": heldout_examples} if pooled else {}),
        "dev_every_epoch": dev_every_epoch,
    }
    seconds = time.perf_counter() - started
    timings["total"] = seconds
    return {
        "config": result_config,
        "task": inputs.spec.name,
        "metric": inputs.spec.main_metric,
        "score": metrics.get("main"),
        "metrics": metrics,
        "selected_epoch": chosen["epoch"],
        "epochs": history.epochs,
        "convergence": convergence(history.epochs, patience or CONVERGENCE_PATIENCE, epochs) if selection == "heldout" else None,
        "dev": dev,
        "floors": {"majority": floors(inputs)},
        "heads": [list(h) for h in heads],
        "feature_cache_hits": cache_hits,
        "feature_cache_keys": list(dict.fromkeys(cache_keys)) if use_cache else [],
        "timings": {key: round(value, 3) for key, value in timings.items()},
        "data": {**inputs.data_record(), **drawn},
        "provenance": dict(provenance(torch_device, seed, seconds), weights_fingerprint=lm.fingerprint),
    }


def save_result(path: str | Path, result: dict) -> Path:
    """Write a result JSON atomically, with a checksum (read back by :mod:`papa.analysis.results`)."""
    from papa.core.io import atomic_write_json

    return atomic_write_json(path, result)
