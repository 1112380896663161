"""The generated pages (sidebar, appendix index, setup prose, front page) and the "Rerun and extend" chapter,
whose every command is checked against the CLI and the Makefile, and whose papermill recipe is run."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from headless import dump_dom

from papa.book.assets import stage_itables
from papa.book.pages import _reproducibility, point_front_page
from papa.book.run_index import (
    GROUPS_DIR,
    _appendix,
    _group,
    _run_groups,
    _toc,
    appendix_rows,
    group_page,
    run_index_pages,
    write_pages,
)
from papa.book.setup_page import constant_share_words, lr_words, setup_page
from papa.book.words import and_list, count, duration, fraction_words
from papa.cli import build_parser
from papa.core.fields import CHAPTERS
from papa.core.io import atomic_write_json
from papa.pipeline.plan import ROOT, Run, grid_model, load_config

RERUN = ROOT / "book" / "rerun.md"


# -- words -------------------------------------------------------------------------------------------
def test_words():
    assert and_list(["a"]) == "a" and and_list(["a", "b"]) == "a and b" and and_list([42, 43, 44]) == "42, 43 and 44"
    assert and_list(["x", "y"]) == "x and y" and and_list([]) == ""
    assert [count(n, "seed") for n in (1, 3, 40)] == ["one seed", "three seeds", "40 seeds"]
    assert [fraction_words(f) for f in (0, "1/2", "7/8", 0.9375, 1)] == ["none", "half", "7/8", "15/16", "all"]
    assert [fraction_words(k / total) for k, total in ((36, 72), (63, 72), (135, 144), (12, 36))] == [
        "half",
        "7/8",
        "15/16",
        "1/3",
    ]
    assert [duration(s) for s in (None, 42.3, 754, 7300)] == ["", "42 s", "12.6 min", "2.0 h"]
    assert [lr_words(x) for x in (2e-5, 1e-3, 0.01, 2.0e-4)] == ["2e-5", "1e-3", "0.01", "2e-4"]
    assert constant_share_words([0, "1/2", 1]) == "none, half and all of the heads constant"
    assert constant_share_words([0]) == "no head constant"


# -- the sidebar -------------------------------------------------------------------------------------
RUN_IDS = [
    "estimate__minilm-l6__sst2",
    "estimate__minilm-l3__sst2",
    "rank__minilm-l6__sst2__gates",
    "select_lr__minilm-l6__sst2",
    "probe__minilm-l6__sst2__none__k0__cached",
    "probe__minilm-l3__sst2__gates__k18__cached",
    "probe__minilm-l6__sst2__all__k72__cached__moredata8k",
    "results",
    "controls",
]


def _entries(entries: list) -> list[dict]:
    """Every entry of a toc list and of its sections, depth first."""
    return [e for entry in entries for e in [entry, *_entries(entry.get("sections", []))]]


def test_toc_puts_the_findings_first_and_the_run_pages_in_collapsed_groups_under_the_appendix():
    toc = yaml.safe_load(_toc({"name": "g"}, RUN_IDS))
    assert toc["root"] == "book/index"
    parts = {part["caption"]: [c["file"] for c in part["chapters"]] for part in toc["parts"]}
    assert list(parts) == [
        "The question",
        "Findings",
        "Rerun and extend",
        "Appendix",
    ]  # the method's rules before the results
    assert parts["Findings"] == ["book/runs/g/results", "book/runs/g/controls"]
    assert parts["The question"] == ["book/introduction", "book/method", "book/setup"]
    assert parts["Rerun and extend"] == ["book/rerun", "book/scale-out", "book/reproducibility"]
    assert parts["Appendix"] == ["book/references", "book/appendix"]
    appendix = toc["parts"][-1]["chapters"][1]
    groups = {group["file"]: [s["file"] for s in group["sections"]] for group in appendix["sections"]}
    assert list(groups) == [
        "book/appendix/constants",
        "book/appendix/rankings",
        "book/appendix/learning-rates",
        "book/appendix/probes-minilm-l6",
        "book/appendix/probes-minilm-l3",
    ]
    assert groups["book/appendix/probes-minilm-l6"] == [
        "book/runs/g/probe__minilm-l6__sst2__none__k0__cached",
        "book/runs/g/probe__minilm-l6__sst2__all__k72__cached__moredata8k",
    ]
    assert groups["book/appendix/learning-rates"] == ["book/runs/g/select_lr__minilm-l6__sst2"]
    runs = [f for files in groups.values() for f in files]
    assert sorted(runs) == sorted(
        f"book/runs/g/{r}" for r in RUN_IDS if r not in ("results", "controls")
    )  # every run page once
    # kinds in a fixed order, models in their order of first appearance
    assert list(_run_groups(RUN_IDS[::-1])) == [
        "Constants",
        "Rankings",
        "Learning rates",
        "Probes — minilm-l6",
        "Probes — minilm-l3",
    ]
    assert list(_run_groups([RUN_IDS[5], RUN_IDS[0], RUN_IDS[4]])) == [
        "Constants",
        "Probes — minilm-l3",
        "Probes — minilm-l6",
    ]
    assert (
        group_page("Probes — microsoft-deberta-base-1a2b3c4d") == "book/appendix/probes-microsoft-deberta-base-1a2b3c4d"
    )


def test_the_default_grids_sidebar_has_about_twenty_entries_at_its_top_level():
    """The generated ``_toc.yml`` of the book's grid: every planned run page is reachable, each once, under the
    appendix; the top level (part captions and chapters) stays short."""
    from papa.pipeline.plan import expand

    config = load_config(ROOT / "configs" / "default.yaml")
    run_ids = [r.run_id for r in expand(config)]
    toc = yaml.safe_load(_toc(config, run_ids))
    top = len(toc["parts"]) + sum(len(part["chapters"]) for part in toc["parts"])
    assert top <= 20, top
    files = [e["file"] for part in toc["parts"] for e in _entries(part["chapters"])]
    assert len(files) == len(set(files))
    assert {f for f in files if f.startswith("book/runs/")} == {f"book/runs/default/{r}" for r in run_ids}
    appendix = toc["parts"][-1]["chapters"][-1]
    assert appendix["file"] == "book/appendix"
    under = {e["file"] for e in _entries(appendix["sections"]) if e["file"].startswith("book/runs/")}
    assert under == {f"book/runs/default/{r}" for r in run_ids if r not in CHAPTERS}
    assert all(len(group["sections"]) <= 200 for group in appendix["sections"])
    committed = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))  # what `papa book build` last wrote
    assert len(committed["parts"]) + sum(len(part["chapters"]) for part in committed["parts"]) <= 20
    captions = [
        part["caption"] for part in toc["parts"]
    ]  # (a "Your models" part of `papa study` chapters may join them)
    assert [part["caption"] for part in committed["parts"] if part["caption"] in captions] == captions


@pytest.mark.book
def test_the_built_sidebar_shows_the_chapters_and_keeps_the_run_pages_collapsed_under_the_appendix(tmp_path):
    """A strict Jupyter Book build of the generated ``_toc.yml`` (one-line pages): on a chapter, the sidebar's top
    level is the four parts' chapters; the groups and run pages sit in closed ``<details>`` under the appendix;
    on a run page, only its own group is open."""
    from papa.pipeline.plan import expand

    config = load_config(ROOT / "configs" / "smoke.yaml")
    run_ids = [r.run_id for r in expand(config)]
    (tmp_path / "_toc.yml").write_text(_toc(config, run_ids))
    (tmp_path / "_config.yml").write_text(
        'title: sidebar\nonly_build_toc_files: true\nexecute:\n  execute_notebooks: "off"\n'
    )
    toc = yaml.safe_load(_toc(config, run_ids))
    for name in [toc["root"], *(e["file"] for part in toc["parts"] for e in _entries(part["chapters"]))]:
        (tmp_path / f"{name}.md").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f"{name}.md").write_text(f"# Page {name.rsplit('/', 1)[-1]}\n\nText.\n")
    build = subprocess.run(
        [str(Path(sys.executable).parent / "jupyter-book"), "build", str(tmp_path), "-W", "-n", "--keep-going"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    html = tmp_path / "_build" / "html"

    def sidebar(page: str) -> str:
        text = (html / page).read_text(encoding="utf-8")
        start = text.index('class="caption-text">The question')
        return text[start : text.index("</nav>", start)]

    chapter = sidebar("book/introduction.html")
    assert re.findall(r'class="caption-text">([^<]+)<', chapter) == [
        "The question",
        "Findings",
        "Rerun and extend",
        "Appendix",
    ]
    assert chapter.count('class="toctree-l1') == 11  # the chapters (replacements among them), no run page
    appendix = chapter[chapter.index('href="appendix.html"') :]
    assert appendix.startswith('href="appendix.html">Page appendix</a><details><summary>')  # closed: no "open"
    assert chapter.count('class="toctree-l2 has-children"') == 4 and "<details open" not in chapter
    assert (
        chapter.count('class="toctree-l3') == len(run_ids) - 3
    )  # every run page, under its group (the three chapters are none)
    run_page = sidebar("book/runs/smoke/probe__minilm-l6__sst2__none__k0__cached.html")
    assert run_page.count("<details open") == 2  # the appendix and this run's group, nothing else


# -- the appendix ------------------------------------------------------------------------------------
def _probe(run_id: str, k: int, seeds: list[int], **extra) -> Run:
    params = (
        dict(
            model="minilm-l6",
            task="sst2",
            k=k,
            mode="cached",
            seeds=seeds,
            probe_input="all",
            out=f"results/{run_id}__s{{seed}}.json",
        )
        | extra
    )
    return Run(run_id, "probe", params)


def _result(root: Path, run_id: str, seed: int, score: float, converged: bool | None = True) -> None:
    (root / "results").mkdir(exist_ok=True)
    record = {"score": score, "config": {"total_heads": 72}, "convergence": {"converged": converged}}
    atomic_write_json(root / "results" / f"{run_id}__s{seed}.json", record)


def test_appendix_rows_describe_every_run(tmp_path):
    runs = [
        Run("estimate__minilm-l6__sst2", "estimate", dict(model="minilm-l6", task="sst2", max_examples=1000)),
        Run("rank__minilm-l6__sst2__gates", "rank", dict(model="minilm-l6", task="sst2", method="gates", seed=42)),
        Run(
            "select_lr__minilm-l6__sst2",
            "select_lr",
            dict(model="minilm-l6", task="sst2", lrs=[2e-5, 1e-3], seeds=[0], out="lr/minilm-l6__sst2.json"),
        ),
        _probe("probe__minilm-l6__sst2__gates__k36__cached", 36, [42, 43]),
        _probe("probe__minilm-l6__sst2__none__k0__cached__embeddings", 0, [42], probe_input="embeddings"),
        _probe("probe__minilm-l6__sst2__all__k72__cached__moredata8k", 72, [42]),
        Run("results", "results", {"grid_config": "configs/g.yaml"}),
    ]
    _result(tmp_path, "probe__minilm-l6__sst2__gates__k36__cached", 42, 0.75)
    _result(tmp_path, "probe__minilm-l6__sst2__gates__k36__cached", 43, 0.80, converged=False)  # not on the basis
    _result(tmp_path, "probe__minilm-l6__sst2__none__k0__cached__embeddings", 42, 0.6, converged=None)
    (tmp_path / "lr").mkdir()
    atomic_write_json(tmp_path / "lr" / "minilm-l6__sst2.json", {"model": "minilm-l6", "task": "sst2", "lr": 1e-3})
    manifest = {
        "estimate__minilm-l6__sst2": {"seconds": 26.4},
        "probe__minilm-l6__sst2__gates__k36__cached": {"seconds": 95.0},
    }
    rows = appendix_rows({"name": "g"}, runs, manifest, tmp_path)
    assert [r.pop("page") for r in rows] == [f"book/runs/g/{r.run_id}" for r in runs[:6]]  # the chapter has no row
    assert rows == [
        dict(
            kind="constants",
            model="minilm-l6",
            task="SST-2",
            ordering="",
            k="",
            setting="1,000 training examples",
            seeds="",
            score="",
            duration="26 s",
        ),
        dict(
            kind="ranking",
            model="minilm-l6",
            task="SST-2",
            ordering="gates",
            k="",
            setting="",
            seeds="42",
            score="",
            duration="",
        ),
        dict(
            kind="learning rate",
            model="minilm-l6",
            task="SST-2",
            ordering="",
            k="",
            setting="1e-3 chosen among 2e-5, 1e-3",
            seeds="0",
            score="",
            duration="",
        ),
        dict(
            kind="probe",
            model="minilm-l6",
            task="SST-2",
            ordering="gates",
            k="36 of 72",
            setting="main grid",
            seeds="42, 43",
            score="0.750",
            duration="1.6 min",
        ),
        dict(
            kind="probe",
            model="minilm-l6",
            task="SST-2",
            ordering="",
            k="",
            setting="attention-free floor",
            seeds="42",
            score="0.600 (none converged)",
            duration="",
        ),
        dict(
            kind="probe",
            model="minilm-l6",
            task="SST-2",
            ordering="",
            k="72",
            setting="8,000 training examples",
            seeds="42",
            score="",
            duration="",
        ),
    ]
    page = _appendix({"name": "g"}, appendix_rows({"name": "g"}, runs, manifest, tmp_path))
    table = [line for line in page.splitlines() if line.startswith("| ")]
    assert table[0] == "| Kind | Model | Task | Ordering | k | Setting | Seeds | Score | Duration | Page |"
    assert len(table) == 1 + 6 and all(line.count(" | ") == 9 for line in table)
    for run in runs[:6]:
        assert f"{{doc}}`open </book/runs/g/{run.run_id}>`" in page
    assert ":name: runs-index" in page and '<script src="../_static/papa-itables.js"></script>' in page
    assert (
        "By group (each group's page lists its runs, and so does the sidebar under it): {doc}`Constants "
        "</book/appendix/constants>` (1), " in page
    )
    assert "{doc}`Probes — minilm-l6 </book/appendix/probes-minilm-l6>` (3)." in page


def test_each_group_page_lists_its_runs_and_stale_group_pages_go(tmp_path):
    runs = [
        Run("estimate__minilm-l6__sst2", "estimate", dict(model="minilm-l6", task="sst2", max_examples=1000)),
        _probe("probe__minilm-l6__sst2__gates__k36__cached", 36, [42]),
        _probe("probe__minilm-l6__sst2__all__k72__cached", 72, [42]),
    ]
    rows = appendix_rows({"name": "g"}, runs, {}, tmp_path)
    page = _group({"name": "g"}, "Probes — minilm-l6", rows[1:])
    assert page.startswith(
        "# Probes — minilm-l6\n\nThe 2 probes of `minilm-l6` of `configs/g.yaml`, one executed notebook each"
    )
    assert ":class: papa-itable" in page and '<script src="../../_static/papa-itables.js"></script>' in page
    assert [line for line in page.splitlines() if line.startswith("| probe")] == [
        "| probe | minilm-l6 | SST-2 | gates | 36 | main grid | 42 |  |  | {doc}`open "
        "</book/runs/g/probe__minilm-l6__sst2__gates__k36__cached>` |",
        "| probe | minilm-l6 | SST-2 |  | 72 | main grid | 42 |  |  | {doc}`open "
        "</book/runs/g/probe__minilm-l6__sst2__all__k72__cached>` |",
    ]
    (tmp_path / "book" / "appendix").mkdir(parents=True)
    stale = tmp_path / "book" / "appendix" / "probes-gone-model.md"
    stale.write_text("# Probes — gone-model\n")
    written = [
        p
        for p in write_pages(run_index_pages({"name": "g"}, rows, [r.run_id for r in runs], tmp_path), tmp_path)
        if p.parent == tmp_path / GROUPS_DIR
    ]
    assert sorted(p.name for p in written) == ["constants.md", "probes-minilm-l6.md"] and not stale.exists()
    assert (
        (tmp_path / "book" / "appendix" / "constants.md")
        .read_text()
        .startswith("# Constants\n\nThe 1 constant-matrix estimates of `configs/g.yaml`")
    )
    toc = yaml.safe_load((tmp_path / "_toc.yml").read_text())
    assert [g["file"] for g in toc["parts"][-1]["chapters"][1]["sections"]] == [
        "book/appendix/constants",
        "book/appendix/probes-minilm-l6",
    ]
    assert (tmp_path / "book" / "appendix.md").read_text().startswith("# Appendix: every run")


def _probe_record(commit: str, device: str, total: float) -> dict:
    provenance = {
        "papa_version": "0.1.0",
        "git_commit": commit,
        "python": "3.11.7",
        "packages": {"torch": "2.13.0"},
        "device": device,
    }
    timings = {"total": total, "features": total / 2, "train": total / 4, "eval": total / 4}
    return {
        "score": 0.8,
        "config": {"total_heads": 72, "mode": "cached"},
        "provenance": provenance,
        "timings": timings,
        "feature_cache_hits": {"train": False, "eval": True},
    }


def test_reproducibility_page_words_its_environment_and_time(tmp_path):
    runs = tmp_path / "book" / "runs" / "g"
    atomic_write_json(runs / "artifacts" / "results" / "probe__a__s42.json", _probe_record("aaa", "cpu:x86_64x2", 60.0))
    record = _probe_record("bbb-dirty", "cpu:x86_64x2", 60.0)
    record["provenance"]["cpu_kernels"] = "AVX2"  # recorded since the kernels were; older runs lack it
    atomic_write_json(runs / "artifacts" / "results" / "probe__b__s42.json", record)
    atomic_write_json(
        runs / "artifacts" / "results" / "probe__b__s43.json", _probe_record("bbb-dirty", "cpu:x86_64x2", 60.0)
    )  # b's seeds share its features
    atomic_write_json(
        runs / "manifest.json",
        {"runs": {"probe__a": {"seconds": 90.0, "status": "ok"}, "probe__b": {"seconds": 150.0, "status": "ok"}}},
    )
    page = _reproducibility({"name": "g"}, ["probe__b"], root=tmp_path)
    assert (
        "(2 feature extractions — one per train/eval split, task and head set — and 2 reuses" in page
    )  # per run, not per seed
    assert "- papa 0.1.0, commits `aaa`, `bbb-dirty` (`-dirty`: the working tree had uncommitted changes;" in page
    assert "- devices: cpu:x86_64x2, cpu:x86_64x2 (AVX2 kernels)" in page
    assert (
        "- 2 probe runs (3 probe results, one per seed): 3.0 minutes inside them (features, training and evaluation, "
        "as the results files time them; the runs' wall times, start-up included, are summed below)" in page
    )
    assert "Inside the 2 probe runs (3 probe results): " in page and "probing run" not in page
    assert "The grid's runs took 4.0 minutes of wall time in all" in page and "| probe | 2 | 4.0 |" in page
    assert (
        "Of that sum, 2.5 minutes are the last recorded durations of the 1 stale run; the 1 current run took 1.5 "
        "minutes." in page
    )
    assert (
        "| model | probe | all |\n|---|---:|---:|\n| b | 2.5 | 2.5 |\n| a | 1.5 | 1.5 |" in page
    )  # the costliest model first
    assert (
        "1 run is stale (its code, data, parameters or environment changed since it ran) and is shown as it was: "
        "`probe__b`" in page
    )
    assert "| `probe__b` | stale | 150.0 |" in page and "| `probe__a` | ok | 90.0 |" in page
    assert "No benchmark table yet: run `make bench`." in page
    assert "this grid's aim" not in page  # only the book's own grids have a time aim


def test_the_machine_time_counts_runs_side_by_side_once_and_gaps_not_at_all(tmp_path):
    from papa.pipeline import plan

    def run(end: str, seconds: float) -> dict:
        return {"seconds": seconds, "finished": f"2026-12-05T{end}+00:00", "status": "ok"}

    # 10:00-10:10 and 10:05-10:15 side by side (15 min), then 12:00-12:01 after a gap
    entries = [run("10:10:00", 600), run("10:15:00", 600), run("12:01:00", 60)]
    shares = plan.machine_shares(dict(zip("abc", entries)))
    assert shares == {"a": 450.0, "b": 450.0, "c": 60.0}  # 5 min alone + 5 side by side (half each) + 5 alone
    assert plan.machine_shares({"a": entries[0], "d": {"seconds": 5.0}}) is None  # sealed before runs recorded it
    atomic_write_json(
        tmp_path / "book" / "runs" / "g" / "artifacts" / "results" / "probe__a__s42.json",
        _probe_record("a", "cpu:x86_64x1", 60.0),
    )
    manifest = {"probe__a": entries[0], "probe__b": entries[1], "probe__c": entries[2]}
    atomic_write_json(tmp_path / "book" / "runs" / "g" / "manifest.json", {"runs": manifest})
    page = _reproducibility({"name": "g"}, [], root=tmp_path)
    assert "The grid's runs kept the machine busy for 16.0 minutes: from each run's start to its end" in page
    assert "The grid's runs took 21.0 minutes of wall time in all" in page


def test_reproducibility_page_names_the_command_that_wrote_each_benchmark_table(tmp_path):
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    (bench / "results-cpu.md").write_text("# papa benchmarks — cpu\n\n- command: `python -m benchmarks.run --quick`\n")
    (bench / "results-cpu-probe-run.md").write_text(
        "# papa benchmarks — one run\n\n- command: `python -m benchmarks.probe_run --repeats 3`; the run: `x`\n"
    )
    (bench / "results-cpu-side-by-side.md").write_text(
        "# papa benchmarks — side by side\n\n- command: `.venv/bin/python -m benchmarks.side_by_side mpnet-base sst2`\n"
    )
    (bench / "results-old.md").write_text("# an older table without a command line\n")
    page = _reproducibility({"name": "g"}, [], root=tmp_path)
    assert "From `benchmarks/results-cpu-side-by-side.md` (written by `python -m benchmarks.side_by_side`):" in page
    assert "From `benchmarks/results-cpu.md` (written by `python -m benchmarks.run`):" in page
    assert "From `benchmarks/results-cpu-probe-run.md` (written by `python -m benchmarks.probe_run`):" in page
    assert "From `benchmarks/results-old.md` (written by `python -m benchmarks.run`):" in page
    assert "### papa benchmarks — one run" in page


def test_reproducibility_page_names_what_is_left_past_the_grids_time_aim(tmp_path, monkeypatch):
    """Past its aim, the page says by how much and lists what is left, costliest first, with what each would take."""
    from papa.book import pages

    runs = tmp_path / "book" / "runs" / "g"
    record = _probe_record("aaa", "cpu:x86_64x2", 60.0)
    record["timings"] = {"features": 30.0, "train": 90.0, "eval": 6.0, "total": 126.0}
    atomic_write_json(runs / "artifacts" / "results" / "probe__a__s42.json", record)
    manifest = {
        "probe__a": {"seconds": 150.0, "status": "ok"},
        "rank__a__sst2__gates": {"seconds": 60.0, "status": "ok"},
    }
    atomic_write_json(runs / "manifest.json", {"runs": manifest})
    monkeypatch.setitem(pages.TIME_AIMS, "g", 3.0)
    page = _reproducibility({"name": "g"}, [], root=tmp_path)
    assert "That is 0.5 minutes over this grid's aim of 3 minutes on two CPU cores." in page
    items = [line.split(",")[0] for line in page.splitlines() if line.startswith("- ") and " min: " in line]
    assert items == [
        "- probe training",
        "- rankings",
        "- encoder features",
        "- notebook start-up",
        "- evaluation",
    ]  # 1.5, 1.0, 0.5, 0.4, 0.1 min
    assert "- evaluation, 0.1 min: every seed's probe is already scored in one pass over the dev features." in page
    monkeypatch.setitem(pages.TIME_AIMS, "g", 10.0)
    assert "That is within this grid's aim of 10 minutes on two CPU cores." in _reproducibility(
        {"name": "g"}, [], root=tmp_path
    )


def test_itables_script_is_offline(tmp_path):
    script = stage_itables(tmp_path).read_text(encoding="utf-8")
    assert "table#runs-index" in script and "new ITable(" in script
    assert len(script) > 500_000  # the whole DataTables bundle, inline
    assert "https://cdn" not in script and "cdn.datatables" not in script


# -- the setup page ----------------------------------------------------------------------------------
@pytest.mark.parametrize("config", ["configs/default.yaml", "configs/smoke.yaml", "configs/paper.yaml"])
def test_setup_page_reads_as_prose(config):
    page = setup_page(load_config(ROOT / config))
    assert "(s)" not in page
    assert not re.search(r"\[[^\]]*['\d][^\]]*\]", page.split("## ", 1)[1].replace("[SEP]", "")), (
        "a Python list on the page"
    )
    assert "{'" not in page and "None" not in page
    for name in ("cachedsmall", "moredata8k"):
        if name in page:
            assert f"(study `{name}`" in page  # named only beside its words


#: What the smoke and paper pages must say, written by hand from each config file (read here with yaml alone).
SETUP_WORDS = {
    "configs/smoke.yaml": [
        "The book runs one encoder, installed from PyPI",
        "draws its own 32 training and 16 held-out examples from a pool of 48 training examples",
        "until its held-out score has not improved for one epoch, at most two epochs",
        "with one seed (42) at every head count; it is scored on at most 32 validation examples",
        "It runs with none, half and all of the heads constant, in cached mode",
        "among 2e-5 and 1e-3: the best mean held-out score of one seed (42) wins",
    ],
    "configs/paper.yaml": [
        "The book runs six encoders; the hub models among them need the Hugging Face hub",
        "Heads are ranked by gates. The gates are trained for 15 epochs "
        "at a learning rate of 2e-5 on 1,000,000 training examples.",
        "trains for 15 epochs, at a learning rate of 2e-5, with three seeds (42, 43 and 44) at every head count",
        "It runs with none, half, 7/8, 15/16 and all of the heads "
        "constant, in cached mode; the reported score is the final epoch's",
    ],
}
TASK_ROWS = {
    "sst2": "| SST-2 |",
    "cola": "| CoLA |",
    "mrpc": "| MRPC |",
    "mnli": "| MNLI |",
    "ner": "| NER (CoNLL-2003) |",
    "pos": "| POS (CoNLL-2003) |",
}


@pytest.mark.parametrize(
    ("probe", "study", "words"),
    [
        ({"heldout_examples": None, "heldout_fraction": 0.2}, {}, "chosen on 20% of the training subset held out"),
        ({"heldout_examples": None}, {"heldout_fraction": 0.25}, "chosen on 25% of the training subset held out"),
        ({"heldout_examples": 16}, {}, "chosen on 16 examples of the training subset held out"),
    ],
)
def test_setup_page_names_a_studys_effective_held_out_share(probe, study, words):
    """A study that selects on held-out examples without its own share holds out what the probe section says."""
    config = load_config(ROOT / "configs/smoke.yaml")
    final = {"selection": "final", "patience": None, "lr": 2e-5, "pool_examples": None}  # the main grid: no held-out
    config["probe"] = config["probe"] | final | probe
    config["studies"] = [{"name": "held", "chapter": "controls", "fractions": [0, 1], "selection": "heldout"} | study]
    section = setup_page(config).split("(study `held`", 1)[1].split("\n", 1)[0]
    assert words in section


@pytest.mark.parametrize("config", ["configs/smoke.yaml", "configs/paper.yaml"])
def test_setup_page_shows_its_configs_numbers(config):
    """Every size, seed and head count on the page is its config's: the words by hand, the numbers from the file."""
    raw = yaml.safe_load((ROOT / config).read_text(encoding="utf-8"))
    page = setup_page(load_config(ROOT / config))
    for words in SETUP_WORDS[config]:
        assert words in page
    assert f"$L$ = {raw['max_length']} tokens" in page
    assert (
        f"averages its attention over the first {raw['estimate']['max_examples']:,} training examples of each task"
        in page
    )
    assert f"Heads are ranked by {' and '.join(raw['rank']['methods'])}." in page
    models = page.split("## Models", 1)[1].split("##", 1)[0]
    assert re.findall(r"^- `([^`]+)`", models, re.M) == raw["models"]  # one bullet per model, in the config's order
    table = page.split("## Tasks and metrics", 1)[1].split("\n\n", 2)[1]
    assert [line.split(" | ")[0] + " |" for line in table.splitlines()[2:]] == [
        TASK_ROWS[task] for task in raw["tasks"]
    ]


