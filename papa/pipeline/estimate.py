"""How long runs take: recorded durations, else an estimate from a run's size."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from papa.core.fields import CHAPTERS, PAPER_MAX_LENGTH
from papa.core.tasks import get_task
from papa.pipeline.plan import Run, head_count, machine_shares

if TYPE_CHECKING:
    from collections.abc import Collection

    from papa.pipeline.stamps import Manifest

#: Seconds a chapter run (results, controls, replacements) takes: it only reads JSON (the re-run of December 2026:
#: 53-70 s).
DEFAULT_SECONDS = dict.fromkeys(CHAPTERS, 60)
#: MiniLM-L6 on two CPU cores, seconds per example: ``extract``, a compact encoder pass that caches features (scaled
#: by :data:`COMPACT_SLOT_SHARE`); ``live``, a padded pass inside training or recording; ``train``, one probe step per
#: example, epoch and seed. Calibrated on the records of the default grid's re-run of December 2026 (333 runs, each
#: counted at its share of the machine's time, :func:`papa.pipeline.plan.machine_shares`): after the start-up below,
#: MiniLM-L6's runs took 1.16x the previous constants, MiniLM-L3's 2.98x and mpnet-base's 1.59x (by kind, 0.95-2.8x).
PROBE_SECONDS_PER_EXAMPLE = {"extract": 0.0075, "live": 0.0186, "train": 0.00035}
#: Seconds before a run that loads an encoder computes anything: the kernel, torch, transformers, the model and the
#: task's data (the same records: 30 s, fitted over the estimate runs of the three models).
PROBE_STARTUP_SECONDS = 30
#: Seconds a run that only reads files takes (combining gate draws, a random or deviation ordering): 13-15 s.
FILE_RUN_SECONDS = 14
#: Cost of a model relative to MiniLM-L6, as (encoder pass, probe step), from the same records; a model not listed
#: is costed as a base model (144 heads) or scaled by its heads. MiniLM-L3 (3 layers, converted from ONNX) measures
#: slower than MiniLM-L6 (6 layers) in every kind of run of the re-run, probes 3.7x its former guess (the records'
#: figure; the cause is not found).
MODEL_COST = {"minilm-l6": (1.0, 1.0), "minilm-l3": (1.55, 1.8), "mpnet-base": (11.4, 11.0)}
BASE_COST = (11.4, 11.0)
#: ``(layers, hidden size, heads)`` of the calibrated models: a folder of the same shape is costed as that model.
CALIBRATED_SHAPES = {(6, 384, 72): "minilm-l6", (3, 384, 36): "minilm-l3", (12, 768, 144): "mpnet-base"}
#: The share of the L = 64 slots a compact pass (:mod:`papa.core.compact`) keeps, measured over 2,600 training
#: examples per task: a compact encoder pass costs the padded one times this share (a task not listed: 1).
COMPACT_SLOT_SHARE = {"sst2": 0.21, "cola": 0.2, "ner": 0.32, "pos": 0.32, "mnli": 0.76, "mrpc": 0.92}
#: With early stopping, the share of the epoch cap a probe is expected to train for (patience 3: the default grid's
#: probes stopped after 8 of their 20 epochs on average, 6 to 17 by model and task).
EARLY_STOP_SHARE = 0.4
#: ``(layers, hidden size)`` by total heads, for models papa can only count heads of offline (the
#: MiniLMs, base and large encoders of the paper's grid); a local folder's config.json says it exactly.
DIMS_BY_HEADS = {36: (3, 384), 72: (6, 384), 144: (12, 768), 384: (24, 1024)}
#: Cached features are float16.
FEATURE_BYTES = 2


def _split_size(task: str, split: str) -> int:
    """Examples in the task's local ``<split>.jsonl`` (non-blank lines), else its hub size (the registry's
    :class:`~papa.core.tasks.TaskSpec`)."""
    from papa.probing.data import resolve_data_dir

    spec, root = get_task(task), resolve_data_dir()
    path = root / spec.local_folder / f"{split}.jsonl" if root is not None else None
    if path is None or not path.is_file():
        return spec.train_size if split == "train" else spec.dev_size
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


def _examples(value: int | None, task: str, split: str) -> int:
    """Examples a run reads: ``value`` (None: the whole split), never more than the split holds."""
    size = _split_size(task, split)
    return size if value is None else min(value, size)


def _train(p: dict, key: str = "max_train_examples") -> int:
    return _examples(p[key], p["task"], "train")


def _dev(p: dict) -> int:
    return _examples(p["max_eval_examples"], p["task"], "validation")


def _pool_and_fit(p: dict) -> tuple[int, int]:
    """``(training examples encoded, examples a probe seed trains on)``, never beyond the split or the pool."""
    pool = _examples(p.get("pool_examples") or p["max_train_examples"], p["task"], "train")
    fit = p["max_train_examples"] if p.get("pool_examples") else None
    return pool, pool if fit is None else min(fit, pool)


def model_cost(model: str) -> tuple[float, float]:
    """``(encoder pass, probe step)`` cost of ``model`` relative to MiniLM-L6 (:data:`MODEL_COST`)."""
    if model in MODEL_COST:
        return MODEL_COST[model]
    heads = head_count(model)[0] or 144
    same_shape = CALIBRATED_SHAPES.get((*(model_dims(model) or (0, 0)), heads))
    if same_shape:  # a local copy of a calibrated model (e.g. a save_pretrained folder of minilm-l6)
        return MODEL_COST[same_shape]
    return BASE_COST[0] * heads / 144, BASE_COST[1] * heads / 144


def model_dims(model: str) -> tuple[int, int] | None:
    """``(layers, hidden size)`` of ``model`` without loading it, or None when it cannot be told offline."""
    config = Path(model).expanduser() / "config.json"
    if config.is_file():
        try:
            values = json.loads(config.read_text(encoding="utf-8"))
            return int(values["num_hidden_layers"]), int(values["hidden_size"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
    return DIMS_BY_HEADS.get(head_count(model)[0] or 0)


def feature_set_bytes(model: str, examples: int, max_length: int) -> int | None:
    """Bytes of one cached feature set: ``[examples, layers + 1, L, hidden]`` float16 (None: dims unknown offline)."""
    dims = model_dims(model)
    return None if dims is None else examples * (dims[0] + 1) * max_length * dims[1] * FEATURE_BYTES


def run_size(run: Run) -> tuple[int, int | None]:
    """``(examples the run encodes, an upper bound of its cached features' bytes or None when unknown)``."""
    p = run.params
    if run.kind in CHAPTERS:
        return 0, 0
    if run.kind == "estimate":
        return _train(p, "max_examples"), 0
    if run.kind == "rank":
        return _train(p) + _dev(p), 0
    examples = _pool_and_fit(p)[0]
    if run.kind != "select_lr":  # an lr selection never scores the dev split
        examples += _dev(p)
    if run.kind == "probe" and p["mode"] == "faithful":
        return examples, 0
    return examples, feature_set_bytes(p["model"], examples, p["max_length"])


def run_cost(run: Run) -> tuple[float, dict[tuple, float]]:
    """``(seconds of its own, {feature set: seconds to extract it})`` for a run never timed, from its size and model
    (:data:`MODEL_COST`); runs sharing a feature set pay for it once in :func:`estimate_seconds`. A cached probe
    pays one encoder pass, then ``seeds × epochs`` probe steps; a faithful probe and a gates ranking pay encoder passes
    in every epoch."""
    p = run.params
    if run.kind in CHAPTERS:
        return DEFAULT_SECONDS[run.kind], {}
    encoder, stepping = model_cost(p["model"])
    share = COMPACT_SLOT_SHARE.get(p["task"], 1.0)
    extract = encoder * PROBE_SECONDS_PER_EXAMPLE["extract"] * share  # a compact pass
    padded = encoder * PROBE_SECONDS_PER_EXAMPLE["live"]  # a padded pass inside training
    step = stepping * PROBE_SECONDS_PER_EXAMPLE["train"]
    if run.kind == "estimate":  # a compact pass that records every head's attention
        return PROBE_STARTUP_SECONDS + _train(p, "max_examples") * padded * share, {}
    sentences = "conll" if p["task"] in ("ner", "pos") else p["task"]
    if run.kind == "rank":
        return _rank_cost(p, padded, extract, step, sentences)
    epochs = p["epochs"] * (EARLY_STOP_SHARE if p.get("patience") else 1)
    train, fit = _pool_and_fit(p)
    if run.kind == "select_lr":
        pool = ("train", p["model"], sentences, 0, "", train, p["max_length"])
        return PROBE_STARTUP_SECONDS + len(p["lrs"]) * len(p["seeds"]) * epochs * fit * step, {pool: train * extract}
    dev = _dev(p)
    passes = epochs * len(p["seeds"])
    if p["mode"] == "faithful":
        return PROBE_STARTUP_SECONDS + (fit + dev) * passes * padded, {}
    heads = (p["k"], p["ranking"])
    features = {
        ("train", p["model"], sentences, *heads, train, p["max_length"]): train * extract,
        ("dev", p["model"], sentences, *heads, dev, p["max_length"]): dev * extract,
    }
    dev_passes = passes if p.get("dev_every_epoch", True) else len(p["seeds"])
    if p.get("probe_input") == "embeddings":  # the attention-free floor reads one hidden state of many
        step /= 7 * model_cost(p["model"])[1] ** 0.5
    return PROBE_STARTUP_SECONDS + fit * passes * step + dev * dev_passes * step / 3, features


def _rank_cost(p: dict, padded: float, extract: float, step: float, sentences: str) -> tuple[float, dict]:
    """A rank run's cost: a gate draw pays its live gate epochs (a training pass with gradients ≈ 3 passes; compact,
    :class:`papa.probing.ranking.CompactLiveSource`, so scaled by :data:`COMPACT_SLOT_SHARE`) and, warm-started,
    a compact pass at k = 0 over its warm examples (the probe pool's feature set when as many: the main grid's k = 0
    probe shares it; an L = 64 grid assumed) and its eval examples (shared by its sibling draws), then the warm
    probe's early-stopped epochs; combining draws or any other method reads files. (Before the compact share, the
    default grid's 18 gate runs took 0.28–0.37× their guess.)"""
    if not p["method"].startswith("gates") or p.get("draws"):
        return FILE_RUN_SECONDS, {}
    train, dev = _train(p), _dev(p)
    share = COMPACT_SLOT_SHARE.get(p["task"], 1.0)
    own = PROBE_STARTUP_SECONDS + (3 * train + dev) * p["epochs"] * padded * share
    if not p.get("warm_epochs"):
        return own, {}
    warm = _examples(p.get("warm_examples") or p["max_train_examples"], p["task"], "train")
    own += p["warm_epochs"] * EARLY_STOP_SHARE * (warm + dev / 3) * step
    pool = ("train", p["model"], sentences, 0, "", warm, PAPER_MAX_LENGTH)
    return own, {pool: warm * extract, ("rank-dev", p["model"], sentences, p["data_seed"], dev): dev * extract}


def cache_bytes(runs: list[Run]) -> tuple[int, int, int]:
    """``(kept, held, unknown)``: shared feature bytes kept, the largest private set held, runs of unknown size."""
    kept, held, unknown, seen = 0, 0, 0, set()
    for run in runs:
        if run.kind not in ("probe", "select_lr"):
            continue
        private = 0
        for key in run_cost(run)[1]:
            size = feature_set_bytes(run.params["model"], key[-2], key[-1])
            if size is None:
                unknown += 1
                break
            if key[4]:  # a ranking: a partial head set, this run's alone
                private += size
            elif key not in seen:
                seen.add(key)
                kept += size
        held = max(held, private)
    return kept, held, unknown


def run_seconds_guess(run: Run) -> float:
    """Seconds one run never timed is expected to take on its own (:func:`run_cost`)."""
    own, features = run_cost(run)
    return own + sum(features.values())


def run_wall_seconds(run: Run, manifest: Manifest | None) -> float:
    """Wall seconds one run takes on its worker: its recorded ``seconds`` (its own clock, not its share of the
    machine: a SLURM walltime bounds that), else :func:`run_seconds_guess`."""
    recorded = manifest.entries.get(run.run_id, {}).get("seconds") if manifest else None
    return float(recorded) if recorded else run_seconds_guess(run)


def estimate_seconds(runs: list[Run], manifest: Manifest | None, resized: Collection[str] = ()) -> float:
    """Expected seconds for ``runs`` one at a time: recorded durations (``manifest``, unless ``resized``), each at its
    share of the machine's time (:func:`papa.pipeline.plan.machine_shares`: a run made beside another counts half of
    its wall time), else :func:`run_cost`."""
    seconds, extracted, recorded = 0.0, set(), manifest.entries if manifest else {}
    shares = machine_shares(recorded) or {}
    for run in runs:
        timed = shares.get(run.run_id, recorded.get(run.run_id, {}).get("seconds"))
        previous = None if run.run_id in resized else timed
        own, features = run_cost(run)
        if previous:  # that duration paid for its feature sets: later runs read them cached
            seconds += previous
        else:
            seconds += own + sum(cost for key, cost in features.items() if key not in extracted)
        extracted.update(features)
    return seconds


def format_duration(seconds: float) -> str:
    """A duration as the dry run prints it: ``"3m07s"``, ``"2h05m"``."""
    if seconds >= 3600:
        return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


# -- what a dry run prints per run and for the feature cache -----------------------------------------
def size_line(run: Run, budget: int) -> str:
    """``2,600 examples, features ≤ 0.37 GB (RAM), ~1m40s on 2 CPU cores`` for one run of a dry run."""
    examples, size = run_size(run)
    parts = [f"{examples:,} examples"] if examples else []
    if size is None:
        parts.append("features: size unknown offline (no config.json)")
    elif size:
        where = "RAM" if size <= budget else "disk: above the memory budget, streamed"
        parts.append(f"features ≤ {size / 1e9:.2f} GB ({where})")
    parts.append(f"~{format_duration(run_seconds_guess(run))} on 2 CPU cores")
    return ", ".join(parts)


def report_disk(stale: list[Run], out) -> None:
    """Print the feature cache these runs need at most, against what is free and cached (warning if it may not fit)."""
    from papa.probing.features import cache_dir, cache_root

    kept, held, _ = cache_bytes(stale)
    if not kept + held:
        return
    root = cache_root()
    existing = next((p for p in (root, *root.parents) if p.exists()), None)
    free = shutil.disk_usage(existing).free if existing is not None else None
    cached = sum(f.stat().st_size for f in cache_dir().glob("*.safetensors")) if cache_dir().is_dir() else 0
    line = f"  feature cache ({root}): ~{kept / 1e9:.1f} GB of shared feature sets kept, up to {held / 1e9:.1f} GB"
    line += f" more while a run holds its own head set; {cached / 1e9:.1f} GB already cached"
    print(line + (f", {free / 1e9:.0f} GB free there" if free is not None else ""), file=out)
    if free is not None and kept + held > free:
        reuse = f" (less what the {cached / 1e9:.1f} GB already cached holds of it)" if cached else ""
        need = f"these runs need up to {(kept + held) / 1e9:.0f} GB{reuse}"
        print(f"  warning: the feature cache may fill the disk: {need}; point PAPA_CACHE_DIR elsewhere", file=out)


def feature_reuse(runs: list[Run]) -> dict[str, tuple[int, int]]:
    """``{run_id: (feature sets it extracts, feature sets it reuses)}``, in execution order."""
    seen: set[tuple] = set()
    counts: dict[str, tuple[int, int]] = {}
    for run in runs:
        keys = list(run_cost(run)[1]) if run.kind in ("probe", "select_lr") else []
        if keys:
            new = [key for key in keys if key not in seen]
            counts[run.run_id] = (len(new), len(keys) - len(new))
            seen.update(keys)
    return counts


def reuse_words(counts: tuple[int, int] | None) -> str:
    """Feature sets in words: ``"extracts 1, reuses 1 feature set"``, ``"reuses 2 feature sets"`` ('' for None)."""
    if counts is None:
        return ""
    extracts, reuses = counts
    noun = lambda n: "feature set" if n == 1 else "feature sets"
    if extracts and reuses:
        return f"extracts {extracts}, reuses {reuses} {noun(reuses)}"
    return f"extracts {extracts} {noun(extracts)}" if extracts else f"reuses {reuses} {noun(reuses)}"
