"""The default grid's probe protocol in the plan: lr chosen once per (model, task) by a
``select_lr`` run, training pools, early stopping, per-task dev sizes, seeded random orderings,
settings one model overrides; and the time estimate that shares feature sets between runs.

Synthetic configs; nothing executes a notebook.
"""

from __future__ import annotations

import json

import pytest

from papa.core.errors import PapaError
from papa.pipeline.estimate import estimate_seconds, run_cost
from papa.pipeline.notebook import parameters
from papa.pipeline.plan import Run, expand, load_config
from papa.pipeline.stamps import Manifest

PROTOCOL = {
    "name": "protocol-test",
    "models": ["minilm-l6", "minilm-l3"],
    "tasks": ["sst2", "ner"],
    "max_length": 32,
    "rank": {"methods": ["gates"]},
    "lr_selection": {"lrs": [2.0e-5, 1.0e-3], "seeds": [42], "epochs": 4},
    "probe": {
        "fractions": [0, "1/2", 1],
        "seeds": [42, 43, 44],
        "lr": "select",
        "epochs": 20,
        "patience": 3,
        "selection": "heldout",
        "pool_examples": 2600,
        "max_train_examples": 2000,
        "heldout_examples": 200,
        "max_eval_examples": {"ner": 1000},
        "dev_every_epoch": False,
        "per_model": {"minilm-l3": {"pool_examples": 1300, "max_train_examples": 1000, "epochs": 15}},
    },
    "studies": [
        {
            "name": "random",
            "chapter": "results",
            "models": ["minilm-l6"],
            "fractions": ["1/2"],
            "methods": ["random-1", "random-2"],
            "seeds": [42],
        },
        {
            "name": "literal",
            "fractions": [0, 1],
            "seeds": [42],
            "lr": 2.0e-5,
            "epochs": 15,
            "patience": None,
            "selection": "final",
        },
    ],
}


def _config(tmp_path, config: dict) -> dict:
    path = tmp_path / "grid.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    return load_config(path)


def _runs(tmp_path, config: dict = PROTOCOL) -> dict[str, Run]:
    return {run.run_id: run for run in expand(_config(tmp_path, config))}


def test_lr_select_adds_one_select_lr_run_per_model_and_task_that_the_probes_read(tmp_path):
    runs = _runs(tmp_path)
    chosen = sorted(r for r in runs if r.startswith("select_lr__"))
    assert chosen == [
        "select_lr__minilm-l3__ner",
        "select_lr__minilm-l3__sst2",
        "select_lr__minilm-l6__ner",
        "select_lr__minilm-l6__sst2",
    ]
    choice = runs["select_lr__minilm-l3__sst2"].params
    # the grid's lr grid, and the pool and draws of the model's own settings
    assert (choice["lrs"], choice["epochs"], choice["patience"]) == ([2.0e-5, 1.0e-3], 4, 3)
    assert (choice["pool_examples"], choice["max_train_examples"], choice["heldout_examples"]) == (1300, 1000, 200)
    probe = runs["probe__minilm-l3__sst2__gates__k18__cached"]
    assert probe.params["lr_file"] == runs["select_lr__minilm-l3__sst2"].outputs[0]
    assert "select_lr__minilm-l3__sst2" in probe.deps
    # the literal study keeps its own lr and never waits for the choice
    literal = runs["probe__minilm-l3__sst2__none__k0__cached__literal"]
    assert (literal.params["lr"], literal.params["lr_file"], literal.params["patience"]) == (2.0e-5, "", None)
    assert not any(d.startswith("select_lr__") for d in literal.deps)
    # the chapters wait for the lr choices too
    assert set(chosen) <= set(runs["results"].deps)


def test_protocol_settings_reach_the_probe_runs_with_per_model_and_per_task_values(tmp_path):
    runs = _runs(tmp_path)
    l6 = runs["probe__minilm-l6__ner__gates__k36__cached"].params
    assert (l6["pool_examples"], l6["max_train_examples"], l6["heldout_examples"], l6["epochs"]) == (
        2600,
        2000,
        200,
        20,
    )
    assert (l6["patience"], l6["selection"], l6["dev_every_epoch"], l6["max_eval_examples"]) == (
        3,
        "heldout",
        False,
        1000,
    )
    l3 = runs["probe__minilm-l3__sst2__all__k36__cached"].params
    assert (l3["pool_examples"], l3["max_train_examples"], l3["epochs"], l3["max_eval_examples"]) == (
        1300,
        1000,
        15,
        None,
    )
    # a study's own value wins over the model's
    assert runs["probe__minilm-l3__sst2__all__k36__cached__literal"].params["epochs"] == 15


