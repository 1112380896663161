"""papa benchmarks: each comparison runs in one process, its two sides alternating (A, B, A, B, ...).

    python -m benchmarks.run [--quick] [--device cpu|cuda] [--json OUT] [--markdown OUT]

1. cached vs faithful probing (minilm-l6, SST-2 from PAPA_DATA_DIR, k = 0): wall time and score;
2. constant estimation vs a plain SDPA forward over the same batches: examples/s, and the peak
   memory of estimation at N and 4N examples, each in a fresh spawned process;
3. patched inference (all heads constant + prune_qk, and an empty head set) vs the unpatched model;
4. an equivalence spot-check of the constant fast path against an independent eager reference;
5-6. compact vs padded encoder passes, and a probe epoch against a plain read of its features (:mod:`benchmarks.speed`).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import shlex
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import torch
import transformers
from transformers import AttentionInterface, AutoModel, BertConfig
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from benchmarks.speed import bench_compact, bench_probe_epoch
from papa.core.architectures import self_attention_modules
from papa.core.constants import estimate_constants
from papa.core.heads import all_heads
from papa.core.models import LoadedModel, load_model
from papa.core.patching import patch_constant_heads, prune_qk
from papa.probing.data import get_task
from papa.probing.experiment import run_probe
from papa.probing.task_inputs import TaskInputs, prepare_inputs

L = 64
# probe_*: probing examples; est_n: estimation examples (est_repeats timed pairs); mem_n: N of the memory check
# (and 4N); batch, iters, repeats: inference batch, forwards per timed sample, timed pairs. The CPU sizes are
# ~9,000 example-forwards of MiniLM in all: about 3-4 minutes on 2 idle cores (more on a busy machine).
SIZES = {
    "cpu": dict(
        speed_n=1000,
        probe_train=128,
        probe_eval=128,
        epochs=15,
        est_n=256,
        est_repeats=3,
        mem_n=256,
        batch=64,
        iters=1,
        repeats=5,
    ),
    "cuda": dict(
        speed_n=8000,
        probe_train=1000,
        probe_eval=872,
        epochs=15,
        est_n=8192,
        est_repeats=5,
        mem_n=2048,
        batch=256,
        iters=20,
        repeats=7,
    ),
    "quick": dict(
        speed_n=64,
        probe_train=32,
        probe_eval=32,
        epochs=3,
        est_n=128,
        est_repeats=2,
        mem_n=64,
        batch=16,
        iters=1,
        repeats=3,
    ),
}
GPU_SHAPES = {  # random-init BERT shapes timed on CUDA only: (layers, heads, hidden)
    "bert-base-shaped": (12, 12, 768),
    "bert-large-shaped": (24, 16, 1024),
}
_DEVICE = torch.device("cpu")
MALLOC_KEY = "MALLOC_MMAP_THRESHOLD_"


def _sync() -> None:
    if _DEVICE.type == "cuda":
        torch.cuda.synchronize()


def compare(name: str, fn_a, fn_b, repeats: int, warmup: int = 1) -> dict:
    """Call ``fn_a``, ``fn_b`` alternately: ``warmup`` untimed pairs, then ``repeats`` timed pairs.

    Returns the median seconds of each side, every timing, and each side's last return value.
    """
    times: dict[str, list[float]] = {"a": [], "b": []}
    last: dict[str, object] = {}
    for i in range(warmup + repeats):
        for side, fn in (("a", fn_a), ("b", fn_b)):
            _sync()
            started = time.perf_counter()
            out = fn()
            _sync()
            if i >= warmup:
                times[side].append(time.perf_counter() - started)
                last[side] = out
    return {
        "name": name,
        "a_s": statistics.median(times["a"]),
        "b_s": statistics.median(times["b"]),
        "a_all": times["a"],
        "b_all": times["b"],
        "a_out": last["a"],
        "b_out": last["b"],
    }


def row(comparison, side_a, side_b, a, b, ratio, target, met, **extra) -> dict:
    return dict(
        comparison=comparison,
        side_a=side_a,
        side_b=side_b,
        a=a,
        b=b,
        ratio=ratio,
        target=target,
        met=bool(met),
        **extra,
    )


def random_batch(n: int, vocab: int, seed: int = 0, padded: bool = True) -> dict[str, torch.Tensor]:
    """``[n, L]`` random token ids; with ``padded`` each row keeps a random real length in [L/4, L]."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000 if vocab > 2000 else 5, vocab, (n, L), generator=g)
    lengths = torch.randint(L // 4, L + 1, (n,), generator=g) if padded else torch.full((n,), L)
    mask = (torch.arange(L)[None] < lengths[:, None]).long()
    return {"input_ids": ids * mask, "attention_mask": mask}


def to(batch: dict, device) -> dict:
    return {k: v.to(device) for k, v in batch.items() if k != "labels"}


# -- 1. cached vs faithful probing ----------------------------------------------------------------
def synthetic_inputs(lm, sizes: dict) -> TaskInputs:
    """Random padded token ids with random binary labels, shaped like SST-2 inputs (``--synthetic``:
    no task data or embedded weights needed; times are meaningful, scores are chance)."""
    vocab = lm.model.config.vocab_size
    train, evals = random_batch(sizes["probe_train"], vocab, seed=5), random_batch(sizes["probe_eval"], vocab, seed=6)
    g = torch.Generator().manual_seed(7)
    train["labels"] = torch.randint(0, 2, (sizes["probe_train"],), generator=g)
    evals["labels"] = torch.randint(0, 2, (sizes["probe_eval"],), generator=g)
    return TaskInputs(
        get_task("sst2"),
        ["negative", "positive"],
        train,
        evals,
        list(range(sizes["probe_train"])),
        list(range(sizes["probe_eval"])),
        L,
        True,
    )


def bench_probe(lm, sizes: dict, device: torch.device, synthetic: bool = False) -> list[dict]:
    inputs = (
        synthetic_inputs(lm, sizes)
        if synthetic
        else prepare_inputs(lm, "sst2", L, True, sizes["probe_train"], sizes["probe_eval"], data_seed=0)
    )
    common = dict(
        model=lm,
        task="sst2",
        constant_heads=0,
        epochs=sizes["epochs"],
        seed=42,
        inputs=inputs,
        device=str(device),
        use_cache=False,
    )
    with torch.no_grad():  # warm-up (kernels, allocator): one forward outside the timed pair
        lm.model(**to({k: v[:16] for k, v in inputs.train.items()}, device))
    result = compare(
        "probe",
        lambda: run_probe(mode="cached", **common),
        lambda: run_probe(mode="faithful", **common),
        repeats=1,
        warmup=0,
    )
    speedup = result["b_s"] / result["a_s"]
    score_a, score_b = 100 * result["a_out"]["score"], 100 * result["b_out"]["score"]
    setting = f"{sizes['probe_train']} train / {sizes['probe_eval']} eval, {sizes['epochs']} epochs, L={L}, 1 pair"
    what = f"{lm.name}, random inputs" if synthetic else "SST-2"
    return [
        row(
            f"Probing time, {what}, k=0 ({setting})",
            "cached",
            "faithful",
            f"{result['a_s']:.1f} s",
            f"{result['b_s']:.1f} s",
            f"speed-up B/A = {speedup:.1f}×",
            "cached ≥ 10× faster",
            speedup >= 10,
            timings=[result["a_all"], result["b_all"]],
        ),
        row(
            "Probing score (accuracy, same run)",
            "cached",
            "faithful",
            f"{score_a:.1f}",
            f"{score_b:.1f}",
            f"|A−B| = {abs(score_a - score_b):.1f} pt",
            "≤ 1 point",
            abs(score_a - score_b) <= 1.0,
            scores=[score_a, score_b],
        ),
    ]


# -- 2. estimation throughput and memory ----------------------------------------------------------
def _status_mib(key: str) -> float:
    """A ``/proc/self/status`` memory field (``VmRSS:``, ``VmHWM:``) in MiB."""
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(key))
    return int(line.split()[1]) / 1024


