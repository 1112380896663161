"""The generated pages of the book: the setup and reproducibility pages, the front page's links, static assets, and
(through :mod:`papa.book.run_index`) ``_toc.yml``, the appendix and its group pages."""

from __future__ import annotations

from pathlib import Path

from papa.analysis import results as R
from papa.book.run_index import appendix_rows, write_run_index
from papa.book.words import plural
from papa.core.errors import PapaError
from papa.core.io import atomic_write_text, read_json_verified
from papa.pipeline.plan import ROOT


def _reproducibility(config: dict, stale: list[str], root: Path = ROOT, run_ids: list[str] | None = None) -> str:
    """The reproducibility page: environment, time and every run's status. With ``run_ids`` (the book's runs), what
    the runs folder holds of other runs (``papa grid run --dry-run`` lists them as "not in the plan") is left out."""
    name = config["name"]
    runs_dir = root / "book" / "runs" / name
    manifest = read_json_verified(runs_dir / "manifest.json", "manifest")["runs"] if (runs_dir / "manifest.json").is_file() else {}
    results = R.read_results(runs_dir / "artifacts" / "results") if (runs_dir / "artifacts" / "results").is_dir() else {}
    if run_ids is not None:
        book = set(run_ids)
        manifest = {run_id: entry for run_id, entry in manifest.items() if run_id in book}
        results = {key: result for key, result in results.items() if key.rsplit("__s", 1)[0] in book}
    lines = [
        "# Reproducibility",
        "",
        f"Every number in this book comes from the runs of `configs/{name}.yaml`, listed below with the "
        "provenance each run recorded. Rerun them with `make book` (only missing or stale runs execute) or one "
        "at a time with papermill: {doc}`rerun` says how.",
        "",
    ]
    if stale:
        lines += [
            ":::{warning}",
            (
                f"{len(stale)} runs are stale (their code, data, parameters or environment changed since they ran) and are shown as they were: "
                if len(stale) > 1
                else "1 run is stale (its code, data, parameters or environment changed since it ran) and is shown as it was: "
            )
            + ", ".join(f"`{s}`" for s in stale[:20])
            + (" …" if len(stale) > 20 else ""),
            ":::",
            "",
        ]
    if results:
        first = next(iter(results.values()))["provenance"]
        packages = ", ".join(f"{k} {v}" for k, v in first["packages"].items())
        commits = sorted({r["provenance"]["git_commit"] for r in results.values()})
        devices = sorted({r["provenance"]["device"] for r in results.values()})
        total = sum(r["timings"]["total"] for r in results.values())
        lines += [
            "## Environment",
            "",
            f"- papa {first['papa_version']}, {plural(len(commits), 'commit')} {', '.join(f'`{c}`' for c in commits)}"
            + (" (`-dirty`: the working tree had uncommitted changes; the run's key still covers the code the run executed)" if any(c.endswith("-dirty") for c in commits) else ""),
            f"- Python {first['python']}; {packages}",
            f"- {plural(len(devices), 'device')}: {', '.join(devices)}",
            f"- {len({key.rsplit('__s', 1)[0] for key in results})} probing runs ({len(results)} probe results, one per seed), {total / 60:.1f} minutes of probing in all",
            "",
            "What could still vary between machines: the device and its kernels (CPU vs GPU, thread count), "
            "and library versions; on one CPU with the same versions the same seed gives the same scores (a test "
            "checks it in two processes).",
            "",
        ]
    if manifest:
        lines += _budget(manifest, results, stale, TIME_AIMS.get(config["name"]))
    lines += ["## Runs", "", "| run | status | seconds |", "|---|---|---:|"]
    for run_id, entry in sorted(manifest.items()):
        status = "stale" if run_id in stale else entry.get("status", "?")
        lines.append(f"| `{run_id}` | {status} | {entry.get('seconds', '')} |")
    lines += [
        "",
        "## Speed",
        "",
        "The tables below compare papa's ways of running the same computation. Their words: *SDPA* is PyTorch's fused "
        "attention kernel (`scaled_dot_product_attention`), which transformers uses by default; the *fast path* is papa's "
        "patched attention, which runs SDPA on the heads that stay input-dependent and one batched matrix product for the "
        "constant ones; *prune_qk* (`papa.prune_qk`) also drops the query and key weights of the constant heads, which no "
        "longer need them; *VmHWM* is the peak memory the process held (Linux's high-water mark of its resident memory). "
        "*A* and *B* are a comparison's two sides.",
        "",
    ]
    bench = sorted((root / "benchmarks").glob("results-*.md"))
    if bench:
        for path in bench:
            text = "\n" + path.read_text(encoding="utf-8")
            lines += [
                f"From `{path.relative_to(root)}` (written by `{_benchmark_command(text)}`):",
                text.replace("\n# ", "\n### ").replace("\n## ", "\n#### ").replace("|A−B|", "\\|A−B\\|"),
                "",
            ]
    else:
        lines += ["No benchmark table yet: run `make bench`.", ""]
    return "\n".join(lines) + "\n"


