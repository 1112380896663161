"""The generated pages of the book: the setup and reproducibility pages, the front page's links, and (through
:mod:`papa.book.run_index`) ``_toc.yml``, the appendix and its group pages; the static assets come from
:mod:`papa.book.assets`. :func:`write_pages` renders every page in memory and checks the assets before it writes
anything, so a build that cannot finish leaves the committed pages as they were."""

from __future__ import annotations

import re
import sys
from functools import partial
from pathlib import Path

from papa.analysis import results as R
from papa.book import run_index as RI
from papa.book.assets import check_assets, stage_assets
from papa.book.load import read_manifest
from papa.book.report_site import reports_part
from papa.book.setup_page import setup_page
from papa.book.templates import Markdown, code, fill, join, pieces
from papa.book.words import plural
from papa.core.names import name_parts
from papa.pipeline.executed import code_span, myst_text
from papa.pipeline.plan import (
    ROOT,
    STUDY_AIMS,
    TIME_AIMS,
    chapter_study_minutes,
    chapter_study_runs,
    count_probe_runs,
    expand,
    machine_shares,
    probe_run_id,
    runs_dir,
)
from papa.pipeline.stamps import read_stamp, stamp_path
from papa.pipeline.verify import VERIFIABLE, bound_records, dirty_runs, stamped_runs

_piece = partial(fill, "reproducibility")


def _grid_piece(piece: str, grid: str, **values: object) -> Markdown:
    """Piece ``piece``, followed where the template has one by piece ``<piece>-grid-<grid>``: what was observed of
    that grid alone and no run records (how it compares with an earlier grid, what else the machine ran)."""
    text, note = _piece(piece, **values), f"{piece}-grid-{grid}"
    return Markdown(f"{text} {_piece(note)}") if note in pieces("reproducibility") else text


