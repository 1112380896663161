"""Constant attention matrices: estimation, saving and loading.

As the official ``run_papa_glue_avgs_creator.py``, over a task's training split at fixed length ``L``::

    C[l, h, i, j] = Σ_x m_i(x) m_j(x) A[l, h, i, j](x)  /  Σ_x m_i(x) m_j(x)

the mean attention where ``i`` and ``j`` are both real (0 if never), NOT row-normalised
(:func:`papa.core.head_patch.masked_rownorm` does that when applied). So every value lies in [0, 1], and as each
example's attention row sums to 1 over its real keys, ``Σ_j counts[i, j] C[l, h, i, j] = counts[i, i]`` exactly for
every real ``i`` (a plain row sum can exceed 1: a key position present in few examples is averaged over few).
:func:`load_constants` refuses a file breaking these bounds (:func:`check_values`).

One streaming pass with float64 accumulators (``O(layers · heads · L²)``) also gives each head's mean squared
deviation from its constant (a training-free ranking), ``deviation[l, h] = Σ_ij Σ_x m_i m_j (A − C)² / Σ_ij Σ_x
m_i m_j``, and its mean output per position (the ``mean`` replacement), ``μ[l, h, i] = Σ_x m_i(x) (A V)[l, h, i](x)
/ Σ_x m_i(x)`` (0 if never real).

Files are safetensors: ``constants`` ``[layers, heads, L, L]`` float32, ``counts`` ``[L, L]`` float64,
``deviation`` ``[layers, heads]`` float32, ``output_means`` ``[layers, heads, L, d]`` float32 (absent from older
files, which serve every replacement but ``mean``), a format tag, the provenance as JSON and a sha256 of the tensors.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load as safetensors_load
from safetensors.torch import save as safetensors_save

from papa.core.compact import compact_forward, plan_batches, supports_compact
from papa.core.errors import ConstantsMismatchError, CorruptFileError, PapaError
from papa.core.head_patch import get_replacement
from papa.core.io import atomic_write_bytes
from papa.core.patching import patch_record, unpatch

FORMAT_VERSION = "1"
#: How far outside [0, 1] a stored value may lie (float32 rounding of a float64 mean).
VALUE_TOLERANCE = 1e-5
#: The largest relative error allowed in a row's count-weighted sum (committed files: under 3e-7).
ROW_TOLERANCE = 1e-4


@dataclass
class ConstantSet:
    """Estimated constants and their provenance (formulas: module docstring).

    Attributes:
        constants, deviation, output_means: ``[layers, heads, L, L]``, ``[layers, heads]``, ``[layers, heads, L, d]``,
            float32 (``output_means``: ``None`` for an older file).
        counts: ``[L, L]`` number of examples in which both positions are real.
        meta: provenance (``model``, ``fingerprint``, ``task``, ``split``, ``max_length``, ``num_examples``,
            ``relayout``, ``papa_version``, ``seconds``).
    """

    constants: torch.Tensor
    counts: torch.Tensor
    deviation: torch.Tensor
    meta: dict = field(default_factory=dict)
    output_means: torch.Tensor | None = None

    @property
    def max_length(self) -> int:
        return int(self.constants.shape[-1])

    def check_compatible(
        self,
        fingerprint: str | None = None,
        num_layers: int | None = None,
        num_heads: int | None = None,
        max_length: int | None = None,
        relayout: bool | None = None,
        replacement: str | None = None,
    ) -> ConstantSet:
        """A :class:`ConstantsMismatchError` if these constants do not fit the given setting; a :class:`PapaError`
        for an unknown ``replacement``, or ``mean`` while they hold no means."""
        if replacement is not None:
            get_replacement(replacement, self.output_means is not None)
        source = self.meta.get("path", "the constants")
        checks = [
            ("model weights", fingerprint, self.meta.get("fingerprint"), "another model"),
            ("layers", num_layers, self.constants.shape[0], "a model of another depth"),
            ("heads", num_heads, self.constants.shape[1], "a model with another head count"),
            ("length L", max_length, self.max_length, "another max length"),
            ("relayout", relayout, self.meta.get("relayout"), "another layout setting"),
        ]
        for what, wanted, have, other in checks:
            if wanted is not None and have is not None and wanted != have:
                raise ConstantsMismatchError(
                    f"{source} were estimated for {other} ({what}: file has {have}, this run needs {wanted})",
                    "Estimate constants for this setting with `papa estimate`.",
                )
        return self


def _batches(
    model: torch.nn.Module, encoded: dict[str, torch.Tensor], batch_size: int, compact: bool
) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor | None]]:
    """``(inputs [B, L], slots [P] or None)`` per batch: compact ones (by length, real slots) or consecutive padded."""
    inputs = {k: v for k, v in encoded.items() if k != "labels"}
    if compact:
        for batch in plan_batches(inputs["attention_mask"], batch_size):
            yield {k: v[batch.rows] for k, v in inputs.items()}, batch.slots
        return
    total = inputs["input_ids"].shape[0]
    for start in range(0, total, batch_size):
        yield {k: v[start : start + batch_size] for k, v in inputs.items()}, None


@torch.no_grad()
def estimate_constants(
    model: torch.nn.Module,
    encoded: dict[str, torch.Tensor],
    batch_size: int = 64,
    device: torch.device | str | None = None,
    progress: bool = False,
    meta: dict | None = None,
    compact: bool = True,
) -> ConstantSet:
    """One streaming pass of ``model`` over ``encoded`` (``[N, L]`` tensors from :mod:`papa.core.layout`), moved to
    ``device`` (default: where it is), in eval mode (restored after). ``compact`` (where supported) runs each batch
    on its real slots (:mod:`papa.core.compact`): the same constants (≤ 1e-6, tested) at the real tokens' cost."""
    if batch_size < 1:
        raise PapaError(f"batch_size must be positive, got {batch_size}", "Use e.g. 64.")
    num_examples, length = encoded["input_ids"].shape
    if num_examples == 0:
        raise PapaError("No examples to estimate constants from", "Check the split and --max-examples.")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.to(device)  # in place: the model runs where the batches go
    was_training = model.training
    patches = patch_record(model, length)  # before eval(): a refused model (unsupported or patched) keeps its mode
    compact = compact and supports_compact(model)
    model.eval()
    counts = torch.zeros(length, length, dtype=torch.float64, device=device)
    started = time.perf_counter()
    try:
        batches = _batches(model, encoded, batch_size, compact)
        if progress:
            from tqdm.auto import tqdm

            batches = tqdm(batches, total=-(-num_examples // batch_size), desc="estimate", unit="batch")
        for batch, slots in batches:
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            if slots is None:
                model(**batch)
                m = batch["attention_mask"].to(torch.float64)
                counts += m.T @ m
            else:
                slots = slots.to(device)
                compact_forward(model, batch, slots)
                m = batch["attention_mask"][:, slots].to(torch.float64)
                counts[slots[:, None], slots[None, :]] += m.T @ m
        sums = torch.stack([p.attention_sums for p in patches])  # [layers, heads, L, L]
        squares = torch.stack([p.squared_sums for p in patches])
        output_sums = torch.stack([p.output_sums for p in patches])  # [layers, heads, L, d]
    finally:
        unpatch(model)
        model.train(was_training)
    constants = torch.nan_to_num(sums / counts).float()
    observed = counts > 0
    residual = torch.where(observed, squares - sums.pow(2) / counts.clamp_min(1), torch.zeros_like(squares))
    deviation = (residual.clamp_min(0).sum((-1, -2)) / counts.sum()).float()
    output_means = torch.nan_to_num(output_sums / counts.diagonal()[:, None]).float()  # counts[i, i]: i real
    info = dict(meta or {})
    info.update(max_length=length, num_examples=num_examples, seconds=round(time.perf_counter() - started, 3))
    return ConstantSet(constants.cpu(), counts.cpu(), deviation.cpu(), info, output_means.cpu())


def _tensor_digest(tensors: dict[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for key in sorted(tensors):
        digest.update(key.encode())
        digest.update(tensors[key].contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def save_constants(path: str | Path, constant_set: ConstantSet) -> Path:
    """Write ``constant_set`` atomically as safetensors (module docstring)."""
    tensors = {
        "constants": constant_set.constants.float().contiguous(),
        "counts": constant_set.counts.double().contiguous(),
        "deviation": constant_set.deviation.float().contiguous(),
    }
    if constant_set.output_means is not None:
        tensors["output_means"] = constant_set.output_means.float().contiguous()
    meta = {k: v for k, v in constant_set.meta.items() if k != "path"}
    metadata = {
        "format": f"papa-constants/{FORMAT_VERSION}",
        "meta": json.dumps(meta, sort_keys=True),
        "sha256": _tensor_digest(tensors),
    }
    return atomic_write_bytes(path, safetensors_save(tensors, metadata=metadata))


def _value_problem(tensors: dict[str, torch.Tensor]) -> str | None:
    """What in ``tensors`` (a constants file's, shapes already checked) no estimate can produce, or ``None``."""
    for key, tensor in tensors.items():
        if not torch.isfinite(tensor).all():
            return f"holds non-finite values (NaN or Inf) in {key!r}"
    constants, counts, deviation = tensors["constants"].double(), tensors["counts"], tensors["deviation"]
    if (counts < 0).any() or not torch.equal(counts, counts.round()) or not torch.equal(counts, counts.T):
        return "has 'counts' that are not a symmetric matrix of whole numbers >= 0 (examples counted per pair)"
    low, high = constants.min().item(), constants.max().item()
    if low < -VALUE_TOLERANCE or high > 1 + VALUE_TOLERANCE:
        return (
            f"holds constants from {low:.4g} to {high:.4g}, outside [0, 1] where a mean of attention probabilities lies"
        )
    if (constants[..., counts == 0] != 0).any():
        return "holds nonzero constants at position pairs no example had ('counts' 0), where the estimate is 0"
    real = counts.diagonal() > 0  # [L]: query positions real in some example
    weighted = torch.einsum("lhij,ij->lhi", constants, counts)[..., real]  # [layers, heads, real L]
    expected = counts.diagonal()[real]
    error = ((weighted - expected).abs() / expected).max().item() if real.any() else 0.0
    if error > ROW_TOLERANCE:
        return (
            f"has rows that are not averaged attention: sum_j counts[i, j] * C[l, h, i, j] must equal counts[i, i] "
            f"(each example's attention row sums to 1), and is off by up to {error:.3g} of it"
        )
    if deviation.min().item() < 0 or deviation.max().item() > 1 + VALUE_TOLERANCE:
        return "has a 'deviation' outside [0, 1] (a mean squared difference of two probabilities)"
    return None


def check_values(tensors: dict[str, torch.Tensor], path: str | Path) -> None:
    """A :class:`CorruptFileError` naming ``path`` when its tensors hold values no estimate can produce: non-finite
    values (means included), constants outside [0, 1] or nonzero where no example was, rows whose count-weighted
    sums differ from ``counts[i, i]`` (the estimator's identity, module docstring), a deviation outside [0, 1]."""
    problem = _value_problem(tensors)
    if problem is not None:
        hint = "Estimate it again with `papa estimate` (a file papa estimated always passes this check)."
        raise CorruptFileError(f"Constants file {path} {problem}", hint)


def load_constants(path: str | Path) -> ConstantSet:
    """Read and verify a constants file (format, shapes, dtypes, checksum)."""
    path = Path(path)
    redo = "Estimate it again with `papa estimate`."
    if not path.is_file():
        raise PapaError(f"Constants file {path} does not exist", "Create it with `papa estimate`.")
    data = path.read_bytes()
    try:
        tensors = safetensors_load(data)
        header_len = int.from_bytes(data[:8], "little")
        metadata = json.loads(data[8 : 8 + header_len]).get("__metadata__") or {}
    except (SafetensorError, ValueError, UnicodeDecodeError, json.JSONDecodeError, OverflowError):
        raise CorruptFileError(
            f"Constants file {path} is not a readable safetensors file (truncated or corrupt)", redo
        ) from None
    if not str(metadata.get("format", "")).startswith("papa-constants/"):
        raise CorruptFileError(f"{path} is not a papa constants file (no papa-constants format tag)", redo)
    expected = {"constants": (torch.float32, 4), "counts": (torch.float64, 2), "deviation": (torch.float32, 2)}
    for key, (dtype, dims) in expected.items():
        tensor = tensors.get(key)
        if tensor is None or tensor.dtype != dtype or tensor.dim() != dims:
            raise CorruptFileError(f"Constants file {path} has a missing or malformed {key!r} tensor", redo)
    constants = tensors["constants"]
    layers, heads, length, length2 = constants.shape
    output_means = tensors.get("output_means")  # absent from files written before the means were stored
    means_fit = output_means is None or (
        output_means.dtype == torch.float32
        and output_means.dim() == 4
        and tuple(output_means.shape[:3]) == (layers, heads, length)
    )
    if (
        length != length2
        or tuple(tensors["counts"].shape) != (length, length)
        or tuple(tensors["deviation"].shape) != (layers, heads)
        or not means_fit
    ):
        raise CorruptFileError(f"Constants file {path} has inconsistent shapes", redo)
    if metadata.get("sha256") != _tensor_digest(tensors):
        raise CorruptFileError(f"Constants file {path} fails its checksum (a changed or corrupted byte)", redo)
    check_values(tensors, path)
    try:
        meta = json.loads(metadata.get("meta", "{}"))
    except json.JSONDecodeError:
        raise CorruptFileError(f"Constants file {path} has unreadable metadata", redo) from None
    meta["path"] = str(path)
    meta["sha256"] = metadata["sha256"]
    return ConstantSet(constants, tensors["counts"], tensors["deviation"], meta, output_means)