def _estimation_peak(n: int, device: str, batch_size: int, synthetic: bool = False) -> dict:
    """In a fresh process: peak memory of ``estimate_constants`` over ``n`` random padded examples."""
    lm = random_lm(device) if synthetic else load_model("minilm-l6", device)
    encoded = random_batch(n, lm.model.config.vocab_size, seed=1)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        estimate_constants(lm.model, encoded, batch_size, device)
        torch.cuda.synchronize()
        return {
            "n": n,
            "what": "torch.cuda.max_memory_allocated",
            "before_mb": before / 2**20,
            "peak_mb": torch.cuda.max_memory_allocated() / 2**20,
        }
    try:  # "5" resets VmHWM to the current RSS (Linux >= 4.0): the peak then excludes the model load
        Path("/proc/self/clear_refs").write_text("5")
        what = "VmHWM (reset after loading)"
    except OSError:
        what = "VmHWM (includes the model load)"
    before = _status_mib("VmRSS:")
    estimate_constants(lm.model, encoded, batch_size, device)
    return {"n": n, "what": what, "before_mb": before, "peak_mb": _status_mib("VmHWM:")}


def bench_estimation(lm, sizes: dict, device: torch.device, synthetic: bool = False) -> tuple[list[dict], object]:
    n, batch_size = sizes["est_n"], 64
    if synthetic:
        encoded = random_batch(n, lm.model.config.vocab_size, seed=8)
    else:
        encoded = prepare_inputs(lm, "sst2", L, True, n, 1, data_seed=0).train
    encoded = {k: v for k, v in encoded.items() if k != "labels"}

    @torch.no_grad()
    def plain():
        for start in range(0, n, batch_size):
            lm.model(**to({k: v[start : start + batch_size] for k, v in encoded.items()}, device))

    padded_estimate = lambda: estimate_constants(lm.model, encoded, batch_size, device, compact=False)  # noqa: E731
    result = compare("estimation", plain, padded_estimate, repeats=sizes["est_repeats"])
    rate_a, rate_b = n / result["a_s"], n / result["b_s"]
    what = f"{lm.name}, {'random inputs' if synthetic else 'SST-2 train'}, N={n}, batch {batch_size}, L={L}"
    rows = [
        row(
            f"Estimation throughput, the cost of recording ({what}, both padded)",
            "plain forward (SDPA)",
            "estimate_constants(compact=False)",
            f"{rate_a:.0f} ex/s",
            f"{rate_b:.0f} ex/s",
            f"B/A = {rate_b / rate_a:.2f}",
            "≥ 0.8",
            rate_b / rate_a >= 0.8,
            examples_per_s=[rate_a, rate_b],
            timings=[result["a_all"], result["b_all"]],
        )
    ]
    compact = compare(
        "estimation-compact",
        padded_estimate,
        lambda: estimate_constants(lm.model, encoded, batch_size, device),
        repeats=sizes["est_repeats"],
    )
    diff = float((compact["a_out"].constants - compact["b_out"].constants).abs().max())
    same_counts = bool(torch.equal(compact["a_out"].counts, compact["b_out"].counts))
    speedup = compact["a_s"] / compact["b_s"]
    rows.append(
        row(
            f"Estimation, compact passes ({what})",
            "padded (all L slots)",
            "compact (real slots)",
            f"{n / compact['a_s']:.0f} ex/s",
            f"{n / compact['b_s']:.0f} ex/s",
            f"{speedup:.2f}x; max |ΔC| = {diff:.1e}, counts {'identical' if same_counts else 'DIFFER'}",
            "faster, constants ≤ 1e-6, counts identical",
            speedup > 1 and diff <= 1e-6 and same_counts,
            max_abs_diff=diff,
            timings=[compact["a_all"], compact["b_all"]],
        )
    )
    peaks = []
    # glibc's adaptive mmap threshold keeps freed activations in the heap, so VmHWM would wander by ±10%
    # between runs; a fixed threshold returns large blocks at once and makes the peak reproducible.
    previous = os.environ.get(MALLOC_KEY)
    os.environ[MALLOC_KEY] = "65536"  # read by the spawned children only (glibc reads it at start-up)
    try:
        for count in (sizes["mem_n"], 4 * sizes["mem_n"]):  # one fresh process per size
            with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
                peaks.append(pool.submit(_estimation_peak, count, device.type, batch_size, synthetic).result())
    finally:
        if previous is None:
            del os.environ[MALLOC_KEY]
        else:
            os.environ[MALLOC_KEY] = previous
    small, large = peaks
    growth = large["peak_mb"] / small["peak_mb"]
    extra = lambda p: f"{p['peak_mb']:.0f} MiB (+{p['peak_mb'] - p['before_mb']:.0f})"  # noqa: E731
    rows.append(
        row(
            f"Estimation peak memory, {small['what']}, random padded inputs, batch {batch_size}",
            f"N={small['n']}",
            f"4N={large['n']}",
            extra(small),
            extra(large),
            f"B/A = {growth:.3f}",
            "≤ 1.05 (independent of N)",
            growth <= 1.05,
            memory=peaks,
        )
    )
    return rows, result["b_out"]