def _benchmark_command(table: str) -> str:
    """The module that wrote a benchmark table (its ``- command:`` line names it; default ``python -m benchmarks.run``)."""
    for line in table.splitlines():
        if line.startswith("- command: `python -m benchmarks."):
            return " ".join(line.split("`")[1].split()[:3])
    return "python -m benchmarks.run"


def _setup(config: dict) -> str:
    """The setup chapter, written from the grid config (sizes are never typed by hand)."""
    from papa.book.setup_page import setup_page

    return setup_page(config)


#: Wall-time aims, in minutes on two CPU cores, of the grids the book is built from (issue 25: the default grid in four hours).
TIME_AIMS = {"default": 240.0}


def _over_aim(total: float, aim: float, parts: dict[str, float], kinds: dict[str, list[float]], overhead: float) -> list[str]:
    """Past the aim: by how much, and what is left, costliest first, with what each would take (seconds in, lines out)."""
    left = [
        (
            parts["train"],
            "probe training",
            "train the seeds of a run in one batched pass, so that each step's small matrix products (batch 16 through the probe's"
            " dense layer) and optimizer updates run once for all seeds; a step is compute- and overhead-bound, not bound by"
            " reading the features (the single-run benchmark times one step on a gathered batch)",
        ),
        (sum(kinds.get("rank", [])), "rankings", "run the gates ranking's training passes on compact batches, as the probes' features already are"),
        (parts["features"], "encoder features", "already near their floor on the CPU (each batch runs only up to its real tokens); a GPU"),
        (parts["eval"], "evaluation", "score every seed's probe in one pass over the dev features"),
        (sum(kinds.get("select_lr", [])), "learning-rate choices", "the same batched probe training, for their three learning rates"),
        (max(overhead, 0.0), "notebook start-up, model loading and tokenisation", "fewer, larger probe notebooks per model and task"),
    ]
    lines = [
        f"That is {(total / 60) - aim:.1f} minutes over this grid's aim of {aim:.0f} minutes on two CPU cores. What is left, costliest first, "
        "and what each would take (every item changes the probing path, so the whole grid re-runs after it):",
        "",
    ]
    lines += [f"- {label}, {seconds / 60:.1f} min: {remedy};" for seconds, label, remedy in sorted(left, key=lambda item: -item[0]) if seconds > 0]
    lines[-1] = lines[-1].rstrip(";") + "."
    return lines + [""]


