"""Encoder features for probing: every hidden state of the frozen (possibly patched) encoder.

The probe reads all ``layers + 1`` hidden states (the embeddings included). In ``cached`` mode
they are computed once, in eval mode, and reused by every epoch, seed and run that shares the same
(model, task, subset, head set, L, layout): :class:`Features` holds them in RAM as float16 and
:func:`cached_features` keeps them on disk as safetensors.

Shapes (``S = layers + 1`` states, ``H`` hidden size):

* sequence tasks: ``states [N, S, P, H]``, ``mask [N, P]``, ``labels [N]`` and ``positions [P]``: only
  the ``P ≤ L`` positions that are a real token in at least one example are kept (with the PAPA
  layout a single sentence never reaches positions ``L/2 .. L−2``); a pad position contributes
  nothing to the probe, so this changes no result and halves single-sentence tasks' cost;
* token tasks: only the labelled positions (each word's first piece) are kept:
  ``states [T, S, H]``, ``labels [T]``, ``example [T]`` (the example each token comes from).

Memory: ``N·S·L·H·2`` bytes for sequence tasks (1000 SST-2 examples on MiniLM-L6: 0.34 GB),
``T·S·H·2`` for token tasks. :func:`feature_bytes` predicts it and :func:`check_budget` refuses a
configuration above ``PAPA_MEMORY_BUDGET_GB`` (default: 60% of the machine's physical memory) before
anything is computed. Cache files are streamed to disk (no second in-memory copy), so the full SST-2
training set (67k sentences, ~12 GB on MiniLM-L6) fits a 24 GB machine.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from papa.core.errors import PapaError, ResourceBudgetError
from papa.core.io import atomic_write_with
from papa.core.layout import IGNORE_INDEX

FEATURE_DTYPE = torch.float16


@dataclass
class Features:
    """Cached encoder states (see the module docstring for shapes)."""

    states: torch.Tensor
    labels: torch.Tensor
    mask: torch.Tensor | None = None  # sequence tasks
    example: torch.Tensor | None = None  # token tasks
    positions: torch.Tensor | None = None  # sequence tasks: the kept positions (real in some example)

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
            f"PAPA_MEMORY_BUDGET_GB={text!r} is not a positive number of gigabytes", "Set it to a number such as 8 or 16, or unset it (default: 60% of the physical memory)."
        )
    return int(gigabytes * 1e9)


def feature_bytes(num_examples: int, num_states: int, length: int, hidden: int, token_task: bool, tokens_per_example: float = 16.0) -> int:
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


def iter_hidden_states(model: torch.nn.Module, encoded: dict[str, torch.Tensor], batch_size: int, device: torch.device) -> Iterator[tuple[slice, torch.Tensor]]:
    """Yield ``(rows, states [B, S, L, H])`` batch by batch (no gradients; the caller sets the mode)."""
    total = encoded["input_ids"].shape[0]
    inputs = {k: v for k, v in encoded.items() if k != "labels"}
    with torch.no_grad():
        for start in range(0, total, batch_size):
            rows = slice(start, min(start + batch_size, total))
            batch = {k: v[rows].to(device) for k, v in inputs.items()}
            out = model(**batch, output_hidden_states=True)
            yield rows, torch.stack(out.hidden_states, dim=1)


def extract_features(
    model: torch.nn.Module,
    encoded: dict[str, torch.Tensor],
    token_task: bool,
    batch_size: int = 64,
    device: torch.device | str = "cpu",
) -> Features:
    """Run the frozen encoder once in eval mode over ``encoded`` and keep its states (float16)."""
    device = torch.device(device)
    was_training = model.training
    model.eval()
    config = model.config
    num_states, hidden = config.num_hidden_layers + 1, config.hidden_size
    total, length = encoded["input_ids"].shape
    labels = encoded["labels"]
    try:
        if not token_task:
            mask = encoded["attention_mask"].bool()
            positions = mask.any(0).nonzero().flatten()
            check_budget(feature_bytes(total, num_states, len(positions), hidden, False), "Caching encoder features")
            states = torch.empty(total, num_states, len(positions), hidden, dtype=FEATURE_DTYPE)
            for rows, batch_states in iter_hidden_states(model, encoded, batch_size, device):
                states[rows] = batch_states[:, :, positions.to(device)].to("cpu", FEATURE_DTYPE)
            return Features(states, labels.clone(), mask=mask[:, positions].clone(), positions=positions)
        keep = labels != IGNORE_INDEX  # [N, L]
        check_budget(int(keep.sum()) * num_states * hidden * 2, "Caching encoder features")
        chunks = []
        for rows, batch_states in iter_hidden_states(model, encoded, batch_size, device):
            chunks.append(batch_states.permute(0, 2, 1, 3)[keep[rows].to(device)].to("cpu", FEATURE_DTYPE))
        example = torch.arange(total)[:, None].expand(total, length)[keep]
        return Features(torch.cat(chunks), labels[keep].clone(), example=example.clone())
    finally:
        model.train(was_training)


FEATURES_VERSION = 2


def cached_features_key(**parts) -> str:
    """A stable short hash of everything that determines a feature tensor."""
    parts["version"] = FEATURES_VERSION
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def cache_dir() -> Path:
    return Path(os.environ.get("PAPA_CACHE_DIR", Path.home() / ".cache" / "papa")) / "features"


def _tensors_sha256(tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes (sorted by name)."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].contiguous()
        digest.update(f"{name}|{tensor.dtype}|{list(tensor.shape)}|".encode())
        digest.update(tensor.view(torch.uint8).reshape(-1).numpy().data if tensor.numel() else b"")
    return digest.hexdigest()


def load_cached(key: str) -> Features | None:
    """The cached features under ``key``, or ``None`` when absent or corrupt (a corrupt entry is
    deleted and recomputed, never read: its tensors are checked against the stored sha256)."""
    path = cache_dir() / f"{key}.safetensors"
    if not path.is_file():
        return None
    try:
        with safe_open(path, framework="pt") as handle:
            stored = (handle.metadata() or {}).get("sha256")
        tensors = load_file(path)
        if stored is None or stored != _tensors_sha256(tensors):
            raise SafetensorError("checksum")
    except (SafetensorError, OSError, RuntimeError, ValueError):
        path.unlink(missing_ok=True)
        return None
    return Features(tensors["states"], tensors["labels"], tensors.get("mask"), tensors.get("example"), tensors.get("positions"))


_SAFETENSORS_DTYPES = {torch.float16: "F16", torch.float32: "F32", torch.int64: "I64", torch.bool: "BOOL"}


def _write_safetensors(handle, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """Write the safetensors format (8-byte header length, JSON header, raw bytes) straight from the
    tensors' memory: ``safetensors.torch.save_file`` first copies every tensor into a bytes object."""
    header: dict = {"__metadata__": metadata}
    offset = 0
    for name in sorted(tensors):
        tensor = tensors[name]
        size = tensor.numel() * tensor.element_size()
        header[name] = {"dtype": _SAFETENSORS_DTYPES[tensor.dtype], "shape": list(tensor.shape), "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    handle.write(len(encoded).to_bytes(8, "little") + encoded)
    for name in sorted(tensors):
        if tensors[name].numel():
            handle.write(tensors[name].view(torch.uint8).reshape(-1).numpy().data)


def store_cached(key: str, features: Features) -> None:
    """Write the features atomically, streamed to disk (no second in-memory copy), with a checksum."""
    tensors = {k: v.detach().cpu().contiguous() for k, v in features.as_tensors().items()}
    metadata = {"sha256": _tensors_sha256(tensors), "version": str(FEATURES_VERSION)}
    atomic_write_with(cache_dir() / f"{key}.safetensors", lambda handle: _write_safetensors(handle, tensors, metadata))
