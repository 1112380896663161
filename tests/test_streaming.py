"""Features above the memory budget stream from a memory-mapped file under PAPA_CACHE_DIR, with the
same values (and so the same probe losses and scores) as in RAM."""

from __future__ import annotations

import dataclasses
import errno
import gc

import pytest
import torch
from safetensors.torch import load_file
from tiny import HEADS, LAYERS, TINY_BERT, L, tiny_batch
from transformers import BertConfig, BertModel

from papa.core.errors import PapaError, ResourceBudgetError
from papa.core.io import TEMP_NAME
from papa.core.layout import IGNORE_INDEX
from papa.probing import extraction, feature_files
from papa.probing import features as feature_cache
from papa.probing.extraction import extract_features
from papa.probing.features import load_cached, store_cached
from papa.probing.probe import CachedSource, ProbeConfig, build_probe, predict, train_probe

TINY_BUDGET = "1e-9"  # one byte: every feature set streams


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPA_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PAPA_MEMORY_BUDGET_GB", raising=False)
    return tmp_path / "features"


def _model():
    torch.manual_seed(0)
    return BertModel(BertConfig(**TINY_BERT)).eval()


def _sequence_inputs(n=12):
    lengths = [16, 9, 4, 12, 3, 7, 16, 5, 11, 8, 6, 10][:n]
    encoded = tiny_batch(lengths, seed=1)
    encoded["labels"] = torch.tensor([i % 2 for i in range(n)])
    return encoded


