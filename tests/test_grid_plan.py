"""The grid runner's plan, without executing anything: how long stale runs are expected to take."""

from __future__ import annotations

import pytest

from papa.grid import DEFAULT_SECONDS, PROBE_SECONDS_PER_EXAMPLE, WHOLE_SPLIT_GUESS, Manifest, Run, estimate_seconds, run_seconds_guess


def test_a_probe_never_timed_is_estimated_from_its_size(tmp_path, monkeypatch):
    (tmp_path / "sst2").mkdir()
    (tmp_path / "sst2" / "train.jsonl").write_text('{"a": 1}\n' * 5 + "\n")  # 5 examples, a blank line not counted
    monkeypatch.setenv("PAPA_DATA_DIR", str(tmp_path))
    extract, train = PROBE_SECONDS_PER_EXAMPLE["extract"], PROBE_SECONDS_PER_EXAMPLE["train"]
    base = DEFAULT_SECONDS["probe"] / 3

    def probe(examples, mode="cached", task="sst2"):
        return Run("p", "probe", dict(task=task, max_train_examples=examples, epochs=15, seeds=[1, 2, 3], mode=mode))

    assert run_seconds_guess(probe(8000)) == pytest.approx(base + 8000 * (extract + train * 45))
    assert run_seconds_guess(probe(100, mode="faithful")) == pytest.approx(base + 100 * extract * 45)
    assert run_seconds_guess(probe(None)) == pytest.approx(base + 5 * (extract + train * 45))  # the whole local split
    assert run_seconds_guess(probe(None, task="mrpc")) == pytest.approx(base + WHOLE_SPLIT_GUESS * (extract + train * 45))
    assert run_seconds_guess(Run("r", "results", {})) == DEFAULT_SECONDS["results"]
    manifest = Manifest(tmp_path / "manifest.json")
    manifest.entries["p"] = {"seconds": 12.5}  # a recorded duration wins over the guess
    assert estimate_seconds([probe(8000), Run("r", "results", {})], manifest) == pytest.approx(12.5 + DEFAULT_SECONDS["results"])
