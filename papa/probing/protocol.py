"""The main grid's probe protocol: the lr chosen once per (model, task) at k = 0 on held-out *training*
examples, then fixed for every k.

:func:`select_lr` tries :data:`LR_GRID` with :func:`papa.probing.experiment.run_probe`'s protocol, never scoring the
dev split; :func:`save_lr_choice` / :func:`load_lr_choice` keep the choice as a checksummed JSON artefact read by every
probe run of that (model, task).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from papa.core.errors import PapaError
from papa.core.io import atomic_write_json, read_json_verified
from papa.core.models import LoadedModel, load_model, pick_device
from papa.core.replacements import REPLACEMENT_TABLE
from papa.probing.experiment import run_probes
from papa.probing.features import forget_cached
from papa.probing.params import DataSettings, ProbeSettings
from papa.probing.task_inputs import prepare_inputs

#: The lrs tried: the paper's 2e-5 and three larger ones (on ~2,000 examples a probe barely moves at 2e-5).
LR_GRID: tuple[float, ...] = (2e-5, 2e-4, 1e-3, 5e-3)


#: :func:`select_lr`'s default settings: every lr of :data:`LR_GRID` on one seed, each seed's own draw of 2,000
#: training + 200 held-out examples from a pool of 2,600, at most 30 epochs with early stopping after 3 epochs without
#: a held-out gain, the best held-out epoch reported.
SELECT_LR_SETTINGS = ProbeSettings(
    lrs=LR_GRID,
    epochs=30,
    patience=3,
    data=DataSettings(pool_examples=2600, max_train_examples=2000, heldout_examples=200),
)
#: What every lr selection does, whatever its settings: cached features, the best held-out epoch, the dev split never
#: scored.
_SELECTION_RULES = {"mode": "cached", "selection": "heldout", "dev_every_epoch": False, "score_dev": False}


def select_lr(
    model: str | LoadedModel,
    task: str,
    settings: ProbeSettings | None = None,
    *,
    device: str | None = None,
    **options: object,
) -> dict:
    """Choose the probe's lr for ``(model, task)`` at k = 0: each seed's own draw from the pool, early stopping on
    held-out training examples; :func:`choose_lr`'s rule on the seeds' best-epoch held-out scores.

    ``settings``: the lrs tried (``lrs``), seeds, epoch cap, patience, batch size and the data (pool, training and
    held-out sizes, ``max_length``, ``relayout``, ``data_seed``, ``data_dir``) as a
    :class:`~papa.probing.params.ProbeSettings` (default :data:`SELECT_LR_SETTINGS`); ``options`` override its fields
    by name (``select_lr(lm, "sst2", seeds=[42, 43], epochs=7)``). The selection, dev scoring and mode are fixed
    (the best held-out epoch, the dev split never scored, cached features). ``device``: a torch device (None: the best
    available).

    Returns ``{"model", "task", "lr", "runner_up", "within_noise", "heldout": {lr: mean best held-out score},
    "stderr": {lr: ...}, "converged": {lr: ...}, "runs": [{lr, seed, heldout, best_epoch, converged,
    epochs_trained}], "protocol": {...}, "seconds"}`` (lr keys as ``repr`` strings).
    """
    chosen = (settings or SELECT_LR_SETTINGS).with_options(**options).with_options(**_SELECTION_RULES)
    lrs, data = chosen.lrs, chosen.data
    if not lrs or any(not (isinstance(lr, (int, float)) and lr > 0 and math.isfinite(lr)) for lr in lrs):
        raise PapaError(f"The lr grid must be positive numbers, got {list(lrs or ())!r}", f"Use e.g. {list(LR_GRID)}.")
    if not chosen.seeds:
        raise PapaError("select_lr needs at least one seed", "Use e.g. seeds=[42].")
    chosen = chosen.with_options(lrs=[float(lr) for lr in lrs])
    started = time.perf_counter()
    torch_device = pick_device(device)
    lm = model if isinstance(model, LoadedModel) else load_model(model, torch_device)
    inputs = prepare_inputs(
        lm, task, data.max_length, data.relayout, data.pool_examples, 1, data.data_seed, data.data_dir
    )  # no dev scores
    # every (lr, seed) on the same features, extracted once
    results = run_probes(lm, task, settings=chosen, device=str(torch_device), inputs=inputs)
    runs = [_selection_run(result) for result in results]
    return {
        "model": lm.name,
        "task": inputs.spec.name,
        **choose_lr(runs),
        "runs": runs,
        "protocol": _protocol_record(chosen),
        "weights_fingerprint": lm.fingerprint,
        "seconds": round(time.perf_counter() - started, 3),
    }


def _selection_run(result: dict) -> dict:
    """One probe result of :func:`select_lr` as its run record: its lr, seed and best-epoch held-out score."""
    conv = result["convergence"]
    return {
        "lr": result["config"]["lr"],
        "seed": result["config"]["seed"],
        "heldout": conv["heldout_curve"][conv["best_epoch"] - 1],
        "best_epoch": conv["best_epoch"],
        "converged": conv["converged"],
        "epochs_trained": conv["epochs_trained"],
    }


def _protocol_record(settings: ProbeSettings) -> dict:
    """The ``protocol`` of a :func:`select_lr` record: the seeds, epoch cap, early stopping and draw it used."""
    data = settings.data
    return {
        "seeds": list(settings.seeds),
        "max_epochs": settings.epochs,
        "patience": settings.patience,
        "pool_examples": data.pool_examples,
        "max_train_examples": data.max_train_examples,
        "heldout_examples": data.heldout_examples,
        "batch_size": settings.batch_size,
        "max_length": data.max_length,
        "relayout": data.relayout,
        "data_seed": data.data_seed,
    }


def _mean_and_stderr(values: list[float]) -> tuple[float, float]:
    """The mean and its standard error (sample sd / √n; 0 for one value)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values))


