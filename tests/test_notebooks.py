"""The notebooks as text: MyST Markdown sources with one strict parameters cell, chapter prose whose every
glued number is glued by the chapter's code, and executed run notebooks titled after their run."""

from __future__ import annotations

import ast
import copy
import json
import re
from pathlib import Path

import jupytext
import pytest
from papermill.translators import PythonTranslator

from papa.core.tasks import task_name
from papa.pipeline.executed import clean_executed, run_title, study_words
from papa.pipeline.notebook import read_source
from papa.pipeline.plan import NOTEBOOKS, ROOT

SOURCES = sorted((ROOT / "notebooks").iterdir())
CHAPTERS = ["notebooks/04_results.md", "notebooks/05_controls.md", "notebooks/08_replacements.md"]


def test_notebooks_folder_holds_only_text_notebooks():
    names = [
        "01_estimate_constants.md",
        "02_rank_heads.md",
        "03_probe.md",
        "04_results.md",
        "05_controls.md",
        "06_select_lr.md",
        "07_report.md",
    ]
    assert [p.name for p in SOURCES] == [*names, "08_replacements.md"]
    assert sorted(NOTEBOOKS.values()) == [
        f"notebooks/{p.name}" for p in SOURCES if p.name != "07_report.md"
    ]  # 07: a model report's chapter (`papa study`), not a grid run
    assert not (ROOT / "tools" / "make_notebooks.py").exists()


def test_jupytext_config_pairs_notebooks_as_myst_and_make_lab_starts_jupyterlab():
    config = (ROOT / "jupytext.toml").read_text(encoding="utf-8").splitlines()
    assert 'formats = "md:myst"' in config
    assert 'cell_metadata_filter = "tags,-all"' in config  # the tags survive a save from JupyterLab
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^lab: ", makefile, re.M) and "jupyter lab notebooks/" in makefile
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    book_extra = pyproject.split("book = [", 1)[1].split("]", 1)[0]
    dependencies = pyproject.split("\ndependencies = [", 1)[1].split("]", 1)[0]
    assert '"jupytext' in dependencies and '"jupyterlab' in book_extra  # the runner reads the text notebooks itself


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_each_notebook_parses_and_has_one_parameters_cell_of_annotated_literals(path):
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\njupytext:") and "format_name: myst" in text
    nb = jupytext.reads(text, fmt="md:myst")
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: {len(tagged)} cells tagged parameters"
    cell = tagged[0]
    assert cell.cell_type == "code"
    tree = ast.parse(cell.source)
    assert tree.body, f"{path.name}: empty parameters cell"
    for statement in tree.body:
        line = ast.get_source_segment(cell.source, statement)
        assert isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name), (
            f"{path.name}: not an annotated assignment: {line}"
        )
        assert statement.value is not None, f"{path.name}: no default: {line}"
        ast.literal_eval(statement.value)  # raises on anything but a literal
    # every parameter is documented on its line (papermill --help-notebook shows it)
    for line in cell.source.splitlines():
        assert "  # " in line, f"{path.name}: parameter without a comment: {line}"
    # papermill infers every parameter (it skips a line holding a second "=", e.g. in its comment, and then warns
    # "Passed unknown parameter" on every run that sets it)
    names = [parameter.name for parameter in PythonTranslator.inspect(cell)]
    assert names == [statement.target.id for statement in tree.body], f"{path.name}: papermill infers {names}"
    # read_source gives the runner the same notebook, with stable cell ids
    assert [c.source for c in read_source(path).cells] == [c.source for c in nb.cells]


def test_chapters_hide_their_code_and_run_notebooks_show_theirs():
    for path in CHAPTERS:
        for cell in jupytext.read(ROOT / path).cells:
            if cell.cell_type == "code":
                tags = cell.metadata.get("tags", [])
                assert "remove-cell" in tags or "remove-input" in tags, (
                    f"{path}: a code cell shown in the chapter:\n{cell.source[:200]}"
                )
    for path in (
        "notebooks/01_estimate_constants.md",
        "notebooks/02_rank_heads.md",
        "notebooks/03_probe.md",
        "notebooks/06_select_lr.md",
    ):
        tags = [t for c in jupytext.read(ROOT / path).cells for t in c.metadata.get("tags", [])]
        # the parameters cell, and the cells whose outputs `papa grid verify` compares (nbval); nothing is hidden
        assert tags[0] == "parameters" and set(tags[1:]) == {"nbval-check-output"}, (path, tags)


