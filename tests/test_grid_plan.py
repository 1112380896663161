"""The grid runner's plan, without executing anything: how long stale runs are expected to take."""

from __future__ import annotations

import pytest

from papa.core.tasks import get_task
from papa.pipeline.estimate import (
    DEFAULT_SECONDS,
    estimate_seconds,
    run_seconds_guess,
    run_wall_seconds,
)
from papa.pipeline.plan import Run
from papa.pipeline.stamps import Manifest


@pytest.fixture
def round_costs(monkeypatch):
    """Round per-example costs, so that every expected duration below is worked out by hand: 10 s to start, an encoder
    pass 0.01 s per example (compact: SST-2 keeps half the slots, MRPC a quarter), a padded pass inside training 0.1 s,
    a probe step 0.001 s per example; mpnet-base 10x the encoder pass and 4x the probe step. No local data: the hub's
    split sizes (SST-2 67,349 training and 872 dev examples, MRPC 3,668 and 408)."""
    from papa.pipeline import estimate

    monkeypatch.setattr(estimate, "PROBE_STARTUP_SECONDS", 10)
    for key, value in {"extract": 0.01, "live": 0.1, "train": 0.001}.items():
        monkeypatch.setitem(estimate.PROBE_SECONDS_PER_EXAMPLE, key, value)
    monkeypatch.setitem(estimate.COMPACT_SLOT_SHARE, "sst2", 0.5)
    monkeypatch.setitem(estimate.COMPACT_SLOT_SHARE, "mrpc", 0.25)
    monkeypatch.setitem(estimate.MODEL_COST, "mpnet-base", (10.0, 4.0))
    monkeypatch.delenv("PAPA_DATA_DIR", raising=False)


def _probe(examples, mode="cached", task="sst2", model="minilm-l6", **more):
    params = dict(model=model, task=task, k=0, ranking="", max_length=64, max_train_examples=examples)
    params.update(max_eval_examples=100, epochs=15, seeds=[1, 2, 3], mode=mode)
    return Run("p", "probe", dict(params, **more))


def test_the_default_grid_probe_guess_matches_its_measured_duration(monkeypatch):
    """The calibration against the records of the default grid's re-run (December 2026, two cores, each run at its
    share of the machine): MiniLM-L6's SST-2 probe runs (2,600 + 872 examples, 3 seeds of 2,000, early stopping
    within 20 epochs) took 30-38 s, mpnet-base's 241-328 s. The guess is within the band the records show per model
    and task (0.57-1.72x a run's time; over all 333 records, 6.69 h guessed against 6.66 h taken)."""
    monkeypatch.delenv("PAPA_DATA_DIR", raising=False)  # the hub's sizes: SST-2's 872 dev examples, as the local copy
    size = dict(pool_examples=2600, max_eval_examples=None, epochs=20, patience=3, dev_every_epoch=False)
    for model, (fastest, slowest) in {"minilm-l6": (30, 38), "mpnet-base": (241, 328)}.items():
        guess = run_seconds_guess(Run("d", "probe", dict(_probe(2000, model=model).params, **size)))
        assert 0.57 * guess <= fastest and slowest <= 1.72 * guess, (model, guess)
    assert get_task("sst2").train_size == 67349 and get_task("mnli").dev_size == 9815


