"""7. One ``papa probe`` run, the speed issue's command, on a baseline commit and on this tree, with its floor.

    python -m benchmarks.probe_run [--baseline COMMIT] [--repeats N] [--markdown OUT] [--json OUT]

The command (the single-run target): minilm-l6, SST-2, the gates ranking's first 36 heads constant, a
pool of 2,600 training examples of which the seed draws 2,000 + 200 held out, up to 20 epochs with patience 3,
lr 2e-4, the dev split scored every epoch (the CLI's default). Constants and ranking are the default grid's
committed artifacts. Each run is a fresh process with a fresh, empty ``PAPA_CACHE_DIR`` ("fresh caches").

Sides alternate A (the baseline, checked out as a temporary ``git worktree``), B (this tree), A, B, ...;
medians are reported. Each side's wall time is split into:

* start-up: what lies outside the run's own ``timings.total``: the interpreter, its imports (``python -c
  "import papa.cli"`` from that tree is also timed apart), argument parsing and writing the result;
* the run's own ``timings``: model and inputs (loading, reading and tokenising the data), ``features`` (encoder
  passes, the float32 copy and the cache write), ``train`` and ``eval``.

The *floor* is what no change to probe training can remove, measured on this tree in a fresh process: the
imports, loading the model, preparing the inputs and the encoder passes over the training pool and the dev split
(no float32 copy, no cache write, no probe). Beside it, one training step of the run's probe on a batch already
gathered in float32 (forward, backward, fused AdamW; :func:`probe_step_ms`) times the steps B took. When the two
exceed a third of the baseline, a 3× speed-up of the whole command is out of reach on this machine without
changing a number the method defines (the encoder and the probe run in float32, at the matrix-multiply rate the
report gives); otherwise the report says how much time it leaves for the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "book" / "runs" / "default" / "artifacts"
#: main when the speed issue was filed (padded encoder passes, float16 converted per batch)
BASELINE = "2e32ada"
MODEL, TASK, K = "minilm-l6", "sst2", 36
POOL, TRAIN, HELDOUT, EPOCHS, PATIENCE, LR, BATCH = 2600, 2000, 200, 20, 3, 2e-4, 16
#: The target: one run within this factor of its floor
FLOOR_TARGET = 1.3
OFFLINE = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_EVALUATE_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def probe_command(out: Path, relative: bool = False, tree: Path = ROOT) -> list[str]:
    """The issue's ``papa probe`` command, writing its result to ``out`` (``relative``: artifact paths from the
    repository root). The constants are ``tree``'s own committed file: each side's code checks the weights
    fingerprint its own way (the baseline hashed the file, this tree hashes the tensors), and the matrices are the same;
    both sides read this tree's ranking, so they make the same heads constant."""
    artifacts = ARTIFACTS.relative_to(ROOT) if relative else ARTIFACTS
    constants = (tree / ARTIFACTS.relative_to(ROOT) if tree != ROOT else artifacts) / "constants"
    return [
        *("-m", "papa.cli", "probe", "--model", MODEL, "--task", TASK),
        *("--constants", str(constants / f"{MODEL}__{TASK}.safetensors")),
        *("--ranking", str(artifacts / "rankings" / f"{MODEL}__{TASK}__gates.json")),
        *("--constant-heads", str(K), "--pool-examples", str(POOL), "--max-train-examples", str(TRAIN)),
        *("--heldout-examples", str(HELDOUT), "--epochs", str(EPOCHS), "--patience", str(PATIENCE)),
        *("--selection", "heldout", "--lr", str(LR), "--out", str(out)),
    ]


@contextlib.contextmanager
def worktree(commit: str) -> Iterator[Path]:
    """``commit`` checked out in a temporary git worktree (removed afterwards)."""
    folder = Path(tempfile.mkdtemp(prefix="papa-baseline-"))
    added = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(folder), commit],
        capture_output=True,
        text=True,
    )
    if added.returncode != 0:
        folder.rmdir()
        raise SystemExit(
            f"Cannot check out the baseline {commit!r}: "
            f"{added.stderr.strip().splitlines()[-1] if added.stderr.strip() else 'git failed'}. "
            "Run from a full clone (git fetch --unshallow) or pass --baseline with a commit this clone has."
        )
    try:
        yield folder
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(folder)], capture_output=True)