# -- 3. patched inference -------------------------------------------------------------------------
def bench_inference(name: str, model, constants, sizes: dict, dtype: torch.dtype, device: torch.device) -> list[dict]:
    config = model.config
    heads = all_heads(config.num_hidden_layers, config.num_attention_heads)
    constants = constants.to(device)
    zero = patch_constant_heads(copy.deepcopy(model), constants, []).eval()
    allc = prune_qk(patch_constant_heads(copy.deepcopy(model), constants, heads)).eval()
    batch = to(random_batch(sizes["batch"], config.vocab_size, seed=2), device)
    iters = sizes["iters"]

    def forward(m):
        @torch.no_grad()
        def run():
            for _ in range(iters):
                m(**batch)

        return run

    setting = f"{name}, {str(dtype).replace('torch.', '')}, batch {sizes['batch']}, L={L}, padded"
    rows = []
    for label, patched in (("all heads constant + prune_qk", allc), ("zero constant heads", zero)):
        result = compare(label, forward(model), forward(patched), sizes["repeats"])
        ms_a, ms_b = 1e3 * result["a_s"] / iters, 1e3 * result["b_s"] / iters
        if patched is allc:
            ratio, target, met = f"speed-up A/B = {ms_a / ms_b:.2f}×", "≥ 1.15×", ms_a / ms_b >= 1.15
        else:
            ratio, target, met = f"slow-down B/A = {ms_b / ms_a:.3f}×", "≤ 1.05×", ms_b / ms_a <= 1.05
        rows.append(
            row(
                f"Inference, {setting}: {label}",
                "unpatched (SDPA)",
                "patched",
                f"{ms_a:.2f} ms",
                f"{ms_b:.2f} ms",
                ratio,
                target,
                met,
                timings=[result["a_all"], result["b_all"]],
            )
        )
    return rows


