"""The minilm-l6 part of the default grid re-made on a GPU, compared with the committed CPU runs.

    python -m benchmarks.cuda_grid GPU_RUNS [--log GRID_LOG] [--markdown OUT] [--json OUT]

``GPU_RUNS`` is the runs folder that ``papa grid run configs/default.yaml --only minilm-l6`` wrote on the GPU
machine (``benchmarks/cuda_session.sh``, stage 2); the CPU side is the committed ``book/runs/default``. Checked, per
run the GPU finished:

* constants (``constants``, ``output_means``, ``deviation``): max |GPU − CPU| per task, against 1e-5;
* the lr each (model, task) chose, and every ranking's head order: listed where they differ;
* each probe result's dev score against the 95% bootstrap interval over dev examples of the committed CPU result
  of the same run and seed (:func:`papa.analysis.bootstrap.score_interval`); results whose constant heads differ
  (a ranking that differs) are counted apart, since they are not the same probe;
* time: the GPU grid's wall time (the runner's ``done in``, from ``--log``) and the summed seconds of its runs'
  stamps, against the same runs' summed stamp seconds on the CPU.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from papa.analysis.bootstrap import run_statistics, score_interval
from papa.probing.data import get_task

ROOT = Path(__file__).resolve().parents[1]
CPU_RUNS = ROOT / "book" / "runs" / "default"
MODEL = "minilm-l6"
CONSTANTS_TOLERANCE = 1e-5


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def compare_constants(gpu: Path, cpu: Path) -> list[dict]:
    """Per task: the largest |GPU − CPU| of each tensor of the constants file."""
    rows = []
    for path in sorted((gpu / "artifacts" / "constants").glob(f"{MODEL}__*.safetensors")):
        mine, theirs = load_file(str(path)), load_file(str(cpu / "artifacts" / "constants" / path.name))
        diffs = {name: float(np.abs(mine[name].astype(np.float64) - theirs[name]).max()) for name in sorted(mine)}
        rows.append({"task": path.stem.split("__")[1], **diffs, "met": max(diffs.values()) <= CONSTANTS_TOLERANCE})
    return rows


def compare_lrs(gpu: Path, cpu: Path) -> list[dict]:
    """Per task: the lr chosen at k = 0 on each side, with the held-out scores that chose it."""
    rows = []
    for path in sorted((gpu / "artifacts" / "lr").glob(f"{MODEL}__*.json")):
        mine, theirs = _json(path), _json(cpu / "artifacts" / "lr" / path.name)
        rows.append(
            {
                "task": path.stem.split("__")[1],
                "cpu": theirs["lr"],
                "gpu": mine["lr"],
                "cpu_heldout": theirs["heldout"],
                "gpu_heldout": mine["heldout"],
            }
        )
    return rows


def compare_rankings(gpu: Path, cpu: Path) -> list[dict]:
    """Per ranking file: equal head order or not, and the overlap of the first halves."""
    rows = []
    for path in sorted((gpu / "artifacts" / "rankings").glob(f"{MODEL}__*.json")):
        mine, theirs = _json(path)["ranking"], _json(cpu / "artifacts" / "rankings" / path.name)["ranking"]
        half = len(theirs) // 2
        overlap = len({tuple(h) for h in mine[:half]} & {tuple(h) for h in theirs[:half]})
        rows.append({"ranking": path.stem, "equal": mine == theirs, "half_overlap": overlap, "half": half})
    return rows


def compare_scores(gpu: Path, cpu: Path) -> list[dict]:
    """Per probe result: the CPU score with its 95% interval over dev examples, the GPU score, and whether the
    constant heads (the set) are the same."""
    rows = []
    for path in sorted((gpu / "artifacts" / "results").glob(f"probe__{MODEL}__*.json")):
        mine, theirs = _json(path), _json(cpu / "artifacts" / "results" / path.name)
        token = get_task(theirs["task"]).is_token_task
        interval = score_interval([run_statistics(theirs)], theirs["metric"], token)
        same_heads = {tuple(h) for h in mine["heads"]} == {tuple(h) for h in theirs["heads"]}
        inside = interval["low"] <= mine["score"] <= interval["high"]
        rows.append(
            {
                "result": path.stem,
                "cpu": theirs["score"],
                "low": interval["low"],
                "high": interval["high"],
                "gpu": mine["score"],
                "inside": inside,
                "same_heads": same_heads,
                "cpu_epoch": theirs["selected_epoch"],
                "gpu_epoch": mine["selected_epoch"],
            }
        )
    return rows


def wall_seconds(log: str) -> int | None:
    """The last ``done in`` duration of a runner's output, as :func:`papa.pipeline.estimate.format_duration` writes
    it (``3m07s`` or ``2h05m``), in seconds; None without one."""
    done = re.findall(r"done in (?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", log)
    if not done:
        return None
    hours, minutes, seconds = (int(part or 0) for part in done[-1])
    return hours * 3600 + minutes * 60 + seconds


def compare_time(gpu: Path, cpu: Path, log: Path | None) -> dict:
    """Summed stamp seconds of the runs the GPU made, on each side, and the GPU grid's wall time."""
    stamps = sorted((gpu / "stamps").glob(f"*{MODEL}*.json"))
    gpu_seconds = sum(_json(p)["seconds"] for p in stamps)
    cpu_seconds = sum(_json(cpu / "stamps" / p.name)["seconds"] for p in stamps)
    wall = wall_seconds(log.read_text("utf-8")) if log and log.is_file() else None
    return {"runs": len(stamps), "gpu_seconds": gpu_seconds, "cpu_seconds": cpu_seconds, "wall_seconds": wall}


