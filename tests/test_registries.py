"""One registry per kind of thing: tasks (papa.core.tasks), replacement modes (papa.core.replacements) and run ids
(papa.core.names.parse_run_id), each read by the schema, the command line, run titles and estimates."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from papa.cli import main
from papa.core import fields
from papa.core.names import RunId, name_parts, parse_run_id, run_id
from papa.core.replacements import REPLACEMENT_TABLE
from papa.core.tasks import TASKS, get_task, metric_name, task_name
from papa.pipeline.executed import run_title, title_is_stale
from papa.probing.protocol import protocol_text

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "book" / "runs" / "default"


def test_the_task_registry_names_and_sizes_every_task():
    assert [task_name(t) for t in TASKS] == ["CoLA", "SST-2", "MRPC", "MNLI", "NER (CoNLL-2003)", "POS (CoNLL-2003)"]
    assert task_name("qqp") == "qqp"
    assert [get_task(t).source for t in TASKS] == ["GLUE"] * 4 + ["CoNLL-2003"] * 2
    assert [get_task(t).metric_display for t in ("cola", "mrpc", "ner", "pos")] == [
        "Matthews correlation",
        "mean of accuracy and F1",
        "entity-level micro F1",
        "accuracy",
    ]
    assert metric_name("f1") == "F1" and metric_name("some_metric") == "some metric"
    assert (get_task("mnli").train_size, get_task("mnli").dev_size, get_task("cola").dev_size) == (392702, 9815, 1043)
    assert fields.TASKS == tuple(TASKS)


def test_a_task_added_to_the_registry_alone_reaches_the_config_schema_and_run_titles(tmp_path):
    script = textwrap.dedent(
        """
        import dataclasses
        from papa.core import tasks
        toy = dataclasses.replace(tasks.TASKS["sst2"], name="toy", display="Toy task", train_size=7, dev_size=3)
        tasks.TASKS["toy"] = toy
        from papa.core.grid_schema import GridConfig
        from papa.core.schema import ProbeParams
        from papa.pipeline.executed import run_title
        import yaml
        config = yaml.safe_load(open("configs/smoke.yaml", encoding="utf-8")) | {"tasks": ["toy", "sst2"]}
        grid = GridConfig.model_validate(config)
        probe = ProbeParams.model_validate({"task": "toy", "out": "x.json", "seeds": [1]})
        print(grid.tasks, probe.task, run_title({"model": "minilm-l6", "task": "toy", "k": 0, "seeds": [1]}))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['toy', 'sst2'] toy Probe — minilm-l6 · Toy task · no head constant · seed 1"


