"""Files papa writes: permissions (temporaries included), stale temporaries, atomicity of streamed
writes, and the feature cache (checksummed, bound to its key, full disks naming PAPA_CACHE_DIR)."""

from __future__ import annotations

import errno
import os
import stat
import types
import warnings

import pytest
import torch
from tiny import HEADS, LAYERS, TINY_BERT, tiny_batch, tiny_constants
from transformers import BertConfig, BertModel

from papa.core import io as papa_io
from papa.core.constants import ConstantSet
from papa.core.errors import PapaError
from papa.core.heads import all_heads
from papa.core.io import atomic_write_json, atomic_write_with, remove_stale_temp_files
from papa.core.models import LoadedModel
from papa.core.tasks import get_task
from papa.probing import features as feature_cache
from papa.probing.extraction import get_features
from papa.probing.features import FeatureCacheWarning, Features
from papa.probing.task_inputs import TaskInputs


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPA_CACHE_DIR", str(tmp_path))
    return tmp_path / "features"


def _features() -> Features:
    generator = torch.Generator().manual_seed(0)
    states = torch.randn(3, 2, 4, 5, generator=generator).half()
    return Features(
        states,
        torch.tensor([0, 1, 1]),
        mask=torch.tensor([[1, 1, 0, 0]] * 3, dtype=torch.bool),
        positions=torch.arange(4),
    )


def test_files_get_the_umask_permissions_not_0600(tmp_path):
    old = os.umask(0o022)
    try:
        path = atomic_write_json(tmp_path / "result.json", {"score": 1.0})
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_temporary_file_has_the_umask_permissions_while_it_is_written(tmp_path):
    """A writer killed mid-write leaves a temporary file: it must not be a private 0600 one."""
    seen = {}

    def write(tmp):
        seen["name"] = os.path.basename(tmp)
        seen["mode"] = stat.S_IMODE(os.stat(tmp).st_mode)
        with open(tmp, "wb") as handle:
            handle.write(b"data")

    old = os.umask(0o022)
    try:
        atomic_write_with(tmp_path / "big.safetensors", write, by_path=True)
    finally:
        os.umask(old)
    assert seen["mode"] == 0o644
    assert papa_io.TEMP_NAME.fullmatch(seen["name"]) and seen["name"].startswith(".big.safetensors.")


def test_remove_stale_temp_files_removes_only_papas_temporaries(tmp_path):
    papa_files = [tmp_path / ".manifest.json.ab_cd123.tmp", tmp_path / "artifacts" / ".x.safetensors.k2j3h4g5.tmp"]
    others = [
        tmp_path / "notes.tmp",
        tmp_path / ".a.tmp",
        tmp_path / ".b.json.short.tmp",
        tmp_path / "result.json",
        tmp_path / ".m.json.ABCDEFGH.tmp",
    ]
    for path in papa_files + others:
        path.parent.mkdir(exist_ok=True)
        path.write_text("x")
    (tmp_path / ".dir.abcdefgh.tmp").mkdir()  # a folder is never touched
    (tmp_path / ".link.abcdefgh.tmp").symlink_to(tmp_path / "result.json")  # nor a link
    old = tmp_path / ".old.json.aaaaaaaa.tmp"
    old.write_text("x")
    os.utime(old, (1, 1))
    assert remove_stale_temp_files(tmp_path, min_age_s=3600) == [old]
    assert remove_stale_temp_files(tmp_path) == sorted(papa_files)
    assert (
        all(path.exists() for path in others)
        and (tmp_path / ".dir.abcdefgh.tmp").is_dir()
        and (tmp_path / ".link.abcdefgh.tmp").is_symlink()
    )
    assert remove_stale_temp_files(tmp_path / "nowhere") == []