def _glue_roles(text: str) -> set[str]:
    """The keys of every ``{glue:text}`` role (without a ``path::`` prefix or ``:format``)."""
    return {m.split("::")[-1].split(":")[0] for m in re.findall(r"\{glue:text\}`([^`]+)`", text)}


def test_chapter_prose_lives_in_markdown_not_in_python_strings():
    for path in CHAPTERS:
        nb = jupytext.read(ROOT / path)
        prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        assert _glue_roles(prose), path
        assert "sentence" not in code, f"{path}: builds a sentence in code"


# -- titles of executed run notebooks ----------------------------------------------------------------
PROBE = {
    "model": "minilm-l6",
    "task": "sst2",
    "k": 36,
    "ranking": "book/runs/x/artifacts/rankings/minilm-l6__sst2__gates.json",
    "mode": "cached",
    "seeds": [42, 43, 44],
    "probe_input": "all",
    "out": "book/runs/x/artifacts/results/probe__minilm-l6__sst2__gates__k36__cached__s{seed}.json",
}


@pytest.mark.parametrize(
    ("params", "title"),
    [
        (PROBE, "Probe — minilm-l6 · SST-2 · gates · 36 of 72 heads constant · seeds 42, 43, 44"),
        (
            dict(PROBE, k=0, ranking="", seeds=[43], out="r/probe__minilm-l6__sst2__none__k0__cached__s{seed}.json"),
            "Probe — minilm-l6 · SST-2 · no head constant · seed 43",
        ),
        (
            dict(PROBE, k=72, ranking="", out="r/probe__minilm-l6__sst2__all__k72__cached__moredata8k__s{seed}.json"),
            "Probe — minilm-l6 · SST-2 · all 72 heads constant · seeds 42, 43, 44 · 8,000 training examples",
        ),
        (
            dict(
                PROBE,
                k=0,
                ranking="",
                probe_input="embeddings",
                task="ner",
                out="r/probe__minilm-l6__ner__none__k0__cached__embeddings__s{seed}.json",
            ),
            "Probe — minilm-l6 · NER (CoNLL-2003) · attention-free floor (embedding layer only) · seeds 42, 43, 44",
        ),
        (
            dict(
                PROBE,
                k=0,
                ranking="",
                mode="faithful",
                out="r/probe__minilm-l6__sst2__none__k0__faithful__faithful__s{seed}.json",
            ),
            "Probe — minilm-l6 · SST-2 · no head constant · faithful mode · seeds 42, 43, 44 · faithful execution (the "
            "encoder live, in train mode, every batch)",
        ),
        (
            {"model": "minilm-l3", "task": "mnli", "method": "deviation", "constants": "c", "seed": 42},
            "Ranking — minilm-l3 · MNLI (deviation)",
        ),
        (
            {"model": "minilm-l6", "task": "pos", "max_examples": 1000, "max_length": 64},
            "Constants — minilm-l6 · POS (CoNLL-2003) · 1,000 training examples",
        ),
        (
            {
                "model": "mpnet-base",
                "task": "cola",
                "lrs": [2e-5, 2e-4, 1e-3],
                "seeds": [0],
                "epochs": 15,
                "out": "lr.json",
            },
            "Learning rate — mpnet-base · CoLA · chosen among 2e-05, 0.0002, 0.001",
        ),
        ({"grid_config": "configs/smoke.yaml"}, None),
    ],
)
def test_run_title_names_the_run(params, title, tmp_path):
    assert run_title(params, tmp_path) == title


def test_run_title_reads_the_head_count_from_the_result_file(tmp_path):
    """A model that cannot be loaded (here: a made-up one) gets its head count from the run's result."""
    params = dict(PROBE, model="made-up", out="results/p__s{seed}.json")
    assert run_title(params, tmp_path) == "Probe — made-up · SST-2 · gates · 36 heads constant · seeds 42, 43, 44"
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "p__s42.json").write_text(json.dumps({"config": {"total_heads": 144}}))
    assert (
        run_title(params, tmp_path) == "Probe — made-up · SST-2 · gates · 36 of 144 heads constant · seeds 42, 43, 44"
    )


def test_display_names():
    assert [task_name(t) for t in ("cola", "sst2", "mrpc", "mnli", "ner", "pos", "other")] == [
        "CoLA",
        "SST-2",
        "MRPC",
        "MNLI",
        "NER (CoNLL-2003)",
        "POS (CoNLL-2003)",
        "other",
    ]
    assert study_words("cachedsmall") == "cached, small (the faithful check's counterpart)"
    assert study_words("moredata8k") == "8,000 training examples"
    assert study_words("unlisted") == "unlisted"