def test_seeded_random_orderings_get_their_own_rankings(tmp_path):
    runs = _runs(tmp_path)
    assert {"rank__minilm-l6__sst2__random-1", "rank__minilm-l6__sst2__random-2"} <= set(runs)
    probe = runs["probe__minilm-l6__sst2__random-2__k36__cached__random"]
    assert probe.params["ranking"].endswith("minilm-l6__sst2__random-2.json") and probe.params["seeds"] == [42]


def _bad(tmp_path, path: str, value) -> str:
    config = json.loads(json.dumps(PROTOCOL))
    *parents, last = path.split(".")
    node = config
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[last] = value
    with pytest.raises(PapaError) as info:
        _config(tmp_path, config)
    assert not (tmp_path / "book").exists()
    return str(info.value)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("probe.selection", "final", "probe.selection: patience and lr: select choose on held-out training examples"),
        (
            "probe.heldout_examples",
            None,
            "probe.pool_examples: a training pool needs max_train_examples and heldout_examples",
        ),
        ("probe.eval_chunk_examples", 500, "probe.eval_chunk_examples must"),
        ("studies.0.methods", ["random-one"], "Unknown ranking method 'random-one'"),
        ("probe.per_model", {"mpnet-base": {"epochs": 3}}, "'mpnet-base' is not one of the grid's models"),
        ("probe.per_model", {"minilm-l3": {"fractions": [0, 1]}}, "probe.per_model.minilm-l3.fractions"),
    ],
)
def test_protocol_keys_that_do_not_go_together_are_one_error_naming_the_key(tmp_path, path, value, message):
    if path == "probe.eval_chunk_examples":
        config = json.loads(json.dumps(PROTOCOL))
        config["probe"].update(eval_chunk_examples=500, dev_every_epoch=True)
        with pytest.raises(PapaError) as info:
            _config(tmp_path, config)
        assert "eval_chunk_examples scores the dev split once" in str(info.value)
        return
    assert message in _bad(tmp_path, path, value)


def test_the_estimate_extracts_a_shared_feature_set_once(tmp_path, monkeypatch):
    from papa.pipeline import estimate
    from papa.pipeline.estimate import run_seconds_guess

    # Round costs (an encoder pass 0.01 s per example; compact passes keep half the slots of SST-2, a quarter of
    # CoNLL's) and the hub's split sizes (SST-2: 872 dev examples), so the shared extraction is worked out by hand.
    monkeypatch.setitem(estimate.PROBE_SECONDS_PER_EXAMPLE, "extract", 0.01)
    for task, share in (("sst2", 0.5), ("ner", 0.25), ("pos", 0.25)):
        monkeypatch.setitem(estimate.COMPACT_SLOT_SHARE, task, share)
    monkeypatch.delenv("PAPA_DATA_DIR", raising=False)
    runs = _runs(tmp_path)
    empty = Manifest.__new__(Manifest)
    empty.entries = {}
    main = runs["probe__minilm-l6__sst2__none__k0__cached"]
    floor = runs["probe__minilm-l6__sst2__none__k0__cached__embeddings"]
    literal = runs["probe__minilm-l6__sst2__none__k0__cached__literal"]
    # the three share the training pool (2,600) and the whole dev split (872) at k = 0: 3,472 x 0.01 x 0.5 = 17.36 s
    shared = 17.36
    for run in (main, floor, literal):
        assert sum(run_cost(run)[1].values()) == pytest.approx(shared)
        assert estimate_seconds([run], empty) == pytest.approx(run_seconds_guess(run))
    alone = sum(run_seconds_guess(run) for run in (main, floor, literal))
    together = estimate_seconds([main, floor, literal], empty)
    assert together == pytest.approx(alone - 2 * shared)  # extracted once, not three times
    # NER and POS read the same CoNLL sentences: a pool of 2,600 and 1,000 dev examples, 3,600 x 0.01 x 0.25 = 9 s
    ner = json.loads(json.dumps(PROTOCOL))
    ner.update(tasks=["ner", "pos"])
    ner["probe"]["max_eval_examples"] = {"ner": 1000, "pos": 1000}
    both = _runs(tmp_path, ner)
    a, b = both["probe__minilm-l6__ner__none__k0__cached"], both["probe__minilm-l6__pos__none__k0__cached"]
    assert sum(run_cost(a)[1].values()) == pytest.approx(9.0)
    assert estimate_seconds([a, b], empty) == pytest.approx(run_seconds_guess(a) + run_seconds_guess(b) - 9.0)
    # a partial head set is a run's own: the k = 1/2 probe shares nothing with k = 0
    half = both["probe__minilm-l6__ner__gates__k36__cached"]
    assert estimate_seconds([a, half], empty) == pytest.approx(run_seconds_guess(a) + run_seconds_guess(half))