def _env(tree: Path, cache: str) -> dict[str, str]:
    return {**os.environ, **OFFLINE, "PYTHONPATH": str(tree), "PAPA_CACHE_DIR": cache}


def _timed(args: list[str], tree: Path, cache: str) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *args], cwd=tree, env=_env(tree, cache), capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(args)} failed in {tree}:\n{done.stderr[-2000:]}")
    return seconds, done.stdout


def import_seconds(tree: Path) -> float:
    """Seconds to start Python and ``import papa.cli`` from ``tree`` (checked to import that tree's papa)."""
    with tempfile.TemporaryDirectory() as cache:
        seconds, printed = _timed(["-c", "import papa.cli, papa; print(papa.__file__)"], tree, cache)
    if not Path(printed.strip()).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"{tree} imported papa from {printed.strip()}, not from its own tree")
    return seconds


def probe_run(tree: Path) -> dict:
    """One run of the command from ``tree`` with a fresh cache: wall seconds, the result's timings and score."""
    with tempfile.TemporaryDirectory() as cache:
        out = Path(cache) / "result.json"
        wall, _ = _timed(probe_command(out, tree=tree), tree, cache)
        result = json.loads(out.read_text())
    return {
        "wall": wall,
        "timings": result["timings"],
        "score": result["score"],
        "selected_epoch": result["selected_epoch"],
        "epochs": len(result["epochs"]),
    }


