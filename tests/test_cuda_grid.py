"""The GPU grid's comparison with the committed CPU runs (benchmarks/cuda_grid.py) on two hand-made runs folders:
constants within or beyond 1e-5, an lr and a ranking that differ, scores inside and outside the CPU result's
bootstrap interval, a result at other heads counted apart, and the time read from the runner's log."""

from __future__ import annotations

import json

import numpy as np
from safetensors.numpy import save_file

from benchmarks.cuda_grid import compare, markdown, wall_seconds

N = 200  # dev examples of every hand-made result


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")


def _result(correct: int, heads, epoch=3) -> dict:
    """An SST-2 probe result whose first ``correct`` of N dev predictions are right (accuracy correct / N)."""
    labels = [i % 2 for i in range(N)]
    predictions = [label if i < correct else 1 - label for i, label in enumerate(labels)]
    dev = {"predictions": predictions, "labels": labels, "label_names": ["negative", "positive"]}
    return {
        "task": "sst2",
        "metric": "accuracy",
        "score": correct / N,
        "heads": heads,
        "selected_epoch": epoch,
        "dev": dev,
    }


def _folder(root, constants_shift, lr, ranking, scores, seconds):
    base = np.linspace(0, 1, 2 * 3 * 4 * 4, dtype=np.float32).reshape(2, 3, 4, 4)
    for task, shift in constants_shift.items():
        path = root / "artifacts" / "constants" / f"minilm-l6__{task}.safetensors"
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({"constants": base + np.float32(shift)}, str(path))
    _write(root / "artifacts" / "lr" / "minilm-l6__sst2.json", {"lr": lr, "heldout": {"0.0002": 0.86}})
    _write(root / "artifacts" / "rankings" / "minilm-l6__sst2__gates.json", {"ranking": ranking})
    for name, (correct, heads) in scores.items():
        _write(root / "artifacts" / "results" / f"{name}.json", _result(correct, heads))
    for run_id, value in seconds.items():
        _write(root / "stamps" / f"{run_id}.json", {"seconds": value})


GATES = "probe__minilm-l6__sst2__gates__k2__cached"
RANKING = [[0, 1], [1, 2], [0, 0], [1, 0]]


def test_a_gpu_grid_is_compared_check_by_check(tmp_path):
    cpu, gpu = tmp_path / "cpu", tmp_path / "gpu"
    half = [[0, 1], [1, 2]]
    _folder(
        cpu,
        {"sst2": 0.0, "cola": 0.0},
        2e-4,
        RANKING,
        {
            "probe__minilm-l6__sst2__gates__k2__cached__s42": (160, half),
            "probe__minilm-l6__sst2__gates__k2__cached__s43": (160, half),
            "probe__minilm-l6__sst2__none__k0__cached__s42": (170, []),
        },
        {"probe__minilm-l6__sst2__gates__k2__cached": 300.0, "estimate__minilm-l6__sst2": 60.0},
    )
    swapped = [[1, 2], [0, 1], [1, 0], [0, 0]]  # the same first half as a set, another order
    _folder(
        gpu,
        {"sst2": 2e-6, "cola": 3e-4},
        1e-3,
        swapped,
        {
            "probe__minilm-l6__sst2__gates__k2__cached__s42": (161, [[1, 2], [0, 1]]),  # 0.805 against 0.80
            "probe__minilm-l6__sst2__gates__k2__cached__s43": (120, half),  # 0.60: far outside
            "probe__minilm-l6__sst2__none__k0__cached__s42": (170, [[0, 0]]),
        },  # other heads: counted apart
        {"probe__minilm-l6__sst2__gates__k2__cached": 12.0, "estimate__minilm-l6__sst2": 3.0},
    )
    log = tmp_path / "grid.log"
    log.write_text("[1/2] estimate__minilm-l6__sst2 (elapsed 0m03s)\ngrid default: done in 4m07s\n", encoding="utf-8")

    found = compare(gpu, cpu, log)

    constants = {row["task"]: row for row in found["constants"]}
    assert constants["sst2"]["met"] and constants["sst2"]["constants"] < 1e-5
    assert not constants["cola"]["met"] and abs(constants["cola"]["constants"] - 3e-4) < 1e-6
    assert [(r["cpu"], r["gpu"]) for r in found["lrs"]] == [(2e-4, 1e-3)]
    assert found["rankings"] == [{"ranking": "minilm-l6__sst2__gates", "equal": False, "half_overlap": 2, "half": 2}]
    scores = {row["result"]: row for row in found["scores"]}
    near, far = scores[f"{GATES}__s42"], scores[f"{GATES}__s43"]
    other = scores["probe__minilm-l6__sst2__none__k0__cached__s42"]
    assert near["same_heads"] and near["inside"] and near["low"] < 0.8 < near["high"]
    assert far["same_heads"] and not far["inside"] and far["gpu"] == 0.6
    assert not other["same_heads"]
    assert found["time"] == {"runs": 2, "gpu_seconds": 15.0, "cpu_seconds": 360.0, "wall_seconds": 247}

    text = markdown(found, {"device": "NVIDIA H200", "commit": "abc"}, "cmd")
    assert "- constants within 1e-05: 1 of 2 tasks" in text
    assert "- lr choices equal: 0 of 1" in text
    assert "- rankings with the same head order: 0 of 1" in text
    assert "probe results at the same constant heads: 2 of 3; of these, GPU scores inside the CPU result's 95% " in text
    assert "interval: 1 of 2; equal to the CPU score: 0 of 2" in text
    assert "grid wall time 4.1 min; summed run seconds 0.2 min on the GPU against 6.0 min" in text
    assert "| probe__minilm-l6__sst2__gates__k2__cached__s43 | 0.8000 [" in text
    assert "| minilm-l6__sst2__gates | no | 2/2 |" in text


def test_the_wall_time_is_read_in_both_of_the_runners_formats():
    assert wall_seconds("done in 3m07s: 2 ok, 0 failed") == 187
    assert wall_seconds("done in 0m39s: 3 ok\n...\ndone in 2h05m: 355 ok, 0 failed") == 7500
    assert wall_seconds("[1/2] estimate__minilm-l6__sst2 (elapsed 0m03s)") is None
