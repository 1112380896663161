"""Installing head patches (:mod:`papa.core.head_patch`) on unmodified transformers, removing them, reloading.

Installing keeps each pass's padding mask in the model's :class:`~papa.core.head_patch.PatchContext` (a pre-hook on
the base model), switches ``interface`` architectures to the ``"papa"`` attention function and gives each
self-attention module its :class:`~papa.core.head_patch.HeadPatch` (``inline`` ones: a wrapped probability dropout,
and an output-projection pre-hook where heads' outputs are used).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from torch import nn

from papa.core.architectures import context_projections, get_adapter, self_attention_modules
from papa.core.errors import ConstantsMismatchError, CorruptFileError, PapaError
from papa.core.head_patch import ATTN_IMPLEMENTATION, HeadPatch, PatchContext, ProbsHook, get_replacement


# -- installing and removing patches ----------------------------------------------------------------
def _context(model: nn.Module) -> PatchContext | None:
    return getattr(model, "_papa_context", None)


def is_patched(model: nn.Module) -> bool:
    return _context(model) is not None


def _capture_mask_hook(context: PatchContext, signature: inspect.Signature):
    def hook(module, args, kwargs):
        bound = signature.bind_partial(*args, **kwargs).arguments
        mask, ids, embeds = bound.get("attention_mask"), bound.get("input_ids"), bound.get("inputs_embeds")
        if ids is None and embeds is None:
            raise PapaError(
                "A patched model was called with neither input_ids nor inputs_embeds",
                "Pass input_ids [batch, L] (with attention_mask [batch, L]) or inputs_embeds [batch, L, hidden].",
            )
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
    """Switch the attention function through transformers' API (``papa`` is registered in ``AttentionInterface``)."""
    model.set_attn_implementation(name or "eager")


def _install(model: nn.Module, max_length: int | None) -> PatchContext:
    if is_patched(model):
        raise PapaError("The model is already patched", "Call papa.unpatch(model) first.")
    adapter = get_adapter(model)
    base = getattr(model, "base_model", model)
    context = PatchContext(max_length=max_length)
    context.hook_handle = base.register_forward_pre_hook(
        _capture_mask_hook(context, inspect.signature(base.forward)), with_kwargs=True
    )
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
            if patch.mode == "record" or patch.output_means is not None:  # heads' outputs are read or written
                patch.hook_handles.append(
                    context_projections(model)[patch.layer].register_forward_pre_hook(patch.context_pre_hook)
                )


def _check_constants(model: nn.Module, constants: torch.Tensor) -> None:
    config = model.config
    expected = (config.num_hidden_layers, config.num_attention_heads)
    if constants.dim() != 4 or tuple(constants.shape[:2]) != expected or constants.shape[2] != constants.shape[3]:
        raise ConstantsMismatchError(
            f"Constants of shape {tuple(constants.shape)} do not fit a model with "
            f"{expected[0]} layers x {expected[1]} heads (expected [layers, heads, L, L])",
            "Estimate constants for this model with `papa estimate --model ...`.",
        )
    limit = getattr(config, "max_position_embeddings", None)
    if limit is not None and constants.shape[2] > limit:
        raise ConstantsMismatchError(
            f"Constants of length {constants.shape[2]} exceed the model's {limit} positions", "Use a smaller L."
        )


def _head_dim(config) -> int:
    """The size ``d`` of one head's output."""
    return getattr(config, "attention_head_size", None) or config.hidden_size // config.num_attention_heads


def _check_output_means(model: nn.Module, output_means: torch.Tensor, constants: torch.Tensor) -> None:
    """``output_means`` must be ``[layers, heads, L, d]`` for ``constants [layers, heads, L, L]`` and the model."""
    expected = (*constants.shape[:3], _head_dim(model.config))
    if tuple(output_means.shape) != expected:
        raise ConstantsMismatchError(
            f"Mean outputs of shape {tuple(output_means.shape)} do not fit these constants and model "
            f"(expected [layers, heads, L, d] = {list(expected)})",
            "Re-run `papa estimate` for this model and task.",
        )


