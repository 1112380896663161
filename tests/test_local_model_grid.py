"""A grid whose model is a local folder (issue 16): the folder's path never reaches a run id or a file
name, and every run, the chapters included, executes."""

from __future__ import annotations

import io
import shutil
import uuid

import pytest
import yaml

from papa.core.names import slug
from papa.pipeline.plan import ROOT, expand, load_config
from papa.pipeline.runner import run_grid

pytestmark = [pytest.mark.data, pytest.mark.slow]


def test_a_grid_on_a_local_model_folder_runs(tmp_path):
    import papa

    folder = tmp_path / "models" / "my encoder"  # a path with a separator and a space
    lm = papa.load_model("minilm-l6", "cpu")
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    name = f"test-local-{uuid.uuid4().hex[:8]}"
    config = {
        "name": name,
        "models": [str(folder)],
        "tasks": ["sst2"],
        "max_length": 32,
        "estimate": {"max_examples": 16},
        "rank": {"methods": ["deviation"], "epochs": 1, "max_train_examples": 16, "max_eval_examples": 16},
        "probe": {"fractions": [0, 1], "seeds": [1], "epochs": 1, "max_train_examples": 16, "max_eval_examples": 16},
        "floors": {"attention_free": False},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    runs_folder = ROOT / "book" / "runs" / name
    try:
        runs = expand(load_config(path))
        model_slug = slug(str(folder))
        assert all("/" not in r.run_id and " " not in r.run_id for r in runs)
        assert f"estimate__{model_slug}__sst2" in {r.run_id for r in runs}
        out = io.StringIO()
        assert run_grid(path, out=out) == 0, out.getvalue()
        assert (runs_folder / "results.ipynb").is_file() and (runs_folder / "controls.ipynb").is_file()
        results = sorted((runs_folder / "artifacts" / "results").glob("*.json"))
        assert [p.name for p in results] == sorted(f"probe__{model_slug}__sst2__{m}__cached__s1.json" for m in ("none__k0", "all__k72"))
    finally:
        shutil.rmtree(runs_folder, ignore_errors=True)