def floor_child() -> None:
    """(In a fresh process.) The run up to its features, timed by phase; prints JSON."""
    from papa.core.constants import load_constants
    from papa.core.models import load_model, pick_device
    from papa.probing.experiment import resolve_heads
    from papa.probing.extraction import get_features
    from papa.probing.task_inputs import prepare_inputs

    t0 = time.perf_counter()  # the imports above count as start-up: the wall time less the phases below
    phases = {}
    device = pick_device(None)
    lm = load_model(MODEL, device)
    phases["model"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    inputs = prepare_inputs(lm, TASK, 64, True, POOL, None, 0, None)
    constants = load_constants(ARTIFACTS / "constants" / f"{MODEL}__{TASK}.safetensors")
    _, heads = resolve_heads(lm, str(ARTIFACTS / "rankings" / f"{MODEL}__{TASK}__gates.json"), K, constants)
    phases["inputs"] = time.perf_counter() - t0
    shapes = {}
    for split in ("train", "eval"):
        t0 = time.perf_counter()
        shapes[split] = list(get_features(lm, inputs, split, heads, constants, device, use_cache=False)[0].states.shape)
        phases[f"extract_{split}"] = time.perf_counter() - t0
    phases["tokens"] = {split: int(getattr(inputs, split)["attention_mask"].sum()) for split in ("train", "eval")}
    t0 = time.perf_counter()
    phases["step_ms"], phases["step_shape"] = probe_step_ms(shapes["train"][1:], lm.model.config.hidden_size)
    phases["step_seconds"] = time.perf_counter() - t0  # not part of the floor: taken off its wall time
    print(json.dumps(phases))


def probe_step_ms(state_shape: list[int], hidden: int, steps: int = 200) -> tuple[float, list[int]]:
    """Milliseconds of one training step of the run's probe on a batch already gathered in float32 (``[16, S, P, H]``,
    ``state_shape = [S, P, H]``): its forward, backward and fused AdamW step, nothing else; and the batch's shape."""
    import torch
    import torch.nn.functional as F

    from papa.probing.probe import ProbeConfig, build_probe, make_optimizer

    config = ProbeConfig(lr=LR, seed=42)
    num_states, positions, _ = state_shape
    probe = build_probe(False, num_states, 64, hidden, 2, config)
    optimizer = make_optimizer(list(probe.parameters()), config)
    generator = torch.Generator().manual_seed(0)
    states = torch.randn(config.batch_size, *state_shape, generator=generator)
    mask, where, labels = (
        torch.ones(config.batch_size, positions, dtype=torch.bool),
        torch.arange(positions),
        torch.randint(0, 2, (config.batch_size,), generator=generator),
    )

    def step() -> None:
        loss = F.cross_entropy(probe(states, mask, where), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for _ in range(10):
        step()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    return 1000 * (time.perf_counter() - started) / steps, list(states.shape)


def floor_median(repeats: int) -> dict:
    """The floor (see the module docstring) measured ``repeats`` times in fresh processes: the median of each phase."""
    measured = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as cache:
            wall, printed = _timed(["-m", "benchmarks.probe_run", "--floor-child"], ROOT, cache)
        phases = json.loads(printed.strip().splitlines()[-1])
        timed = sum(phases[name] for name in ("model", "inputs", "extract_train", "extract_eval"))
        wall -= phases["step_seconds"]
        measured.append({**phases, "wall": wall, "start-up": wall - timed})
    names = ("wall", "start-up", "model", "inputs", "extract_train", "extract_eval", "step_ms")
    floor = {name: statistics.median(m[name] for m in measured) for name in names}
    return {
        **floor,
        "tokens": measured[-1]["tokens"],
        "step_shape": measured[-1]["step_shape"],
        "repeats": repeats,
        "walls": [m["wall"] for m in measured],
    }


def matmul_gflops(seconds: float = 2.0) -> float:
    """The float32 matrix-multiply rate of an encoder-sized product ``[1024, 384] @ [384, 1536]`` (GFLOP/s)."""
    import torch

    a, b = torch.randn(1024, 384), torch.randn(384, 1536)
    for _ in range(3):
        a @ b
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        a @ b
        count += 1
    return 2 * 1024 * 384 * 1536 * count / (time.perf_counter() - started) / 1e9


def _parts(runs: list[dict]) -> dict[str, float]:
    """Median seconds of each part of a side's runs; the parts after ``wall`` add up to it (medians, to rounding)."""
    timings = {
        name: statistics.median(r["timings"][name] for r in runs) for name in ("features", "train", "eval", "total")
    }
    wall = statistics.median(r["wall"] for r in runs)
    return {
        "wall": wall,
        "start-up (interpreter, imports, writing the result)": wall - timings["total"],
        "model and inputs": timings["total"] - timings["features"] - timings["train"] - timings["eval"],
        "features (encoder passes, float32 copy, cache write)": timings["features"],
        "train": timings["train"],
        "eval": timings["eval"],
    }


def to_markdown(info: dict, a: dict, b: dict, floor: dict) -> str:
    speedup = a["parts"]["wall"] / b["parts"]["wall"]
    aim, above = a["parts"]["wall"] / 3, b["parts"]["wall"] - floor["wall"]
    steps = b["epochs"] * math.ceil(TRAIN / BATCH)
    training = steps * floor["step_ms"] / 1000
    lines = [
        f"# papa benchmarks — one `papa probe` run ({info['device']})",
        "",
        f"- command: `{info['command']}`; the run: `python "
        f"{shlex.join(probe_command(Path('result.json'), relative=True))}`",
        f"- {info['repeats']} timed runs per side, alternating A, B, A, B, each a fresh process with an empty "
        "`PAPA_CACHE_DIR`; medians shown",
        f"- {info['date']}; torch threads {info['threads']} on "
        f"{info['cpu_count']} CPUs; load average at start {info['load_average']}; "
        f"CPU float32 matmul rate {info['gflops']:.0f} GFLOP/s",
        "",
        "| part (s) | A: baseline `" + info["baseline"] + "` | B: this tree `" + info["tree"] + "` |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {name} | {a['parts'][name]:.1f} | {b['parts'][name]:.1f} |" for name in a["parts"]]
    lines += [
        f"| (`import papa.cli` alone, timed apart) | {a['imports']:.1f} | {b['imports']:.1f} |",
        f"| score (accuracy) | {a['score']:.4f} | {b['score']:.4f} |",
        f"| epochs trained (reported) | {a['epochs']} "
        f"({a['selected_epoch']}) | {b['epochs']} ({b['selected_epoch']}) |",
        "",
        f"**Speed-up A/B = {speedup:.2f}×** (target ≥ 3×: {'met' if speedup >= 3 else 'NOT met'}); |score A − score B| "
        f"= {abs(a['score'] - b['score']):.4f} (target ≤ 0.01).",
        "",
        f"**B / floor = {b['parts']['wall'] / floor['wall']:.2f}×** "
        f"(target ≤ {FLOOR_TARGET}×: "
        f"{'met' if b['parts']['wall'] <= FLOOR_TARGET * floor['wall'] else 'NOT met'}). "
        f"Against the floor and the probe's own training steps ({floor['wall'] + training:.1f} s, below which neither "
        f"the encoder's nor the probe's compute can go) B is {b['parts']['wall'] / (floor['wall'] + training):.2f}×: "
        f"{above - training:.1f} s above them (gathering the batches, the float32 copy, the cache write, evaluation).",
        "",
        f"**Floor of B** (imports, model, inputs and the encoder passes only; no float32 copy, cache write or probe): "
        f"{floor['wall']:.1f} s = imports and start-up {floor['start-up']:.1f} "
        f"+ model {floor['model']:.1f} + inputs {floor['inputs']:.1f} "
        f"+ encoder passes {floor['extract_train']:.1f} (training pool, {floor['tokens']['train']:,} real tokens) and "
        f"{floor['extract_eval']:.1f} "
        f"(dev split, {floor['tokens']['eval']:,} real tokens); median of {floor['repeats']}.",
        "",
        "Training alone, each batch already gathered in float32 "
        f"(`{floor['step_shape']}`: the probe's forward, backward and fused "
        f"AdamW step, nothing else), takes {floor['step_ms']:.2f} "
        f"ms a step, so B's {steps} steps ({b['epochs']} epochs of "
        f"{math.ceil(TRAIN / BATCH)}) take at least {training:.1f} s.",
        "",
        f"A / 3 = {aim:.1f} s. The floor and those steps come to {floor['wall'] + training:.1f} s, "
        + (
            f"which leaves {aim - floor['wall'] - training:.1f} s for the rest (gathering the batches, the float32 "
            f"copy, the cache write and evaluation: {above - training:.1f} s in B)."
            if aim > floor["wall"] + training
            else "above A / 3: a 3× speed-up of this command is out of reach on this machine without changing a "
            "number the method defines (the encoder passes and the probe run in float32, at the matrix-multiply "
            "rate above), even before the batches are gathered, the features cached and the dev split scored."
        ),
    ]
    return "\n".join(lines) + "\n"


def header(args) -> dict:
    """The report's header: the command, this tree's commit, the machine and its float32 matmul rate."""
    import torch

    tree = subprocess.run(
        ["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "command": shlex.join(
            ["python", "-m", "benchmarks.probe_run", "--baseline", args.baseline, "--repeats", str(args.repeats)]
        ),
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "baseline": args.baseline,
        "tree": tree,
        "repeats": args.repeats,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "gflops": matmul_gflops(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.probe_run", description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE, help=f"the commit side A runs (default {BASELINE})")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per side")
    parser.add_argument("--markdown", type=Path, help="default benchmarks/results-<device>-probe-run.md")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--floor-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.floor_child:
        floor_child()
        return 0
    if not os.environ.get("PAPA_DATA_DIR"):
        raise SystemExit(
            "PAPA_DATA_DIR is unset: the run reads SST-2 from it. Set it to the task data folder (e.g. ../shared/data)."
        )
    with worktree(args.baseline) as old:  # a baseline the clone lacks stops here, before anything is measured
        info = header(args)
        sides = {"a": (old, []), "b": (ROOT, [])}
        imports = {side: import_seconds(tree) for side, (tree, _) in sides.items()}
        for i in range(args.repeats):
            for side, (tree, runs) in sides.items():
                runs.append(probe_run(tree))
                print(
                    f"[{i + 1}/{args.repeats}] {side}: {runs[-1]['wall']:.1f} s, score {runs[-1]['score']:.4f}",
                    flush=True,
                )
    floor = floor_median(args.repeats)
    results = {}
    for side, (_, runs) in sides.items():
        last = runs[-1]
        results[side] = {
            "parts": _parts(runs),
            "imports": imports[side],
            "runs": runs,
            **{name: last[name] for name in ("score", "epochs", "selected_epoch")},
        }
    markdown = to_markdown(info, results["a"], results["b"], floor)
    print("\n" + markdown)
    (args.markdown or Path(__file__).parent / f"results-{info['device']}-probe-run.md").write_text(
        markdown, encoding="utf-8"
    )
    if args.json:
        args.json.write_text(json.dumps({"header": info, "sides": results, "floor": floor}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
