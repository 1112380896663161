"""Cached encoder features: all ``S = layers + 1`` hidden states of the frozen (possibly patched) encoder, computed
once in eval mode and reused by every epoch, seed and run sharing (model, task, subset, head set, L, layout).

* sequence tasks: ``states [N, S, P, H]``, ``mask [N, P]``, ``labels [N]``, ``positions [P]``: only the ``P ≤ L``
  positions real in some example (pads add nothing to the probe; a single sentence never reaches ``L/2 .. L−2``);
* token tasks: each word's first piece only: ``states [T, S, H]``, ``labels [T]``, ``example [T]``.

States are float16 (``N·S·P·H·2`` bytes: 0.34 GB for 1000 SST-2 examples on MiniLM-L6). Above
``PAPA_MEMORY_BUDGET_GB`` (default 60% of physical memory) they stream to a memory-mapped file under
``PAPA_CACHE_DIR`` (same bytes, same scores). Cache entries record their key's parts (:func:`cached_features_key`); one
read under another key is warned (:class:`FeatureCacheWarning`), deleted and recomputed. File layout:
:mod:`papa.probing.feature_files`; encoder passes: :mod:`papa.probing.extraction`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from papa.core.errors import PapaError, ResourceBudgetError
from papa.core.io import atomic_write_with, temporary_file, write_error
from papa.probing.feature_files import (
    FeatureFileError,
    StreamedFile,
    read_file,
    read_header,
    rewrite_metadata,
    tensors_sha256,
    write_tensors,
)

FEATURE_DTYPE = torch.float16


@dataclass
class Features:
    """Cached encoder states (shapes: module docstring)."""

    states: torch.Tensor
    labels: torch.Tensor
    mask: torch.Tensor | None = None  # sequence tasks
    example: torch.Tensor | None = None  # token tasks
    positions: torch.Tensor | None = None  # sequence tasks: the kept positions (real in some example)
    file: Path | None = field(default=None, compare=False)  # the feature file mapped (None: in RAM)
    _scratch: weakref.finalize | None = field(default=None, compare=False, repr=False)  # deletes it unless stored

    @property
    def streamed(self) -> bool:
        """Whether the tensors are memory-mapped from a file on disk rather than held in RAM."""
        return self.file is not None

    @property
    def is_token(self) -> bool:
        return self.example is not None

    @property
    def num_examples(self) -> int:
        return int(self.example.max()) + 1 if self.is_token else self.states.shape[0]

    def as_tensors(self) -> dict[str, torch.Tensor]:
        out = {"states": self.states, "labels": self.labels}
        if self.mask is not None:
            out["mask"] = self.mask
        if self.example is not None:
            out["example"] = self.example
        if self.positions is not None:
            out["positions"] = self.positions
        return out


def physical_memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return int(8e9)


def memory_budget_bytes() -> int:
    """``PAPA_MEMORY_BUDGET_GB`` in bytes; unset: 60% of the physical memory."""
    text = os.environ.get("PAPA_MEMORY_BUDGET_GB")
    if text is None:
        return int(0.6 * physical_memory_bytes())
    try:
        gigabytes = float(text)
    except ValueError:
        gigabytes = float("nan")
    if not gigabytes > 0 or gigabytes == float("inf"):
        raise PapaError(
            f"PAPA_MEMORY_BUDGET_GB={text!r} is not a positive number of gigabytes",
            "Set it to a number such as 8 or 16, or unset it (default: 60% of the physical memory).",
        )
    return int(gigabytes * 1e9)


def feature_bytes(
    num_examples: int, num_states: int, length: int, hidden: int, token_task: bool, tokens_per_example: float = 16.0
) -> int:
    """Predicted size of a :class:`Features` in bytes (float16)."""
    positions = tokens_per_example if token_task else length
    return int(num_examples * positions * num_states * hidden * 2)


def check_budget(needed: int, what: str) -> None:
    """Refuse (with the numbers) a configuration whose memory would exceed the budget."""
    budget = memory_budget_bytes()
    if needed > budget:
        raise ResourceBudgetError(
            f"{what} would need {needed / 1e9:.2f} GB, above the memory budget of {budget / 1e9:.2f} GB",
            "Lower max_train_examples / max_eval_examples, or raise PAPA_MEMORY_BUDGET_GB.",
        )


def cache_root() -> Path:
    """``PAPA_CACHE_DIR`` (default ``~/.cache/papa``)."""
    return Path(os.environ.get("PAPA_CACHE_DIR", Path.home() / ".cache" / "papa"))


def cache_dir() -> Path:
    return cache_root() / "features"


def _cache_folder() -> Path:
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PapaError(
            f"Cannot create the feature cache {folder}: {err.strerror}", "Set PAPA_CACHE_DIR to a writable folder."
        ) from None
    return folder


def check_disk(needed: int, what: str) -> Path:
    """Refuse (with the numbers) features that would stream to a disk without room; the cache folder (not created)."""
    folder = cache_dir()
    existing = next((p for p in (folder, *folder.parents) if p.is_dir()), Path("/"))
    free = shutil.disk_usage(existing).free
    if needed > free:
        raise ResourceBudgetError(
            f"{what} would need {needed / 1e9:.2f} GB, "
            f"above the memory budget of {memory_budget_bytes() / 1e9:.2f} GB, "
            f"so they stream to disk, but PAPA_CACHE_DIR ({cache_root()}) has only {free / 1e9:.2f} GB free",
            "Free disk space there, set PAPA_CACHE_DIR to a folder on a larger disk, "
            "or lower max_train_examples / max_eval_examples.",
        )
    return folder


FEATURES_VERSION = 3  # 3: compact passes (a pad position a row's batch did not compute holds 0)
_CACHE_SETTING = "PAPA_CACHE_DIR"


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)


def _mapped(path: Path, scratch: bool) -> Features:
    """``path``'s features, memory-mapped; a ``scratch`` file goes with them unless :func:`store_cached` took it."""
    _, tensors = read_file(path)
    features = Features(
        tensors["states"],
        tensors["labels"],
        tensors.get("mask"),
        tensors.get("example"),
        tensors.get("positions"),
        file=path,
    )
    if scratch:
        features._scratch = weakref.finalize(features, _remove, path)
    return features