def test_a_task_added_to_the_registry_alone_reaches_the_schema_fields_and_the_setup_page():
    # the schema's Task literal is built from the registry at import: patch the registry first, in a fresh interpreter
    script = textwrap.dedent(
        """
        import dataclasses
        from papa.core import tasks
        toy = dataclasses.replace(
            tasks.TASKS["mrpc"], name="toy", display="Toy task", source="Toy corpus", metric_words="toy agreement"
        )
        tasks.TASKS = {**tasks.TASKS, "toy": toy}
        import yaml
        from papa.core import fields
        from papa.core.grid_schema import GridConfig
        from papa.book.setup_page import setup_page
        config = yaml.safe_load(open("configs/smoke.yaml", encoding="utf-8")) | {"tasks": ["toy", "sst2"]}
        print(fields.TASKS[-1], GridConfig.model_validate(config).tasks)
        print(next(line for line in setup_page(config).splitlines() if line.startswith("| Toy task")))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "toy ['toy', 'sst2']",
        "| Toy task | one label per sentence or pair | toy agreement | Toy corpus |",
    ]


def test_a_replacement_mode_the_chapter_asks_nothing_about_stops_the_chapter(monkeypatch):
    from papa.book.chapters import replacements as chapter
    from papa.core import replacements as core
    from papa.core.errors import PapaError

    chapter.check_modes()  # the table's four modes: papa and the three alternatives the chapter asks about
    extra = dataclasses.replace(REPLACEMENT_TABLE["zero"], name="shuffle", words="replaced by shuffled attention")
    monkeypatch.setattr(core, "REPLACEMENT_TABLE", {**REPLACEMENT_TABLE, "shuffle": extra})
    with pytest.raises(PapaError, match="asks nothing about the replacement mode[(]s[)] shuffle[.] Add each to") as err:
        chapter.check_modes()
    assert "zero" not in err.value.problem and "papa.book.words.REPLACEMENT_QUESTIONS" in err.value.hint
    with pytest.raises(PapaError, match="mode[(]s[)] shuffle"):
        chapter.build(None)  # the build checks first, before it reads any run


def test_the_replacement_table_is_what_the_schema_the_command_line_and_the_protocol_read(capsys, tmp_path):
    assert fields.REPLACEMENTS == tuple(REPLACEMENT_TABLE) == ("papa", "uniform", "zero", "mean")
    assert main(["probe", "--task", "sst2", "--replacement", "half", "--out", str(tmp_path / "r.json")]) == 2
    error = capsys.readouterr().err
    assert "Unknown replacement 'half'" in error and "Use one of papa, uniform, zero, mean." in error
    assert not list(tmp_path.iterdir())
    config = {"lr": 1e-3, "batch_size": 64, "epochs": 3, "selection": "final", "mode": "cached"}
    config |= {"constant_heads": 36, "total_heads": 72}
    words = [protocol_text({"config": config | {"replacement": name}}) for name in (*REPLACEMENT_TABLE, "other")]
    assert [w.split("heads ", 1)[1].split(";")[0] for w in words] == [
        "constant",
        "replaced by uniform attention",
        "replaced by zero",
        "replaced by their mean outputs",
        "replaced",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("estimate__minilm-l6__sst2", RunId("estimate", "minilm-l6", "sst2")),
        ("select_lr__mpnet-base__cola", RunId("select_lr", "mpnet-base", "cola")),
        ("rank__minilm-l3__ner__random-2", RunId("rank", "minilm-l3", "ner", "random-2")),
        ("results", RunId("results")),
        ("probe__minilm-l6__cola__none__k0__cached", RunId("probe", "minilm-l6", "cola", "none", 0, "cached")),
        (
            "probe__minilm-l6__cola__gates__k36__cached__uniform__replace__s43",
            RunId("probe", "minilm-l6", "cola", "gates", 36, "cached", ("uniform", "replace"), 43),
        ),
        (
            "probe__m__pos__none__k0__faithful__embeddings__s{seed}.json",
            RunId("probe", "m", "pos", "none", 0, "faithful", ("embeddings",)),
        ),
    ],
)
def test_parse_run_id_reads_every_kind_of_run_id(text, expected):
    assert parse_run_id(text) == expected


def test_the_parts_after_the_mode_are_probe_input_replacement_and_study():
    floor = parse_run_id("probe__m__sst2__none__k0__cached__embeddings__fulldatafloor__s1")
    assert (floor.probe_input, floor.replacement, floor.study, floor.seed) == ("embeddings", "papa", "fulldatafloor", 1)
    mode = parse_run_id("probe__m__sst2__all__k72__cached__mean__replace")
    assert (mode.probe_input, mode.replacement, mode.study, mode.seed) == ("all", "mean", "replace", None)
    main = parse_run_id("probe__m__sst2__gates__k36__cached")
    assert (main.probe_input, main.replacement, main.study) == ("all", "papa", None)
    assert name_parts("minilm-l6__sst2__gates") == ("minilm-l6", "sst2", "gates")


@pytest.mark.skipif(not (RUNS / "stamps").is_dir(), reason="the default grid's committed runs")
def test_every_committed_run_id_and_result_key_parses_back_to_itself():
    stamps = [json.loads(p.read_text()) for p in sorted((RUNS / "stamps").glob("*.json"))]
    assert len(stamps) > 300
    for stamp in stamps:
        parsed = parse_run_id(stamp["run_id"])
        parts = [parsed.kind, parsed.model, parsed.task, parsed.method]
        parts += [f"k{parsed.k}", parsed.mode, *parsed.extra] if parsed.kind == "probe" else []
        assert run_id(*[p for p in parts if p]) == stamp["run_id"]
        params = (stamp.get("components") or {}).get("params") or {}
        if parsed.kind == "probe":
            keys = ("model", "task", "k", "mode")
            assert (parsed.model, parsed.task, parsed.k, parsed.mode) == tuple(params[key] for key in keys)
            assert (parsed.probe_input, parsed.replacement) == (params["probe_input"], params["replacement"])
        notebook = RUNS / f"{stamp['run_id']}.ipynb"
        if run_title(params, ROOT) is not None:
            assert not title_is_stale(notebook, params, ROOT), stamp["run_id"]  # every title as committed
    for path in sorted((RUNS / "artifacts" / "results").glob("*.json"))[:50]:
        assert parse_run_id(path.name).seed == json.loads(path.read_text())["config"]["seed"]