def _reproducibility(config: dict, stale: list[str], root: Path = ROOT, run_ids: list[str] | None = None) -> str:
    """The reproducibility page: environment, time and every run's status (of ``run_ids`` only, when given)."""
    name = config["name"]
    runs_dir = root / "book" / "runs" / name
    manifest = read_manifest(runs_dir)
    results_dir = runs_dir / "artifacts" / "results"
    results = R.read_results(results_dir) if results_dir.is_dir() else {}
    if run_ids is not None:
        book = set(run_ids)
        manifest = {run_id: entry for run_id, entry in manifest.items() if run_id in book}
        results = {key: result for key, result in results.items() if probe_run_id(key) in book}
    lines = ["# Reproducibility", "", _piece("intro", config=code(f"configs/{name}.yaml")), ""]
    if stale:
        listed = Markdown(", ".join(code_span(s) for s in stale[:20]) + (" …" if len(stale) > 20 else ""))
        what = (
            _piece("stale-one", runs=listed) if len(stale) == 1 else _piece("stale-many", count=len(stale), runs=listed)
        )
        lines += [":::{warning}", what, ":::", ""]
    if results:
        first = next(iter(results.values()))["provenance"]
        packages = myst_text(", ".join(f"{k} {v}" for k, v in first["packages"].items()))
        commits = sorted({r["provenance"]["git_commit"] for r in results.values()})
        devices = sorted({myst_text(_device_words(r["provenance"])) for r in results.values()})
        total = sum(r["timings"]["total"] for r in results.values())
        minutes = f"{total / 60:.1f}"
        papa = f"- papa {myst_text(first['papa_version'])}, {plural(len(commits), 'commit')} "
        papa += ", ".join(map(code_span, commits))
        if any(c.endswith("-dirty") for c in commits):
            papa += " (`-dirty`: the working tree had uncommitted changes; the run's key still covers the code the run"
            papa += " executed)"
        papa += "\n" + _code_states(runs_dir, list(manifest))
        python = f"- Python {myst_text(first['python'])}; {packages}"
        device = plural(len(devices), "device")
        probes = _piece("probe-runs", probe_runs=count_probe_runs(results), probe_results=len(results), minutes=minutes)
        lines += ["## Environment", "", papa, python, f"- {device}: {', '.join(devices)}", probes, ""]
        lines += [_grid_piece("machines-vary", name), ""]
    if manifest:
        own = {chapter: chapter_study_runs(config, manifest, chapter) for chapter in STUDY_AIMS}
        aside = {run_id for run_ids in own.values() for run_id in run_ids}
        main = {run_id: entry for run_id, entry in manifest.items() if run_id not in aside}
        main_results = {key: result for key, result in results.items() if probe_run_id(key) not in aside}
        shares = machine_shares(manifest)  # over every run: a study's run beside a main one takes half the time
        apart = {chapter: study_runs for chapter, study_runs in own.items() if study_runs}
        lines += ["## Where the time goes", ""]
        if apart:  # the grid's aim counts the runs it had before these studies: name that basis before any sum
            chapters = join(apart, " and ")
            lines += [_piece("time-basis", runs=len(aside), chapters=chapters), ""]
        lines += _budget(main, main_results, stale, TIME_AIMS.get(name), shares, name)
        for chapter in apart:
            runs, minutes = chapter_study_minutes(config, manifest, chapter)
            aim = f"{STUDY_AIMS[chapter]:.0f}"
            lines += [_piece("study-time", runs=runs, chapter=chapter, minutes=f"{minutes:.1f}", aim=aim), ""]
    lines += _verified_section(config, runs_dir, run_ids, root)
    lines += ["## Runs", "", "| run | status | seconds |", "|---|---|---:|"]
    for run_id, entry in sorted(manifest.items()):
        status = "stale" if run_id in stale else entry.get("status", "?")
        seconds = myst_text(entry.get("seconds", ""))
        lines.append(f"| {code_span(run_id, table=True)} | {myst_text(status)} | {seconds} |")
    lines += ["", "## Speed", "", _piece("speed"), ""]
    bench = sorted((root / "benchmarks").glob("results-*.md"))
    if bench:
        for path in bench:
            text = "\n" + path.read_text(encoding="utf-8")
            source = _piece("bench-from", path=code(path.relative_to(root)), command=code(_benchmark_command(text)))
            shown = text.replace("\n# ", "\n### ").replace("\n## ", "\n#### ").replace("|A−B|", "\\|A−B\\|")
            lines += [source, shown, ""]
    else:
        lines += [_piece("bench-none"), ""]
    return "\n".join(lines) + "\n"


def _device_words(provenance: dict) -> str:
    """``cpu:x86_64x2 (AVX512 kernels)``: the device and, where the run recorded them, the CPU's vector kernels."""
    kernels = provenance.get("cpu_kernels")
    return provenance["device"] + (f" ({kernels} kernels)" if kernels else "")


def _code_states(runs_dir: Path, run_ids: list[str]) -> str:
    """How many versions of the papa code the runs executed: per module, the distinct fingerprints in the stamps of
    the runs that import it (one each: every run ran the same code, whatever commit its files were committed at)."""
    seen: dict[str, set[str]] = {}
    for run_id in run_ids:
        modules = ((read_stamp(stamp_path(runs_dir, run_id)) or {}).get("components") or {}).get("papa") or {}
        for module, fingerprint in modules.items():
            seen.setdefault(module, set()).add(fingerprint)
    differing = sorted(module for module, prints in seen.items() if len(prints) > 1)
    if not differing:
        return _piece("code-one", modules=len(seen))
    shown = ", ".join(map(code_span, differing[:8])) + (" …" if len(differing) > 8 else "")
    return _piece("code-many", modules=len(seen), differing=len(differing), shown=Markdown(shown))