def random_lm(device, layers: int = 12, heads: int = 12, hidden: int = 768) -> LoadedModel:
    """A bert-base-shaped random-init encoder as a LoadedModel (weights do not matter for speed)."""
    model = random_bert(layers, heads, hidden, torch.float32, device)
    return LoadedModel("bert-base-shaped", model, None, "random", "random-init")


def random_bert(layers: int, heads: int, hidden: int, dtype, device):
    cfg = BertConfig(
        num_hidden_layers=layers, num_attention_heads=heads, hidden_size=hidden, intermediate_size=4 * hidden
    )
    torch.manual_seed(0)
    model = AutoModel.from_config(copy.deepcopy(cfg), attn_implementation="sdpa")  # from_config mutates its config
    return model.to(device, dtype).eval().requires_grad_(False)


# -- 4. equivalence: fast path vs an independent eager reference ----------------------------------
REFERENCE = "papa_bench_reference"
_REF_STATE: dict = {}  # self-attention module -> (constant heads, their C [n, L, L]); "mask" -> [B, L] bool


def _reference_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Eager softmax attention; the listed heads' probabilities become ``rownorm(C ⊙ m mᵀ)``."""
    scaling = query.size(-1) ** -0.5 if scaling is None else scaling
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask  # eager_mask: additive float
    probs = scores.softmax(-1)
    if module in _REF_STATE:
        heads, constants = _REF_STATE[module]
        m = _REF_STATE["mask"].to(probs.dtype)
        length = probs.shape[-1]
        c = constants[None, :, :length, :length] * m[:, None, :, None] * m[:, None, None, :]
        probs[:, heads] = c / c.sum(-1, keepdim=True).clamp_min(1e-12)
    return torch.matmul(probs, value).transpose(1, 2).contiguous(), None