def _budget(manifest: dict, results: dict, stale: list[str] = (), aim: float | None = None) -> list[str]:
    """Where the grid's time went, from the manifest (per run) and the results (per probe): by kind of run, by model
    (``run_kind__model__…``), while some runs are stale how much of the sum is their old duration, and against the
    grid's ``aim`` (minutes, :data:`TIME_AIMS`) by how much it is over and what is left."""
    kinds: dict[str, list[float]] = {}
    by_model: dict[str, dict[str, float]] = {}
    for run_id, entry in manifest.items():
        kind, *rest = run_id.split("__")
        seconds = float(entry.get("seconds") or 0)
        kinds.setdefault(kind, []).append(seconds)
        if rest:
            by_model.setdefault(rest[0], {}).setdefault(kind, 0.0)
            by_model[rest[0]][kind] += seconds
    by_run = {name.rsplit("__s", 1)[0]: r for name, r in results.items()}  # the seeds of one run share its feature sets: count them once
    extractions = sum(1 for r in by_run.values() for hit in (r.get("feature_cache_hits") or {}).values() if not hit)
    reused = sum(1 for r in by_run.values() for hit in (r.get("feature_cache_hits") or {}).values() if hit)
    faithful = sum(1 for r in results.values() if r["config"]["mode"] == "faithful")
    parts = {key: sum(r["timings"].get(key, 0.0) for r in results.values()) for key in ("features", "train", "eval")}
    probe_total = sum(kinds.get("probe", []))
    overhead = probe_total - sum(r["timings"]["total"] for r in results.values())
    total = sum(sum(v) for v in kinds.values())
    lines = [
        "## Where the time goes",
        "",
        f"The grid's runs took {total / 60:.1f} minutes of wall time in all (each run's notebook, from the manifest):",
        "",
        "| runs | count | minutes |",
        "|---|---:|---:|",
    ]
    lines += [f"| {kind} | {len(v)} | {sum(v) / 60:.1f} |" for kind, v in sorted(kinds.items())]
    stale_here = [run_id for run_id in stale if run_id in manifest]
    if stale_here:
        old = sum(float(manifest[run_id].get("seconds") or 0) for run_id in stale_here)
        lines += [
            "",
            f"Of that sum, {old / 60:.1f} minutes are the last recorded durations of the {len(stale_here)} "
            f"{plural(len(stale_here), 'stale run')}; the {len(manifest) - len(stale_here)} "
            f"{plural(len(manifest) - len(stale_here), 'current run')} took {(total - old) / 60:.1f} minutes.",
        ]
    kind_order = [kind for kind in ("estimate", "rank", "select_lr", "probe") if any(kind in row for row in by_model.values())]
    if by_model and kind_order:
        lines += ["", "By model, in minutes:", "", "| model | " + " | ".join(kind_order) + " | all |", "|---|" + "---:|" * (len(kind_order) + 1)]
        for model, row in sorted(by_model.items(), key=lambda item: -sum(item[1].values())):
            lines.append(f"| {model} | " + " | ".join(f"{row.get(kind, 0.0) / 60:.1f}" for kind in kind_order) + f" | {sum(row.values()) / 60:.1f} |")
    lines += [
        "",
        f"Inside the {len(results)} probing runs: encoder features {parts['features'] / 60:.1f} min "
        f"({extractions} feature extractions — one per train/eval split, task and head set — and {reused} reuses "
        f"from the on-disk cache; {faithful} faithful runs recompute the encoder every batch instead), probe training "
        f"{parts['train'] / 60:.1f} min, evaluation {parts['eval'] / 60:.1f} min; notebook start-up, model loading and "
        f"tokenisation {max(overhead, 0) / 60:.1f} min.",
        "",
    ]
    if aim is not None and total / 60 > aim:
        lines += _over_aim(total, aim, parts, kinds, overhead)
    elif aim is not None:
        lines += [f"That is within this grid's aim of {aim:.0f} minutes on two CPU cores.", ""]
    return lines


MATHJAX = ROOT / ".venv" / "mathjax" / "node_modules" / "mathjax" / "es5"


def stage_mathjax(static: Path) -> None:
    """Copy MathJax (installed from npm by `make install`) into the book's static files: the page
    loads it from the site itself, never from a CDN."""
    import shutil

    if not (MATHJAX / "tex-mml-chtml.js").is_file():
        raise PapaError(f"MathJax is not installed at {MATHJAX.relative_to(ROOT)}", "Run `make install` (it installs mathjax@3 with npm).")
    target = static / "mathjax"
    if (target / "tex-mml-chtml.js").is_file():
        return
    fonts = Path("output") / "chtml" / "fonts" / "woff-v2"
    (target / fonts).mkdir(parents=True, exist_ok=True)
    shutil.copy2(MATHJAX / "tex-mml-chtml.js", target / "tex-mml-chtml.js")
    for font in (MATHJAX / fonts).glob("*.woff"):
        shutil.copy2(font, target / fonts / font.name)


