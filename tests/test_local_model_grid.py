"""A grid whose model is a local folder: the folder's path never reaches a run id or a file
name, every run, the chapters included, executes, and a local copy of minilm-l6's folder gives the same constants,
ranking and scores as the same grid on the embedded minilm-l6."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from tiny import write_tiny_grid

from papa.core.names import slug
from papa.pipeline.plan import ROOT, expand, load_config
from papa.pipeline.runner import run_grid

pytestmark = [pytest.mark.data, pytest.mark.slow]


#: What a probe result holds that depends on the weights and the data only (not on the model's name or the clock).
SCIENCE = ("score", "metric", "metrics", "dev", "selected_epoch", "floors")


def test_a_grid_on_a_local_model_folder_runs_and_scores_as_the_embedded_model(tmp_path, monkeypatch):
    import papa
    from papa.core.io import read_json_verified
    from papa.core.models import resolve_model_path, weights_fingerprint

    monkeypatch.setenv("PAPA_CACHE_DIR", str(tmp_path / "cache"))  # each grid extracts its own features
    folder = tmp_path / "models" / "my encoder"  # a path with a separator and a space
    lm = papa.load_model("minilm-l6", "cpu")
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    local_path, local = write_tiny_grid(tmp_path, "test-local", models=[str(folder)])
    embedded_path, embedded = write_tiny_grid(tmp_path, "test-local")
    folders = {local: ROOT / "book" / "runs" / local, embedded: ROOT / "book" / "runs" / embedded}
    try:
        runs = expand(load_config(local_path))
        model_slug = slug(str(folder))
        assert all("/" not in r.run_id and " " not in r.run_id for r in runs)
        assert f"estimate__{model_slug}__sst2" in {r.run_id for r in runs}
        for path in (local_path, embedded_path):
            out = io.StringIO()
            assert run_grid(path, out=out) == 0, out.getvalue()
        runs_folder = folders[local]
        assert (runs_folder / "results.ipynb").is_file() and (runs_folder / "controls.ipynb").is_file()
        results = sorted((runs_folder / "artifacts" / "results").glob("*.json"))
        names = sorted(f"probe__{model_slug}__sst2__{m}__cached__s1.json" for m in ("none__k0", "all__k72"))
        assert [p.name for p in results] == names

        # the local copy of minilm-l6's folder gives the embedded model's constants, ranking and scores
        def artifact(grid: str, kind: str, name: str) -> Path:
            model = model_slug if grid == local else "minilm-l6"
            return folders[grid] / "artifacts" / kind / name.replace("MODEL", model)

        grids = (local, embedded)
        ours, theirs = (papa.load_constants(artifact(g, "constants", "MODEL__sst2.safetensors")) for g in grids)
        # The fingerprints hash the files' tensors; the package's file also holds the buffer position_ids, which
        # save_pretrained no longer writes, so the copy has another fingerprint (and its own constants).
        fingerprints = (ours.meta["fingerprint"], theirs.meta["fingerprint"])
        assert fingerprints == (weights_fingerprint(str(folder)), lm.fingerprint) and fingerprints[0] != fingerprints[1]
        package_file = Path(resolve_model_path("minilm-l6")[0]) / "model.safetensors"
        with safe_open(str(package_file), "pt") as package, safe_open(str(folder / "model.safetensors"), "pt") as copy:
            assert set(package.keys()) - set(copy.keys()) == {"embeddings.position_ids"} and set(copy.keys()) < set(
                package.keys()
            )
        assert torch.equal(ours.constants, theirs.constants) and torch.equal(ours.deviation, theirs.deviation)
        rankings = [read_json_verified(artifact(g, "rankings", "MODEL__sst2__deviation.json")) for g in grids]
        assert rankings[0]["ranking"] == rankings[1]["ranking"]
        for heads in ("none__k0", "all__k72"):
            name = f"probe__MODEL__sst2__{heads}__cached__s1.json"
            ours, theirs = (read_json_verified(artifact(g, "results", name)) for g in grids)
            assert ours["score"] is not None and len(ours["dev"]["predictions"]) == 16
            assert {key: ours.get(key) for key in SCIENCE} == {key: theirs.get(key) for key in SCIENCE}, heads
            assert [e["train_loss"] for e in ours["epochs"]] == [e["train_loss"] for e in theirs["epochs"]]
    finally:
        for runs_folder in folders.values():
            shutil.rmtree(runs_folder, ignore_errors=True)