def choose_lr(runs: Sequence[dict]) -> dict:
    """The lr rule on ``runs`` (``{"lr", "seed", "heldout", "converged"}`` each, every lr on the same seeds).

    * Each lr's score is its seeds' mean best-epoch held-out score; its noise is the standard error of that mean
      (sample sd / √seeds: 0 with one seed). Two lrs are **within noise** when their means differ by at most
      ``√(se_a² + se_b²)``, the standard error of the difference.
    * An lr has **converged** when most of its seeds' runs stopped early (a run still rising at the epoch cap has
      not).
    * The highest mean wins (ties: the smaller lr), unless it has not converged and a converged lr lies within
      noise of it: then the best converged lr within noise wins (a candidate still rising at the cap does not win
      over a converged one on noise).
    * The **runner-up** is the best of the others by mean (ties: the smaller lr); ``within_noise`` says whether the
      choice is within noise of it (then the all-heads drop is worth reading at the runner-up too).

    Returns ``{"lr", "runner_up" (None with one lr), "within_noise", "heldout", "stderr", "converged"}``, the
    per-lr maps keyed by ``repr(lr)``.
    """
    lrs = sorted({float(run["lr"]) for run in runs})
    stats = {lr: _mean_and_stderr([run["heldout"] for run in runs if float(run["lr"]) == lr]) for lr in lrs}
    converged = {}
    for lr in lrs:
        flags = [bool(run["converged"]) for run in runs if float(run["lr"]) == lr]
        converged[lr] = 2 * sum(flags) > len(flags)
    noise = lambda a, b: math.hypot(stats[a][1], stats[b][1])
    close = lambda a, b: abs(stats[a][0] - stats[b][0]) <= noise(a, b)
    by_score = sorted(lrs, key=lambda lr: (-stats[lr][0], lr))
    chosen = by_score[0]
    if not converged[chosen]:
        rivals = [lr for lr in by_score if converged[lr] and close(chosen, lr)]
        chosen = rivals[0] if rivals else chosen
    others = [lr for lr in by_score if lr != chosen]
    runner_up = others[0] if others else None
    return {
        "lr": chosen,
        "runner_up": runner_up,
        "within_noise": runner_up is not None and close(chosen, runner_up),
        "heldout": {repr(lr): stats[lr][0] for lr in lrs},
        "stderr": {repr(lr): stats[lr][1] for lr in lrs},
        "converged": {repr(lr): converged[lr] for lr in lrs},
    }