def _executed(params: dict, chapter: bool = False) -> dict:
    """A notebook as papermill leaves it: title, default parameters, injected parameters, code."""
    parameter_tags = ["parameters", "remove-cell"] if chapter else ["parameters"]
    return {
        "metadata": {
            "papermill": {
                "parameters": params,
                "start_time": "t",
                "input_path": "/home/x/in.ipynb",
                "output_path": "/home/x/out.ipynb",
            }
        },
        "cells": [
            {
                "cell_type": "markdown",
                "metadata": {},
                "source": "# Probing runs\n\nMakes the first $k$ heads constant.",
            },
            {
                "cell_type": "code",
                "metadata": {"tags": parameter_tags},
                "source": 'task: str = "sst2"  # task',
                "outputs": [],
            },
            {
                "cell_type": "code",
                "metadata": {"tags": ["injected-parameters"]},
                "source": '# Parameters\ntask = "mnli"',
                "outputs": [],
            },
            {
                "cell_type": "code",
                "metadata": {"execution": {"x": 1}},
                "source": "1 + 1",
                "outputs": [{"output_type": "stream", "name": "stderr", "text": "progress"}],
            },
        ],
    }


def test_clean_executed_titles_the_run_and_hides_the_default_parameters(tmp_path):
    nb = clean_executed(_executed(PROBE), tmp_path)
    assert (
        nb["cells"][0]["source"] == "# Probe — minilm-l6 · SST-2 · gates · 36 of 72 heads constant "
        "· seeds 42, 43, 44\n\nMakes the first $k$ heads constant."
    )
    assert nb["cells"][1]["metadata"]["tags"] == ["parameters", "remove-cell"]  # the defaults: hidden
    assert nb["cells"][2]["metadata"]["tags"] == ["injected-parameters"]  # what ran: the first code shown
    assert nb["cells"][3]["outputs"] == [] and "execution" not in nb["cells"][3]["metadata"]
    assert set(nb["metadata"]["papermill"]) == {"parameters"}
    again = clean_executed(copy.deepcopy(nb), tmp_path)
    assert again == nb  # cleaning twice changes nothing


def test_clean_executed_leaves_a_chapter_untitled_and_hides_both_parameter_cells(tmp_path):
    nb = clean_executed(_executed({"grid_config": "configs/smoke.yaml"}, chapter=True), tmp_path)
    assert nb["cells"][0]["source"].startswith("# Probing runs")
    assert nb["cells"][1]["metadata"]["tags"] == ["parameters", "remove-cell"]
    assert nb["cells"][2]["metadata"]["tags"] == ["injected-parameters", "remove-cell"]


# -- the executed chapters (the smoke grid's runs) ------------------------------------------------------
def _glued_names(notebook: Path) -> set[str]:
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    names = set()
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            scrapbook = output.get("metadata", {}).get("scrapbook", {})
            if "name" in scrapbook:
                names.add(scrapbook["name"])
    return names


@pytest.mark.data
@pytest.mark.parametrize("chapter", ["results", "controls", "replacements"])
def test_every_glued_number_of_the_prose_is_glued_by_the_executed_chapter(chapter):
    executed = ROOT / "book" / "runs" / "smoke" / f"{chapter}.ipynb"
    if not executed.is_file():
        pytest.fail("The smoke grid has not been run: `make test` runs it first (papa grid run configs/smoke.yaml).")
    source = jupytext.read(ROOT / NOTEBOOKS[chapter])
    prose = "\n".join(c.source for c in source.cells if c.cell_type == "markdown")
    wanted = _glue_roles(prose) | set(re.findall(r"\{glue:figure\} (\S+)", prose))
    missing = wanted - _glued_names(executed)
    assert not missing, f"{chapter}: glued in the prose but not by the code: {sorted(missing)}"
    if chapter in ("results", "replacements"):  # the front page glues from both, each key from its own chapter
        front = (ROOT / "book" / "index.md").read_text(encoding="utf-8")
        roles = re.findall(rf"\{{glue:text\}}`runs/default/{chapter}\.ipynb::([^`:]+)", front)
        wanted = set(roles) | (set(re.findall(r"```\{glue\} (\S+)", front)) if chapter == "results" else set())
        assert roles and not wanted - _glued_names(executed), (
            f"the front page needs {sorted(wanted - _glued_names(executed))}"
        )
