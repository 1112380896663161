"""A model folder is checked as a whole before any weights load: tokenizer files, a vocabulary that fits
the embedding matrix, a size bound from the config, and checkpoint tensors that match the config. Each refusal is
one PapaError naming the folder, exit 2 from `papa probe`, `papa estimate`, `papa study --dry-run` and the grid, and
nothing written."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from tiny import TINY_BERT, tiny_tokenizer, write_tiny_grid
from transformers import BertConfig, BertForMaskedLM, BertModel

from papa.cli import main
from papa.core.errors import PapaError
from papa.core.model_folders import MAX_LAYERS, check_model_fits
from papa.core.models import EMBEDDED_MODELS, load_model
from papa.pipeline.plan import ROOT

REDO_CONFIG = "Make config.json match the weights, or save the model again with save_pretrained."
NO_TOKENIZER = (
    "has no tokenizer files (none of tokenizer.json, vocab.txt, vocab.json, spm.model, sentencepiece.bpe.model, "
    "spiece.model, tokenizer.model): every word would become one unknown token. Save the model's tokenizer into the "
    "folder too (tokenizer.save_pretrained(folder))."
)


def _folder(path: Path, tokenizer: bool = True, **config) -> Path:
    """A tiny BERT saved with save_pretrained (and a tokenizer fitting its 100-row vocabulary), then ``config.json``
    edited with ``config``."""
    torch.manual_seed(0)
    BertModel(BertConfig(**TINY_BERT)).save_pretrained(path)
    if tokenizer:
        tiny_tokenizer().save_pretrained(path)
    if config:
        saved = json.loads((path / "config.json").read_text())
        (path / "config.json").write_text(json.dumps({**saved, **config}))
    return path


def _refusal(folder: Path) -> str:
    with pytest.raises(PapaError) as err:
        check_model_fits(folder)
    return str(err.value)


def test_a_tiny_folder_with_its_tokenizer_passes_and_loads(tmp_path):
    folder = _folder(tmp_path / "ok")
    check_model_fits(folder)
    lm = load_model(str(folder))
    assert (lm.num_layers, len(lm.tokenizer)) == (TINY_BERT["num_hidden_layers"], TINY_BERT["vocab_size"])


def test_a_task_models_checkpoint_passes_its_head_dropped(tmp_path):
    """``bert.``-prefixed tensors and an MLM head (``cls.*``): what transformers drops, papa does not refuse."""
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig(**TINY_BERT)).save_pretrained(tmp_path)
    tiny_tokenizer().save_pretrained(tmp_path)
    check_model_fits(tmp_path)


def test_no_tokenizer_files(tmp_path):
    folder = _folder(tmp_path / "m", tokenizer=False)
    assert _refusal(folder) == f"The model {folder} {NO_TOKENIZER}"


@pytest.mark.parametrize(
    ("entries", "why"), [(300, "ids beyond the last row"), (20, "fewer than half its rows: another model's tokenizer")]
)
def test_a_tokenizer_that_does_not_fit_the_embedding_matrix(tmp_path, entries, why):
    folder = _folder(tmp_path / "m", tokenizer=False)
    tiny_tokenizer(entries).save_pretrained(folder)
    assert _refusal(folder) == (
        f"The model {folder}: its tokenizer has {entries} entries but its embedding matrix 100 rows ({why}). "
        "Save the tokenizer the model was trained with into the folder."
    )


def test_more_layers_in_the_config_than_in_the_weights(tmp_path):
    folder = _folder(tmp_path / "m", num_hidden_layers=3)  # 2 layers of weights: layer 2 would be random
    assert _refusal(folder) == (
        f"The model {folder}: its checkpoint lacks 16 weights its config.json needs "
        "(encoder.layer.2.attention.output.LayerNorm.bias, encoder.layer.2.attention.output.LayerNorm.weight, "
        "encoder.layer.2.attention.output.dense.bias, encoder.layer.2.attention.output.dense.weight, "
        f"encoder.layer.2.attention.self.key.bias and 11 more); transformers would initialise them at random. "
        f"{REDO_CONFIG}"
    )


def test_fewer_layers_in_the_config_than_in_the_weights(tmp_path):
    folder = _folder(tmp_path / "m", num_hidden_layers=1)
    message = _refusal(folder)
    assert message.startswith(f"The model {folder}: its checkpoint holds 16 encoder tensors config.json has no place ")
    assert "(encoder.layer.1.attention.output.LayerNorm.bias," in message and message.endswith(REDO_CONFIG)


def test_a_tensor_of_another_shape(tmp_path):
    folder = _folder(tmp_path / "m", intermediate_size=38)
    message = _refusal(folder)
    assert message.startswith(f"The model {folder}: 6 tensors do not have the shape config.json gives: ")
    assert "encoder.layer.0.intermediate.dense.bias [37] (config: [38])" in message


def test_absurd_layer_counts_are_refused_before_anything_is_built(tmp_path):
    folder = _folder(tmp_path / "m", num_hidden_layers=10_000)
    started = time.perf_counter()
    assert _refusal(folder) == (
        f"The model {folder}: its config.json asks for 10000 layers (num_hidden_layers), not a whole number from 1 "
        f"to {MAX_LAYERS}. Set num_hidden_layers to the number of layers the checkpoint holds."
    )
    assert time.perf_counter() - started < 5


def test_a_config_far_beyond_its_checkpoint_is_refused_by_size(tmp_path):
    folder = _folder(tmp_path / "m", num_hidden_layers=500)
    assert _refusal(folder) == (
        f"The model {folder}: its config.json describes 3,400,932 parameters (500 layers), far more than the 20,010 "
        "its checkpoint holds. Make config.json match the weights (num_hidden_layers, hidden_size, ...), or save the "
        "model again with save_pretrained."
    )


def test_a_broken_safetensors_header(tmp_path):
    folder = _folder(tmp_path / "m")
    (folder / "model.safetensors").write_bytes((10**12).to_bytes(8, "little") + b"{}")
    assert _refusal(folder) == (
        f"The model {folder}: model.safetensors is not a readable safetensors file. Save the model and its tokenizer "
        "again with save_pretrained, into a folder of their own."
    )


# -- every entry point: one line, exit 2, nothing written -------------------------------------------------------------
@pytest.fixture
def offline(monkeypatch, tmp_path):
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("PAPA_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("command", ["probe", "estimate", "study", "grid-dry-run", "grid"])
def test_every_entry_point_refuses_a_folder_without_tokenizer(tmp_path, capsys, offline, command):
    folder = _folder(tmp_path / "model", tokenizer=False)
    out = tmp_path / "out"
    out.mkdir()
    grid, name = write_tiny_grid(tmp_path, "test-folders", models=[str(folder)])
    runs = ROOT / "book" / "runs" / name
    argv = {
        "probe": ["probe", "--model", str(folder), "--task", "sst2", "--out", str(out / "result.json")],
        "estimate": ["estimate", "--model", str(folder), "--task", "sst2", "--out", str(out / "c.safetensors")],
        "study": ["study", str(folder), "--tasks", "sst2", "--dry-run"],
        "grid-dry-run": ["grid", "run", str(grid), "--dry-run"],
        "grid": ["grid", "run", str(grid)],
    }[command]
    capsys.readouterr()
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err == f"papa: error: The model {folder} {NO_TOKENIZER}\n"
    assert list(out.iterdir()) == [] and not runs.exists()
    assert not (ROOT / "configs" / "study-model.yaml").exists()


def test_estimate_refuses_ten_thousand_layers_without_allocating(tmp_path, capsys, offline):
    folder = _folder(tmp_path / "model", num_hidden_layers=10_000)
    out = tmp_path / "c.safetensors"
    assert main(["estimate", "--model", str(folder), "--task", "sst2", "--out", str(out)]) == 2
    assert "asks for 10000 layers (num_hidden_layers)" in capsys.readouterr().err and not out.exists()


# -- the embedded models pass ----------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EMBEDDED_MODELS))
def test_every_embedded_model_passes_the_folder_check(name):
    check_model_fits(EMBEDDED_MODELS[name](), name)