def patch_constant_heads(
    model: nn.Module,
    constants: torch.Tensor,
    heads: Iterable[tuple[int, int]],
    trainable: bool = False,
    replacement: str = "papa",
    output_means: torch.Tensor | None = None,
) -> nn.Module:
    """Replace ``heads`` (``(layer, head)`` pairs) in place by ``rownorm(M ⊙ m mᵀ) V + m ⊙ μ``, ``M`` and ``μ``
    from :data:`papa.core.replacements.REPLACEMENT_TABLE`; returns ``model``.

    Args:
        constants: ``[layers, heads, L, L]`` (e.g. ``papa.core.constants.load_constants(...).constants``); for
            ``uniform``, ``zero`` and ``mean`` only its shape (``L``) is used.
        trainable: make the constants ``nn.Parameter`` s instead of frozen buffers (``papa`` only).
        replacement: one of :data:`papa.core.replacements.REPLACEMENTS`: ``papa`` (``M`` = the constant), ``uniform``
            (all ones), ``zero`` (no output), ``mean`` (``μ`` = the mean output).
        output_means: ``[layers, heads, L, d]`` (``ConstantSet.output_means``), needed by ``mean``.
    """
    from papa.core.heads import validate_head_set

    chosen = get_replacement(replacement, output_means is not None)
    if trainable and chosen.matrix != "constants":
        raise PapaError(
            f"Only the 'papa' replacement has trainable constants, not {replacement!r}", "Use trainable=False."
        )
    _check_constants(model, constants)
    if chosen.stored_output:
        _check_output_means(model, output_means, constants)
    num_layers, num_heads = constants.shape[:2]
    head_set = validate_head_set(heads, num_layers, num_heads)
    context = _install(model, constants.shape[-1])
    by_layer: dict[int, list[int]] = {}
    for layer, head in head_set:
        by_layer.setdefault(layer, []).append(head)
    patches = []
    for layer, layer_heads in sorted(by_layer.items()):
        layer_heads = sorted(layer_heads)
        means = output_means[layer, layer_heads] if chosen.stored_output else None
        patches.append(
            HeadPatch(
                layer,
                num_heads,
                "constant",
                context,
                chosen.matrices(constants[layer, layer_heads]),
                layer_heads,
                trainable,
                means,
            )
        )
    _attach(model, patches)
    context.meta = {
        "mode": "constant",
        "constant_heads": [list(h) for h in head_set],
        "max_length": int(constants.shape[-1]),
        "replacement": chosen.name,
    }
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
    """Record attention statistics in every layer (:meth:`HeadPatch.transform_probs`); ``max_length``: the
    accumulators' ``L``, needed to record compact passes (:mod:`papa.core.compact`)."""
    config = model.config
    context = _install(model, None)
    context.record_length = max_length
    patches = [
        HeadPatch(layer, config.num_attention_heads, "record", context) for layer in range(config.num_hidden_layers)
    ]
    _attach(model, patches)
    context.meta = {"mode": "record"}
    return patches


def gate_lambdas(model: nn.Module) -> torch.Tensor:
    """``[layers, heads]`` λ of a model patched with :func:`patch_gates`."""
    return torch.stack([m.papa_patch.lambdas.detach().cpu() for m in self_attention_modules(model)])