def test_a_probe_never_timed_is_estimated_from_its_size(round_costs, tmp_path, monkeypatch):
    # 8,000 training and 100 dev examples, 3 seeds x 15 epochs = 45 passes, dev scored each epoch (a third of a step):
    # 10 + 8,100 x 0.005 (compact extraction) + 8,000 x 45 x 0.001 + 100 x 45 x 0.001 / 3 = 10 + 40.5 + 360 + 1.5
    assert run_seconds_guess(_probe(8000)) == pytest.approx(412.0)
    # faithful: the live encoder runs padded over the training and dev examples at every pass: 10 + 200 x 45 x 0.1
    assert run_seconds_guess(_probe(100, mode="faithful")) == pytest.approx(910.0)
    # mpnet-base: 10 + 8,100 x 0.05 + 8,000 x 45 x 0.004 + 100 x 45 x 0.004 / 3 = 10 + 405 + 1,440 + 6
    assert run_seconds_guess(_probe(8000, model="mpnet-base")) == pytest.approx(1861.0)
    # the attention-free floor steps a seventh of the probe: 10 + 40.5 + (360 + 1.5) / 7
    assert run_seconds_guess(_probe(8000, probe_input="embeddings")) == pytest.approx(50.5 + 361.5 / 7)
    # the main protocol: a pool of 2,600 (extracted once), 2,000 drawn per seed, early stopping at 40% of 20 epochs
    # (3 x 8 = 24 passes), the whole dev split (872): 10 + 3,472 x 0.005 + 2,000 x 24 x 0.001 + 872 x 24 x 0.001 / 3
    main = _probe(2000, pool_examples=2600, max_eval_examples=None, epochs=20, patience=3)
    assert run_seconds_guess(main) == pytest.approx(10 + 17.36 + 48 + 6.976)
    # ... and with dev scored once per seed at the end: 872 x 3 x 0.001 / 3 = 0.872
    dev_at_the_end = Run("m", "probe", dict(main.params, dev_every_epoch=False))
    assert run_seconds_guess(dev_at_the_end) == pytest.approx(10 + 17.36 + 48 + 0.872)
    assert run_seconds_guess(Run("r", "results", {})) == DEFAULT_SECONDS["results"]

    manifest = Manifest(tmp_path / "manifest.json")
    manifest.entries["p"] = {"seconds": 12.5}  # a recorded duration wins over the guess
    chapter = Run("r", "results", {})
    assert estimate_seconds([_probe(8000), chapter], manifest) == pytest.approx(12.5 + DEFAULT_SECONDS["results"])
    # a run whose parameters changed since that record is costed from its size, not from the old duration
    assert estimate_seconds([_probe(8000)], manifest, {"p"}) == pytest.approx(412.0)
    # a run sharing the timed run's feature sets (the same k = 0 sentences) pays no second extraction: 412 - 40.5
    twin = Run("q", "probe", dict(_probe(8000).params))
    assert estimate_seconds([_probe(8000), twin], manifest) == pytest.approx(12.5 + 371.5)
    untimed = [twin, Run("q2", "probe", dict(twin.params))]
    assert estimate_seconds(untimed, Manifest(tmp_path / "none.json")) == pytest.approx(412 + 371.5)

    # A local split of 5 examples (a blank line not counted): never more than the split holds.
    (tmp_path / "sst2").mkdir()
    (tmp_path / "sst2" / "train.jsonl").write_text('{"a": 1}\n' * 5 + "\n")
    monkeypatch.setenv("PAPA_DATA_DIR", str(tmp_path))
    # 10 + 105 x 0.005 + 5 x 45 x 0.001 + 1.5 = 10 + 0.525 + 0.225 + 1.5
    assert run_seconds_guess(_probe(8000)) == pytest.approx(12.25)
    assert run_seconds_guess(_probe(None)) == pytest.approx(12.25)  # the whole local split
    # MRPC has no local file: the hub's 3,668: 10 + 3,768 x 0.0025 + 3,668 x 45 x 0.001 + 1.5
    assert run_seconds_guess(_probe(None, task="mrpc")) == pytest.approx(10 + 9.42 + 165.06 + 1.5)


def test_a_run_recorded_beside_another_counts_its_share_of_the_machine(tmp_path):
    """Two runs timed side by side (``--scheduler local:2``): p ran 12.5 s to 10:00:10, q 10 s to 10:00:05, so they
    overlapped 7.5 s; each overlapping second counts half, and the two add up to the 15 s the machine ran."""
    manifest = Manifest(tmp_path / "manifest.json")
    manifest.entries["p"] = {"seconds": 12.5, "finished": "2026-12-07T10:00:10+00:00"}
    manifest.entries["q"] = {"seconds": 10.0, "finished": "2026-12-07T10:00:05+00:00"}
    p, q = Run("p", "results", {}), Run("q", "controls", {})
    assert estimate_seconds([p], manifest) == pytest.approx(12.5 - 7.5 / 2)
    assert estimate_seconds([q], manifest) == pytest.approx(10.0 - 7.5 / 2)
    assert estimate_seconds([p, q], manifest) == pytest.approx(15.0)
    # a SLURM worker's walltime bounds a run's own clock, not its share: p's 12.5 s; a run never timed, its guess
    assert run_wall_seconds(p, manifest) == 12.5
    assert run_wall_seconds(Run("r", "results", {}), manifest) == DEFAULT_SECONDS["results"]