def save_lr_choice(path: str | Path, choice: dict) -> Path:
    """Write a :func:`select_lr` record atomically, with a checksum."""
    return atomic_write_json(path, choice)


def load_lr_choice(path: str | Path, model: str | None = None, task: str | None = None, which: str = "chosen") -> float:
    """The chosen lr (``which="runner-up"``: the runner-up) of a saved :func:`select_lr` record, checked against
    ``model``/``task`` when given."""
    record = read_json_verified(Path(path), "lr choice")
    for key, wanted in (("model", model), ("task", task)):
        if wanted is not None and record.get(key) != wanted:
            raise PapaError(
                f"The lr choice {path} is for {key} {record.get(key)!r}, not {wanted!r}",
                "Point the run at the lr file of its own model and task.",
            )
    if which not in ("chosen", "runner-up"):
        raise PapaError(f"Unknown lr choice {which!r}", "Use chosen or runner-up.")
    lr = record.get("lr" if which == "chosen" else "runner_up")
    if which == "runner-up" and "runner_up" not in record:
        raise PapaError(
            f"The lr choice {path} records no runner-up (written by an older papa)", "Recompute it (its select_lr run)."
        )
    if not isinstance(lr, (int, float)) or not lr > 0:
        raise PapaError(
            f"The lr choice {path} holds no positive lr", "Recompute it with papa.probing.protocol.select_lr."
        )
    return float(lr)


def release_private_features(results: Iterable[dict]) -> int:
    """Delete the cached features of these results' partial head sets (0 < k < all); returns how many entries were
    deleted. Runs no longer write such entries (:func:`papa.probing.extraction.get_features`); the probe runs
    committed before that call this, and ``papa grid verify`` replays them (remove it once no committed run does)."""
    keys = [
        key
        for result in results
        if 0 < int(result["config"]["constant_heads"]) < int(result["config"]["total_heads"])
        for key in result.get("feature_cache_keys", [])
    ]
    return forget_cached(keys)


def protocol_text(result: dict) -> str:
    """One Markdown paragraph on how a probe result was trained and scored (lr, epoch cap, early stopping, reported
    epoch, training draw, dev scoring), from its own ``config`` and ``data``."""
    config, data = result["config"], result.get("data") or {}
    parts = [f"lr = {config['lr']:g}", f"batch {config['batch_size']}", f"at most {config['epochs']} epochs"]
    if config.get("patience") is not None:
        parts.append(f"early stopping after {config['patience']} epochs without a held-out gain")
    parts.append(
        "reported epoch: the best on held-out training examples"
        if config["selection"] == "heldout"
        else "reported epoch: the last"
    )
    if data.get("pool_examples") is not None and data.get("train_examples") is not None:
        parts.append(
            f"each seed draws {data['train_examples']:,} training + {data['heldout_examples']:,} held-out examples "
            f"from a pool of {data['pool_examples']:,}"
        )
    parts.append(
        "the dev split scored after every epoch"
        if config.get("dev_every_epoch")
        else "the dev split scored once, by the reported probe"
    )
    inputs = (
        "the embedding layer only (the attention-free floor)"
        if config.get("probe_input") == "embeddings"
        else "every hidden state"
    )
    replaced = REPLACEMENT_TABLE.get(config.get("replacement", "papa"))
    heads = f"{config['constant_heads']} of {config['total_heads']} heads {replaced.words if replaced else 'replaced'}"
    return f"**Protocol run:** {config['mode']} features of {inputs}, {heads}; " + "; ".join(parts) + "."