AttentionInterface.register(REFERENCE, _reference_attention)
AttentionMaskInterface.register(REFERENCE, eager_mask)


@torch.no_grad()
def reference_output(model, constants, heads, batch) -> torch.Tensor:
    modules = self_attention_modules(model)
    for layer in {l for l, _ in heads}:
        layer_heads = sorted(h for l, h in heads if l == layer)
        _REF_STATE[modules[layer]] = (layer_heads, constants[layer, layer_heads])
    _REF_STATE["mask"] = batch["attention_mask"].bool()
    previous, model.config._attn_implementation = model.config._attn_implementation, REFERENCE
    try:
        return model(**batch).last_hidden_state
    finally:
        model.config._attn_implementation = previous
        _REF_STATE.clear()


def bench_equivalence(model, constants, device: torch.device, name: str = "minilm-l6") -> tuple[list[dict], list[dict]]:
    config = model.config
    everything = all_heads(config.num_hidden_layers, config.num_attention_heads)
    half = [
        everything[i]
        for i in torch.randperm(len(everything), generator=torch.Generator().manual_seed(3))[
            : len(everything) // 2
        ].tolist()
    ]
    constants = constants.to(device)
    cases = []
    for label, heads in (("0 heads", []), (f"{len(half)} random heads", sorted(half)), ("all heads", everything)):
        fast_model = patch_constant_heads(copy.deepcopy(model), constants, heads)
        if heads:
            prune_qk(fast_model)
        for padded in (True, False):
            batch = to(random_batch(8, config.vocab_size, seed=4, padded=padded), device)
            with torch.no_grad():
                fast = fast_model(**batch).last_hidden_state
            diff = float((fast - reference_output(model, constants, heads, batch)).abs().max())
            cases.append({"heads": label, "padded": padded, "max_abs_diff": diff})
    worst = max(c["max_abs_diff"] for c in cases)
    rows = [
        row(
            f"Equivalence, {name} fp32: patched fast path (+prune_qk) vs eager reference, {len(cases)} cases",
            "eager reference",
            "fast path",
            "—",
            "—",
            f"max |A−B| = {worst:.1e}",
            "≤ 1e-5",
            worst <= 1e-5,
        )
    ]
    return rows, cases


