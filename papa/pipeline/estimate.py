"""How long runs take: recorded durations, else an estimate from a run's size."""

from __future__ import annotations

from typing import TYPE_CHECKING

from papa.pipeline.plan import Run

if TYPE_CHECKING:
    from papa.pipeline.stamps import Manifest

DEFAULT_SECONDS = {"estimate": 60, "rank": 120, "select_lr": 120, "probe": 60, "results": 40, "controls": 40}


#: MiniLM-L6 on two CPU cores (SST-2, 8000 examples: about 95 s of extraction, 90 s per seed), plus
#: a fixed start-up (kernel, model and data loading).
PROBE_SECONDS_PER_EXAMPLE = {"extract": 0.012, "train": 0.00075}
PROBE_STARTUP_SECONDS = 20
#: Training-split sizes on the hub, for a run that asks for the whole split when no local data says
#: how large it is (MNLI: the full 393k-pair split; the local stand-in holds a 9k subset).
HUB_TRAIN_SIZES = {"cola": 8551, "sst2": 67349, "mrpc": 3668, "mnli": 392702, "ner": 14041, "pos": 14041}


def _train_split_size(task: str) -> int:
    """Examples in the task's local ``train.jsonl`` (non-blank lines), else its hub size."""
    from papa.probing.data import get_task, resolve_data_dir

    root = resolve_data_dir()
    path = root / get_task(task).local_folder / "train.jsonl" if root is not None else None
    if path is None or not path.is_file():
        return HUB_TRAIN_SIZES[get_task(task).name]
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


def run_seconds_guess(run: Run) -> float:
    """Seconds a run is expected to take when the manifest has no earlier duration for it: a probe
    scales with its training examples, epochs and seeds (a faithful probe pays an encoder pass for
    every example of every epoch); other kinds take :data:`DEFAULT_SECONDS`."""
    if run.kind != "probe":
        return DEFAULT_SECONDS[run.kind]
    p = run.params
    examples = p["max_train_examples"] if p["max_train_examples"] is not None else _train_split_size(p["task"])
    passes = p["epochs"] * len(p["seeds"])
    rate = PROBE_SECONDS_PER_EXAMPLE
    per_example = rate["extract"] * passes if p["mode"] == "faithful" else rate["extract"] + rate["train"] * passes
    return PROBE_STARTUP_SECONDS + examples * per_example


def estimate_seconds(runs: list[Run], manifest: Manifest) -> float:
    """Expected seconds for ``runs``: each run's last recorded duration, else :func:`run_seconds_guess`."""
    seconds = 0.0
    for run in runs:
        previous = manifest.entries.get(run.run_id, {}).get("seconds")
        seconds += previous if previous else run_seconds_guess(run)
    return seconds


def _format(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