def test_a_notebook_checks_its_parameters_against_the_schema():
    namespace = {
        "__annotations__": {"model": str, "task": str, "max_examples": "Optional[int]"},
        "model": "minilm-l6",
        "task": "sst2",
        "max_examples": 0,
    }
    namespace["__annotations__"].update(max_length=int, relayout=bool, device=str, out=str)
    namespace.update(max_length=64, relayout=True, device="auto", out="c.safetensors")
    with pytest.raises(PapaError) as info:
        parameters(namespace, "estimate")
    assert "Notebook parameters: max_examples must be >= 1, got 0" in str(info.value)
    namespace["max_examples"] = None  # None: every training example
    assert parameters(namespace, "estimate")["max_examples"] is None


def test_the_project_folder_is_found_from_the_working_directory(tmp_path, monkeypatch):
    """``papa grid run`` from an installed package: notebooks, configs and runs live in the project folder."""
    from papa.pipeline.plan import project_root

    project = tmp_path / "my-project"
    (project / "notebooks").mkdir(parents=True)
    (project / "notebooks" / "03_probe.md").write_text("---\n---\n")
    (project / "configs").mkdir()
    (project / "configs" / "deep").mkdir()
    monkeypatch.delenv("PAPA_PROJECT_DIR", raising=False)
    assert project_root(project / "configs" / "deep") == project.resolve()
    assert project_root(project) == project.resolve()
    monkeypatch.setenv("PAPA_PROJECT_DIR", str(tmp_path / "elsewhere"))
    assert project_root(project) == (tmp_path / "elsewhere").resolve()
    monkeypatch.delenv("PAPA_PROJECT_DIR")
    assert (project_root(tmp_path) / "notebooks" / "03_probe.md").is_file()  # outside any project: the source checkout


def test_the_dry_run_sizes_every_run_offline(tmp_path, monkeypatch):
    """Examples, the cached features' size (RAM or disk against the memory budget) and the time of each run."""
    import io

    from papa.pipeline.estimate import run_size
    from papa.pipeline.runner import run_grid

    monkeypatch.delenv("PAPA_DATA_DIR", raising=False)  # hub sizes: SST-2's dev split holds 872 sentences
    runs = _runs(tmp_path)
    examples, size = run_size(runs["probe__minilm-l6__sst2__gates__k36__cached"])
    assert examples == 2600 + 872 and size == examples * 7 * 32 * 384 * 2  # [examples, layers + 1, L, hidden] float16
    assert run_size(runs["select_lr__minilm-l3__sst2"]) == (1300, 1300 * 4 * 32 * 384 * 2)
    assert run_size(runs["estimate__minilm-l6__sst2"]) == (2000, 0)  # the schema default, below the split size
    assert (
        run_size(
            Run(
                "p",
                "probe",
                dict(
                    runs["probe__minilm-l6__sst2__gates__k36__cached"].params,
                    max_train_examples=10**9,
                    pool_examples=None,
                ),
            )
        )[0]
        == 67349 + 872
    )
    config = json.loads(json.dumps(PROTOCOL))
    config.update(name=f"dry-{tmp_path.name[-8:]}".lower().replace("_", "-"), tasks=["sst2"], models=["minilm-l6"])
    config["probe"]["per_model"] = {}
    config["studies"] = []
    path = tmp_path / "dry.yaml"
    path.write_text(json.dumps(config))
    monkeypatch.setenv("PAPA_MEMORY_BUDGET_GB", "0.05")  # 50 MB: the k = 0 features go to disk
    out = io.StringIO()
    assert run_grid(path, dry_run=True, out=out) == 0
    lines = out.getvalue().splitlines()
    at = lines.index(next(line for line in lines if "would run probe__minilm-l6__sst2__none__k0__cached:" in line))
    assert (
        lines[at + 1]
        .strip()
        .startswith("3,472 examples, features ≤ 0.60 GB (disk: above the memory budget, streamed), ~")
    )
    assert (
        lines[at + 1].strip().endswith("on 2 CPU cores, extracts 1, reuses 1 feature set")
    )  # the pool: select_lr's, which runs first