def _token_inputs():
    encoded = tiny_batch([16, 9, 4, 12, 3, 7], seed=2)
    labels = torch.full(encoded["input_ids"].shape, IGNORE_INDEX)
    generator = torch.Generator().manual_seed(3)
    for row, length in enumerate([16, 9, 4, 12, 3, 7]):
        labels[row, 1 : length - 1 : 2] = torch.randint(0, 3, ((length - 2 + 1) // 2,), generator=generator)
    encoded["labels"] = labels
    return encoded


def _both(model, encoded, token_task, monkeypatch):
    in_ram = extract_features(model, encoded, token_task, batch_size=5)
    monkeypatch.setenv("PAPA_MEMORY_BUDGET_GB", TINY_BUDGET)
    streamed = extract_features(model, encoded, token_task, batch_size=5)
    monkeypatch.delenv("PAPA_MEMORY_BUDGET_GB")
    return in_ram, streamed


@pytest.mark.parametrize("token_task", [False, True], ids=["sequence", "token"])
def test_streamed_features_equal_in_ram(cache, monkeypatch, token_task):
    encoded = _token_inputs() if token_task else _sequence_inputs()
    in_ram, streamed = _both(_model(), encoded, token_task, monkeypatch)
    assert not in_ram.streamed and in_ram.file is None
    assert streamed.streamed and streamed.file.parent == cache and TEMP_NAME.fullmatch(streamed.file.name)
    assert streamed.file.name.startswith(".streamed.safetensors.")
    ram_tensors, disk_tensors = in_ram.as_tensors(), streamed.as_tensors()
    assert (
        sorted(ram_tensors)
        == sorted(disk_tensors)
        == (["example", "labels", "states"] if token_task else ["labels", "mask", "positions", "states"])
    )
    for name, tensor in ram_tensors.items():
        assert disk_tensors[name].dtype == tensor.dtype and torch.equal(disk_tensors[name], tensor), name
    assert streamed.num_examples == in_ram.num_examples == 12 - 6 * token_task


@pytest.mark.parametrize("token_task", [False, True], ids=["sequence", "token"])
def test_probe_on_streamed_features_gives_identical_losses_and_scores(cache, monkeypatch, token_task):
    encoded = _token_inputs() if token_task else _sequence_inputs()
    in_ram, streamed = _both(_model(), encoded, token_task, monkeypatch)
    config = ProbeConfig(lr=1e-3, epochs=3, batch_size=4, seed=7)
    histories, batches = [], []
    for features in (in_ram, streamed):
        source = CachedSource(features)
        batches.append(source.batch(torch.tensor([5, 0, 3])))

        def evaluate(probe, source=source):
            preds, gold = predict(probe, source, batch_size=5)
            return {"main": float((preds == gold).float().mean())}

        torch.manual_seed(11)
        probe = build_probe(token_task, LAYERS + 1, 16, TINY_BERT["hidden_size"], 3, config)
        histories.append(train_probe(probe, source, evaluate, config).epochs)
    (ram_inputs, ram_labels), (disk_inputs, disk_labels) = batches
    assert torch.equal(ram_labels, disk_labels)
    assert all(torch.equal(a, b) for a, b in zip(ram_inputs, disk_inputs, strict=True))
    assert histories[0] == histories[1]
    assert len(histories[0]) == 3 and histories[0][0]["train_loss"] != histories[0][-1]["train_loss"]


def test_streamed_features_move_into_the_cache_and_are_mapped_back(cache, monkeypatch):
    in_ram, streamed = _both(_model(), _sequence_inputs(), False, monkeypatch)
    scratch = streamed.file
    key = feature_cache.cached_features_key(task="tiny", split="train")
    store_cached(key, streamed)
    entry = cache / f"{key}.safetensors"
    assert streamed.file == entry and not scratch.exists()
    assert sorted(p.name for p in cache.iterdir()) == [entry.name]
    del streamed
    gc.collect()
    assert entry.exists()  # adopted: no longer deleted with the object
    expected = in_ram.as_tensors()
    assert {name: torch.equal(t, expected[name]) for name, t in load_file(entry).items()} == dict.fromkeys(
        expected, True
    )  # a valid safetensors file
    metadata, _ = feature_files.read_file(entry)
    assert (
        metadata["key"] == key
        and metadata["parts"] == key.parts_json
        and metadata["version"] == str(feature_cache.FEATURES_VERSION) == "3"
    )
    monkeypatch.setenv("PAPA_MEMORY_BUDGET_GB", TINY_BUDGET)
    mapped = load_cached(key)
    assert mapped.file == entry and all(torch.equal(t, expected[name]) for name, t in mapped.as_tensors().items())
    monkeypatch.delenv("PAPA_MEMORY_BUDGET_GB")
    loaded = load_cached(key)
    assert loaded.file is None and all(torch.equal(t, expected[name]) for name, t in loaded.as_tensors().items())


def test_unstored_streamed_features_leave_nothing(cache, monkeypatch):
    _, streamed = _both(_model(), _sequence_inputs(), False, monkeypatch)
    assert len(list(cache.iterdir())) == 1
    del streamed
    gc.collect()
    assert list(cache.iterdir()) == []


def test_too_little_disk_is_refused_naming_papa_cache_dir(cache, monkeypatch):
    monkeypatch.setenv("PAPA_MEMORY_BUDGET_GB", TINY_BUDGET)
    monkeypatch.setattr(feature_cache.shutil, "disk_usage", lambda folder: type("Usage", (), {"free": 4_000})())
    with pytest.raises(ResourceBudgetError) as err:
        extract_features(_model(), _sequence_inputs(), token_task=False)
    # 12 examples x 3 states x 16 positions x 32 hidden x 2 bytes = 36,864 bytes
    assert str(err.value) == (
        "Caching encoder features would need 0.00 GB, above the memory budget of 0.00 GB, so they stream to disk, but "
        f"PAPA_CACHE_DIR ({cache.parent}) has only 0.00 GB free. "
        "Free disk space there, set PAPA_CACHE_DIR to a folder on a "
        "larger disk, or lower max_train_examples / max_eval_examples."
    )
    assert not cache.exists()  # nothing written, not even the folder


def test_disk_full_while_streaming_names_papa_cache_dir(cache, monkeypatch):
    monkeypatch.setenv("PAPA_MEMORY_BUDGET_GB", TINY_BUDGET)
    calls = []

    def full(self, rows):
        calls.append(len(rows))
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.handle.write(feature_files._flat_bytes(rows))

    monkeypatch.setattr(feature_files.StreamedFile, "append", full)
    monkeypatch.setattr(extraction, "STREAM_WINDOW", 5)  # compact passes stream a window of rows at a time
    with pytest.raises(PapaError) as err:
        extract_features(_model(), _sequence_inputs(), token_task=False, batch_size=5)
    assert (
        str(err.value)
        == f"No space left to write {cache}. Free disk space there, or set PAPA_CACHE_DIR to a folder on a larger disk."
    )
    assert calls == [5, 5] and list(cache.iterdir()) == []


def _tiny_run():
    from papa.core.models import LoadedModel
    from papa.core.tasks import get_task
    from papa.probing.task_inputs import TaskInputs

    lm = LoadedModel("tiny", _model(), tokenizer=None, source="local", fingerprint="0123456789abcdef")
    train = _sequence_inputs()
    evals = tiny_batch([5, 16, 9, 2], seed=4)
    evals["labels"] = torch.tensor([1, 0, 0, 1])
    return lm, TaskInputs(
        get_task("sst2"), ["negative", "positive"], train, evals, list(range(12)), list(range(4)), 16, True
    )


def test_a_run_above_the_memory_budget_streams_and_scores_as_in_ram(cache, monkeypatch):
    from papa.probing.experiment import run_probe
    from papa.probing.extraction import get_features

    lm, inputs = _tiny_run()
    settings = dict(model=lm, inputs=inputs, epochs=3, lr=1e-3, batch_size=4, seed=5, device="cpu")
    in_ram = run_probe(**settings, use_cache=False)
    assert not cache.exists()
    monkeypatch.setenv("PAPA_MEMORY_BUDGET_GB", TINY_BUDGET)
    streamed = run_probe(**settings)
    assert streamed["feature_cache_hits"] == {"train": False, "eval": False}
    assert streamed["epochs"] == in_ram["epochs"] and streamed["score"] == in_ram["score"]
    assert len(list(cache.glob("*.safetensors"))) == 2 and not [p for p in cache.iterdir() if p.name.startswith(".")]
    again = run_probe(**settings)
    assert again["feature_cache_hits"] == {"train": True, "eval": True} and again["epochs"] == in_ram["epochs"]
    features, hit = get_features(lm, inputs, "train", [], None, "cpu")
    assert hit and features.streamed and features.file.parent == cache


def test_a_failed_stream_leaves_gradients_enabled(cache, monkeypatch):
    monkeypatch.setenv("PAPA_MEMORY_BUDGET_GB", TINY_BUDGET)

    def fail(self, rows):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(feature_files.StreamedFile, "append", fail)
    with pytest.raises(PapaError) as err:  # the traceback stays alive, as in a notebook's last error
        extract_features(_model(), _sequence_inputs(), token_task=False, batch_size=5)
    assert torch.is_grad_enabled()
    assert "Input/output error" in err.value.problem and err.value.__traceback__ is not None
    assert torch.ones(1, requires_grad=True).mul(2).requires_grad  # a new computation records its graph


def test_the_cache_key_follows_the_encoded_inputs_not_only_their_indices(cache):
    """Another data folder or tokenizer gives other input ids under the same indices: a miss, never stale features."""
    from papa.probing.extraction import get_features

    lm, inputs = _tiny_run()
    keys: list[str] = []
    first, hit = get_features(lm, inputs, "train", [], None, "cpu", keys=keys)
    assert not hit and len(keys) == 1 and (cache / f"{keys[0]}.safetensors").is_file()
    assert get_features(lm, inputs, "train", [], None, "cpu", keys=keys)[1] and keys[1] == keys[0]
    edited = dict(inputs.train, input_ids=inputs.train["input_ids"].clone())
    edited["input_ids"][0, 1] += 1  # one token of one example, same indices
    other_text = dataclasses.replace(inputs, train=edited)
    assert not get_features(lm, other_text, "train", [], None, "cpu", keys=keys)[1] and keys[2] != keys[0]
    relabelled = dataclasses.replace(inputs, train=dict(inputs.train, labels=1 - inputs.train["labels"]))
    features, hit = get_features(lm, relabelled, "train", [], None, "cpu", keys=keys)
    assert not hit and torch.equal(features.labels, 1 - first.labels)  # a sequence task's labels live in the entry


def test_a_run_records_its_cache_entries_and_only_shared_head_sets_are_stored(cache):
    from papa.core.constants import estimate_constants
    from papa.probing.experiment import run_probe
    from papa.probing.extraction import get_features

    lm, inputs = _tiny_run()
    result = run_probe(model=lm, inputs=inputs, epochs=1, lr=1e-3, batch_size=4, seed=5, device="cpu")
    entries = sorted(p.stem for p in cache.glob("*.safetensors"))
    assert sorted(result["feature_cache_keys"]) == entries and len(entries) == 2  # k = 0: train and dev, stored
    constants = estimate_constants(lm.model, inputs.train)
    every = [(layer, head) for layer in range(LAYERS) for head in range(HEADS)]
    for heads, stored in (([(0, 0)], False), (every[1:], False), (every, True)):
        keys = []
        features, hit = get_features(lm, inputs, "train", heads, constants, "cpu", keys=keys)
        assert not hit and (cache / f"{keys[0]}.safetensors").exists() == stored, len(heads)
        again, hit = get_features(lm, inputs, "train", heads, constants, "cpu")
        assert hit == stored and torch.equal(again.states, features.states)  # recomputed alike when not stored


def test_a_faithful_run_that_fails_after_patching_leaves_the_encoder_unpatched(monkeypatch):
    from papa.core.patching import is_patched
    from papa.probing import experiment

    lm, inputs = _tiny_run()
    heads = [[0, 0], [1, 1]]
    monkeypatch.setattr(experiment, "resolve_heads", lambda *args: (len(heads), heads))
    fake = {
        "constants": torch.full((LAYERS, HEADS, L, L), 1 / L),
        "output_means": None,
        "check_compatible": lambda *a: None,
    }
    monkeypatch.setattr(experiment, "load_constants", lambda path: type("C", (), fake)())
    with pytest.raises(PapaError, match=r"The pool holds 12 training examples, fewer than the 12 \+ 4"):
        experiment.run_probe(
            model=lm, inputs=inputs, constants="c.safetensors", constant_heads=2, mode="faithful", selection="heldout",
            pool_examples=12, max_train_examples=12, heldout_examples=4, epochs=1, device="cpu",
        )  # fmt: skip
    assert not is_patched(lm.model)