ITABLES_SCRIPT = "papa-itables.js"


def stage_itables(static: Path) -> Path:
    """Write ``papa-itables.js``: itables' offline DataTables bundle (the files ``init_notebook_mode(
    connected=False)`` embeds) wrapped in a classic script that makes every ``table#runs-index`` or
    ``table.papa-itable`` sortable and searchable. Nothing is fetched from a CDN; the page loads the
    bundle as a blob module, as itables' offline mode does, so it also works from ``file://``."""
    import json
    from importlib.resources import files

    import itables

    bundle = files("itables") / "html"
    css, js = (bundle / "dt_bundle.css").read_text(encoding="utf-8"), (bundle / "dt_bundle.js").read_text(encoding="utf-8")
    script = (
        f"/* itables {itables.__version__} offline DataTables bundle, written by `papa book build`: no CDN. */\n"
        "(function () {\n"
        f"  const css = {json.dumps(css)};\n"
        f"  const src = {json.dumps(js)};\n"
        "  const style = document.createElement('style');\n"
        "  style.textContent = css;\n"
        "  document.head.appendChild(style);\n"
        "  const url = URL.createObjectURL(new Blob([src], { type: 'application/javascript' }));\n"
        "  import(url).then(({ ITable }) => {\n"
        "    URL.revokeObjectURL(url);\n"
        "    document.querySelectorAll('table#runs-index, table.papa-itable').forEach((table) => {\n"
        "      new ITable(table, { pageLength: 50, lengthMenu: [25, 50, 100, 500], order: [], autoWidth: false });\n"
        "    });\n"
        "  });\n"
        "})();\n"
    )
    target = static / ITABLES_SCRIPT
    atomic_write_text(target, script)
    return target


def point_front_page(text: str, name: str) -> str:
    """The front page with every ``runs/<grid>/results`` or ``controls`` path (glued numbers, links) pointed
    at grid ``name``, the grid the book is built from."""
    import re

    return re.sub(r"runs/[\w-]+/(results|controls)\b", rf"runs/{name}/\1", text)


def write_pages(config: dict, stale: list[str], run_ids: list[str]) -> None:
    from papa.analysis.figures import write_vega_bundle
    from papa.pipeline.plan import expand, runs_dir

    runs_folder = runs_dir(config)
    manifest = read_json_verified(runs_folder / "manifest.json", "manifest")["runs"] if (runs_folder / "manifest.json").is_file() else {}
    present = set(run_ids)
    rows = appendix_rows(config, [r for r in expand(config) if r.run_id in present], manifest)
    write_run_index(config, rows, run_ids)
    from papa.book.study_site import add_studies_part

    add_studies_part()  # the "Your models" part: every executed `papa study` chapter (none: no part)
    front = ROOT / "book" / "index.md"
    text = front.read_text(encoding="utf-8")
    if point_front_page(text, config["name"]) != text:
        atomic_write_text(front, point_front_page(text, config["name"]))
    atomic_write_text(ROOT / "book" / "reproducibility.md", _reproducibility(config, stale, run_ids=run_ids))
    atomic_write_text(ROOT / "book" / "setup.md", _setup(config))
    atomic_write_text(
        ROOT / "book" / "_generated" / "constants-figure.md",
        (
            "(fig-constants)=\n"
            "```{glue} fig-constants\n"
            f":doc: runs/{config['name']}/results.ipynb\n```\n\n"
            "**Figure: constant matrices.** A few constant matrices (query position × key position; darker: more "
            f"attention), averaged down for display, from the first task's constants of the `{config['name']}` grid.\n"
        ),
    )
    write_vega_bundle(ROOT / "book" / "_static")
    stage_itables(ROOT / "book" / "_static")
    stage_mathjax(ROOT / "book" / "_static")