def _verified_section(config: dict, runs_dir: Path, run_ids: list[str] | None, root: Path = ROOT) -> list[str]:
    """ "Verified": what ``papa grid verify`` re-executed and compared (records of the runs' current executions only),
    on which machines, every mismatch with its size and cause; then the runs whose outputs record ``-dirty``."""
    runs = [r for r in stamped_runs(runs_dir) if r.kind in VERIFIABLE and (run_ids is None or r.run_id in run_ids)]
    records, aside = bound_records(runs_dir, runs, root)  # only records of the runs' current outputs count
    lines = ["## Verified", ""]
    set_aside = [_piece(f"verified-{why}", count=count) for why, count in aside.items() if count]
    if not records:
        lines += [_piece("verified-none"), ""] + [line for piece in set_aside for line in (piece, "")]
    else:
        differed = sorted(run_id for run_id, record in records.items() if not record["matched"])
        tolerances = sorted({record["tolerance"] for record in records.values()})
        exactness = "exactly" if tolerances == [0.0] else "within " + " or ".join(f"{t:g}" for t in tolerances)
        where = code(f"book/runs/{config['name']}/verified/")
        matched = len(records) - len(differed)
        counts = dict(verified=len(records), verifiable=len(runs), matched=matched, differed=len(differed))
        lines += [_piece("verified-intro", exactness=exactness, records=where, **counts), ""]
        groups: dict[tuple, list[str]] = {}
        for record in records.values():
            packages = sorted(record["packages"].items())
            versions = ", ".join(f"{k} {v}" for k, v in packages if k in ("torch", "transformers", "numpy"))
            machine = (record["machine"], record["device"], f"Python {record['python']}, {versions}")
            groups.setdefault((*machine, record["papa"]["commit"]), []).append(record["verified_at"][:10])
        for (machine, device, versions, commit), dates in sorted(groups.items()):
            when = min(dates) if min(dates) == max(dates) else f"{min(dates)} to {max(dates)}"
            runs_words, commit = f"{len(dates)} {plural(len(dates), 'run')}", code(commit)
            where = dict(machine=machine, device=device, versions=versions, commit=commit, when=when)
            lines.append(_piece("verified-machine", runs=runs_words, **where))
        for piece in set_aside:
            lines += ["", piece]
        if differed:
            head = "| run | fields that differed | largest \\|Δ\\| | cause |"
            lines += ["", _piece("mismatches"), "", head, "|---|---|---:|---|"]
            for run_id in differed:
                record = records[run_id]
                more = len(record["fields"]) - 4
                fields = record["fields"][:4] + ([f"and {more} more"] if more > 0 else [])
                fields += [f"nbval {cell}" for cell in record["nbval"]["failed_cells"][:2]]
                cells = [myst_text(", ".join(fields)), myst_text("; ".join(record["causes"]) or "unexplained")]
                fields_cell, cause_cell = (cell.replace("|", "\\|") for cell in cells)
                size = f"{record['largest_difference']:.3g}"
                lines.append(f"| {code_span(run_id, table=True)} | {fields_cell} | {size} | {cause_cell} |")
        lines.append("")
    dirty = dirty_runs(runs, root)
    if dirty:
        lines += [_piece("dirty", count=len(dirty)), ""]
        lines += [f"- {code_span(run_id)}: {', '.join(map(code_span, c))}" for run_id, c in sorted(dirty.items())]
    else:
        lines.append(_piece("dirty-none"))
    return lines + [""]


def _benchmark_command(table: str) -> str:
    """The module that wrote a benchmark table: ``python -m benchmarks.NAME`` from its ``- command:`` line, whichever
    interpreter path that line names (default ``python -m benchmarks.run``)."""
    found = re.search(r"^- command: `(?:\S*/)?python -m (benchmarks\.\w+)", table, flags=re.MULTILINE)
    return f"python -m {found.group(1)}" if found else "python -m benchmarks.run"