def stream_features(batches: Iterator[torch.Tensor], small: dict[str, torch.Tensor], shape: list[int]) -> Features:
    """Write ``batches`` of states (row order) and ``small`` to a scratch file under ``PAPA_CACHE_DIR``; map it."""
    needed = int(torch.Size(shape).numel()) * 2
    folder = check_disk(needed, "Caching encoder features")
    path = temporary_file(folder / "streamed.safetensors", setting=_CACHE_SETTING)
    writer = None
    try:
        writer = StreamedFile(path, small, "states", FEATURE_DTYPE, shape, {"version": str(FEATURES_VERSION)})
        for batch in batches:
            writer.append(batch)
        writer.finish()
    except OSError as err:
        if writer is not None:
            writer.abort()
        _remove(path)
        raise write_error(folder, err, _CACHE_SETTING) from None
    except BaseException:
        if writer is not None:
            writer.abort()
        _remove(path)
        raise
    return _mapped(path, scratch=True)


class FeatureKey(str):
    """A cache key (20 hex digits) that remembers the canonical JSON of the parts it was hashed from."""

    parts_json: str = ""


def cached_features_key(**parts) -> FeatureKey:
    """A stable short hash of everything that determines a feature tensor (and those parts)."""
    parts["version"] = FEATURES_VERSION
    text = json.dumps(parts, sort_keys=True, default=str)
    key = FeatureKey(hashlib.sha256(text.encode()).hexdigest()[:20])
    key.parts_json = text
    return key


def encoded_sha256(encoded: dict[str, torch.Tensor], with_labels: bool) -> str:
    """A short hash of the encoded examples (``input_ids``, ``attention_mask``, ``token_type_ids`` ``[N, L]``, and
    ``labels`` for sequence tasks; token tags are re-read on load, so NER and POS share an entry): text and tokenizer
    are in the key, so an edited data file never reads stale features."""
    digest = hashlib.sha256()
    for name in ("input_ids", "attention_mask", "token_type_ids", *(("labels",) if with_labels else ())):
        if name in encoded:
            tensor = encoded[name].detach().cpu().contiguous()
            digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
            digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()[:16]


