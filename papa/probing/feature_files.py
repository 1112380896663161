"""The on-disk form of cached features: safetensors files papa writes and memory-maps itself.

A file is ``[8-byte little-endian header length][JSON header][tensor bytes]`` (readable by
``safetensors.torch.load_file``), tensors by decreasing element size, each aligned to it, so :func:`read_file` maps
them in place (copy-on-write) and features larger than RAM are read batch by batch from the page cache. The header's
``__metadata__`` holds ``sha256`` (:func:`tensors_sha256`), ``version`` and, for a cache entry, its ``key`` and
``parts``. :class:`StreamedFile` writes states ``[N, S, P, H]`` batch by batch, reserving header space for the key.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch

#: safetensors dtype name, numpy dtype, for every dtype a feature file holds.
DTYPES: dict[torch.dtype, tuple[str, type]] = {
    torch.float16: ("F16", np.float16),
    torch.float32: ("F32", np.float32),
    torch.int64: ("I64", np.int64),
    torch.bool: ("BOOL", np.bool_),
}
_BY_NAME = {name: (dtype, numpy) for dtype, (name, numpy) in DTYPES.items()}

#: Header bytes reserved by :class:`StreamedFile` for metadata added later (key and parts).
HEADER_RESERVE = 1 << 16
_HASH_CHUNK = 1 << 26


class FeatureFileError(ValueError):
    """A feature file that is truncated, malformed or not papa's layout (the cache treats it as a miss)."""


def _order(specs: dict[str, tuple[torch.dtype, list[int]]]) -> list[str]:
    """Names by decreasing element size, then by name: every tensor starts aligned to its element size."""
    return sorted(specs, key=lambda name: (-torch.empty(0, dtype=specs[name][0]).element_size(), name))


def _nbytes(dtype: torch.dtype, shape: Iterable[int]) -> int:
    return int(np.prod(list(shape), dtype=np.int64)) * torch.empty(0, dtype=dtype).element_size()