def test_the_smoke_plan_exactly():
    """Run ids, dependencies, outputs and parameters of the smoke grid, from the schema's params models."""
    from papa.pipeline.plan import ROOT, expand, load_config

    runs = {r.run_id: r for r in expand(load_config(ROOT / "configs" / "smoke.yaml"))}
    art = "book/runs/smoke/artifacts"
    estimate, rank, choose = (
        "estimate__minilm-l6__sst2",
        "rank__minilm-l6__sst2__deviation",
        "select_lr__minilm-l6__sst2",
    )
    probes = [
        "probe__minilm-l6__sst2__none__k0__cached",
        "probe__minilm-l6__sst2__deviation__k36__cached",
        "probe__minilm-l6__sst2__all__k72__cached",
    ]
    replaced = [f"probe__minilm-l6__sst2__all__k72__cached__{mode}__replace" for mode in ("uniform", "zero", "mean")]
    assert list(runs) == [estimate, rank, choose, *probes, *replaced, "results", "controls", "replacements"]
    assert [runs[p].deps for p in probes] == [[choose], [estimate, choose, rank], [estimate, choose]]
    assert [(runs[p].deps, runs[p].params["replacement"]) for p in replaced] == [
        ([estimate, choose], m) for m in ("uniform", "zero", "mean")
    ]
    assert runs["results"].deps == [rank, choose, *probes, *replaced] and runs["results"].params == {
        "grid_config": "configs/smoke.yaml"
    }
    assert runs["replacements"].deps == runs["results"].deps
    lr_file = f"{art}/lr/minilm-l6__sst2.json"
    assert runs[choose].outputs == [lr_file]
    assert runs[choose].params == dict(
        model="minilm-l6",
        task="sst2",
        lrs=[2e-5, 1e-3],
        seeds=[42],
        epochs=2,
        patience=1,
        pool_examples=48,
        max_train_examples=32,
        heldout_examples=16,
        data_seed=0,
        max_length=32,
        relayout=True,
        device="auto",
        out=lr_file,
    )
    constants = f"{art}/constants/minilm-l6__sst2.safetensors"
    assert runs[estimate].params == dict(
        model="minilm-l6", task="sst2", max_examples=32, max_length=32, relayout=True, device="auto", out=constants
    )
    assert runs[rank].params == dict(
        model="minilm-l6",
        task="sst2",
        method="deviation",
        constants=f"{art}/constants/minilm-l6__sst2.safetensors",
        epochs=1,
        lr=2e-5,
        max_train_examples=16,
        max_eval_examples=16,
        seed=42,
        data_seed=0,
        device="auto",
        warm_epochs=0,
        warm_lr=1e-3,
        warm_examples=None,
        draws=[],
        out=f"{art}/rankings/minilm-l6__sst2__deviation.json",
    )
    probe = runs[probes[1]]
    assert probe.outputs == [f"{art}/results/{probes[1]}__s42.json"]
    assert probe.params == dict(
        model="minilm-l6",
        task="sst2",
        k=36,
        constants=f"{art}/constants/minilm-l6__sst2.safetensors",
        ranking=f"{art}/rankings/minilm-l6__sst2__deviation.json",
        mode="cached",
        replacement="papa",
        seeds=[42],
        epochs=2,
        lr=None,  # from lr_file: the run's page shows no lr it did not use
        lr_file=lr_file,
        lr_choice="chosen",
        patience=1,
        pool_examples=48,
        heldout_examples=16,
        dev_every_epoch=False,
        eval_chunk_examples=None,
        probe_input="all",
        selection="heldout",
        heldout_fraction=0.1,
        max_train_examples=32,
        max_eval_examples=32,
        data_seed=0,
        max_length=32,
        relayout=True,
        device="auto",
        out=f"{art}/results/{probes[1]}__s{{seed}}.json",
    )