def compare(gpu: Path, cpu: Path = CPU_RUNS, log: Path | None = None) -> dict:
    return {
        "constants": compare_constants(gpu, cpu),
        "lrs": compare_lrs(gpu, cpu),
        "rankings": compare_rankings(gpu, cpu),
        "scores": compare_scores(gpu, cpu),
        "time": compare_time(gpu, cpu, log),
    }


def _pct(part: int, whole: int) -> str:
    return f"{part} of {whole}"


def markdown(found: dict, env: dict, command: str) -> str:
    """The report: what ran where, then one table per check."""
    time, scores = found["time"], found["scores"]
    same = [r for r in scores if r["same_heads"]]
    outside = [r for r in same if not r["inside"]]
    count = {
        "constants": _pct(sum(r["met"] for r in found["constants"]), len(found["constants"])),
        "lrs": _pct(sum(r["cpu"] == r["gpu"] for r in found["lrs"]), len(found["lrs"])),
        "rankings": _pct(sum(r["equal"] for r in found["rankings"]), len(found["rankings"])),
    }
    lines = [
        f"# papa on a GPU: the {MODEL} part of the default grid against the committed CPU runs",
        "",
        f"- command: `{command}`",
        f"- device: {env.get('device', '?')}; torch {env.get('torch', '?')}, "
        f"transformers {env.get('transformers', '?')}; "
        f"{env.get('cpus', '?')} CPUs; code at {env.get('commit', '?')}; {env.get('date', '?')}",
        "- the CPU side: the committed `book/runs/default` (made on 2 CPU cores)",
        "",
        "## Summary",
        "",
        f"- runs made on the GPU: {time['runs']}; grid wall time "
        + (f"{time['wall_seconds'] / 60:.1f} min" if time["wall_seconds"] is not None else "not logged")
        + f"; summed run seconds {time['gpu_seconds'] / 60:.1f} min on the GPU against {time['cpu_seconds'] / 60:.1f}"
        " min for the same runs on the CPU",
        f"- constants within {CONSTANTS_TOLERANCE:g}: {count['constants']} tasks",
        f"- lr choices equal: {count['lrs']}",
        f"- rankings with the same head order: {count['rankings']}",
        f"- probe results at the same constant heads: {_pct(len(same), len(scores))}; of these, GPU scores inside "
        f"the CPU result's 95% bootstrap interval: {_pct(len(same) - len(outside), len(same))}; equal to the CPU "
        f"score: {_pct(sum(r['gpu'] == r['cpu'] for r in same), len(same))}",
        "",
        "## Constants: max |GPU − CPU|",
        "",
    ]
    names = [k for k in (found["constants"][0] if found["constants"] else {}) if k not in ("task", "met")]
    lines += ["| task | " + " | ".join(names) + " | ≤ 1e-5 |", "|---" * (len(names) + 2) + "|"]
    lines += [
        f"| {r['task']} | " + " | ".join(f"{r[n]:.1e}" for n in names) + f" | {'met' if r['met'] else 'NOT met'} |"
        for r in found["constants"]
    ]
    lines += [
        "",
        "## lr chosen at k = 0",
        "",
        "| task | CPU | GPU | held-out scores, CPU | held-out scores, GPU |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['task']} | {r['cpu']:g} | {r['gpu']:g} | {r['cpu_heldout']} | {r['gpu_heldout']} |" for r in found["lrs"]
    ]
    lines += ["", "## Rankings", "", "| ranking | same order | first-half overlap |", "|---|---|---|"]
    lines += [
        f"| {r['ranking']} | {'yes' if r['equal'] else 'no'} | {r['half_overlap']}/{r['half']} |"
        for r in found["rankings"]
    ]
    lines += ["", "## Probe scores outside the CPU result's interval (same constant heads)", ""]
    if outside:
        lines += ["| result | CPU [95% interval] | GPU | best epoch CPU / GPU |", "|---|---|---|---|"]
        lines += [
            f"| {r['result']} | {r['cpu']:.4f} [{r['low']:.4f}, {r['high']:.4f}] | {r['gpu']:.4f} | "
            f"{r['cpu_epoch']} / {r['gpu_epoch']} |"
            for r in outside
        ]
    else:
        lines.append("None.")
    moved = [abs(r["gpu"] - r["cpu"]) for r in same]
    if moved:
        lines += [
            "",
            f"Largest |GPU − CPU| score at the same heads: {max(moved):.4f}; median {float(np.median(moved)):.4f}; "
            f"best epoch equal in {_pct(sum(r['cpu_epoch'] == r['gpu_epoch'] for r in same), len(same))}.",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gpu_runs", type=Path, help="the runs folder the GPU machine wrote")
    parser.add_argument("--log", type=Path, help="the GPU grid's output (its 'done in' line)")
    parser.add_argument("--env", type=Path, help="the GPU machine's env.json (cuda_session.sh)")
    parser.add_argument("--markdown", type=Path, default=ROOT / "benchmarks" / "results-cuda-grid.md")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    found = compare(args.gpu_runs, CPU_RUNS, args.log)
    env = _json(args.env) if args.env else {}
    command = "benchmarks/cuda_session.sh stage2, then python -m benchmarks.cuda_grid"
    args.markdown.write_text(markdown(found, env, env.get("command", command)), encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps(found, indent=1, default=float), encoding="utf-8")
    print(args.markdown.read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