def _over_aim(total: float, aim: float, parts: dict, kinds: dict[str, list[float]], overhead: float) -> list[str]:
    """Past the aim: by how much, and what is left, costliest first, with what each would take."""
    left = [
        (parts["train"], "probe training", "remedy-train"),
        (sum(kinds.get("rank", [])), "rankings", "remedy-rank"),
        (parts["features"], "encoder features", "remedy-features"),
        (parts["eval"], "evaluation", "remedy-eval"),
        (sum(kinds.get("select_lr", [])), "learning-rate choices", "remedy-select-lr"),
        (max(overhead, 0.0), "notebook start-up, model loading and tokenisation", "remedy-overhead"),
    ]
    items = [item for item in sorted(left, key=lambda item: -item[0]) if item[0] > 0]
    lines = [_piece("over-aim", over=f"{(total / 60) - aim:.1f}", aim=f"{aim:.0f}"), ""]
    for n, (seconds, label, remedy) in enumerate(items, 1):
        end = "." if n == len(items) else ";"
        lines.append(_piece("remedy", label=label, minutes=f"{seconds / 60:.1f}", remedy=_piece(remedy), end=end))
    return lines + [""]


def _budget(
    manifest: dict, results: dict, stale: list[str], aim: float | None, shares: dict | None, grid: str
) -> list[str]:
    """Where the grid's time went (manifest and results): by kind of run, by model, the stale runs' share, and against
    the grid's ``aim`` (minutes, :data:`TIME_AIMS`) by how much it is over and what is left; with the runs'
    ``shares`` of the machine's time (:func:`~papa.pipeline.plan.machine_shares`), the aim is measured on those."""
    kinds: dict[str, list[float]] = {}
    by_model: dict[str, dict[str, float]] = {}
    for run_id, entry in manifest.items():
        kind, *rest = name_parts(run_id)
        seconds = float(entry.get("seconds") or 0)
        kinds.setdefault(kind, []).append(seconds)
        if rest:
            by_model.setdefault(rest[0], {}).setdefault(kind, 0.0)
            by_model[rest[0]][kind] += seconds
    by_run = {probe_run_id(name): r for name, r in results.items()}  # a run's seeds share its features: count once
    hits = [hit for r in by_run.values() for hit in (r.get("feature_cache_hits") or {}).values()]
    extractions, reused = sum(1 for hit in hits if not hit), sum(1 for hit in hits if hit)
    faithful = sum(1 for r in by_run.values() if r["config"]["mode"] == "faithful")
    parts = {key: sum(r["timings"].get(key, 0.0) for r in results.values()) for key in ("features", "train", "eval")}
    probe_total = sum(kinds.get("probe", []))
    overhead = probe_total - sum(r["timings"]["total"] for r in results.values())
    total = sum(sum(v) for v in kinds.values())
    busy = None if shares is None else sum(shares[run_id] for run_id in manifest)
    lines = []
    if busy is not None and busy < total - 60:  # runs ran side by side: the machine's time is the measure
        lines += [_grid_piece("time-busy", grid, busy=f"{busy / 60:.1f}"), ""]
    lines += [_piece("time-sum", minutes=f"{total / 60:.1f}"), ""]
    lines += ["| runs | count | minutes |", "|---|---:|---:|"]
    lines += [f"| {kind} | {len(v)} | {sum(v) / 60:.1f} |" for kind, v in sorted(kinds.items())]
    stale_here = [run_id for run_id in stale if run_id in manifest]
    if stale_here:
        old = sum(float(manifest[run_id].get("seconds") or 0) for run_id in stale_here)
        n_stale, n_current = len(stale_here), len(manifest) - len(stale_here)
        stale_words = f"{n_stale} {plural(n_stale, 'stale run')}"
        current = f"{n_current} {plural(n_current, 'current run')}"
        minutes = dict(old=f"{old / 60:.1f}", rest=f"{(total - old) / 60:.1f}")
        lines += ["", _piece("time-stale", stale=stale_words, current=current, **minutes)]
    kind_order = [k for k in ("estimate", "rank", "select_lr", "probe") if any(k in row for row in by_model.values())]
    if by_model and kind_order:
        head = "| model | " + " | ".join(kind_order) + " | all |"
        lines += ["", "By model, in minutes:", "", head, "|---|" + "---:|" * (len(kind_order) + 1)]
        for model, row in sorted(by_model.items(), key=lambda item: -sum(item[1].values())):
            cells = [f"{row.get(kind, 0.0) / 60:.1f}" for kind in kind_order] + [f"{sum(row.values()) / 60:.1f}"]
            lines.append(f"| {myst_text(model)} | " + " | ".join(cells) + " |")
    minutes = {key: f"{seconds / 60:.1f}" for key, seconds in (*parts.items(), ("overhead", max(overhead, 0)))}
    faithful_words = _piece("faithful-one") if faithful == 1 else _piece("faithful", runs=faithful)
    counts = dict(probe_runs=count_probe_runs(results), probe_results=len(results), extractions=extractions)
    inside = _piece("inside-probe-runs", reused=reused, faithful=faithful_words, **counts, **minutes)
    lines += ["", inside, ""]
    spent = total if busy is None else min(busy, total)
    if aim is not None and spent / 60 > aim:
        lines += _over_aim(spent, aim, parts, kinds, overhead)
    elif aim is not None:
        lines += [_piece("within-aim", aim=f"{aim:.0f}"), ""]
    return lines


