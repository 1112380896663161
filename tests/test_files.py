"""Files papa writes: permissions, atomicity of streamed writes, and the checksummed feature cache."""

from __future__ import annotations

import os
import stat

import pytest
import torch

from papa.core.io import atomic_write_json, atomic_write_with
from papa.probing import features as feature_cache
from papa.probing.features import Features


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPA_CACHE_DIR", str(tmp_path))
    return tmp_path / "features"


def _features() -> Features:
    generator = torch.Generator().manual_seed(0)
    states = torch.randn(3, 2, 4, 5, generator=generator).half()
    return Features(states, torch.tensor([0, 1, 1]), mask=torch.tensor([[1, 1, 0, 0]] * 3, dtype=torch.bool), positions=torch.arange(4))


def test_files_get_the_umask_permissions_not_0600(tmp_path):
    old = os.umask(0o022)
    try:
        path = atomic_write_json(tmp_path / "result.json", {"score": 1.0})
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


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
