"""Training the probes of one run (:func:`papa.probing.experiment.run_probes`) under one :class:`ProbeProtocol`:
:func:`train_together` (``cached``: all probes as one stacked model,
:func:`~papa.probing.stacked_training.train_stacked`) or :func:`train_one` (``faithful``: one probe on the live
encoder). Either gives per probe ``{"probe", "history", "chosen", "drawn", "metrics", "dev", "seconds_dev",
"seconds"}``, which :func:`result_record` turns into a result (:class:`papa.core.schema.ResultRecord`). The reported
epoch is :func:`select_epoch`'s; :func:`convergence` says whether the held-out curve had stopped rising.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from papa.core.errors import PapaError
from papa.core.head_patch import get_replacement
from papa.core.io import sha256_file
from papa.core.models import LoadedModel
from papa.core.provenance import provenance
from papa.probing.probe import (
    CachedSource,
    LiveSource,
    ProbeConfig,
    SubsetSource,
    build_probe,
    predict,
    seed_everything,
    train_probe,
)
from papa.probing.stacked import ProbeStack, predict_stacked
from papa.probing.stacked_training import StackedMember, device_rng_state, train_stacked
from papa.probing.task_inputs import (
    TaskInputs,
    draw_from_pool,
    floors,
    make_evaluator,
    score_predictions,
    split_heldout,
)

#: The patience that defines ``converged`` for held-out runs trained without early stopping.
CONVERGENCE_PATIENCE = 3


def convergence(epochs: list[dict], patience: int, max_epochs: int) -> dict:
    """Whether the held-out curve (``heldout_main`` per epoch) had stopped rising: ``converged`` when the best epoch
    (earliest among ties) lies ``patience`` or more epochs before the last (always after an early stop; not when the
    cap cut a rising curve); also ``best_epoch``, ``epochs_trained``, ``stopped_early``, ``patience``,
    ``max_epochs``, ``heldout_curve``."""
    if not epochs or "heldout_main" not in epochs[0]:
        raise PapaError("Convergence needs held-out scores per epoch", "Train with a heldout evaluator.")
    curve = [float(record["heldout_main"]) for record in epochs]
    best = max(range(len(curve)), key=lambda i: (curve[i], -i)) + 1
    trained = len(curve)
    return {
        "converged": trained - best >= patience,
        "best_epoch": best,
        "epochs_trained": trained,
        "stopped_early": trained < max_epochs,
        "patience": patience,
        "max_epochs": max_epochs,
        "heldout_curve": curve,
    }


SELECTIONS = ("final", "heldout")


def select_epoch(epochs: list[dict], selection: str) -> dict:
    """The reported epoch: the last (``final``, the official runs) or the best held-out one (``heldout``; earliest)."""
    if selection == "final":
        return epochs[-1]
    if selection == "heldout":
        if "heldout_main" not in epochs[0]:
            raise PapaError("Epoch selection 'heldout' needs held-out scores", "Train with a heldout evaluator.")
        return max(epochs, key=lambda record: (record["heldout_main"], -record["epoch"]))
    raise PapaError(f"Unknown epoch selection {selection!r}", f"Use one of {', '.join(SELECTIONS)}.")


#: How a run gets its features: cached (once, eval mode) or faithful (the live encoder, train mode).
MODES = ("cached", "faithful")


@dataclass(frozen=True)
class ProbeProtocol:
    """How every probe of a :func:`~papa.probing.experiment.run_probes` call is trained and scored (beyond its
    :class:`~papa.probing.probe.ProbeConfig`)."""

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


def draw_examples(
    inputs: TaskInputs, config: ProbeConfig, protocol: ProbeProtocol, num_examples: int
) -> tuple[torch.Tensor | None, torch.Tensor | None, dict]:
    """A probe's training examples ``fit`` (None: all of the training source) and held-out examples ``held`` (None:
    none scored), indices into the training source, and the record of its draw from the pool."""
    if protocol.pooled:  # the seed's own draw; with selection "final" (the literal setting) held-out goes unused
        fit, held = draw_from_pool(num_examples, protocol.max_train_examples, protocol.heldout_examples, config.seed)
        digest = lambda xs: hashlib.sha256(
            ",".join(str(inputs.train_indices[i]) for i in xs.tolist()).encode()
        ).hexdigest()[:16]
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


def build_seeded_probe(lm: LoadedModel, inputs: TaskInputs, config: ProbeConfig, torch_device) -> torch.nn.Module:
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


def train_together(
    lm: LoadedModel,
    inputs: TaskInputs,
    configs: list[ProbeConfig],
    protocol: ProbeProtocol,
    train_pool: CachedSource,
    eval_source,
    torch_device,
) -> list[dict]:
    """Draw, train as one stacked model (:func:`~papa.probing.stacked_training.train_stacked`) and score in one pass
    (unless the dev split is chunked) every probe of a cached run; ``seconds``, ``seconds_dev``: equal shares."""
    started = time.perf_counter()
    members, records = [], []
    for config in configs:
        fit, held, drawn = draw_examples(inputs, config, protocol, train_pool.num_examples)
        probe = build_seeded_probe(lm, inputs, config, torch_device)
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


def train_one(
    lm: LoadedModel,
    inputs: TaskInputs,
    config: ProbeConfig,
    protocol: ProbeProtocol,
    train_pool,
    eval_source,
    torch_device,
) -> dict:
    """Draw, train (:func:`~papa.probing.probe.train_probe`) and score one probe (faithful mode: the live encoder)."""
    started = time.perf_counter()
    fit, held, drawn = draw_examples(inputs, config, protocol, train_pool.num_examples)
    heldout = None
    if held is not None:
        scoring_source = LiveSource(
            lm.model, inputs.train, inputs.spec.is_token_task, torch_device, False, config.probe_input
        )
        heldout = make_evaluator(
            inputs, SubsetSource(scoring_source, held), {k_: v[held] for k_, v in inputs.train.items()}
        )
    train_source = train_pool if fit is None else SubsetSource(train_pool, fit)
    probe = build_seeded_probe(lm, inputs, config, torch_device)
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


def result_record(
    lm: LoadedModel,
    inputs: TaskInputs,
    config: ProbeConfig,
    protocol: ProbeProtocol,
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
        **({"constants_sha256": sha256_file(constants)} if constants else {}),  # the file's, not only its name
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