def forget_cached(keys) -> int:
    """Delete the cache entries under ``keys`` (absent ones are skipped); returns how many were deleted."""
    deleted = 0
    for key in dict.fromkeys(str(k) for k in keys):
        path = cache_dir() / f"{key}.safetensors"
        try:
            path.unlink()
            deleted += 1
        except FileNotFoundError:
            pass
        except OSError as err:
            raise write_error(path, err, _CACHE_SETTING) from None
    return deleted


class FeatureCacheWarning(UserWarning):
    """A feature-cache entry held the features of another key: it is recomputed."""


def _entry_metadata(key: str, sha256: str) -> dict[str, str]:
    metadata = {"key": str(key), "sha256": sha256, "version": str(FEATURES_VERSION)}
    if getattr(key, "parts_json", ""):
        metadata["parts"] = key.parts_json
    return metadata


def _foreign(key: str, metadata: dict[str, str]) -> str | None:
    """Why an entry read under ``key`` does not belong to it (``None`` when it does)."""
    stored = metadata.get("key")
    if stored != str(key):
        return f"it holds the features of key {stored}"
    parts = metadata.get("parts")
    if parts is not None and hashlib.sha256(parts.encode()).hexdigest()[:20] != stored:
        return "its recorded parameters do not hash to its key"
    if getattr(key, "parts_json", "") and parts is not None and parts != key.parts_json:
        return "its recorded parameters differ from the requested ones"
    return None


def load_cached(key: str) -> Features | None:
    """The cached features under ``key``; ``None`` (a miss) when absent, corrupt (sha256) or recorded under another
    key (then deleted). An entry above ``PAPA_MEMORY_BUDGET_GB`` is memory-mapped."""
    path = cache_dir() / f"{key}.safetensors"
    if not path.is_file():
        return None
    identity = None
    try:
        identity = path.stat().st_ino
        metadata, tensors = read_file(path)
        if "key" not in metadata:
            raise FeatureFileError("an entry from before keys were recorded")
        if (reason := _foreign(key, metadata)) is not None:
            warnings.warn(
                f"The feature-cache entry {path.name} does not belong to its name ({reason}): it is recomputed",
                FeatureCacheWarning,
                stacklevel=2,
            )
            raise FeatureFileError(reason)
        if metadata.get("sha256") != tensors_sha256(tensors):
            raise FeatureFileError("checksum")
    except (FeatureFileError, OSError, RuntimeError, ValueError):
        _remove_if_same(path, identity)
        return None
    if sum(t.numel() * t.element_size() for t in tensors.values()) > memory_budget_bytes():
        return _mapped(path, scratch=False)
    ram = {name: tensor.clone() for name, tensor in tensors.items()}
    return Features(ram["states"], ram["labels"], ram.get("mask"), ram.get("example"), ram.get("positions"))


def _remove_if_same(path: Path, identity: int | None) -> None:
    """Delete ``path`` unless another writer has replaced it since it was read."""
    try:
        if identity is None or path.stat().st_ino == identity:
            path.unlink()
    except OSError:
        pass


def store_cached(key: str, features: Features) -> None:
    """Write ``features`` atomically under ``key``, with a checksum; a streamed scratch file is renamed into place."""
    target = cache_dir() / f"{key}.safetensors"
    scratch = features._scratch
    if scratch is not None and scratch.alive and features.file is not None:
        try:
            _, header = read_header(features.file)
            rewrite_metadata(features.file, _entry_metadata(key, header["__metadata__"]["sha256"]))
            os.replace(features.file, target)
        except OSError as err:
            raise write_error(target, err, _CACHE_SETTING) from None
        except (FeatureFileError, KeyError):
            raise PapaError(
                f"The streamed features {features.file} were changed on disk", "Run again: papa recomputes them."
            ) from None
        scratch.detach()
        features.file = target
        return
    if features.file is not None and features.file == target:
        return
    tensors = {k: v.detach().cpu().contiguous() for k, v in features.as_tensors().items()}
    metadata = _entry_metadata(key, tensors_sha256(tensors))
    _cache_folder()
    atomic_write_with(target, lambda handle: write_tensors(handle, tensors, metadata), setting=_CACHE_SETTING)
