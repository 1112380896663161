"""Two runs side by side on one thread each, against one run at a time on every thread: the default grid's probe run
(its committed settings, three seeds, the features from the on-disk cache) on the CPU.

A probe step on the CPU is small matrix products and an AdamW pass over the dense layer's weights: a second thread
speeds one run up by far less than 2×, and a notebook's start-up (imports, model loading, tokenisation) runs on one
thread anyway. So ``papa grid run --scheduler local:2`` (two runs at once, one thread each) may finish a grid sooner
than one run at a time on two threads. This file measures it, and checks that every seed's scores and per-epoch
losses are the same on one thread as on two (the run is re-made on each thread count in its own process)::

    PAPA_DATA_DIR=... .venv/bin/python -m benchmarks.side_by_side [MODEL] [TASK]   # default mpnet-base sst2

Run it with nothing else on the machine, after the run's features are in the cache (a first run puts them there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "book" / "runs" / "default" / "artifacts" / "results"


def one_run(model: str, task: str) -> dict:
    """The committed ``probe__MODEL__TASK__none__k0__cached`` run re-made here: its seconds and every seed's epochs."""
    import torch

    from papa.probing.experiment import run_probes

    committed = [
        json.loads(p.read_text()) for p in sorted(RESULTS.glob(f"probe__{model}__{task}__none__k0__cached__s*.json"))
    ]
    if not committed:
        raise SystemExit(f"No committed probe__{model}__{task}__none__k0__cached results under {RESULTS}")
    config, data = committed[0]["config"], committed[0]["data"]
    started = time.perf_counter()
    runs = run_probes(
        model, task, None, None, 0, mode="cached", seeds=[r["config"]["seed"] for r in committed],
        epochs=config["epochs"], lr=config["lr"], selection=config["selection"], patience=config["patience"],
        pool_examples=config["pool_examples"], heldout_examples=config["heldout_examples"],
        max_train_examples=data["train_examples"], dev_every_epoch=config["dev_every_epoch"],
        data_seed=config["data_seed"], device="cpu",
    )  # fmt: skip
    return {
        "threads": torch.get_num_threads(),
        "seconds": time.perf_counter() - started,
        "train": sum(r["timings"]["train"] for r in runs),
        "epochs": [r["epochs"] for r in runs],
        "scores": [r["score"] for r in runs],
    }


def _child(model: str, task: str, threads: int) -> subprocess.Popen:
    env = dict(os.environ, **{name: str(threads) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")})
    command = [sys.executable, "-m", "benchmarks.side_by_side", "--child", model, task]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)


def _result(process: subprocess.Popen) -> dict:
    out, _ = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"a child run failed with status {process.returncode}")
    return json.loads(out.strip().splitlines()[-1])


def main(model: str = "mpnet-base", task: str = "sst2") -> None:
    cores = os.cpu_count() or 2
    alone = _result(_child(model, task, cores))
    single = _result(_child(model, task, 1))
    started = time.perf_counter()
    pair = [_child(model, task, 1) for _ in range(2)]
    side = [_result(p) for p in pair]
    both = time.perf_counter() - started
    same = all(r["epochs"] == alone["epochs"] and r["scores"] == alone["scores"] for r in (single, *side))
    print(f"# papa benchmarks — two probe runs side by side (cpu, {cores} cores)\n")
    print(f"- command: `.venv/bin/python -m benchmarks.side_by_side {model} {task}`")
    print(f"- run: `probe__{model}__{task}__none__k0__cached` (three seeds, committed settings, cached features)\n")
    print("| how | threads per run | seconds per run | probe training, s |\n| --- | ---: | ---: | ---: |")
    print(f"| one at a time | {cores} | {alone['seconds']:.1f} | {alone['train']:.1f} |")
    print(f"| one at a time | 1 | {single['seconds']:.1f} | {single['train']:.1f} |")
    per_run = both / 2
    print(
        f"| two side by side | 1 | {per_run:.1f} (wall for both / 2) | {side[0]['train']:.1f}, {side[1]['train']:.1f} |"
    )
    print(f"\nTwo side by side do {alone['seconds'] / per_run:.2f}× the work of one at a time on {cores} threads.")
    print(f"Scores and per-epoch losses equal on every thread count: {'yes' if same else 'NO'}.")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(one_run(*sys.argv[2:4])))
    else:
        main(*sys.argv[1:3])