def test_setup_page_words_for_the_default_grid():
    page = setup_page(load_config(ROOT / "configs/default.yaml"))
    assert "The book runs three encoders, all installed from PyPI" in page
    assert "with three seeds (42, 43 and 44) at every head count" in page
    assert "It runs with none, half, 7/8, 15/16 and all of the heads constant, in cached mode" in page
    assert "draws its own 2,000 training and 200 held-out examples from a pool of 2,600 training examples" in page
    assert "**The budget:**" not in page and "per_model" not in page  # every model probes the same sizes
    assert (
        "at the learning rate chosen for its model and task" in page
        and "The validation split never chooses anything." in page
    )
    assert (
        "- **the paper's literal setting (learning rate 2e-5, 15 epochs, final epoch)** (study `literal`, read in the "
        "controls chapter)" in page
    )
    assert "- **cached, small (the faithful check's counterpart)** (study `cachedsmall`" in page
    assert "| NER (CoNLL-2003) | one label per word | entity-level micro F1 | CoNLL-2003 |" in page


# -- the front page ----------------------------------------------------------------------------------
def test_front_page_is_an_abstract_with_links():
    page = (ROOT / "book" / "index.md").read_text(encoding="utf-8")
    assert "https://arxiv.org/abs/2211.03495" in page and "https://github.com/schwartz-lab-NLP/papa" in page
    assert "CoNLL-2003" in page
    glued = set(re.findall(r"\{glue:text\}`[^`]*::(\w+):s`", page))
    assert {
        "claim1_number",
        "claim2_number",
        "claim2b_number",
        "claim1_verdict",
        "claim2_verdict",
        "claim2b_verdict",
        "claim3_verdict",
        "claim1_reason",
        "random_summary",
    } <= glued
    for chapter in ("introduction", "method", "setup", "reproducibility", "rerun", "appendix"):
        assert f"{{doc}}`{chapter}`" in page
    pointed = point_front_page(page, "smoke")
    assert "runs/default/" not in pointed and pointed.count("runs/smoke/") == page.count("runs/default/") > 10
    assert point_front_page(pointed, "smoke") == pointed