def prune_qk(model: nn.Module) -> nn.Module:
    """Drop the Q and K projection rows of constant heads (inference speed-up, reversible by unpatch).

    Only for ``interface`` architectures whose adapter names ``query``/``key``, and frozen constants. A layer of only
    constant heads keeps one zero head (``view(..., -1, d)`` of an empty projection is ambiguous), never used.
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
        model.config.papa["qk_pruned"] = True  # save_pretrained now writes pruned Q/K (for load_patched)
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
        for handle in patch.hook_handles:
            handle.remove()
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
_MEANS_SUFFIX = ".papa_patch.output_means"


def _saved_tensors(folder: Path, wanted) -> dict[str, torch.Tensor]:
    """The tensors of a ``save_pretrained`` folder (single or sharded safetensors) whose key satisfies ``wanted``."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise PapaError(
            f"The folder {folder} holds no *.safetensors weights", "Save the patched model with save_pretrained."
        )
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
    """Reload a model written by ``save_pretrained`` after :func:`patch_constant_heads`, in eval mode.

    ``config.papa`` (``replacement`` absent: ``papa``) says which heads get the saved ``.papa_patch.constants`` (and
    ``.papa_patch.output_means``) back. A task model's folder comes back as its base ``AutoModel``; one saved after
    :func:`prune_qk` comes back pruned with its saved Q/K rows. ``requires_grad`` is as ``from_pretrained`` leaves it.
    """
    from transformers import AutoConfig

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
    replacement = get_replacement(meta.get("replacement", "papa"), has_output_means=True)  # older saves: papa
    qk_pruned = bool(meta.get("qk_pruned", False)) and adapter.query is not None
    projections = (adapter.query, adapter.key) if qk_pruned else ()
    saved = _saved_tensors(
        folder,
        lambda key: key.endswith((_PATCH_SUFFIX, _MEANS_SUFFIX)) or any(f".{name}." in key for name in projections),
    )
    model = _from_pretrained_quietly(folder, config, qk_pruned)
    names = {module: name for name, module in model.named_modules()}
    modules = self_attention_modules(model)
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    constants = torch.zeros(num_layers, num_heads, length, length)
    output_means = torch.zeros(num_layers, num_heads, length, _head_dim(config)) if replacement.stored_output else None

    def layer_tensor(layer: int, suffix: str, what: str, shape: tuple[int, ...]) -> torch.Tensor:
        name = names[modules[layer]] + suffix
        key = _saved_key(saved, name)
        if key is None:
            raise CorruptFileError(f"{folder} lacks the {what} of layer {layer} ({name})", redo)
        if tuple(saved[key].shape) != shape:
            raise CorruptFileError(
                f"{folder}: the {what} of layer {layer} have shape {tuple(saved[key].shape)}, "
                f"config.papa needs {shape}",
                redo,
            )
        return saved[key].float()

    for layer, layer_heads in by_layer.items():
        layer_heads = sorted(layer_heads)
        constants[layer, layer_heads] = layer_tensor(
            layer, _PATCH_SUFFIX, "constants", (len(layer_heads), length, length)
        )
        if output_means is not None:
            output_means[layer, layer_heads] = layer_tensor(
                layer, _MEANS_SUFFIX, "mean outputs", (len(layer_heads), *output_means.shape[2:])
            )
    patch_constant_heads(model, constants, heads, bool(meta.get("trainable", False)), replacement.name, output_means)
    if qk_pruned:
        prune_qk(model)
        _restore_pruned_qk(modules, names, saved, projections, f"{folder}: ", redo)
    model.eval()
    if device is not None:
        model.to(device)
    return model


def _from_pretrained_quietly(folder: Path, config, qk_pruned: bool) -> nn.Module:
    """``AutoModel.from_pretrained(folder)`` without transformers' expected report of the saved patch tensors
    (UNEXPECTED ``papa_patch.constants``, ``.output_means``); pruned Q/K, which do not fit the full projections, are
    re-initialised (the caller puts the saved ones back)."""
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    from papa.core.architectures import attn_implementation_for
    from papa.core.models import NO_CUSTOM_CODE

    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        return AutoModel.from_pretrained(
            folder,
            attn_implementation=attn_implementation_for(config),
            ignore_mismatched_sizes=qk_pruned,
            **NO_CUSTOM_CODE,
        )
    finally:
        hf_logging.set_verbosity(previous)


def _restore_pruned_qk(
    modules: list[nn.Module],
    names: dict[nn.Module, str],
    saved: dict[str, torch.Tensor],
    projections: tuple[str, ...],
    where: str,
    redo: str,
) -> None:
    """Copy the saved pruned Q/K rows (``projections``' weight and bias) into every Q/K-pruned layer, in place."""
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
                        raise CorruptFileError(f"{where}no pruned {proj}.{part} of layer {patch.layer} fits", redo)
                    target.copy_(saved[key])
