"""The dry run's extractions against reuses: which run of the default plan extracts a feature set and
which later runs read it from the cache."""

from __future__ import annotations

from papa.pipeline.estimate import feature_reuse, reuse_words
from papa.pipeline.plan import ROOT, expand, load_config


def test_each_feature_set_of_the_default_plan_is_extracted_once():
    counts = feature_reuse(expand(load_config(ROOT / "configs" / "default.yaml")))
    assert counts["select_lr__minilm-l6__sst2"] == (1, 0)  # the k = 0 pool
    assert counts["probe__minilm-l6__sst2__none__k0__cached"] == (1, 1)  # reuses the pool, extracts the dev split
    assert counts["probe__minilm-l6__sst2__none__k0__cached__embeddings"] == (
        0,
        2,
    )  # the attention-free floor: state 0 of k = 0
    assert counts["probe__minilm-l6__sst2__none__k0__cached__literal"] == (
        0,
        2,
    )  # the literal setting reads the main features
    assert counts["probe__minilm-l6__pos__none__k0__cached"] == (0, 2)  # POS reads NER's sentences
    assert counts["probe__minilm-l6__sst2__gates__k36__cached"] == (2, 0)  # a partial head set is its run's own
    assert "estimate__minilm-l6__sst2" not in counts and "results" not in counts


def test_reuse_words():
    assert [reuse_words(c) for c in [(2, 0), (1, 1), (0, 2), (0, 1), None]] == [
        "extracts 2 feature sets",
        "extracts 1, reuses 1 feature set",
        "reuses 2 feature sets",
        "reuses 1 feature set",
        "",
    ]


def test_the_dry_run_prints_extractions_and_reuses(capsys, tmp_path):
    """On a grid with no run yet (the default config under another name), every stale run says what it extracts."""
    import yaml

    from papa.cli import main

    config = yaml.safe_load((ROOT / "configs" / "default.yaml").read_text(encoding="utf-8"))
    config["name"] = "reuse-check"
    path = tmp_path / "reuse-check.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    assert main(["grid", "run", str(path), "--dry-run", "--only", "minilm-l6__sst2__none__k0__cached"]) == 0
    out = capsys.readouterr().out.splitlines()
    sizes = {line.split()[2].rstrip(":"): out[i + 1] for i, line in enumerate(out) if line.startswith("  would run ")}
    assert sizes["probe__minilm-l6__sst2__none__k0__cached"].endswith(", extracts 2 feature sets")
    assert sizes["probe__minilm-l6__sst2__none__k0__cached__embeddings"].endswith(", reuses 2 feature sets")
    assert sizes["probe__minilm-l6__sst2__none__k0__cached__literal"].endswith(", reuses 2 feature sets")
    assert not (ROOT / "book" / "runs" / "reuse-check").exists()  # a dry run writes nothing
