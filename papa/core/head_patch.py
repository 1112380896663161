"""The patch of one layer's self-attention: constant (replaced) heads, gated heads and attention recording.

Each patched self-attention module gets a :class:`HeadPatch` (``module.papa_patch``); a :class:`PatchContext` shared by
all layers holds the padding mask ``m`` (``[B, L]``, True for real tokens). The patch acts on the probabilities
``A = softmax(QKᵀ/√d + mask)`` ``[B, H, L, L]`` and the heads' outputs ``A V`` ``[B, H, L, d]``:

* ``constant`` — a replaced head outputs ``rownorm(M ⊙ m mᵀ) V + m ⊙ μ`` (rownorm: the official
  ``mask_and_normalize``, L1 rows, eps 1e-12, pad rows 0), ``M`` and ``μ`` from
  :data:`papa.core.replacements.REPLACEMENT_TABLE`.
* ``gates`` — every head mixes ``σ(λ_h) A_h + (1 − σ(λ_h)) rownorm(C_h ⊙ m mᵀ)``, trainable ``λ`` from 0
  (the paper's head ranking).
* ``record`` — ``A`` unchanged; sums of ``A ⊙ m mᵀ``, its square and each head's output at real positions
  (:mod:`papa.core.constants`).

``interface`` architectures call :meth:`HeadPatch.attend` as transformers' ``"papa"`` attention function (registered
with SDPA's boolean mask in ``AttentionMaskInterface``: without it the padding mask silently becomes ``None``).
``inline`` ones get their probability dropout wrapped by :class:`ProbsHook` and, where outputs are read or written,
an output-projection pre-hook. Installing and removing patches: :mod:`papa.core.patching`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from papa.core.errors import PapaError
from papa.core.replacements import REPLACEMENT_TABLE, REPLACEMENTS, Replacement

ATTN_IMPLEMENTATION = "papa"
MODES = ("constant", "gates", "record")


def get_replacement(name: str, has_output_means: bool) -> Replacement:
    """The table's entry for ``name``; a :class:`PapaError` for an unknown name, or ``mean`` without stored means."""
    replacement = REPLACEMENT_TABLE.get(name) if isinstance(name, str) else None
    if replacement is None:
        raise PapaError(f"Unknown replacement {name!r}", f"Use one of {', '.join(REPLACEMENTS)}.")
    if replacement.stored_output and not has_output_means:
        raise PapaError(
            f"The replacement {name!r} needs the heads' mean outputs, "
            "and these constants hold none (estimated before they were stored)",
            "Re-run `papa estimate` for this model and task to write them.",
        )
    return replacement