# -- driver ---------------------------------------------------------------------------------------
def _cpu_name() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return next(l.split(":", 1)[1].strip() for l in lines if l.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def header(args, device: torch.device, sizes: dict) -> dict:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name()
    return {
        "command": shlex.join(["python", "-m", "benchmarks.run", *sys.argv[1:]]),
        "device": f"{device.type} ({name})",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "quick": args.quick,
        "sizes": sizes,
    }


def to_markdown(info: dict, rows: list[dict], cases: list[dict]) -> str:
    lines = [f"# papa benchmarks — {info['device']}", ""]
    lines += [
        f"- command: `{info['command']}`",
        f"- device: {info['device']}; torch {info['torch']}, transformers {info['transformers']}; "
        f"{info['threads']} torch threads on {info['cpu_count']} CPUs; load average at start {info['load_average']}",
        f"- date: {info['date']}; sizes: `{json.dumps(info['sizes'])}`",
        "- each comparison runs in one process, its sides alternating A, B, A, B after a warm-up pair (probing: one "
        "timed pair, no warm-up pair); medians shown.",
        "",
    ]
    lines += [
        "| comparison | side A | side B | A (median) | B (median) | ratio | target | met |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['comparison']} | {r['side_a']} | {r['side_b']} | {r['a']} | {r['b']} | {r['ratio']} | {r['target']} "
            f"| {'met' if r['met'] else 'NOT met'} |"
        )
    lines += [
        "",
        "Equivalence cases (max abs diff of `last_hidden_state`, fp32):",
        "",
        "| constant heads | padded batch | max abs diff |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {c['heads']} | {c['padded']} | {c['max_abs_diff']:.2e} |" for c in cases]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    global _DEVICE
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smallest sizes (a smoke test, not a measurement)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", type=Path, help="write every measurement as JSON here")
    parser.add_argument(
        "--synthetic",
        action="store_true",
        help="a bert-base-shaped random-init model on random inputs: no task data or embedded weights needed",
    )
    parser.add_argument("--markdown", type=Path, help="default benchmarks/results-<device>[-quick].md")
    args = parser.parse_args(argv)
    _DEVICE = device = torch.device(args.device)
    sizes = dict(SIZES["quick" if args.quick else device.type])
    info = header(args, device, sizes)
    print(
        f"{info['command']}\n{info['device']}, torch {info['torch']}, {info['threads']} threads, sizes {sizes}",
        flush=True,
    )

    lm = random_lm(device) if args.synthetic else load_model("minilm-l6", device)
    rows, started = [], time.perf_counter()
    rows += bench_probe(lm, sizes, device, args.synthetic)
    print(f"[{time.perf_counter() - started:.0f} s] probing done", flush=True)
    estimation_rows, constant_set = bench_estimation(lm, sizes, device, args.synthetic)
    rows += estimation_rows
    print(f"[{time.perf_counter() - started:.0f} s] estimation done", flush=True)
    rows += bench_inference(lm.name, lm.model, constant_set.constants, sizes, torch.float32, device)
    if device.type == "cuda":
        for shape, (layers, heads, hidden) in GPU_SHAPES.items():
            model = random_bert(layers, heads, hidden, torch.float16, device)
            constants = torch.rand(layers, heads, L, L, generator=torch.Generator().manual_seed(0))
            rows += bench_inference(shape, model, constants, sizes, torch.float16, device)
            del model
            torch.cuda.empty_cache()
    print(f"[{time.perf_counter() - started:.0f} s] inference done", flush=True)
    rows += bench_compact(lm, device, compare, row, sizes["speed_n"], args.synthetic)
    rows += bench_probe_epoch(lm, device, compare, row, sizes["speed_n"], args.synthetic)
    print(f"[{time.perf_counter() - started:.0f} s] compact passes and probe epoch done", flush=True)
    equivalence_rows, cases = bench_equivalence(lm.model, constant_set.constants, device, lm.name)
    rows += equivalence_rows

    markdown = to_markdown(info, rows, cases)
    print("\n" + markdown)
    out = (
        args.markdown
        or Path(__file__).parent
        / f"results-{device.type}{'-synthetic' if args.synthetic else ''}{'-quick' if args.quick else ''}.md"
    )
    out.write_text(markdown, encoding="utf-8")
    if args.json:
        args.json.write_text(json.dumps({"header": info, "rows": rows, "equivalence": cases}, indent=2, default=str))
    print(f"written: {out}" + (f", {args.json}" if args.json else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