# --- the lr rule on several seeds --------------------------------------------------------------------------
def _lr_runs(table: dict[float, list[tuple[float, bool]]]) -> list[dict]:
    """``{lr: [(held-out score, converged) per seed]}`` as select_lr's run records."""
    return [
        {"lr": lr, "seed": seed, "heldout": score, "converged": converged}
        for lr, scores in table.items()
        for seed, (score, converged) in enumerate(scores)
    ]


def test_the_lr_is_chosen_on_the_mean_of_its_seeds():
    from papa.probing.protocol import choose_lr

    # seed 0 alone would choose 1e-3 (0.85 against 0.70); the means over three seeds: 0.70 against 0.6167
    steady, lucky = [(0.70, True)] * 3, [(0.85, True), (0.50, True), (0.50, True)]
    choice = choose_lr(_lr_runs({2e-4: steady, 1e-3: lucky}))
    assert choice["lr"] == 2e-4 and choice["runner_up"] == 1e-3
    assert choice["heldout"] == {"0.0002": pytest.approx(0.70), "0.001": pytest.approx(1.85 / 3)}
    # 1e-3's standard error: deviations 0.2333, -0.1167, -0.1167; sd² = 0.081667 / 2; / 3 → se = 0.35 / 3 = 0.1167;
    # 2e-4's is 0: the noise 0.1167 exceeds the gap 0.0833, so the choice is within noise
    assert choice["stderr"]["0.001"] == pytest.approx(0.35 / 3) and choice["stderr"]["0.0002"] == pytest.approx(0.0)
    assert choice["within_noise"] is True
    clear = choose_lr(_lr_runs({2e-4: steady, 1e-3: [(0.60, True), (0.61, True), (0.59, True)]}))
    assert (clear["lr"], clear["runner_up"], clear["within_noise"]) == (2e-4, 1e-3, False)  # 0.1 apart, se 0.0058


def test_an_lr_still_rising_at_the_cap_loses_to_a_converged_one_within_noise():
    from papa.probing.protocol import choose_lr

    # the mpnet-base POS case: 2e-5 best by a hair (0.9292 against 0.9289) but never converged
    close = {
        2e-5: [(0.9302, False), (0.9282, False), (0.9292, False)],
        2e-4: [(0.9299, True), (0.9279, True), (0.9289, True)],
        1e-3: [(0.9200, True), (0.9210, True), (0.9190, True)],
    }
    choice = choose_lr(_lr_runs(close))
    assert choice["lr"] == 2e-4 and choice["runner_up"] == 2e-5 and choice["within_noise"] is True
    assert choice["converged"] == {"2e-05": False, "0.0002": True, "0.001": True}
    # far ahead (beyond noise), the unconverged lr keeps its win
    ahead = close | {2e-5: [(0.9602, False), (0.9582, False), (0.9592, False)]}
    assert choose_lr(_lr_runs(ahead))["lr"] == 2e-5
    # most seeds converged counts as converged: 2 of 3
    mostly = close | {2e-5: [(0.9302, True), (0.9282, True), (0.9292, False)]}
    assert choose_lr(_lr_runs(mostly))["lr"] == 2e-5
    # one seed: no noise, so only an exact tie lets the converged lr win (ties also go to the smaller lr)
    single = choose_lr(_lr_runs({2e-5: [(0.93, False)], 2e-4: [(0.93, True)]}))
    assert (single["lr"], single["runner_up"], single["within_noise"]) == (2e-4, 2e-5, True)


def test_a_probe_run_reads_the_runner_up_of_the_lr_record(tmp_path):
    from papa.probing.protocol import load_lr_choice, save_lr_choice

    path = save_lr_choice(tmp_path / "lr.json", {"model": "m", "task": "cola", "lr": 1e-3, "runner_up": 2e-4})
    assert load_lr_choice(path, "m", "cola") == 1e-3 and load_lr_choice(path, "m", "cola", "runner-up") == 2e-4
    old = save_lr_choice(tmp_path / "old.json", {"model": "m", "task": "cola", "lr": 1e-3})
    with pytest.raises(PapaError, match="records no runner-up"):
        load_lr_choice(old, which="runner-up")
    with pytest.raises(PapaError, match="Unknown lr choice 'second'"):
        load_lr_choice(path, which="second")