def test_the_lr_is_chosen_under_each_models_probe_cap_unless_set():
    """lr_selection.epochs unset: the choice trains under the cap its model's probes train under (20 in the default
    grid; a ``probe.per_model`` cap of 15 for mpnet-base here), with a seed that is no probe's."""
    import copy

    from papa.pipeline.plan import ROOT, expand, load_config

    config = load_config(ROOT / "configs" / "default.yaml")
    chosen = {r.run_id: r.params for r in expand(config) if r.kind == "select_lr"}
    assert {rid.split("__")[1]: p["epochs"] for rid, p in chosen.items()} == {
        "minilm-l6": 20,
        "minilm-l3": 20,
        "mpnet-base": 20,
    }
    capped = copy.deepcopy(config)
    capped["probe"]["per_model"] = {"mpnet-base": {"epochs": 15}}
    chosen = {r.run_id: r.params for r in expand(capped) if r.kind == "select_lr"}
    assert {rid.split("__")[1]: p["epochs"] for rid, p in chosen.items()} == {
        "minilm-l6": 20,
        "minilm-l3": 20,
        "mpnet-base": 15,
    }
    assert {tuple(p["seeds"]) for p in chosen.values()} == {(0, 1, 2)}  # three seeds, none a probe seed
    assert not {0, 1, 2} & set(config["probe"]["seeds"])
    config["lr_selection"]["epochs"] = 7
    assert {r.params["epochs"] for r in expand(config) if r.kind == "select_lr"} == {7}


def test_committed_results_match_the_result_record():
    """Every committed result JSON is a :class:`papa.core.schema.ResultRecord`, and declares no field the record
    lacks."""
    from papa.core.io import read_json_verified
    from papa.core.schema import ResultConfig, ResultRecord
    from papa.pipeline.plan import ROOT

    files = sorted((ROOT / "book" / "runs").glob("*/artifacts/results/*.json"))
    assert files, "no committed results"
    for path in files:
        record = read_json_verified(path, "result")
        ResultRecord.model_validate(record)
        assert set(record) <= set(ResultRecord.model_fields) and set(record["config"]) <= set(
            ResultConfig.model_fields
        ), path.name


def test_the_feature_cache_keeps_shared_sets_once_and_holds_one_runs_own_set_at_a_time():
    """MiniLM-L6 features: [examples, 7 states, L, 384] float16. Two probes at k = 0 share their sets (the
    floor reads the same ones); k = all is shared too; a partial head set (a ranking) is a run's own."""
    from papa.pipeline.estimate import cache_bytes, feature_set_bytes

    def probe(k, ranking="", examples=100, task="sst2"):
        params = dict(
            model="minilm-l6",
            task=task,
            k=k,
            ranking=ranking,
            max_length=64,
            max_train_examples=examples,
            max_eval_examples=50,
            epochs=2,
            seeds=[1],
            mode="cached",
        )
        return Run(f"p{k}{ranking}{task}", "probe", params)

    per_example = 7 * 64 * 384 * 2
    assert feature_set_bytes("minilm-l6", 1, 64) == per_example
    runs = [
        probe(0),
        probe(0),
        probe(72),
        probe(36, "r.json"),
        probe(36, "s.json", examples=300),
        probe(0, task="ner"),
        probe(0, task="pos"),
    ]
    kept, held, unknown = cache_bytes(runs)
    # shared: sst2 k = 0 and k = all (100 train + 50 dev each), CoNLL k = 0 once for NER and POS
    assert kept == (150 + 150 + 150) * per_example and unknown == 0
    assert held == (300 + 50) * per_example  # the larger of the two partial runs
    faithful = Run("f", "probe", dict(runs[2].params, mode="faithful"))
    assert cache_bytes([faithful, Run("r", "results", {})]) == (0, 0, 0)