def test_streamed_write_that_fails_leaves_nothing(tmp_path):
    def write(tmp):
        with open(tmp, "wb") as handle:
            handle.write(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write_with(tmp_path / "big.safetensors", write, by_path=True)
    assert list(tmp_path.iterdir()) == []


def test_feature_cache_round_trip(cache):
    features = _features()
    feature_cache.store_cached("key", features)
    loaded = feature_cache.load_cached("key")
    assert torch.equal(loaded.states, features.states) and torch.equal(loaded.mask, features.mask)
    assert torch.equal(loaded.positions, features.positions) and torch.equal(loaded.labels, features.labels)


@pytest.mark.parametrize("offset", [-1, -40])  # inside the tensor bytes (states are stored last or not: both)
def test_feature_cache_flipped_byte_is_recomputed_never_read(cache, offset):
    feature_cache.store_cached("key", _features())
    path = cache / "key.safetensors"
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    assert feature_cache.load_cached("key") is None
    assert not path.exists()  # deleted, so the next run recomputes and rewrites it


def test_feature_cache_truncated_or_without_checksum_is_recomputed(cache):
    from safetensors.torch import save_file

    feature_cache.store_cached("key", _features())
    path = cache / "key.safetensors"
    path.write_bytes(path.read_bytes()[:-10])
    assert feature_cache.load_cached("key") is None
    save_file(_features().as_tensors(), cache / "old.safetensors")  # an entry from before checksums
    assert feature_cache.load_cached("old") is None


def test_feature_cache_entry_without_key_is_a_miss(cache):
    from safetensors.torch import save_file

    tensors = _features().as_tensors()
    cache.mkdir(parents=True)
    save_file(
        tensors, cache / "nokey.safetensors", metadata={"sha256": feature_files_sha(tensors), "version": "2"}
    )  # an entry from before keys
    assert feature_cache.load_cached("nokey") is None
    assert not (cache / "nokey.safetensors").exists()


def feature_files_sha(tensors):
    from papa.probing.feature_files import tensors_sha256

    return tensors_sha256(tensors)


# -- swapped entries: the cache checks each entry against its own key -------------------------------
def _tiny_run():
    torch.manual_seed(0)
    model = BertModel(BertConfig(**TINY_BERT)).eval()
    lm = LoadedModel("tiny", model, tokenizer=None, source="local", fingerprint="0123456789abcdef")
    train = tiny_batch([16, 9, 4, 12, 3, 7], seed=1)
    train["labels"] = torch.tensor([0, 1, 1, 0, 1, 0])
    evals = tiny_batch([5, 16], seed=2)
    evals["labels"] = torch.tensor([1, 0])
    inputs = TaskInputs(get_task("sst2"), ["negative", "positive"], train, evals, list(range(6)), [0, 1], 16, True)
    constants = ConstantSet(
        tiny_constants(), torch.ones(16, 16, dtype=torch.float64), torch.zeros(LAYERS, HEADS), {"sha256": "c0ffee"}
    )
    return lm, inputs, constants


def test_swapped_cache_entries_are_recomputed_not_read(cache):
    lm, inputs, constants = _tiny_run()
    heads = {"k0": [], "all": all_heads(LAYERS, HEADS)}
    first = {name: get_features(lm, inputs, "train", h, constants, "cpu") for name, h in heads.items()}
    assert [hit for _, hit in first.values()] == [False, False]
    assert not torch.equal(first["k0"][0].states, first["all"][0].states)
    entries = sorted(cache.iterdir())
    assert len(entries) == 2
    a, b = entries
    tmp = a.with_suffix(".swap")
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = {name: get_features(lm, inputs, "train", h, constants, "cpu") for name, h in heads.items()}
    assert [hit for _, hit in again.values()] == [False, False]  # both recomputed
    for name in heads:
        assert all(torch.equal(t, first[name][0].as_tensors()[k]) for k, t in again[name][0].as_tensors().items())
    reports = sorted(str(w.message) for w in caught if issubclass(w.category, FeatureCacheWarning))
    assert reports == sorted(
        f"The feature-cache entry {x.name} does not belong to its name "
        f"(it holds the features of key {y.stem}): it is recomputed"
        for x, y in ((a, b), (b, a))
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        third = {name: get_features(lm, inputs, "train", h, constants, "cpu") for name, h in heads.items()}
    assert [hit for _, hit in third.values()] == [
        True,
        True,
    ] and caught == []  # reported once: the entries are right now
    for name in heads:
        assert torch.equal(third[name][0].states, first[name][0].states)


def test_feature_cache_entry_records_its_parameters(cache):
    key = feature_cache.cached_features_key(task="sst2", split="train", heads=[[0, 1]])
    feature_cache.store_cached(key, _features())
    from papa.probing.feature_files import read_file

    metadata, _ = read_file(cache / f"{key}.safetensors")
    assert metadata["key"] == key
    assert metadata["parts"] == '{"heads": [[0, 1]], "split": "train", "task": "sst2", "version": 3}'
    other = feature_cache.cached_features_key(task="sst2", split="eval", heads=[[0, 1]])
    (cache / f"{key}.safetensors").rename(cache / f"{other}.safetensors")
    with pytest.warns(FeatureCacheWarning, match=f"it holds the features of key {key}"):
        assert feature_cache.load_cached(other) is None


def test_full_cache_disk_names_papa_cache_dir(cache, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    proxy = types.SimpleNamespace(**{name: getattr(os, name) for name in dir(os) if not name.startswith("__")})
    proxy.fsync = full
    monkeypatch.setattr(papa_io, "os", proxy)
    with pytest.raises(PapaError) as err:
        feature_cache.store_cached("key", _features())
    assert (
        str(err.value) == f"No space left to write {cache / 'key.safetensors'}. Free disk "
        "space there, or set PAPA_CACHE_DIR to a folder on a larger disk."
    )
    assert list(cache.iterdir()) == []


def test_unwritable_cache_names_papa_cache_dir(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("PAPA_CACHE_DIR", str(blocker))
    with pytest.raises(PapaError) as err:
        feature_cache.store_cached("key", _features())
    assert (
        str(err.value) == f"Cannot create the feature cache {blocker / 'features'}: "
        "Not a directory. Set PAPA_CACHE_DIR to a writable folder."
    )


def test_a_killed_writer_leaves_a_umask_temporary_that_cleanup_removes(tmp_path):
    """SIGKILL-like exit mid-write: the leftover is papa's temp name at 0644, and only it is removed."""
    import subprocess
    import sys

    script = (
        "import os\n"
        "os.umask(0o022)\n"
        "from papa.core.io import atomic_write_with\n"
        "def write(handle):\n"
        "    handle.write(b'half'); handle.flush(); os._exit(9)\n"
        f"atomic_write_with({str(tmp_path / 'manifest.json')!r}, write)\n"
    )
    assert subprocess.run([sys.executable, "-c", script], check=False).returncode == 9
    (leftover,) = tmp_path.iterdir()
    assert papa_io.TEMP_NAME.fullmatch(leftover.name) and leftover.name.startswith(".manifest.json.")
    assert stat.S_IMODE(leftover.stat().st_mode) == 0o644 and leftover.read_bytes() == b"half"
    assert remove_stale_temp_files(tmp_path) == [leftover]
    assert list(tmp_path.iterdir()) == []