def encode_header(
    specs: dict[str, tuple[torch.dtype, list[int]]], metadata: dict[str, str], reserve: int = 0
) -> tuple[bytes, int]:
    """``(8-byte length + JSON header space-padded to a multiple of 8 and at least reserve, data bytes)``."""
    header: dict = {"__metadata__": metadata}
    offset = 0
    for name in _order(specs):
        dtype, shape = specs[name]
        size = _nbytes(dtype, shape)
        header[name] = {"dtype": DTYPES[dtype][0], "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * max(reserve - len(encoded), 0)
    encoded += b" " * (-len(encoded) % 8)
    return len(encoded).to_bytes(8, "little") + encoded, offset


def _flat_bytes(tensor: torch.Tensor) -> memoryview:
    return memoryview(tensor.contiguous().view(torch.uint8).reshape(-1).numpy()) if tensor.numel() else memoryview(b"")


def tensors_sha256(tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes (by name), in chunks (mapped ones are not loaded)."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name]
        digest.update(f"{name}|{tensor.dtype}|{list(tensor.shape)}|".encode())
        data = _flat_bytes(tensor)
        for start in range(0, len(data), _HASH_CHUNK):
            digest.update(data[start : start + _HASH_CHUNK])
    return digest.hexdigest()


def write_tensors(handle, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """Write ``tensors`` as a feature file to an open binary ``handle``, straight from their memory."""
    header, _ = encode_header({name: (t.dtype, list(t.shape)) for name, t in tensors.items()}, metadata)
    handle.write(header)
    for name in _order({name: (t.dtype, list(t.shape)) for name, t in tensors.items()}):
        data = _flat_bytes(tensors[name])
        for start in range(0, len(data), _HASH_CHUNK):
            handle.write(data[start : start + _HASH_CHUNK])


def read_header(path: Path) -> tuple[int, dict]:
    """``(header length, header)`` of a feature file, checked against the file's size."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise FeatureFileError("truncated")
        length = int.from_bytes(prefix, "little")
        if length > size - 8:
            raise FeatureFileError("truncated header")
        try:
            header = json.loads(handle.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise FeatureFileError("unreadable header") from None
    if not isinstance(header, dict) or not isinstance(header.get("__metadata__", {}), dict):
        raise FeatureFileError("malformed header")
    end = 0
    for name, info in sorted(
        ((n, i) for n, i in header.items() if n != "__metadata__"), key=lambda item: item[1].get("data_offsets", [0])[0]
    ):
        if not isinstance(info, dict) or info.get("dtype") not in _BY_NAME:
            raise FeatureFileError(f"tensor {name!r}: unknown dtype")
        shape, offsets = info.get("shape"), info.get("data_offsets")
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise FeatureFileError(f"tensor {name!r}: malformed shape")
        if offsets != [end, end + _nbytes(_BY_NAME[info["dtype"]][0], shape)]:
            raise FeatureFileError(f"tensor {name!r}: offsets do not fit")
        end = offsets[1]
    if 8 + length + end != size:
        raise FeatureFileError("size does not match the header (truncated or extended)")
    return length, header


def read_file(path: str | os.PathLike) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    """``(metadata, tensors)``: every tensor memory-mapped copy-on-write (never written back)."""
    path = Path(path)
    length, header = read_header(path)
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, numpy = _BY_NAME[info["dtype"]]
        begin, end = info["data_offsets"]
        if end == begin:
            tensors[name] = torch.empty(info["shape"], dtype=dtype)
            continue
        array = np.memmap(path, dtype=numpy, mode="c", offset=8 + length + begin, shape=tuple(info["shape"]))
        tensors[name] = torch.from_numpy(array)
    return {str(k): str(v) for k, v in header.get("__metadata__", {}).items()}, tensors


def rewrite_metadata(path: Path, metadata: dict[str, str]) -> None:
    """Replace a feature file's metadata in place, the header keeping its length (its padding absorbs the change);
    a :class:`FeatureFileError` when it does not fit."""
    length, header = read_header(path)
    header["__metadata__"] = metadata
    encoded = json.dumps(header, separators=(",", ":")).encode()
    if len(encoded) > length:
        raise FeatureFileError("the new metadata does not fit the reserved header")
    with open(path, "r+b") as handle:
        handle.seek(8)
        handle.write(encoded + b" " * (length - len(encoded)))
        handle.flush()
        os.fsync(handle.fileno())


class StreamedFile:
    """A feature file written sequentially: the small tensors, then the streamed tensor ``name`` (sorting last, e.g.
    ``states``) in row order, chunk by chunk; the sha256 is computed on the way (:meth:`finish` writes it)."""

    def __init__(
        self,
        path: Path,
        small: dict[str, torch.Tensor],
        name: str,
        dtype: torch.dtype,
        shape: list[int],
        metadata: dict[str, str],
    ):
        specs = {key: (t.dtype, list(t.shape)) for key, t in small.items()} | {name: (dtype, list(shape))}
        order = _order(specs)
        if sorted(specs)[-1] != name:
            raise ValueError(f"The streamed tensor {name!r} must sort last by name (the checksum reads it last)")
        self.path, self.name, self.dtype, self.shape, self.metadata = path, name, dtype, list(shape), dict(metadata)
        self.expected, self.written = _nbytes(dtype, shape), 0
        self.after = order[order.index(name) + 1 :]
        self.small = {key: t.contiguous() for key, t in small.items()}
        header, _ = encode_header(specs, {**metadata, "sha256": "0" * 64}, reserve=HEADER_RESERVE)
        self.digest = hashlib.sha256()
        for key in sorted(self.small):
            tensor = self.small[key]
            self.digest.update(f"{key}|{tensor.dtype}|{list(tensor.shape)}|".encode())
            self.digest.update(_flat_bytes(tensor))
        self.digest.update(f"{name}|{dtype}|{list(shape)}|".encode())
        self.handle = open(path, "wb")  # closed by finish() or abort()
        self.handle.write(header)
        for key in order[: order.index(name)]:
            self.handle.write(_flat_bytes(self.small[key]))

    def append(self, rows: torch.Tensor) -> None:
        """Write the next rows of the streamed tensor (``[B, *shape[1:]]``, its dtype, on the CPU)."""
        data = _flat_bytes(rows.to(self.dtype))
        self.handle.write(data)
        self.digest.update(data)
        self.written += len(data)

    def finish(self) -> str:
        """Write the trailing tensors and the checksum, fsync and close; returns the sha256."""
        if self.written != self.expected:
            raise ValueError(f"{self.name}: {self.written} bytes written, {self.expected} expected")
        for key in self.after:
            self.handle.write(_flat_bytes(self.small[key]))
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()
        sha256 = self.digest.hexdigest()
        rewrite_metadata(self.path, {**self.metadata, "sha256": sha256})
        return sha256

    def abort(self) -> None:
        self.handle.close()
