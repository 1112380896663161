"""The grid runner's plan, without executing anything: how long stale runs are expected to take."""

from __future__ import annotations

import pytest

from papa.pipeline.grid import DEFAULT_SECONDS, HUB_TRAIN_SIZES, PROBE_SECONDS_PER_EXAMPLE, PROBE_STARTUP_SECONDS, Manifest, Run, estimate_seconds, run_seconds_guess


def test_a_probe_never_timed_is_estimated_from_its_size(tmp_path, monkeypatch):
    (tmp_path / "sst2").mkdir()
    (tmp_path / "sst2" / "train.jsonl").write_text('{"a": 1}\n' * 5 + "\n")  # 5 examples, a blank line not counted
    monkeypatch.setenv("PAPA_DATA_DIR", str(tmp_path))
    extract, train = PROBE_SECONDS_PER_EXAMPLE["extract"], PROBE_SECONDS_PER_EXAMPLE["train"]
    base = PROBE_STARTUP_SECONDS

    def probe(examples, mode="cached", task="sst2"):
        return Run("p", "probe", dict(task=task, max_train_examples=examples, epochs=15, seeds=[1, 2, 3], mode=mode))

    assert run_seconds_guess(probe(8000)) == pytest.approx(base + 8000 * (extract + train * 45))
    assert run_seconds_guess(probe(100, mode="faithful")) == pytest.approx(base + 100 * extract * 45)
    assert run_seconds_guess(probe(None)) == pytest.approx(base + 5 * (extract + train * 45))  # the whole local split
    assert run_seconds_guess(probe(None, task="mrpc")) == pytest.approx(base + 3668 * (extract + train * 45))  # no local file
    assert HUB_TRAIN_SIZES["sst2"] == 67349
    # the calibration: 8000 SST-2 sentences, 3 seeds × 15 epochs took 374–389 s on two cores
    assert 300 < run_seconds_guess(probe(8000)) < 450
    assert run_seconds_guess(Run("r", "results", {})) == DEFAULT_SECONDS["results"]
    manifest = Manifest(tmp_path / "manifest.json")
    manifest.entries["p"] = {"seconds": 12.5}  # a recorded duration wins over the guess
    assert estimate_seconds([probe(8000), Run("r", "results", {})], manifest) == pytest.approx(12.5 + DEFAULT_SECONDS["results"])