# -- the "Rerun and extend" chapter --------------------------------------------------------------------
def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", RERUN.read_text(encoding="utf-8"), re.S)


def _commands() -> list[list[str]]:
    """Every command of the chapter's bash blocks, environment assignments (``HF_HUB_OFFLINE=0``) dropped."""
    commands = []
    for block in _blocks("bash"):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                words = words[1:]
            if words:
                commands.append(words)
    return commands


def test_rerun_chapter_is_in_the_toc_and_every_command_exists():
    assert "      - file: book/rerun" in _toc({"name": "g"}, [])
    commands = _commands()
    programs = {c[0] for c in commands}
    assert programs == {"make", "papa", "mkdir", "jupytext", "papermill"}, programs
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([\w-]+):", makefile, re.M))
    made = [c for c in commands if c[0] == "make"]
    assert {c[1] for c in made} == {"book", "test", "book-as-is", "lab"}
    for command in made:
        assert command[1] in targets, command
        for variable in command[2:]:
            assert re.fullmatch(r"[A-Z]+=\w+", variable) and f"{variable.split('=')[0]} ?=" in makefile, command
    parser = build_parser()
    cli = [c for c in commands if c[0] == "papa"]
    assert len(cli) == 13 and sum(c[1] == "study" for c in cli) == 3  # the study section's three
    for command in cli:
        args = parser.parse_args(command[1:])  # an unknown command or flag exits with status 2
        assert callable(args.func)
    assert any(parser.parse_args(c[1:]).dry_run for c in cli if c[1] == "grid" and "--dry-run" in c)
    assert any(parser.parse_args(c[1:]).only == "estimate__minilm-l6__sst2" for c in cli if "--only" in c)
    assert any(parser.parse_args(c[1:]).prune for c in cli if c[1] == "grid" and "--prune" in c)
    assert any(parser.parse_args(c[1:]).dry_run for c in cli if c[1] == "study" and "--dry-run" in c)


