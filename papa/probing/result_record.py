"""The result record of one probe (:func:`result_record`; its schema: :class:`papa.core.schema.ResultRecord`) and
:func:`save_result`, which writes it."""

from __future__ import annotations

from pathlib import Path

from papa.core.models import LoadedModel
from papa.core.provenance import provenance
from papa.probing.probe import (
    ProbeConfig,
    convergence,
)
from papa.probing.run_training import CONVERGENCE_PATIENCE, ProbeProtocol
from papa.probing.task_inputs import TaskInputs, floors


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