def test_gate_draws_and_the_issue_54_studies_in_the_default_plan():
    """rank.seeds: one rank run per draw (gates-<seed>), the gates run combines them; the draws, randombase and
    lrnext studies expand to one-seed probes at half of the heads (lrnext: k = 0 and all heads at the runner-up)."""
    from papa.pipeline.plan import ROOT, expand, load_config

    config = load_config(ROOT / "configs" / "default.yaml")
    runs = {r.run_id: r for r in expand(config)}
    order = list(runs)
    art = "book/runs/default/artifacts/rankings"
    draws = [f"rank__mpnet-base__cola__gates-{seed}" for seed in (42, 43, 44)]
    combined = runs["rank__mpnet-base__cola__gates"]
    assert combined.deps == draws and all(order.index(d) < order.index(combined.run_id) for d in draws)
    assert combined.params["draws"] == [f"{art}/mpnet-base__cola__gates-{seed}.json" for seed in (42, 43, 44)]
    draw = runs["rank__mpnet-base__cola__gates-43"].params
    assert (draw["method"], draw["seed"], draw["draws"]) == ("gates-43", 43, [])
    assert (draw["warm_epochs"], draw["warm_lr"], draw["warm_examples"], draw["epochs"]) == (20, 1e-3, 2600, 2)
    assert runs["rank__mpnet-base__cola__gates-43"].deps == ["estimate__mpnet-base__cola"]
    ranks = [r for r in runs.values() if r.kind == "rank" and r.params["method"].startswith("gates")]
    assert len(ranks) == 3 * 6 * 4  # every model and task: three draws and their combination
    per_draw = runs["probe__mpnet-base__cola__gates-43__k72__cached__draws"]
    assert per_draw.params["ranking"] == f"{art}/mpnet-base__cola__gates-43.json" and per_draw.params["seeds"] == [42]
    assert "rank__mpnet-base__cola__gates-43" in per_draw.deps
    main_half = runs["probe__mpnet-base__cola__gates__k72__cached"]
    assert main_half.params["ranking"] == f"{art}/mpnet-base__cola__gates.json" and main_half.params["seeds"] == [
        42,
        43,
        44,
    ]
    assert {r.params["model"] for r in runs.values() if r.run_id.endswith("__draws")} == {"minilm-l6", "mpnet-base"}
    random = [r for r in runs.values() if r.run_id.endswith("__randombase")]
    assert sorted({r.params["ranking"].rsplit("__", 1)[1] for r in random}) == [
        "random-1.json",
        "random-2.json",
        "random-3.json",
    ]
    assert len(random) == 18 and {(r.params["model"], r.params["k"], tuple(r.params["seeds"])) for r in random} == {
        ("mpnet-base", 72, (42,))
    }
    lrnext = [r for r in runs.values() if r.run_id.endswith("__lrnext")]
    assert len(lrnext) == 3 * 6 * 2 and {(r.params["lr"], r.params["lr_choice"]) for r in lrnext} == {
        (None, "runner-up")
    }
    assert {r.params["k"] for r in lrnext if r.params["model"] == "minilm-l3"} == {0, 36}
    chosen = runs["probe__mpnet-base__cola__none__k0__cached"].params
    assert (chosen["lr"], chosen["lr_choice"], chosen["lr_file"]) == (
        None,
        "chosen",
        "book/runs/default/artifacts/lr/mpnet-base__cola.json",
    )


def test_one_gate_seed_keeps_the_single_gates_run():
    """Without rank.seeds (or with one), gates is one draw at rank.seed, trained by its own run: no gates-<seed> run."""
    from papa.pipeline.plan import ROOT, expand, load_config

    config = load_config(ROOT / "configs" / "default.yaml")
    config["rank"]["seeds"] = None
    config["studies"] = [s for s in config["studies"] if s["name"] != "draws"]
    ranks = {r.run_id: r for r in expand(config) if r.kind == "rank" and "gates" in r.run_id}
    assert sorted(ranks) == sorted(f"rank__{m}__{t}__gates" for m in config["models"] for t in config["tasks"])
    single = ranks["rank__minilm-l6__sst2__gates"]
    assert (single.params["seed"], single.params["draws"], single.deps) == (42, [], ["estimate__minilm-l6__sst2"])
    config["rank"]["seeds"] = [7]
    one = {r.run_id: r for r in expand(config) if r.kind == "rank" and "gates" in r.run_id}
    assert set(one) == set(ranks) and one["rank__minilm-l6__sst2__gates"].params["seed"] == 42
