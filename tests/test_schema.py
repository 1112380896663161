"""The typed schema (papa/core/fields.py, schema.py, grid_schema.py): every bad config value is one PapaError
naming its YAML path, before anything is written; slugs that are safe paths; the JSON Schema;
the offline plan of the paper grid.

Every config here is synthetic and tiny; nothing executes a notebook.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import yaml

from papa.cli import build_parser, main
from papa.core.errors import PapaError
from papa.core.grid_schema import GridConfig
from papa.core.names import MAX_RUN_ID, MAX_SLUG, run_id, slug
from papa.core.schema import RUN_PARAMS, EstimateParams, ProbeParams, RankParams
from papa.pipeline.plan import ROOT, expand, head_count, load_config

NAME = "schema-test-bad"  # a grid name no test ever runs: its folder must never appear
SMOKE = {
    "name": NAME,
    "models": ["minilm-l6"],
    "tasks": ["sst2"],
    "max_length": 32,
    "estimate": {"max_examples": 32},
    "rank": {"methods": ["deviation"]},
    "probe": {"fractions": [0, "1/2", 1], "seeds": [42], "modes": ["cached"]},
    "studies": [{"name": "a"}, {"name": "b", "lr": 1.0e-3}, {"name": "c", "epochs": 2}],
}


def _with(path: str, value) -> dict:
    """SMOKE with one value replaced; ``path`` like ``probe.epochs`` or ``studies.2.lr``."""
    config = json.loads(json.dumps(SMOKE))
    *parents, last = path.split(".")
    node = config
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return config


def _without(path: str) -> dict:
    config = json.loads(json.dumps(SMOKE))
    *parents, last = path.split(".")
    node = config
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    del node[last]
    return config


#: (config, the exact "<path> <problem>" the message holds, a hint substring). Issue 15's "Bad values" and
#: "Config values are silently reinterpreted", plus names that become paths.
BAD = [
    pytest.param(_with("probe.epochs", 0), "probe.epochs must be >= 1, got 0", "epochs >= 1", id="epochs-0"),
    pytest.param(
        _with("studies.2.epochs", 0), "studies[2].epochs must be >= 1, got 0", "epochs >= 1", id="study-epochs-0"
    ),
    pytest.param(
        _with("probe.lr", -1e-3), "probe.lr must be > 0, got -0.001", "positive learning rate", id="negative-lr"
    ),
    pytest.param(_with("rank.lr", 0), "rank.lr must be > 0, got 0", "positive learning rate", id="rank-lr-0"),
    pytest.param(
        _with("studies.2.lr", "abc"),
        "studies[2].lr: must be a number, got 'abc'",
        "positive learning rate",
        id="study-lr-abc",
    ),
    pytest.param(_with("probe.lr", "abc"), "probe.lr: must be a number, got 'abc'", "2.0e-5", id="lr-abc"),
    pytest.param(_with("max_length", 3), "max_length must be >= 8, got 3", "from 8 to 512", id="max-length-3"),
    pytest.param(
        _with("max_length", 100000), "max_length must be <= 512, got 100000", "from 8 to 512", id="max-length-100000"
    ),
    pytest.param(
        _with("max_length", "long"),
        "max_length must be a whole number, got 'long'",
        "from 8 to 512",
        id="max-length-text",
    ),
    pytest.param(
        _with("device", "gpu9"),
        "device: 'gpu9' is not a device",
        "Use auto, cpu, cuda, cuda:N or mps",
        id="device-gpu9",
    ),
    pytest.param(
        _with("probe.max_train_examples", 0),
        "probe.max_train_examples must be >= 1, got 0",
        "null for the whole training split",
        id="max-train-0",
    ),
    pytest.param(
        _with("probe.max_eval_examples", 0),
        "probe.max_eval_examples must be >= 1, got 0",
        "null for the whole evaluation split",
        id="max-eval-0-is-not-all",
    ),
    pytest.param(
        _with("rank.max_eval_examples", 0),
        "rank.max_eval_examples must be >= 1, got 0",
        "null for the whole",
        id="rank-max-eval-0",
    ),
    pytest.param(
        _with("studies.1.max_train_examples", 0),
        "studies[1].max_train_examples must be >= 1, got 0",
        "null for the whole",
        id="study-max-train-0",
    ),
    pytest.param(
        _with("estimate.max_examples", 0),
        "estimate.max_examples must be >= 1, got 0",
        "count >= 1",
        id="estimate-max-0",
    ),
    pytest.param(
        _with("probe.seeds", [1.5]), "probe.seeds[0] must be a whole number, got 1.5", "whole numbers", id="seeds-float"
    ),
    pytest.param(
        _with("studies.0.seeds", [42, 1.5]),
        "studies[0].seeds[1] must be a whole number, got 1.5",
        "whole numbers",
        id="study-seeds-float",
    ),
    pytest.param(
        _with("probe.seeds", [True]), "probe.seeds[0] must be a whole number, got True", "whole numbers", id="seed-bool"
    ),
    pytest.param(_with("probe.seeds", []), "probe.seeds must not be empty", "whole numbers", id="seeds-empty"),
    pytest.param(
        _with("probe.seeds", [42, 42]),
        "probe.seeds[1]: 42 is listed twice (items 0 and 1)",
        "List each value once",
        id="seeds-repeated",
    ),
    pytest.param(_with("models", []), "models must not be empty", "minilm-l6", id="models-empty"),
    pytest.param(_with("tasks", []), "tasks must not be empty", "every key and its type", id="tasks-empty"),
    pytest.param(
        _with("probe.fractions", []), "probe.fractions must not be empty", "0, 1/2, 7/8", id="fractions-empty"
    ),
    pytest.param(
        _with("probe.fractions", [0]),
        "probe.fractions: fractions [0] alone leave nothing to compare",
        "Add 1",
        id="fractions-only-0",
    ),
    pytest.param(
        _with("probe.fractions", [0, "1/2", 0.5]),
        "probe.fractions[2]: head fraction 0.5 is listed twice",
        "once",
        id="fractions-repeated",
    ),
    pytest.param(
        _with("probe.fractions", [0, "9/8"]),
        "probe.fractions[1]: head fraction '9/8' is outside [0, 1]",
        "Fractions run from 0",
        id="fraction-above-one",
    ),
    pytest.param(
        _with("probe.fractions", [0, "half"]),
        "probe.fractions[1]: head fraction 'half' is not a number",
        "0, 1/2, 7/8",
        id="fraction-text",
    ),
    pytest.param(
        _with("probe.fractions", 0.5), "probe.fractions must be a list, got 0.5", "0, 1/2", id="fractions-not-a-list"
    ),
    pytest.param(_with("rank.methods", []), "rank.methods must not be empty", "every key", id="methods-empty"),
    pytest.param(
        _with("relayout", "yes"), "relayout must be true or false, got 'yes'", "Write true or false", id="bool-yes"
    ),
    pytest.param(
        _with("relayout", "abc"), "relayout must be true or false, got 'abc'", "Write true or false", id="bool-abc"
    ),
    pytest.param(
        _with("floors", {"attention_free": "no"}),
        "floors.attention_free must be true or false, got 'no'",
        "Write true or false",
        id="bool-no",
    ),
    pytest.param(_with("relayout", 1), "relayout must be true or false, got 1", "Write true or false", id="bool-1"),
    # names
    pytest.param(
        _with("tasks", ["qqp"]),
        "Unknown task 'qqp' at tasks[0]",
        "Use one of cola, sst2, mrpc, mnli, ner, pos",
        id="unknown-task",
    ),
    pytest.param(
        _with("rank.methods", ["oracle"]),
        "rank.methods[0]: Unknown ranking method 'oracle'",
        "Use one of gates, deviation, random",
        id="unknown-method",
    ),
    pytest.param(
        _with("probe.modes", ["fast"]),
        "Unknown mode 'fast' at probe.modes[0]",
        "Use one of cached, faithful",
        id="unknown-mode",
    ),
    pytest.param(
        _with("probe.selection", "best"),
        "Unknown epoch selection 'best' at probe.selection",
        "Use one of final, heldout",
        id="unknown-selection",
    ),
    pytest.param(
        _with("studies.0.probe_input", "pixels"),
        "Unknown probe_input 'pixels' at studies[0].probe_input",
        "Use one of all, embeddings",
        id="unknown-probe-input",
    ),
    pytest.param(
        _with("models", ["no such model!"]),
        "models[0]: Unknown model 'no such model!'",
        "a local model folder or a hub id",
        id="unknown-model",
    ),
    pytest.param(_with("models", [3]), "models[0] must be text, got 3", "minilm-l6", id="model-not-text"),
    pytest.param(
        _with("models", ["minilm-l6", "minilm-l6"]),
        "models[1]: 'minilm-l6' is listed twice",
        "once",
        id="model-repeated",
    ),
    pytest.param(_with("name", "my grid"), "name: name 'my grid' is not a safe name", "a-z, 0-9", id="grid-name-space"),
    pytest.param(
        _with("name", "../escape"), "name: name '../escape' is not a safe name", "a-z, 0-9", id="grid-name-dots"
    ),
    pytest.param(_with("name", "x" * 300), "is not a safe name", "at most 40 characters", id="grid-name-300"),
    pytest.param(_without("studies.1.name"), "the key studies[1].name is missing", "Add it", id="study-without-name"),
    pytest.param(
        _with("studies.1.name", "a{b}"),
        "studies[1].name: name 'a{b}' is not a safe name",
        "a-z, 0-9",
        id="study-name-braces",
    ),
    pytest.param(
        _with("studies.1.name", "../../x"),
        "studies[1].name: name '../../x' is not a safe name",
        "a-z, 0-9",
        id="study-name-dots",
    ),
    pytest.param(
        _with("studies.1.name", "a__b"),
        "studies[1].name: name 'a__b' is not a safe name",
        "single _",
        id="study-name-separator",
    ),
    pytest.param(_with("studies.1.name", 7), "studies[1].name must be text, got 7", "a-z, 0-9", id="study-name-number"),
    pytest.param(
        _with("studies.2.name", "a"),
        "studies[2].name: the study name 'a' is used twice (studies 0 and 2)",
        "its own name",
        id="study-name-repeated",
    ),
    pytest.param(
        _with("studies.1.name", "main"),
        "studies[1].name: the study name 'main' is reserved",
        "Rename the study",
        id="study-name-main",
    ),
    pytest.param(
        _with("studies.1.name", "floor"),
        "studies[1].name: the study name 'floor' is reserved",
        "Rename the study",
        id="study-name-floor",
    ),
    pytest.param(
        _with("studies.1.tasks", ["cola"]),
        "studies[1].tasks[0]: 'cola' is not one of the grid's tasks",
        "Add it to the top-level tasks",
        id="study-task-outside",
    ),
    pytest.param(
        _with("studies.1.models", ["minilm-l3"]),
        "studies[1].models[0]: 'minilm-l3' is not one of the grid's models",
        "top-level models",
        id="study-model-outside",
    ),
    pytest.param(
        _with("studies.1.epochs", None),
        "studies[1].epochs must be a whole number, got None",
        "epochs >= 1",
        id="study-epochs-null",
    ),
    # keys
    pytest.param(
        _with("repeats", 3),
        "Unknown config key repeats",
        "Allowed at the top level: data_seed, description, device",
        id="unknown-top-key",
    ),
    pytest.param(
        _with("probe.folds", 3),
        "Unknown config key probe.folds",
        "Allowed here: dev_every_epoch, epochs, eval_chunk_examples, fractions",
        id="unknown-section-key",
    ),
    pytest.param(
        _with("studies.1.colour", "red"),
        "Unknown config key studies[1].colour",
        "Allowed here: chapter, dev_every_epoch, epochs",
        id="unknown-study-key",
    ),
    pytest.param(_without("probe"), "the key probe is missing", "Add it", id="missing-probe"),
    pytest.param(
        _with("studies", {"name": "a"}),
        "studies must be a list, got",
        "every key and its type",
        id="studies-not-a-list",
    ),
    pytest.param(
        _with("probe", [1]), "probe must be a mapping, got [1]", "every key and its type", id="section-not-a-mapping"
    ),
    pytest.param(
        ["models", "tasks"], "must be a mapping of keys to values", "See configs/default.yaml", id="not-a-mapping"
    ),
    pytest.param(
        "models: [minilm-l6\ntasks: sst2\n",
        "not valid YAML (while parsing a flow sequence)",
        "Fix the YAML syntax",
        id="invalid-yaml",
    ),
    pytest.param(
        f"name: {NAME}\nmodels: [minilm-l6]\ntasks: [sst2]\nprobe:\n  epochs: 2\n  lr: 1.0e-3\n  epochs: 30\n",
        "the key 'epochs' appears twice in one mapping (lines 5 and 7)",
        "YAML would silently use the last",
        id="duplicate-key",
    ),
    pytest.param(
        f"name: {NAME}\nmodels: [minilm-l6]\ntasks: [sst2]\nprobe: {{}}\ntasks: [cola]\n",
        "the key 'tasks' appears twice in one mapping (lines 3 and 5)",
        "Keep one of them",
        id="duplicate-top-key",
    ),
]


def _write(tmp_path: Path, config) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


@pytest.mark.parametrize(("config", "problem", "hint"), BAD)
def test_a_bad_value_is_one_error_naming_its_path(config, problem, hint, tmp_path):
    path = _write(tmp_path, config)
    with pytest.raises(PapaError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith("Config bad.yaml: "), message
    assert problem in message, f"{problem!r} not in {message!r}"
    assert hint in info.value.hint, f"{hint!r} not in {info.value.hint!r}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


@pytest.mark.parametrize("dry_run", [True, False])
@pytest.mark.parametrize(
    ("config", "problem"),
    [
        (_with("studies.2.lr", "abc"), "studies[2].lr: must be a number, got 'abc'"),
        (_with("probe.seeds", [1.5]), "probe.seeds[0] must be a whole number"),
        (_without("studies.1.name"), "the key studies[1].name is missing"),
        (_with("floors", {"attention_free": "abc"}), "floors.attention_free must be true or false"),
    ],
)
def test_the_cli_stops_before_writing_anything(config, problem, dry_run, tmp_path, capsys):
    path = _write(tmp_path, config)
    status = main(["grid", "run", str(path)] + (["--dry-run"] if dry_run else []))
    message = capsys.readouterr().err
    assert status == 2
    assert message.startswith("papa: error: Config bad.yaml: ") and problem in message, message
    assert "Traceback" not in message and message.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]
    assert not (ROOT / "book" / "runs" / NAME).exists()


def test_the_shipped_configs_validate_and_defaults_live_in_the_schema(tmp_path):
    for name in ("default", "smoke", "paper"):
        config = load_config(ROOT / "configs" / f"{name}.yaml")
        assert config["name"] == name and config["_path"] == f"configs/{name}.yaml"
    path = _write(tmp_path, {"name": "minimal", "models": ["minilm-l6"], "tasks": ["sst2"], "probe": {}})
    config = load_config(path)
    assert config["probe"]["fractions"] == [0, 1] and config["probe"]["epochs"] == 15 and config["probe"]["lr"] == 2e-5
    assert (
        config["rank"]["methods"] == ["gates"]
        and config["estimate"]["max_examples"] == 2000
        and config["device"] == "auto"
    )
    assert config["floors"] == {"attention_free": True} and config["studies"] == []
    # 2e-5 without a dot is text in YAML 1.1: read as the number it means; rank.max_eval_examples inherits probe's
    path.write_text(
        "name: m\nmodels: [minilm-l6]\ntasks: [sst2]\nprobe: {lr: 2e-5, max_eval_examples: 64}\nstudies: [{name: full, "
        "max_train_examples: null}]\n"
    )
    config = load_config(path)
    assert config["probe"]["lr"] == 2e-5 and config["rank"]["max_eval_examples"] == 64
    assert config["studies"] == [
        {"name": "full", "chapter": "controls", "max_train_examples": None}
    ]  # only what the study sets


def test_studies_inherit_the_probe_section_and_null_means_the_whole_split(tmp_path):
    config = dict(
        SMOKE,
        studies=[
            {"name": "full", "fractions": [0], "probe_input": "embeddings", "max_train_examples": None},
            {"name": "long", "epochs": 40},
        ],
    )
    config["probe"] = dict(config["probe"], max_train_examples=64, max_eval_examples=32)
    runs = {r.run_id: r for r in expand(load_config(_write(tmp_path, config)))}
    full = runs["probe__minilm-l6__sst2__none__k0__cached__embeddings__full"].params
    assert full["max_train_examples"] is None and full["max_eval_examples"] == 32 and full["epochs"] == 15
    long = runs["probe__minilm-l6__sst2__deviation__k36__cached__long"].params
    assert long["epochs"] == 40 and long["max_train_examples"] == 64


def test_every_run_carries_exactly_its_params_model():
    runs = expand(load_config(ROOT / "configs" / "default.yaml"))
    # 300 + 54 replacement probes + their chapter (355), then the robustness studies: 3 gate draws per pair (54 rank
    # runs), 3 random orderings on mpnet-base (18), their probes at half of the heads (36 draws, 18 random) and lrnext
    # on every pair (36, 2 of them before)
    assert len(runs) == 515 and {r.kind for r in runs} == set(RUN_PARAMS)
    # the replacement studies: 3 replacements × 6 tasks × (minilm-l6 at half and all heads, mpnet-base at all heads)
    replaced = [r for r in runs if r.kind == "probe" and r.params["replacement"] != "papa"]
    assert len(replaced) == 54 and {r.params["replacement"] for r in replaced} == {"uniform", "zero", "mean"}
    assert {(r.params["model"], r.params["k"]) for r in replaced} == {
        ("minilm-l6", 36),
        ("minilm-l6", 72),
        ("mpnet-base", 144),
    }
    assert all(
        r.params["constants"] and r.params["lr_file"] for r in replaced
    )  # the main grid's protocol: lr chosen at k = 0
    lrnext = next(
        r for r in runs if r.run_id == "probe__mpnet-base__cola__all__k144__cached__lrnext"
    ).params  # the all-heads drop at the runner-up lr of the choice, on every pair
    assert (lrnext["lr"], lrnext["lr_choice"], lrnext["epochs"], lrnext["selection"]) == (
        None,
        "runner-up",
        20,
        "heldout",
    )
    assert lrnext["lr_file"] == "book/runs/default/artifacts/lr/mpnet-base__cola.json" and lrnext["seeds"] == [42]
    mpnet = next(
        r for r in runs if r.run_id == "probe__mpnet-base__sst2__none__k0__cached"
    ).params  # the MiniLMs' sizes
    assert (mpnet["pool_examples"], mpnet["max_train_examples"], mpnet["heldout_examples"], mpnet["epochs"]) == (
        2600,
        2000,
        200,
        20,
    )
    config = load_config(ROOT / "configs" / "default.yaml")
    config["probe"]["per_model"] = {"mpnet-base": {"pool_examples": 1300, "max_train_examples": 1000, "epochs": 15}}
    config["studies"].append(
        {
            "name": "more",
            "models": ["mpnet-base"],
            "tasks": ["sst2"],
            "fractions": [0],
            "pool_examples": 2600,
            "max_train_examples": 2000,
        }
    )
    planned = {r.run_id: r.params for r in expand(config)}
    more, small = (
        planned["probe__mpnet-base__sst2__none__k0__cached__more"],
        planned["probe__mpnet-base__sst2__none__k0__cached"],
    )
    assert (more["pool_examples"], more["max_train_examples"], more["epochs"]) == (
        2600,
        2000,
        15,
    )  # the study's sizes over per_model's
    assert (small["pool_examples"], small["max_train_examples"], small["epochs"]) == (1300, 1000, 15)
    for run in runs:
        model = RUN_PARAMS[run.kind]
        assert set(run.params) == set(model.model_fields), run.run_id
        assert model.model_validate(run.params).model_dump() == run.params


def test_the_notebooks_declare_exactly_the_params_models_fields():
    from papa.pipeline.notebook import notebook_parameters
    from papa.pipeline.plan import NOTEBOOKS

    for kind, notebook in NOTEBOOKS.items():
        assert set(notebook_parameters(ROOT / notebook)) == set(RUN_PARAMS[kind].model_fields), notebook


def test_the_schemas_names_equal_the_probing_modules():
    from papa.core import fields as schema_fields
    from papa.core.tasks import TASKS
    from papa.probing import probe, ranking, run_training

    assert schema_fields.TASKS == tuple(TASKS)
    assert schema_fields.METHODS == tuple(ranking.METHODS)
    assert schema_fields.SELECTIONS == tuple(run_training.SELECTIONS)
    assert schema_fields.PROBE_INPUTS == tuple(probe.PROBE_INPUTS)
    assert schema_fields.MODES == tuple(run_training.MODES)


# --- slugs and run ids ------------------------------------------------------------------------------------------------

TRICKY = [
    "minilm-l6",
    "microsoft/deberta-base",
    "microsoft/deberta-large",
    "Microsoft/DeBERTa-base",
    "/home/user/models/My Model",
    "/home/user/models/My Model/",
    "../../etc/passwd",
    "..",
    ".",
    "a..b",
    "x__y",
    "x_y",
    "x-y",
    "{name}",
    "a" * 300,
    "a" * 299,
    "ünïcode/名前",
    "",
]


def test_slugs_are_safe_bounded_stable_and_distinct():
    slugs = [slug(name) for name in TRICKY]
    for name, made in zip(TRICKY, slugs):
        assert "/" not in made and "\\" not in made and ".." not in made and "__" not in made, (name, made)
        assert 0 < len(made) <= MAX_SLUG and made == made.lower() and not made.startswith((".", "-")), (name, made)
    assert len(set(slugs)) == len(TRICKY)  # distinct names never share a slug
    assert (
        slug("minilm-l6") == "minilm-l6" and slug("x_y") == "x_y" and slug("bert-base-uncased") == "bert-base-uncased"
    )  # safe names stay
    assert slug("microsoft/deberta-base") == "microsoft-deberta-base-e2419560"  # the same on every machine
    long_id = run_id("probe", "a" * 300, "sst2", "gates", "k72", "cached", "study")
    assert len(long_id) <= MAX_RUN_ID and long_id != run_id(
        "probe", "a" * 299, "sst2", "gates", "k72", "cached", "study"
    )
    assert run_id("probe", "microsoft/deberta-base", "sst2") == "probe__microsoft-deberta-base-e2419560__sst2"


def test_a_local_model_folder_is_sized_from_its_config_and_slugged(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = tmp_path / "My Models" / "tiny"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 4}))
    assert head_count(str(folder)) == (8, "config.json")
    assert head_count("minilm-l3") == (36, "embedded") and head_count("microsoft/deberta-large") == (384, "table")
    config = load_config(_write(tmp_path, dict(SMOKE, models=[str(folder)], studies=[])))
    runs = expand(config)
    assert runs.unsized == {}
    for run in runs:
        assert "/" not in run.run_id and all(".." not in o for o in run.outputs), run.run_id
    assert {r.params["k"] for r in runs if r.kind == "probe"} == {0, 4, 8}


# --- offline planning -------------------------------------------------------------------------------------------------


def test_the_paper_grid_plans_offline_with_run_ids_without_slashes(tmp_path, monkeypatch):
    from papa.pipeline.runner import run_grid

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))  # nothing cached: the table must do
    runs = expand(load_config(ROOT / "configs" / "paper.yaml"))
    assert runs.unsized == {}
    assert len([r for r in runs if r.kind == "probe"]) == 6 * 6 * (
        5 + 1
    )  # 6 models × 6 tasks × 5 fractions, + the floor at k = 0
    deberta = [r for r in runs if r.kind == "probe" and r.params["model"] == "microsoft/deberta-large"]
    assert {r.params["k"] for r in deberta} == {0, 192, 336, 360, 384}
    assert all("/" not in r.run_id for r in runs) and "estimate__microsoft-deberta-base-e2419560__sst2" in {
        r.run_id for r in runs
    }
    out = io.StringIO()
    assert run_grid(ROOT / "configs" / "paper.yaml", dry_run=True, out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("grid paper: 290 runs, 290 to execute")
    planned = [line.split("would run ", 1)[1] for line in lines[1:] if "would run " in line]
    assert len(planned) == 290 and all("/" not in line for line in planned)
    sizes = [line.strip() for line in lines[1:] if line.startswith("      ")]
    cache = next(line for line in lines if line.startswith("  feature cache ("))
    assert (
        float(cache.split("~")[1].split(" GB")[0]) > 1000
    )  # base and large models' whole splits: a warning unless a disk holds it
    assert len(sizes) == 290 and all(
        re.search(r"on 2 CPU cores(, (extracts|reuses) .*feature sets?)?$", line) for line in sizes
    )  # every run sized offline


def test_a_model_that_cannot_be_sized_is_named_not_a_crash(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    path = _write(tmp_path, dict(SMOKE, name="unsized", models=["minilm-l6", "someorg/unknown-model"], studies=[]))
    runs = expand(load_config(path))
    assert (
        list(runs.unsized) == ["someorg/unknown-model"]
        and "not in papa's table" in runs.unsized["someorg/unknown-model"]
    )
    assert not [r for r in runs if r.kind == "probe" and r.params["model"] == "someorg/unknown-model"]
    assert [r.run_id for r in runs if r.kind == "estimate"] == [
        "estimate__minilm-l6__sst2",
        "estimate__someorg-unknown-model-b3381248__sst2",
    ]
    status = main(["grid", "run", str(path), "--dry-run", "--only", "nothing-matches"])
    captured = capsys.readouterr()
    assert status == 0 and "cannot size someorg/unknown-model: not in papa's table" in captured.err
    status = main(["grid", "run", str(path)])
    captured = capsys.readouterr()
    assert status == 2 and "papa: error: Cannot count the heads of someorg/unknown-model offline" in captured.err
    assert not (ROOT / "book" / "runs" / "unsized").exists()


# --- JSON Schema and the command line ---------------------------------------------------------------------------------


def test_grid_schema_writes_the_committed_json_schema(tmp_path, capsys):
    import jsonschema

    out = tmp_path / "grid.schema.json"
    assert main(["grid", "schema", "--out", str(out)]) == 0
    schema = json.loads(out.read_text())
    assert schema == json.loads((ROOT / "configs" / "grid.schema.json").read_text()), (
        "run `papa grid schema --out configs/grid.schema.json`"
    )
    assert schema == GridConfig.model_json_schema() and schema["additionalProperties"] is False
    capsys.readouterr()
    assert main(["grid", "schema"]) == 0 and json.loads(capsys.readouterr().out) == schema
    for name in ("default", "smoke", "paper"):
        text = (ROOT / "configs" / f"{name}.yaml").read_text()
        assert text.startswith("# yaml-language-server: $schema=grid.schema.json\n")
        jsonschema.validate(yaml.safe_load(text), schema)
    with pytest.raises(jsonschema.ValidationError, match="colour"):
        jsonschema.validate(dict(SMOKE, colour="red"), schema)


#: Every flag name the README and earlier releases used (a public contract) still parses.
OLD_FLAGS = {
    "estimate": (
        "--model minilm-l6 --task sst2 --data-dir d --device cpu --split train --max-examples 8 --max-length 32 "
        "--no-relayout --batch-size 4 --quiet --out c"
    ),
    "rank": (
        "--model minilm-l6 --task sst2 --data-dir d --device cpu --constants c --method gates --epochs 2 --seed 1 "
        "--max-train-examples 8 --max-eval-examples 8 --out r"
    ),
    "probe": (
        "--model minilm-l6 --task sst2 --data-dir d --device cpu --constants c --ranking r --constant-heads 1/2 --mode "
        "faithful --epochs 2 --lr 0.001 --seed 3"
        " --probe-input embeddings --selection heldout --heldout-fraction 0.2 --max-train-examples 8 "
        "--max-eval-examples 8 --out p"
    ),
}


def test_cli_flags_come_from_the_params_models_and_old_flags_still_work():
    parser = build_parser()
    for command, flags in OLD_FLAGS.items():
        args = parser.parse_args([command, *flags.split()])
        assert args.model == "minilm-l6" and args.task == "sst2" and args.device == "cpu"
    args = parser.parse_args(["probe", *OLD_FLAGS["probe"].split()])
    assert (args.epochs, args.lr, args.seed, args.constant_heads, args.heldout_fraction, args.max_eval_examples) == (
        2,
        0.001,
        3,
        "1/2",
        0.2,
        8,
    )
    assert parser.parse_args(["estimate", *OLD_FLAGS["estimate"].split()]).relayout is False
    for command, model, skip in (
        ("estimate", EstimateParams, ()),
        ("rank", RankParams, ()),
        ("probe", ProbeParams, ("k", "seeds")),
    ):
        args = parser.parse_args(
            [command, "--task", "sst2", "--out", "x"] + (["--method", "random"] if command == "rank" else [])
        )
        for name, field in model.model_fields.items():
            if name not in skip and not field.is_required():
                assert getattr(args, name) == field.default, (command, name)  # the schema's default, not a copy
    args = parser.parse_args(
        [
            "rank",
            "--task",
            "sst2",
            "--method",
            "gates",
            "--out",
            "r",
            "--max-eval-examples",
            "null",
            "--lr",
            "0.01",
            "--data-seed",
            "3",
        ]
    )
    assert (args.max_eval_examples, args.lr, args.data_seed) == (None, 0.01, 3)


@pytest.mark.parametrize(
    ("argv", "problem", "hint"),
    [
        (["probe", "--task", "sst2", "--epochs", "0"], "--epochs must be >= 1, got 0", "epochs >= 1"),
        (["probe", "--task", "sst2", "--lr", "abc"], "--lr: must be a number, got 'abc'", "positive learning rate"),
        (["probe", "--task", "sst2", "--seed", "1.5"], "--seed must be a whole number, got '1.5'", "whole number"),
        (
            ["probe", "--task", "sst2", "--max-eval-examples", "0"],
            "--max-eval-examples must be >= 1, got 0",
            "null for the whole evaluation split",
        ),
        (["probe", "--task", "sst2", "--mode", "fast"], "Unknown mode 'fast' at --mode", "Use one of cached, faithful"),
        (
            ["rank", "--task", "sst2", "--method", "magic"],
            "--method: Unknown ranking method 'magic'",
            "Use one of gates, deviation, random",
        ),
        (["estimate", "--task", "qqp"], "Unknown task 'qqp' at --task", "Use one of cola, sst2"),
        (["estimate", "--task", "sst2", "--max-length", "4"], "--max-length must be >= 8, got 4", "from 8 to 512"),
    ],
)
def test_cli_values_are_checked_by_the_schema(argv, problem, hint, tmp_path, capsys):
    status = main(argv + ["--out", str(tmp_path / "out.json")])
    message = capsys.readouterr().err
    assert status == 2 and message.startswith("papa: error: ") and problem in message and hint in message, message
    assert list(tmp_path.iterdir()) == []


def test_grid_scale_out_flags_are_validated_and_passed_to_the_runner(monkeypatch, capsys):
    import papa.pipeline.runner as runner

    calls = []

    def run_grid(
        config_path,
        only=None,
        dry_run=False,
        out=None,
        replace=False,
        scheduler="sequential",
        gpus_per_run=0,
        threads_per_run=None,
        prune=False,
    ):
        calls.append(
            dict(
                only=only,
                dry_run=dry_run,
                replace=replace,
                scheduler=scheduler,
                gpus_per_run=gpus_per_run,
                threads_per_run=threads_per_run,
                prune=prune,
            )
        )
        return 0

    smoke = str(ROOT / "configs" / "smoke.yaml")
    monkeypatch.setattr(runner, "run_grid", run_grid)
    assert (
        main(
            [
                "grid",
                "run",
                smoke,
                "--scheduler",
                "local:2",
                "--gpus-per-run",
                "1",
                "--threads-per-run",
                "2",
                "--replace",
            ]
        )
        == 0
    )
    assert calls[-1] == dict(
        only=None, dry_run=False, replace=True, scheduler="local:2", gpus_per_run=1, threads_per_run=2, prune=False
    )
    assert main(["grid", "run", smoke, "--prune"]) == 0 and calls[-1]["prune"] is True
    for scheduler in ("sequential", "local:1", "tcp://10.0.0.1:8786", "slurm", "slurm:4"):
        assert (
            main(["grid", "run", smoke, "--dry-run", "--scheduler", scheduler]) == 0
            and calls[-1]["scheduler"] == scheduler
        )
    errors = []
    for bad in (
        ["--scheduler", "local:0"],
        ["--scheduler", "dask"],
        ["--scheduler", "tcp://host"],
        ["--gpus-per-run", "-1"],
        ["--threads-per-run", "0"],
    ):
        with pytest.raises(SystemExit) as exit_:
            main(["grid", "run", smoke, *bad])
        assert exit_.value.code == 2
        errors.append(capsys.readouterr().err)
    assert "--scheduler local:0: '0' is not a positive whole number" in errors[0]
    assert "Unknown --scheduler 'dask'" in errors[1] and "not a scheduler address" in errors[2]
    assert "must be at least 1, got 0" in errors[4]


# --- the robustness studies' keys: gate draws and their warm start, lr: runner-up -------------------------------------
@pytest.mark.parametrize(
    ("config", "problem", "hint"),
    [
        (_with("rank.seeds", []), "rank.seeds must not be empty", "whole numbers"),
        (_with("rank.seeds", [42, 42]), "rank.seeds", "once"),
        (_with("rank.warm_epochs", -1), "rank.warm_epochs must be >= 0, got -1", ""),
        (_with("rank.methods", ["gates-x"]), "rank.methods[0]: Unknown ranking method 'gates-x'", "gates-<seed>"),
        (_with("probe.lr", "second"), "probe.lr: must be a number, got 'second'", "learning rate"),
    ],
)
def test_bad_issue_54_keys_are_one_error_naming_their_path(config, problem, hint, tmp_path):
    with pytest.raises(PapaError) as info:
        load_config(_write(tmp_path, config))
    assert problem in str(info.value) and hint in (info.value.hint or "") + str(info.value), str(info.value)


def test_gate_draw_keys_and_lr_runner_up_load_and_default_to_the_old_grid(tmp_path):
    config = load_config(_write(tmp_path, SMOKE))
    rank = config["rank"]
    assert (rank["seeds"], rank["warm_epochs"], rank["warm_lr"], rank["warm_examples"]) == (None, 0, 1e-3, None)
    drawn = _with("rank.seeds", [1, 2, 3])
    drawn["rank"]["methods"] = ["gates", "gates-2"]
    protocol = {"selection": "heldout", "patience": 1, "pool_examples": 48, "max_train_examples": 32}
    study = {"name": "second", "fractions": [0, 1], "lr": "runner-up", "seeds": [42], "heldout_examples": 16}
    drawn["studies"] = [study | protocol]
    loaded = load_config(_write(tmp_path, drawn))
    assert loaded["rank"]["seeds"] == [1, 2, 3] and loaded["studies"][0]["lr"] == "runner-up"
    runs = {r.run_id: r for r in expand(loaded)}
    assert {rid for rid in runs if rid.startswith("rank__") and "gates" in rid} == {
        "rank__minilm-l6__sst2__gates",
        *(f"rank__minilm-l6__sst2__gates-{seed}" for seed in (1, 2, 3)),
    }
    second = runs["probe__minilm-l6__sst2__none__k0__cached__second"].params
    assert (second["lr"], second["lr_choice"]) == (None, "runner-up") and second["lr_file"].endswith("sst2.json")
    bad = json.loads(json.dumps(drawn))
    bad["studies"][0] |= {"selection": "final", "patience": None}
    with pytest.raises(PapaError, match="patience and lr: runner-up choose on held-out training examples"):
        load_config(_write(tmp_path, bad))


def test_a_probe_run_without_lr_needs_an_lr_file():
    with pytest.raises(Exception, match="lr is null and no lr_file gives one"):
        ProbeParams(task="sst2", lr=None, out="x.json")
    assert ProbeParams(task="sst2", lr=None, lr_file="lr.json", out="x.json").lr_choice == "chosen"