def masked_rownorm(matrices: torch.Tensor, key_mask: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """``rownorm(M ⊙ m mᵀ)``: non-negative ``matrices`` ``[n, L, L]`` (shared by the batch) or ``[B, n, L, L]``
    masked to the real tokens of ``key_mask [B, L]`` (bool), each row L1-normalised → ``[B, n, L, L]``; real rows
    sum to 1 (or 0 if never observed), pad rows are 0."""
    m = key_mask.to(matrices.dtype)
    pattern = (m[:, :, None] * m[:, None, :])[:, None]  # [B, 1, L, L]
    masked = matrices * pattern
    return masked / masked.sum(-1, keepdim=True).clamp_min(eps)


@dataclass
class PatchContext:
    """State shared by all layers of one patched model during a forward pass."""

    key_mask: torch.Tensor | None = None  # [B, L] bool (B, P in a compact pass)
    max_length: int | None = None
    slots: torch.Tensor | None = None  # [P]: the slots a compact pass keeps (papa.core.compact); None: 0 .. L−1
    record_length: int | None = None  # record mode: L of the [L, L] accumulators (needed by compact passes)
    hook_handle: object | None = None
    previous_attn_implementation: str | None = None
    pruned: bool = False
    meta: dict = field(default_factory=dict)


class HeadPatch(nn.Module):
    """The patch of one layer's self-attention. Saved with ``state_dict``: ``constants`` (``constant`` mode:
    ``[n_const, L, L]``, the replaced heads' ``M`` in :attr:`constant_heads` order; ``gates``: ``[H, L, L]``),
    ``output_means`` (``[n_const, L, d]`` when the replacement adds ``μ``, else None), ``lambdas`` (``gates``: ``[H]``).
    """

    def __init__(
        self,
        layer: int,
        num_heads: int,
        mode: str,
        context: PatchContext,
        constants: torch.Tensor | None = None,
        constant_heads: Sequence[int] = (),
        trainable: bool = False,
        output_means: torch.Tensor | None = None,
    ):
        super().__init__()
        if mode not in MODES:
            raise PapaError(f"Unknown patch mode {mode!r}", f"Use one of {', '.join(MODES)}.")
        self.layer, self.num_heads, self.mode = layer, num_heads, mode
        object.__setattr__(self, "context", context)  # not a submodule
        self.constant_heads = sorted(int(h) for h in constant_heads)
        self.dynamic_heads = [h for h in range(num_heads) if h not in set(self.constant_heads)]
        self.qk_pruned = False
        self._originals: dict[str, nn.Module] = {}
        self.hook_handles: list = []  # forward pre-hooks on the output projection (inline architectures)
        if constants is not None:
            constants = constants.detach().clone().float()
            if trainable:
                self.constants = nn.Parameter(constants)
            else:
                self.register_buffer("constants", constants)
        self.register_buffer("output_means", None if output_means is None else output_means.detach().clone().float())
        if mode == "gates":
            self.lambdas = nn.Parameter(torch.zeros(num_heads))
        self.reset_record()
        self.register_buffer("_const_idx", torch.tensor(self.constant_heads, dtype=torch.long), persistent=False)
        self.register_buffer("_dyn_idx", torch.tensor(self.dynamic_heads, dtype=torch.long), persistent=False)
        self._full_mask_cache: tuple[torch.Tensor, tuple, torch.Tensor] | None = None  # _constant_probs

    def reset_record(self) -> None:
        """Reset the float64 ``record`` sums: ``attention_sums``, ``squared_sums`` ``[H, L, L]``, ``output_sums``
        ``[H, L, d]`` (each head's output summed where a position is real)."""
        self.attention_sums: torch.Tensor | None = None
        self.squared_sums: torch.Tensor | None = None
        self.output_sums: torch.Tensor | None = None

    def constant_matrices(self, length: int) -> torch.Tensor:
        """The constants ``[n, length, length]`` at this pass's positions: the first ``length`` slots, or a compact
        pass's kept ones ``C[:, slots][:, :, slots]``."""
        slots = self.context.slots
        if slots is None:
            return self.constants[:, :length, :length]
        return self.constants[:, slots][:, :, slots]

    def stored_outputs(self, key_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``m ⊙ μ`` of the replaced heads at this pass's slots: ``key_mask [B, P]`` → ``[B, n_const, P, d]``."""
        slots = self.context.slots
        means = self.output_means[:, : key_mask.shape[1]] if slots is None else self.output_means[:, slots]
        return (means[None] * key_mask[:, None, :, None].to(means.dtype)).to(dtype)

    def _add_stored_outputs(self, outputs: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        """The replaced heads' ``V`` term ``[B, n_const, P, d]`` plus ``m ⊙ μ`` (itself when ``μ = 0``)."""
        return outputs if self.output_means is None else outputs + self.stored_outputs(key_mask, outputs.dtype)

    def _record_length(self) -> int:
        if self.context.record_length is None:
            raise PapaError(
                "A compact pass records attention only with a known L", "Call patch_record(model, max_length=L)."
            )
        return self.context.record_length

    def _accumulate(self, sums: torch.Tensor, squares: torch.Tensor) -> None:
        """Add ``[H, P, P]`` recorded sums at the current pass's slots into the ``[H, L, L]`` accumulators."""
        slots = self.context.slots
        if slots is None:
            if self.attention_sums is None:
                self.attention_sums, self.squared_sums = sums, squares
            else:
                self.attention_sums += sums
                self.squared_sums += squares
            return
        if self.attention_sums is None:
            length = self._record_length()
            self.attention_sums = sums.new_zeros(sums.shape[0], length, length)
            self.squared_sums = sums.new_zeros(sums.shape[0], length, length)
        where = (slots[:, None], slots[None, :])
        self.attention_sums[(slice(None), *where)] += sums
        self.squared_sums[(slice(None), *where)] += squares

    @torch.no_grad()
    def _accumulate_outputs(self, outputs: torch.Tensor, key_mask: torch.Tensor) -> None:
        """Add every head's outputs ``[B, H, P, d]`` at real positions (``key_mask [B, P]``) into ``output_sums``."""
        sums = (outputs * key_mask[:, None, :, None].to(outputs.dtype)).sum(0).double()  # [H, P, d]
        slots = self.context.slots
        if slots is None:
            if self.output_sums is None:
                self.output_sums = sums
            else:
                self.output_sums += sums
            return
        if self.output_sums is None:
            self.output_sums = sums.new_zeros(sums.shape[0], self._record_length(), sums.shape[2])
        self.output_sums.index_add_(1, slots, sums)

    # -- the generic path: act on the full probability tensor ------------------------------------
    def _key_mask(self, batch: int, length: int, device: torch.device) -> torch.Tensor:
        mask = self.context.key_mask
        if mask is None or mask.shape != (batch, length):
            return torch.ones(batch, length, dtype=torch.bool, device=device)
        return mask

    def transform_probs(self, probs: torch.Tensor) -> torch.Tensor:
        """Apply the patch to attention probabilities ``[B, H, L, L]``; returns ``[B, H, L, L]``."""
        batch, _, length, _ = probs.shape
        key_mask = self._key_mask(batch, length, probs.device)
        if self.mode == "record":
            with torch.no_grad():
                m = key_mask.to(probs.dtype)
                weighted = probs * (m[:, :, None] * m[:, None, :])[:, None]
                self._accumulate(weighted.sum(0).double(), (weighted * probs).sum(0).double())
            return probs
        constants = self.constant_matrices(length).to(probs.dtype)
        if self.mode == "gates":
            gate = torch.sigmoid(self.lambdas).to(probs.dtype)[None, :, None, None]
            return gate * probs + (1 - gate) * masked_rownorm(constants, key_mask)
        if not self.constant_heads:
            return probs
        out = probs.clone()
        out[:, self._const_idx] = masked_rownorm(constants, key_mask)
        return out

    def context_pre_hook(self, projection: nn.Module, args: tuple) -> tuple | None:
        """Pre-hook on an ``inline`` output projection, input ``[B, P, H·d]`` (the heads' outputs): ``record``
        accumulates them; ``constant`` adds ``m ⊙ μ`` to the replaced heads' ``rownorm(M ⊙ m mᵀ) V``."""
        outputs = args[0]
        batch, length, width = outputs.shape
        heads = outputs.reshape(batch, length, self.num_heads, width // self.num_heads)  # [B, P, H, d]
        key_mask = self._key_mask(batch, length, outputs.device)
        if self.mode == "record":
            self._accumulate_outputs(heads.transpose(1, 2), key_mask)
            return None
        if self.output_means is None or not self.constant_heads:
            return None
        stored = self.stored_outputs(key_mask, outputs.dtype).transpose(1, 2)  # [B, P, n_const, d]
        return (heads.index_add(2, self._const_idx, stored).reshape(batch, length, width), *args[1:])

    # -- the interface path ------------------------------------------------------------------------
    def attend(self, module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        """Attention for ``interface`` architectures. q/k/v: ``[B, H, L, d]`` → ``([B, L, H, d], None)``.
        ``constant`` fast path: SDPA on the dynamic heads, a batched matmul for the replaced ones."""
        if self.mode == "constant":
            return self._attend_constant(query, key, value, attention_mask, dropout, scaling)
        scaling = query.size(-1) ** -0.5 if scaling is None else scaling
        scores = torch.matmul(query, key.transpose(2, 3)) * scaling
        if attention_mask is not None:
            if attention_mask.dtype == torch.bool:
                scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
            else:
                scores = scores + attention_mask
        probs = self.transform_probs(F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype))
        probs = F.dropout(probs, p=dropout, training=module.training)
        outputs = torch.matmul(probs, value)  # [B, H, L, d]
        if self.mode == "record":
            self._accumulate_outputs(outputs, self._key_mask(outputs.shape[0], outputs.shape[2], outputs.device))
        return outputs.transpose(1, 2).contiguous(), None

    def _constant_probs(self, key_mask: torch.Tensor, length: int, dtype: torch.dtype) -> torch.Tensor:
        """``rownorm(C ⊙ m mᵀ)``: ``[1, n_const, L, L]`` when all rows share a mask, else ``[B, n_const, L, L]``.
        The all-real one of frozen constants is cached, keyed by the positions (``L``, slots), ``dtype``, device and
        the constants themselves (the same tensor, its storage and in-place version): edited or replaced constants
        are normalised again."""
        constants = self.constant_matrices(length)
        if bool((key_mask == key_mask[:1]).all()):
            source = self.constants
            cacheable = bool(key_mask[0].all()) and not source.requires_grad and not source.is_inference()
            if cacheable:  # an inference tensor has no version counter
                slots = None if self.context.slots is None else tuple(self.context.slots.tolist())
                key = (length, slots, dtype, key_mask.device, source._version, source.data_ptr())
                if self._full_mask_cache is not None:
                    cached_source, cached_key, cached = self._full_mask_cache
                    if cached_source is source and cached_key == key:
                        return cached
            probs = masked_rownorm(constants, key_mask[:1]).to(dtype)
            if cacheable:
                self._full_mask_cache = (source, key, probs)
            return probs
        return masked_rownorm(constants, key_mask).to(dtype)

    def _constant_output(self, value: torch.Tensor, key_mask: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
        """``rownorm(C ⊙ m mᵀ) @ V`` as ``m_i · (C @ (m ⊙ V))_i / (C @ m)_i`` (no ``[B, n, L, L]`` or host sync):
        the constant heads' ``value [B, n_const, L, d]`` and ``key_mask [B, L]`` (bool) → ``[B, n_const, L, d]``,
        pad query rows 0 (as :func:`masked_rownorm`)."""
        length = value.shape[2]
        constants = self.constant_matrices(length)  # [n, L, L]
        m = key_mask.to(torch.float32)[:, None, :, None]  # [B, 1, L, 1]
        denominator = torch.matmul(constants.float(), m)  # [B, n, L, 1] in float32 (no underflow in half precision)
        scale = (m / denominator.clamp_min(eps)).to(value.dtype)
        numerator = torch.matmul(constants.to(value.dtype), value * m.to(value.dtype))  # [B, n, L, d]
        return numerator * scale

    def _attend_constant(self, query, key, value, attention_mask, dropout, scaling):
        batch, num_heads, length, head_dim = value.shape
        key_mask = self._key_mask(batch, length, value.device)
        if self.constant_heads and not self.dynamic_heads and not (dropout and self.training):  # all constant
            return self._add_stored_outputs(self._constant_output(value, key_mask), key_mask).transpose(
                1, 2
            ).contiguous(), None
        output = value.new_empty(batch, num_heads, length, head_dim)
        if self.dynamic_heads:
            if not self.qk_pruned:
                query, key = query[:, self._dyn_idx], key[:, self._dyn_idx]
            output[:, self._dyn_idx] = F.scaled_dot_product_attention(
                query,
                key,
                value[:, self._dyn_idx],
                attn_mask=attention_mask,
                dropout_p=dropout if self.training else 0.0,
                scale=scaling,
            )
        if self.constant_heads:
            if dropout and self.training:  # dropout acts on the probabilities: form them
                probs = F.dropout(
                    self._constant_probs(key_mask, length, value.dtype).expand(batch, -1, -1, -1), p=dropout
                )
                replaced = torch.matmul(probs, value[:, self._const_idx])
            else:
                replaced = self._constant_output(value[:, self._const_idx], key_mask)
            output[:, self._const_idx] = self._add_stored_outputs(replaced, key_mask)
        return output.transpose(1, 2).contiguous(), None


class ProbsHook(nn.Module):
    """Wraps the dropout that follows the softmax in ``inline`` architectures: ``dropout(patch(A))``."""

    def __init__(self, dropout: nn.Module, patch: HeadPatch):
        super().__init__()
        self.dropout = dropout
        object.__setattr__(self, "patch", patch)

    def forward(self, probs: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.patch.transform_probs(probs))


def papa_attention_forward(module, query, key, value, attention_mask, **kwargs):
    """The ``"papa"`` attention function: the module's :class:`HeadPatch`, or plain SDPA."""
    patch = getattr(module, "papa_patch", None)
    if patch is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    return patch.attend(module, query, key, value, attention_mask, **kwargs)


AttentionInterface.register(ATTN_IMPLEMENTATION, papa_attention_forward)
AttentionMaskInterface.register(ATTN_IMPLEMENTATION, sdpa_mask)
