"""`papa probe` passes every protocol flag the schema gives it to run_probe (as its ProbeSettings), reads --lr-file
like the probe notebook, and fills {seed} into --out (run_probe replaced by a recorder: no model, no data)."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from papa.cli import main
from papa.core.io import atomic_write_json


@pytest.fixture
def recorded(monkeypatch):
    from papa.core import models
    from papa.probing import experiment, protocol  # noqa: F401  (imported before load_model is replaced: its own binding stays the real one)

    calls = []

    def fake_run_probe(model, task, constants, ranking, constant_heads, settings, **kwargs):
        fields = {key: value for key, value in dataclasses.asdict(settings).items() if key != "data"}
        calls.append(dict(model=model, task=task, constant_heads=constant_heads, **fields, **settings.data.__dict__))
        calls[-1] |= kwargs
        return {
            "task": task,
            "metric": "accuracy",
            "score": 0.5,
            "config": {"constant_heads": 0},
            "timings": {"total": 1.0},
        }

    monkeypatch.setattr(experiment, "run_probe", fake_run_probe)
    monkeypatch.setattr(models, "load_model", lambda name, device=None: SimpleNamespace(name=name))
    return calls


def test_protocol_flags_reach_run_probe_and_the_lr_file_replaces_lr(recorded, tmp_path):
    lr_file = tmp_path / "lr.json"
    atomic_write_json(lr_file, {"model": "minilm-l6", "task": "sst2", "lr": 1e-3})
    out = tmp_path / "r_s{seed}.json"
    argv = [
        "probe",
        "--task",
        "sst2",
        "--selection",
        "heldout",
        "--lr",
        "2e-5",
        "--lr-file",
        str(lr_file),
        "--patience",
        "2",
        "--pool-examples",
        "300",
    ]
    argv += [
        "--max-train-examples",
        "200",
        "--heldout-examples",
        "50",
        "--no-dev-every-epoch",
        "--eval-chunk-examples",
        "100",
        "--seed",
        "43",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    (call,) = recorded
    assert call["model"].name == "minilm-l6" and call["lr"] == 1e-3 and call["seed"] == 43
    assert (
        call["patience"],
        call["pool_examples"],
        call["heldout_examples"],
        call["dev_every_epoch"],
        call["eval_chunk_examples"],
    ) == (2, 300, 50, False, 100)
    assert (
        json.loads((tmp_path / "r_s43.json").read_text())["score"] == 0.5 and not (tmp_path / "r_s{seed}.json").exists()
    )


def test_without_an_lr_file_the_lr_flag_counts(recorded, tmp_path):
    assert main(["probe", "--task", "sst2", "--lr", "1e-4", "--out", str(tmp_path / "r.json")]) == 0
    assert recorded[0]["lr"] == 1e-4 and recorded[0]["model"] == "minilm-l6" and recorded[0]["patience"] is None


def test_an_lr_file_of_another_task_is_one_clear_error(recorded, tmp_path, capsys):
    lr_file = tmp_path / "lr.json"
    atomic_write_json(lr_file, {"model": "minilm-l6", "task": "cola", "lr": 1e-3})
    assert main(["probe", "--task", "sst2", "--lr-file", str(lr_file), "--out", str(tmp_path / "r.json")]) != 0
    assert "is for task 'cola', not 'sst2'" in capsys.readouterr().err and not recorded


def test_probe_settings_take_overrides_by_field_name_and_refuse_unknown_ones():
    from papa.core.errors import PapaError
    from papa.probing.experiment import run_probe
    from papa.probing.params import DataSettings, ProbeSettings

    base = ProbeSettings(seeds=[1, 2], data=DataSettings(max_train_examples=50))
    changed = base.with_options(lr=1e-3, max_train_examples=200, data_seed=3)
    assert (changed.lr, changed.seeds, changed.rates) == (1e-3, (1, 2), (1e-3,))
    assert (changed.data.max_train_examples, changed.data.data_seed, base.data.max_train_examples) == (200, 3, 50)
    assert base.with_options(lrs=[2e-5, 1e-3]).rates == (2e-5, 1e-3)
    with pytest.raises(PapaError, match="Unknown probe options 'epoch', 'seed'") as err:
        base.with_options(epoch=3, seed=4)
    assert "epochs" in err.value.hint and "max_train_examples" in err.value.hint
    with pytest.raises(PapaError, match="run_probe trains one seed, and the settings hold 2"):
        run_probe("minilm-l6", "sst2", None, None, 0, base)
