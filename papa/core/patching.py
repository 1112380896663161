"""Head patching on unmodified transformers: constant heads, gated heads and attention recording.

One generic mechanism, thin specialisations. Every self-attention module of a patched model gets a
:class:`HeadPatch` child (``module.papa_patch``) that knows its layer, its constant heads and its
mode; a forward pre-hook on the base model stores the current padding mask ``m`` (``[B, L]``,
True for real tokens) in a :class:`PatchContext` shared by all layers. The patch acts on the
attention probabilities ``A = softmax(QKᵀ/√d + mask)`` of shape ``[B, H, L, L]``:

* ``constant`` — for each constant head ``h``: ``A_h = rownorm(C_h ⊙ m mᵀ)`` (the official
  ``mask_and_normalize``: L1-normalised rows, eps 1e-12, so pad rows are 0), then ``A_h V_h`` with
  the input's own ``V``. Other heads are untouched.
* ``gates`` — every head mixes ``σ(λ_h) A_h + (1 − σ(λ_h)) rownorm(C_h ⊙ m mᵀ)`` with a trainable
  ``λ`` initialised to 0 (the paper's head-ranking method).
* ``record`` — ``A`` is unchanged; sums of ``A ⊙ m mᵀ`` and of its square are accumulated per head
  (constant estimation, :mod:`papa.core.constants`).

For ``interface`` architectures the function registered as ``"papa"`` in transformers'
``AttentionInterface`` (with the SDPA boolean mask registered under the same name in
``AttentionMaskInterface`` — without it the padding mask silently becomes ``None``) calls the patch.
Its ``constant`` fast path runs SDPA on the dynamic heads only and a batched matmul for the
constant heads; :func:`prune_qk` additionally drops the Q/K rows of constant heads. For ``inline``
architectures the probability dropout is wrapped by :class:`ProbsHook`.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import SafetensorError, safe_open
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from papa.core.architectures import get_adapter, self_attention_modules
from papa.core.errors import ConstantsMismatchError, CorruptFileError, PapaError

ATTN_IMPLEMENTATION = "papa"
MODES = ("constant", "gates", "record")


def masked_rownorm(matrices: torch.Tensor, key_mask: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """``rownorm(M ⊙ m mᵀ)``: mask rows and columns to real tokens, L1-normalise each row.

    Args:
        matrices: ``[n, L, L]`` (shared by the batch) or ``[B, n, L, L]``; non-negative.
        key_mask: ``[B, L]`` bool, True for real tokens.
    Returns:
        ``[B, n, L, L]``; real rows sum to 1 (or 0 if never observed), pad rows are 0.
    """
    m = key_mask.to(matrices.dtype)
    pattern = (m[:, :, None] * m[:, None, :])[:, None]  # [B, 1, L, L]
    masked = matrices * pattern
    return masked / masked.sum(-1, keepdim=True).clamp_min(eps)


@dataclass
class PatchContext:
    """State shared by all layers of one patched model during a forward pass."""

    key_mask: torch.Tensor | None = None  # [B, L] bool (B, P in a compact pass)
    max_length: int | None = None
    slots: torch.Tensor | None = None  # [P]: the padded slots a compact pass keeps (papa.core.compact); None: 0 .. L−1
    record_length: int | None = None  # record mode: L of the [L, L] accumulators (needed by compact passes)
    hook_handle: object | None = None
    previous_attn_implementation: str | None = None
    pruned: bool = False
    meta: dict = field(default_factory=dict)


class HeadPatch(nn.Module):
    """The patch of one layer's self-attention.

    Buffers/parameters (saved with ``state_dict``):
        constants: ``[n_const, L, L]`` in ``constant`` mode (the constant heads' C, in head order of
            :attr:`constant_heads`), ``[H, L, L]`` in ``gates`` mode.
        lambdas: ``[H]`` in ``gates`` mode.
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
        if constants is not None:
            constants = constants.detach().clone().float()
            if trainable:
                self.constants = nn.Parameter(constants)
            else:
                self.register_buffer("constants", constants)
        if mode == "gates":
            self.lambdas = nn.Parameter(torch.zeros(num_heads))
        self.reset_record()
        self.register_buffer("_const_idx", torch.tensor(self.constant_heads, dtype=torch.long), persistent=False)
        self.register_buffer("_dyn_idx", torch.tensor(self.dynamic_heads, dtype=torch.long), persistent=False)
        self._full_mask_cache: tuple[tuple, torch.Tensor] | None = None

    def reset_record(self) -> None:
        """Zero the ``record`` accumulators: ``attention_sums`` / ``squared_sums`` ``[H, L, L]`` float64."""
        self.attention_sums: torch.Tensor | None = None
        self.squared_sums: torch.Tensor | None = None

    def constant_matrices(self, length: int) -> torch.Tensor:
        """This patch's constants at the current pass's positions: ``[n, length, length]`` — the first ``length``
        slots, or in a compact pass the kept slots ``C[:, slots][:, :, slots]``."""
        slots = self.context.slots
        if slots is None:
            return self.constants[:, :length, :length]
        return self.constants[:, slots][:, :, slots]

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
            length = self.context.record_length
            if length is None:
                raise PapaError("A compact pass records attention only with a known L", "Call patch_record(model, max_length=L).")
            self.attention_sums = sums.new_zeros(sums.shape[0], length, length)
            self.squared_sums = sums.new_zeros(sums.shape[0], length, length)
        where = (slots[:, None], slots[None, :])
        self.attention_sums[(slice(None), *where)] += sums
        self.squared_sums[(slice(None), *where)] += squares

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

    # -- the interface path ------------------------------------------------------------------------
    def attend(self, module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        """Attention for ``interface`` architectures. q/k/v: ``[B, H, L, d]`` → ``([B, L, H, d], None)``."""
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
        return torch.matmul(probs, value).transpose(1, 2).contiguous(), None

    def _constant_probs(self, key_mask: torch.Tensor, length: int, dtype: torch.dtype) -> torch.Tensor:
        """``rownorm(C ⊙ m mᵀ)`` for the constant heads: ``[1, n_const, L, L]`` when every row of the
        batch has the same mask (computed once and cached for the all-real mask), else ``[B, n_const, L, L]``."""
        constants = self.constant_matrices(length)
        if bool((key_mask == key_mask[:1]).all()):
            full = bool(key_mask[0].all())
            where = (length, None if self.context.slots is None else tuple(self.context.slots.tolist()))
            if full and not self.constants.requires_grad and self._full_mask_cache is not None:
                cached_where, cached = self._full_mask_cache
                if cached_where == where and cached.dtype == dtype and cached.device == key_mask.device:
                    return cached
            probs = masked_rownorm(constants, key_mask[:1]).to(dtype)
            if full and not self.constants.requires_grad:
                self._full_mask_cache = (where, probs)
            return probs
        return masked_rownorm(constants, key_mask).to(dtype)

    def _constant_output(self, value: torch.Tensor, key_mask: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
        """``rownorm(C ⊙ m mᵀ) @ V`` without forming the ``[B, n, L, L]`` probabilities and without a
        host synchronisation: ``m_i · (C @ (m ⊙ V))_i / (C @ m)_i``.

        Args:
            value: ``[B, n_const, L, d]``, the constant heads' values.
            key_mask: ``[B, L]`` bool, True for real tokens.
        Returns:
            ``[B, n_const, L, d]``; pad query rows are 0, as with :func:`masked_rownorm`.
        """
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
        if self.constant_heads and not self.dynamic_heads and not (dropout and self.training):
            return self._constant_output(value, key_mask).transpose(1, 2).contiguous(), None  # all constant: no scatter
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
                probs = F.dropout(self._constant_probs(key_mask, length, value.dtype).expand(batch, -1, -1, -1), p=dropout)
                output[:, self._const_idx] = torch.matmul(probs, value[:, self._const_idx])
            else:
                output[:, self._const_idx] = self._constant_output(value[:, self._const_idx], key_mask)
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


# -- installing and removing patches ----------------------------------------------------------------
def _context(model: nn.Module) -> PatchContext | None:
    return getattr(model, "_papa_context", None)


def is_patched(model: nn.Module) -> bool:
    return _context(model) is not None


def _capture_mask_hook(context: PatchContext, signature: inspect.Signature):
    def hook(module, args, kwargs):
        bound = signature.bind_partial(*args, **kwargs).arguments
        mask, ids, embeds = bound.get("attention_mask"), bound.get("input_ids"), bound.get("inputs_embeds")
        shape = ids.shape if ids is not None else embeds.shape[:2]
        if context.max_length is not None and shape[-1] > context.max_length:
            raise PapaError(
                f"Input length {shape[-1]} exceeds the constants' length L={context.max_length}",
                f"Tokenise with max_length={context.max_length} (padding='max_length', truncation=True).",
            )
        device = (ids if ids is not None else embeds).device
        context.key_mask = torch.ones(shape, dtype=torch.bool, device=device) if mask is None else mask.bool()

    return hook


def _set_attn_implementation(model: nn.Module, name: str | None) -> None:
    """Switch the model's attention function through transformers' own API (``papa`` is registered in
    ``AttentionInterface``, so transformers accepts it like ``sdpa`` or ``eager``)."""
    model.set_attn_implementation(name or "eager")


def _install(model: nn.Module, max_length: int | None) -> PatchContext:
    if is_patched(model):
        raise PapaError("The model is already patched", "Call papa.unpatch(model) first.")
    adapter = get_adapter(model)
    base = getattr(model, "base_model", model)
    context = PatchContext(max_length=max_length)
    context.hook_handle = base.register_forward_pre_hook(_capture_mask_hook(context, inspect.signature(base.forward)), with_kwargs=True)
    if adapter.mechanism == "interface":
        context.previous_attn_implementation = model.config._attn_implementation
        _set_attn_implementation(model, ATTN_IMPLEMENTATION)
    object.__setattr__(model, "_papa_context", context)
    return context


def _attach(model: nn.Module, patches: Iterable[HeadPatch]) -> None:
    adapter = get_adapter(model)
    modules = self_attention_modules(model)
    for patch in patches:
        module = modules[patch.layer]
        reference = next(module.parameters(), None)
        if reference is not None:
            patch.to(reference.device)  # constants and indices live where the layer lives (in place for parameters)
        module.papa_patch = patch
        if adapter.mechanism == "inline":
            setattr(module, adapter.probs_dropout, ProbsHook(getattr(module, adapter.probs_dropout), patch))


def _check_constants(model: nn.Module, constants: torch.Tensor) -> None:
    config = model.config
    expected = (config.num_hidden_layers, config.num_attention_heads)
    if constants.dim() != 4 or tuple(constants.shape[:2]) != expected or constants.shape[2] != constants.shape[3]:
        raise ConstantsMismatchError(
            f"Constants of shape {tuple(constants.shape)} do not fit a model with {expected[0]} layers x {expected[1]} heads (expected [layers, heads, L, L])",
            "Estimate constants for this model with `papa estimate --model ...`.",
        )
    limit = getattr(config, "max_position_embeddings", None)
    if limit is not None and constants.shape[2] > limit:
        raise ConstantsMismatchError(f"Constants of length {constants.shape[2]} exceed the model's {limit} positions", "Use a smaller L.")


def patch_constant_heads(
    model: nn.Module,
    constants: torch.Tensor,
    heads: Iterable[tuple[int, int]],
    trainable: bool = False,
) -> nn.Module:
    """Make ``heads`` (``(layer, head)`` pairs) constant, in place; returns ``model``.

    Args:
        constants: ``[layers, heads, L, L]`` (e.g. ``papa.core.constants.load_constants(...).constants``).
        trainable: make the constants ``nn.Parameter`` s instead of frozen buffers.
    """
    from papa.core.heads import validate_head_set

    _check_constants(model, constants)
    num_layers, num_heads = constants.shape[:2]
    head_set = validate_head_set(heads, num_layers, num_heads)
    context = _install(model, constants.shape[-1])
    by_layer: dict[int, list[int]] = {}
    for layer, head in head_set:
        by_layer.setdefault(layer, []).append(head)
    patches = []
    for layer, layer_heads in sorted(by_layer.items()):
        layer_heads = sorted(layer_heads)
        patches.append(HeadPatch(layer, num_heads, "constant", context, constants[layer, layer_heads], layer_heads, trainable))
    _attach(model, patches)
    context.meta = {"mode": "constant", "constant_heads": [list(h) for h in head_set], "max_length": int(constants.shape[-1])}
    model.config.papa = dict(context.meta, trainable=trainable)
    return model


def patch_gates(model: nn.Module, constants: torch.Tensor) -> list[nn.Parameter]:
    """Gate every head between its attention and its constant; returns the λ parameters, layer order."""
    _check_constants(model, constants)
    num_layers, num_heads = constants.shape[:2]
    context = _install(model, constants.shape[-1])
    patches = [HeadPatch(layer, num_heads, "gates", context, constants[layer]) for layer in range(num_layers)]
    _attach(model, patches)
    context.meta = {"mode": "gates", "max_length": int(constants.shape[-1])}
    return [patch.lambdas for patch in patches]


def patch_record(model: nn.Module, max_length: int | None = None) -> list[HeadPatch]:
    """Record attention statistics in every layer (see :meth:`HeadPatch.transform_probs`); ``max_length``: the
    ``L`` of the accumulators, needed when compact passes (:mod:`papa.core.compact`) are recorded."""
    config = model.config
    context = _install(model, None)
    context.record_length = max_length
    patches = [HeadPatch(layer, config.num_attention_heads, "record", context) for layer in range(config.num_hidden_layers)]
    _attach(model, patches)
    context.meta = {"mode": "record"}
    return patches


def gate_lambdas(model: nn.Module) -> torch.Tensor:
    """``[layers, heads]`` λ of a model patched with :func:`patch_gates`."""
    return torch.stack([m.papa_patch.lambdas.detach().cpu() for m in self_attention_modules(model)])


def prune_qk(model: nn.Module) -> nn.Module:
    """Drop the Q and K projection rows of constant heads (inference speed-up, reversible by unpatch).

    Only for ``interface`` architectures whose adapter names ``query``/``key`` and for frozen
    constants. A layer whose heads are all constant keeps one zero head (a ``view(..., -1, d)``
    of an empty projection would be ambiguous); its scores are never used.
    """
    context, adapter = _context(model), get_adapter(model)
    if context is None or context.meta.get("mode") != "constant":
        raise PapaError("prune_qk needs a model patched with constant heads", "Call patch_constant_heads first.")
    if adapter.query is None or context.pruned:
        return model
    for module in self_attention_modules(model):
        patch = getattr(module, "papa_patch", None)
        if patch is None or not patch.constant_heads or patch.constants.requires_grad:
            continue
        head_dim = module.attention_head_size if hasattr(module, "attention_head_size") else None
        for name in (adapter.query, adapter.key):
            linear: nn.Linear = getattr(module, name)
            head_dim = head_dim or linear.out_features // patch.num_heads
            keep = patch.dynamic_heads
            pruned = nn.Linear(linear.in_features, head_dim * max(len(keep), 1), bias=linear.bias is not None)
            pruned.to(linear.weight.device, linear.weight.dtype).requires_grad_(False)
            with torch.no_grad():
                if keep:
                    rows = torch.cat([torch.arange(h * head_dim, (h + 1) * head_dim) for h in keep])
                    pruned.weight.copy_(linear.weight[rows])
                    if linear.bias is not None:
                        pruned.bias.copy_(linear.bias[rows])
                else:
                    pruned.weight.zero_()
                    if pruned.bias is not None:
                        pruned.bias.zero_()
            patch._originals[name] = linear
            setattr(module, name, pruned)
        patch.qk_pruned = True
    context.pruned = True
    if isinstance(getattr(model.config, "papa", None), dict):
        model.config.papa["qk_pruned"] = True  # save_pretrained now writes pruned Q/K: load_patched needs to know
    return model


def unpatch(model: nn.Module) -> nn.Module:
    """Remove every patch, restoring the original modules and attention implementation."""
    context = _context(model)
    if context is None:
        return model
    adapter = get_adapter(model)
    for module in self_attention_modules(model):
        patch = getattr(module, "papa_patch", None)
        if patch is None:
            continue
        for name, original in patch._originals.items():
            setattr(module, name, original)
        if adapter.mechanism == "inline":
            setattr(module, adapter.probs_dropout, getattr(module, adapter.probs_dropout).dropout)
        del module.papa_patch
    context.hook_handle.remove()
    if adapter.mechanism == "interface":
        _set_attn_implementation(model, context.previous_attn_implementation)
    if hasattr(model.config, "papa"):
        del model.config.papa
    object.__delattr__(model, "_papa_context")
    return model


def constant_heads_of(model: nn.Module) -> list[tuple[int, int]]:
    """The ``(layer, head)`` pairs that are constant in ``model``."""
    return [
        (m.papa_patch.layer, h)
        for m in self_attention_modules(model)
        if getattr(m, "papa_patch", None) is not None and m.papa_patch.mode == "constant"
        for h in m.papa_patch.constant_heads
    ]


# -- reloading a saved patched model ----------------------------------------------------------------
_PATCH_SUFFIX = ".papa_patch.constants"


def _saved_tensors(folder: Path, wanted) -> dict[str, torch.Tensor]:
    """The tensors of a ``save_pretrained`` folder (single or sharded safetensors) whose key satisfies ``wanted``."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise PapaError(f"The folder {folder} holds no *.safetensors weights", "Save the patched model with save_pretrained.")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as handle:
                for key in handle.keys():
                    if wanted(key):
                        tensors[key] = handle.get_tensor(key)
        except (SafetensorError, OSError) as err:
            raise CorruptFileError(f"The weights file {file} cannot be read ({err})", "Save the model again.") from None
    return tensors


def _saved_key(tensors: dict[str, torch.Tensor], name: str) -> str | None:
    """The key of base-model parameter ``name`` in ``tensors``, allowing a task-model prefix (``bert.``)."""
    if name in tensors:
        return name
    matches = [key for key in tensors if key.endswith("." + name)]
    return matches[0] if len(matches) == 1 else None


def load_patched(folder: str | Path, device: str | torch.device | None = None) -> nn.Module:
    """Reload a model written by ``save_pretrained`` after :func:`patch_constant_heads`.

    Reads ``config.papa`` (``mode``, ``constant_heads``, ``max_length``, ``trainable``) from the
    folder's ``config.json``, loads the base encoder with ``AutoModel`` (SDPA; eager for inline
    architectures) and re-attaches the saved constants (``<self-attention>.papa_patch.constants``
    in the safetensors weights) to the same heads. A folder saved from a task model (e.g.
    ``BertForSequenceClassification``) comes back as its base encoder; one saved after
    :func:`prune_qk` (``config.papa["qk_pruned"]``) comes back pruned with its saved Q/K rows.
    Returned in eval mode (``requires_grad`` as ``from_pretrained`` leaves it).
    """
    from transformers import AutoConfig, AutoModel
    from transformers.utils import logging as hf_logging

    from papa.core.architectures import attn_implementation_for
    from papa.core.heads import validate_head_set
    from papa.core.models import NO_CUSTOM_CODE, check_model_folder

    folder = Path(folder)
    redo = "Patch the model again and save it with save_pretrained."
    if not (folder / "config.json").is_file():
        raise PapaError(f"The folder {folder} has no config.json", "Point at a folder written by save_pretrained.")
    check_model_folder(folder)
    config = AutoConfig.from_pretrained(folder, **NO_CUSTOM_CODE)
    meta = getattr(config, "papa", None)
    if not isinstance(meta, dict) or meta.get("mode") != "constant":
        raise PapaError(
            f"{folder} does not hold a model patched with constant heads (config.json has no papa.mode 'constant')",
            "Load it with papa.load_model, or patch it with patch_constant_heads before save_pretrained.",
        )
    adapter = get_adapter(config)
    num_layers, num_heads = config.num_hidden_layers, config.num_attention_heads
    heads = validate_head_set(meta.get("constant_heads") or [], num_layers, num_heads)
    length = meta.get("max_length")
    if not isinstance(length, int) or length < 1:
        raise CorruptFileError(f"{folder}: config.papa.max_length is {length!r}, not a positive integer", redo)
    qk_pruned = bool(meta.get("qk_pruned", False)) and adapter.query is not None
    projections = (adapter.query, adapter.key) if qk_pruned else ()
    saved = _saved_tensors(folder, lambda key: key.endswith(_PATCH_SUFFIX) or any(f".{name}." in key for name in projections))
    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # silence the expected load report (UNEXPECTED papa_patch.constants)
    try:
        # Pruned Q/K do not fit the full projections: they are re-initialised here, replaced below.
        model = AutoModel.from_pretrained(folder, attn_implementation=attn_implementation_for(config), ignore_mismatched_sizes=qk_pruned, **NO_CUSTOM_CODE)
    finally:
        hf_logging.set_verbosity(previous)
    names = {module: name for name, module in model.named_modules()}
    modules = self_attention_modules(model)
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    constants = torch.zeros(num_layers, num_heads, length, length)
    for layer, layer_heads in by_layer.items():
        name = names[modules[layer]] + _PATCH_SUFFIX
        key = _saved_key(saved, name)
        if key is None:
            raise CorruptFileError(f"{folder} lacks the constants of layer {layer} ({name})", redo)
        if tuple(saved[key].shape) != (len(layer_heads), length, length):
            raise CorruptFileError(
                f"{folder}: the constants of layer {layer} have shape {tuple(saved[key].shape)}, config.papa needs {(len(layer_heads), length, length)}",
                redo,
            )
        constants[layer, sorted(layer_heads)] = saved[key].float()
    patch_constant_heads(model, constants, heads, trainable=bool(meta.get("trainable", False)))
    if qk_pruned:
        prune_qk(model)
        with torch.no_grad():
            for module in modules:
                patch = getattr(module, "papa_patch", None)
                if patch is None or not patch.qk_pruned:
                    continue
                for proj in projections:
                    linear = getattr(module, proj)
                    for part in ("weight", "bias"):
                        target = getattr(linear, part)
                        if target is None:
                            continue
                        key = _saved_key(saved, f"{names[module]}.{proj}.{part}")
                        if key is None or saved[key].shape != target.shape:
                            raise CorruptFileError(f"{folder}: no pruned {proj}.{part} of layer {patch.layer} fits", redo)
                        target.copy_(saved[key])
    model.eval()
    if device is not None:
        model.to(device)
    return model