def point_front_page(text: str, name: str) -> str:
    """The front page with every ``runs/<grid>/<chapter>`` path (glued numbers, links) pointed at grid ``name``."""
    return re.sub(r"runs/[\w-]+/(results|controls|replacements)\b", rf"runs/{name}/\1", text)


def generated_pages(config: dict, stale: list[str], run_ids: list[str], root: Path = ROOT) -> dict[Path, str]:
    """Every page ``papa book build`` generates, by path, rendered in memory: ``_toc.yml`` (with the "Your models"
    part), the appendix and its group pages, the front page, the reproducibility and setup pages, and the constants
    figure's include."""
    ids = set(run_ids)
    present = [r for r in expand(config) if r.run_id in ids]
    rows = RI.appendix_rows(config, present, read_manifest(runs_dir(config)), root)
    pages = RI.run_index_pages(config, rows, run_ids, root)
    toc = root / "_toc.yml"
    pages[toc] = reports_part(pages[toc], root)  # the "Your models" part: every executed model report
    front = root / "book" / "index.md"
    pages[front] = point_front_page(front.read_text(encoding="utf-8"), config["name"])
    pages[root / "book" / "reproducibility.md"] = _reproducibility(config, stale, root, run_ids=run_ids)
    pages[root / "book" / "setup.md"] = setup_page(config)
    pages[root / "book" / "_generated" / "constants-figure.md"] = (
        "(fig-constants)=\n"
        "```{glue} fig-constants\n"
        f":doc: runs/{config['name']}/results.ipynb\n```\n\n"
        "**Figure: constant matrices.** "
        f"{{glue:text}}`runs/{config['name']}/results.ipynb::fig-constants-caption:s`\n"
    )
    return pages


def write_pages(config: dict, stale: list[str], run_ids: list[str], root: Path = ROOT) -> list[Path]:
    """Check the assets, render every page, then write them (each atomically) and stage the assets: a build that cannot
    finish leaves every committed page as it was. Returns the pages."""
    check_assets()
    pages = generated_pages(config, stale, run_ids, root)
    RI.write_pages(pages, root)
    stage_assets(root / "book" / "_static")
    report_dirty_runs(config, run_ids, root)
    return list(pages)


def report_dirty_runs(config: dict, run_ids: list[str], root: Path = ROOT, out=None) -> list[str]:
    """Name (on ``out``, default standard output) and return every run of the book whose outputs record a commit
    marked ``-dirty`` (computed in a working tree with uncommitted changes)."""
    present = set(run_ids)
    runs = [r for r in stamped_runs(root / "book" / "runs" / config["name"]) if r.run_id in present]
    dirty = sorted(dirty_runs(runs, root))
    if dirty:
        shown = ", ".join(dirty[:10]) + (f" and {len(dirty) - 10} more" if len(dirty) > 10 else "")
        what = f"warning: {len(dirty)} runs were computed in a working tree with uncommitted changes (-dirty)"
        print(f"{what}: {shown}", file=out or sys.stdout)
    return dirty