def test_rerun_chapter_grid_yaml_is_a_valid_config(tmp_path):
    (yaml_text,) = _blocks("yaml")
    path = tmp_path / "mine.yaml"
    path.write_text(yaml_text, encoding="utf-8")
    config = load_config(path)
    assert config["name"] == "mine" and config["rank"]["methods"] == ["gates", "random"]
    assert config["studies"][0]["max_train_examples"] == 1200
    assert "configs/mine.yaml" in RERUN.read_text(encoding="utf-8")


def test_rerun_chapter_only_selects_a_run_of_the_smoke_grid():
    from papa.pipeline.plan import expand

    only = next(c[c.index("--only") + 1] for c in _commands() if "--only" in c)
    config = next(c[3] for c in _commands() if "--only" in c)
    assert [r.run_id for r in expand(load_config(ROOT / config)) if only in r.run_id] == [only]


@pytest.mark.data
@pytest.mark.slow
def test_rerun_chapter_papermill_recipe_runs(tmp_path):
    """The chapter's jupytext + papermill lines, run as written from the repository root."""
    import papa

    recipe = [c for c in _commands() if c[0] in ("mkdir", "jupytext", "papermill")]
    assert [c[0] for c in recipe] == ["mkdir", "jupytext", "papermill"]
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    outputs = [
        ROOT / p
        for p in (
            "book/runs/scratch/estimate.ipynb",
            "book/runs/scratch/estimate.out.ipynb",
            "book/runs/scratch/constants.safetensors",
        )
    ]
    for path in outputs:
        path.unlink(missing_ok=True)
    try:
        for command in recipe:
            program = str(bin_dir / command[0]) if (bin_dir / command[0]).is_file() else command[0]
            done = subprocess.run(
                [program, *command[1:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
            )
            assert done.returncode == 0, done.stderr[-3000:]
        executed = json.loads(outputs[1].read_text(encoding="utf-8"))
        assert executed["metadata"]["papermill"]["parameters"] == {
            "task": "sst2",
            "max_examples": 32,
            "max_length": 32,
            "out": "book/runs/scratch/constants.safetensors",
        }
        constant_set = papa.load_constants(outputs[2])
        assert list(constant_set.constants.shape) == [6, 12, 32, 32]
        assert constant_set.meta["num_examples"] == 32
    finally:
        for path in outputs:
            path.unlink(missing_ok=True)


@pytest.mark.book
def test_itables_script_makes_the_index_sortable_and_searchable_offline_in_chromium(tmp_path):
    """The staged script, loaded from ``file://`` with the network off, turns a plain table into a
    DataTable with a search box and sortable columns (no book build needed)."""
    (tmp_path / "_static").mkdir()
    stage_itables(tmp_path / "_static")
    (tmp_path / "book").mkdir()
    page = tmp_path / "book" / "appendix.html"
    rows = "".join(f"<tr><td>probe</td><td>{score:.3f}</td></tr>" for score in (0.5, 0.75, 0.25))
    page.write_text(
        "<html><head></head><body><table "
        f'id="runs-index"><thead><tr><th>Kind</th><th>Score</th></tr></thead><tbody>{rows}</tbody></table>'
        '<script src="../_static/papa-itables.js"></script></body></html>',
        encoding="utf-8",
    )
    dom = dump_dom(page.as_uri(), tmp_path / "profile", "--virtual-time-budget=10000")
    assert re.search(r'<table(?=[^>]*id="runs-index")(?=[^>]*class="[^"]*\bdataTable\b)[^>]*>', dom), dom[-2000:]
    assert 'aria-controls="runs-index"' in dom  # the search box
    assert "Showing 1 to 3 of 3 entries" in dom
    assert dom.count("dt-orderable-asc") >= 2  # both columns sort


def test_what_differs_from_the_paper_lists_only_what_differs_for_that_config():
    """The paper's own grid (full sets, 15 gate epochs at 2e-5 over all examples, the paper's encoders) differs only in
    execution, seeds and token types; the default grid in every respect, its gate settings read from its file."""
    section = lambda name: setup_page(load_config(ROOT / "configs" / f"{name}.yaml")).split(
        "## What differs from the paper", 1
    )[1]  # noqa: E731
    paper, default = section("paper"), section("default")
    assert re.findall(r"^- \*\*([^*]+)\*\*", paper, re.MULTILINE) == ["Execution", "Seeds", "Token types"]
    assert re.findall(r"^- \*\*([^*]+)\*\*", default, re.MULTILINE) == [
        "Models",
        "Sizes",
        "Gates",
        "Execution",
        "Seeds",
        "Token types",
    ]
    assert (
        "Gates**: trained for two epochs at lr 0.01 on 300 training examples" in default
    )  # rank: epochs 2, lr 1e-2, 300
    assert "three sentence-embedding models" in default and "on three models here" in default


def _stamp(folder: Path, run_id: str, modules: dict[str, str]) -> None:
    from papa.core.io import canonical_json, sha256_bytes
    from papa.pipeline.stamps import stamp_path

    stamp = {"run_id": run_id, "outputs": {}, "components": {"papa": modules}}
    path = stamp_path(folder, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    sha = sha256_bytes(canonical_json(stamp).encode("utf-8"))
    path.write_text(json.dumps(stamp | {"sha256": sha}), encoding="utf-8")


def test_the_code_state_line_counts_fingerprints_per_module_not_commits(tmp_path):
    from papa.book.pages import _code_states

    _stamp(tmp_path, "estimate__m__t", {"papa.core.a": "1", "papa.core.b": "2"})
    _stamp(tmp_path, "probe__m__t", {"papa.core.a": "1", "papa.probing.c": "3"})
    one = _code_states(tmp_path, ["estimate__m__t", "probe__m__t", "no_stamp"])
    assert "each of the 3 papa modules they import has one fingerprint" in one
    _stamp(tmp_path, "probe__m__t", {"papa.core.a": "9", "papa.probing.c": "3"})
    many = _code_states(tmp_path, ["estimate__m__t", "probe__m__t"])
    assert "1 of the 3 papa modules they import have more than one fingerprint across the runs (`papa.core.a`)" in many


def test_a_chapters_studies_are_timed_beside_the_grids_sum_against_their_own_aim(tmp_path, monkeypatch):
    """The runs of studies with an aim of their own (the replacements chapter's) leave the grid's sum, which is what
    the grid's aim is about, and are timed on a line of their own; the chapter glues the same minutes."""
    from papa.book import pages
    from papa.book.chapters.replacements import study_cost
    from papa.pipeline import plan

    runs = tmp_path / "book" / "runs" / "g"
    manifest = {
        "probe__a__none__k0__cached": {"seconds": 120.0, "status": "ok"},
        "probe__a__all__k2__cached__zero__swap": {"seconds": 30.0, "status": "ok"},
        "probe__a__all__k2__cached__mean__swapbase": {"seconds": 48.0, "status": "ok"},
        "probe__a__all__k2__cached__swapless": {"seconds": 600.0, "status": "ok"},
    }
    atomic_write_json(runs / "manifest.json", {"runs": manifest})
    studies = [
        {"name": "swap", "chapter": "replacements"},
        {"name": "swapbase", "chapter": "replacements"},
        {"name": "swapless", "chapter": "controls"},
    ]
    config = {"name": "g", "studies": studies}
    monkeypatch.setitem(pages.TIME_AIMS, "g", 20.0)
    verified_among = []
    monkeypatch.setattr(pages, "_verified_section", lambda c, d, run_ids, root: verified_among.append(run_ids) or [])
    assert _reproducibility(config, [], root=tmp_path, run_ids=list(manifest))
    assert verified_among == [list(manifest)]  # the book's runs, not the last study's (a loop once rebound the name)
    page = _reproducibility(config, [], root=tmp_path)
    assert "The grid's runs took 12.0 minutes of wall time in all" in page  # 120 + 600 s: the controls study counts
    basis = (
        "## Where the time goes\n\nThe sums of this section count the grid's runs less the 2 runs of the studies "
        "the replacements chapter reports: those are timed apart, at its end.\n\nThe grid's runs took 12.0 minutes"
    )  # the basis is named before the first sum
    assert basis in page
    assert (
        "The 2 runs of the studies the replacements chapter reports took 1.3 minutes beside them, against their own "
        "aim of 60 minutes on two CPU cores." in page
    )
    assert plan.chapter_study_minutes(config, manifest, "replacements") == (2, (30.0 + 48.0) / 60)
    assert plan.chapter_study_minutes(config, manifest, "results") == (0, 0.0)
    monkeypatch.setattr(plan, "ROOT", tmp_path)
    grid = grid_model(config | {"models": ["minilm-l6"], "tasks": ["sst2"], "probe": {}})
    assert study_cost(grid) == {
        "replacement_study_runs": "2",
        "replacement_study_minutes": "1.3",
        "replacement_study_aim": "60",
    }


def test_a_grids_own_observations_follow_their_piece_on_that_grids_page_only(tmp_path):
    """``<piece>-grid-<grid>`` pieces (what was observed of one grid and no run records) follow their piece on that
    grid's page, and on no other grid's."""
    from papa.book.templates import pieces

    notes = {name: text for name, text in pieces("reproducibility").items() if "-grid-default" in name}
    assert set(notes) == {"machines-vary-grid-default", "time-busy-grid-default"}
    runs = {"probe__a": ("10:10:00", 600), "probe__b": ("10:15:00", 600)}  # side by side: the machine-time sentence
    vary = pieces("reproducibility")["machines-vary"]
    for grid in ("default", "g"):
        folder = tmp_path / grid / "book" / "runs" / grid
        atomic_write_json(folder / "artifacts" / "results" / "probe__a__s42.json", _probe_record("a", "cpu:x", 60.0))
        manifest = {run_id: {"seconds": s, "finished": f"2026-12-05T{end}+00:00"} for run_id, (end, s) in runs.items()}
        atomic_write_json(folder / "manifest.json", {"runs": manifest})
        page = _reproducibility({"name": grid}, [], root=tmp_path / grid)
        busy = "The grid's runs kept the machine busy for 15.0 minutes: from each run's start to its end"
        assert vary in page and busy in page
        for piece, note in notes.items():
            assert (note in page) == (grid == "default"), (grid, piece)
        if grid == "default":
            assert f"{vary} {notes['machines-vary-grid-default']}\n" in page
