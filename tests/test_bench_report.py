"""The single-run benchmark's report (benchmarks/probe_run.py) on hand-made timings: the parts add up to the wall
time, the speed-up and the floor's verdict follow the numbers."""

from __future__ import annotations

import pytest

from benchmarks.probe_run import _parts, probe_command, to_markdown

INFO = {
    "command": "python -m benchmarks.probe_run",
    "device": "cpu",
    "baseline": "2e32ada",
    "tree": "abc1234",
    "repeats": 2,
    "threads": 2,
    "cpu_count": 2,
    "load_average": [0.1, 0.1, 0.1],
    "date": "2026-12-03",
    "gflops": 125.0,
}


def _run(wall, features, train, evaluate, total):
    return {"wall": wall, "timings": {"features": features, "train": train, "eval": evaluate, "total": total}}


def _side(runs, score=0.7729):
    return {"parts": _parts(runs), "imports": 7.5, "score": score, "epochs": 6, "selected_epoch": 3}


def _floor(wall, step_ms=4.0):
    phases = {"start-up": 8.0, "model": 0.7, "inputs": 1.9, "extract_train": 8.1, "extract_eval": 4.3}
    step = {"step_ms": step_ms, "step_shape": [16, 7, 33, 384]}
    return {"wall": wall, **phases, **step, "tokens": {"train": 33090, "eval": 20686}, "repeats": 2}


def test_parts_are_medians_that_add_up_to_the_wall_time():
    parts = _parts(
        [_run(60.0, 40.0, 6.0, 2.0, 51.0), _run(70.0, 50.0, 6.0, 2.0, 61.0), _run(68.0, 48.0, 6.0, 2.0, 59.0)]
    )
    assert parts["wall"] == 68.0
    assert parts["features (encoder passes, float32 copy, cache write)"] == 48.0
    assert parts["start-up (interpreter, imports, writing the result)"] == 68.0 - 59.0
    assert parts["model and inputs"] == 59.0 - 48.0 - 6.0 - 2.0
    assert sum(value for name, value in parts.items() if name != "wall") == pytest.approx(parts["wall"])


def test_the_report_gives_the_speed_up_and_says_when_the_floor_rules_out_three_times():
    a = _side([_run(68.0, 50.0, 6.0, 2.0, 60.0)])
    b = _side([_run(33.0, 15.0, 5.0, 4.0, 25.0)], score=0.7725)
    text = to_markdown(INFO, a, b, _floor(18.0, step_ms=4.0))
    assert "**Speed-up A/B = 2.06×** (target ≥ 3×: NOT met); |score A − score B| = 0.0004 (target ≤ 0.01)." in text
    assert "| wall | 68.0 | 33.0 |" in text
    assert "takes 4.00 ms a step, so B's 750 steps (6 epochs of 125) take at least 3.0 s." in text
    assert "A / 3 = 22.7 s. The floor and those steps come to 21.0 s, which leaves 1.7 s for the rest" in text
    assert "(gathering the batches, the float32 copy, the cache write and evaluation: 12.0 s in B)" in text
    assert "**B / floor = 1.83×** (target ≤ 1.3×: NOT met)." in text
    assert "the probe's own training steps (21.0 s, below which" in text
    assert "B is 1.57×: 12.0 s above them" in text
    out = to_markdown(INFO, a, b, _floor(19.6, step_ms=5.0))
    assert (
        "A / 3 = 22.7 s. The floor and those steps come to 23.4 s, above A / 3: a 3× speed-up of this command is out "
        "of reach" in out
    )
    fast = to_markdown(INFO, a, _side([_run(20.0, 10.0, 2.0, 1.0, 15.0)]), _floor(15.0))
    assert "**Speed-up A/B = 3.40×** (target ≥ 3×: met)" in fast


def test_the_timed_command_is_the_issues_single_run():
    command = probe_command("result.json")
    options = dict(zip(command[3::2], command[4::2]))
    assert command[:3] == ["-m", "papa.cli", "probe"] and options["--model"] == "minilm-l6"
    assert (options["--task"], options["--constant-heads"], options["--pool-examples"]) == ("sst2", "36", "2600")
    assert (
        options["--max-train-examples"],
        options["--heldout-examples"],
        options["--epochs"],
        options["--patience"],
    ) == ("2000", "200", "20", "3")
    assert (options["--selection"], float(options["--lr"])) == ("heldout", 2e-4)
    assert options["--ranking"].endswith("minilm-l6__sst2__gates.json")


def test_a_baseline_this_clone_lacks_is_one_clear_error(tmp_path, monkeypatch):
    from benchmarks.probe_run import main

    monkeypatch.setenv("PAPA_DATA_DIR", str(tmp_path))
    with pytest.raises(SystemExit) as stop:
        main(["--baseline", "0" * 40, "--markdown", str(tmp_path / "out.md")])
    message = str(stop.value)
    assert message.startswith(f"Cannot check out the baseline {'0' * 40!r}: ")
    assert message.endswith(
        "Run from a full clone (git fetch --unshallow) or pass --baseline with a commit this clone has."
    )
    assert not (tmp_path / "out.md").exists()


def test_without_the_task_data_it_says_what_to_set(monkeypatch):
    from benchmarks.probe_run import main

    monkeypatch.delenv("PAPA_DATA_DIR", raising=False)
    with pytest.raises(
        SystemExit, match=r"PAPA_DATA_DIR is unset: the run reads SST-2 from it\. Set it to the task data folder"
    ):
        main([])
