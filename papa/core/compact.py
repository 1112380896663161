"""Encoder passes over the real positions only: cost proportional to real tokens, same hidden states.

In the PAPA layout (:mod:`papa.core.layout`) a single sentence fills slots ``0 .. n−1`` and ``L − 1``, so trimming
at the last real slot would keep all ``L``. A *compact* pass runs the encoder on ``[B, P]`` inputs, the batch's
``slots [P]`` real in at least one row, and gives it the padded pass's absolute position ids (adapter's
``position_ids``), the slots' relative positions (``relative_positions``) and, through
:attr:`papa.core.head_patch.PatchContext.slots`, the slots to the head patches. It is exact (≤ 1e-5, tested per
adapter): pad keys get weight 0 in a dynamic head, a constant head re-masks and renormalises, and every real key is
kept. DeBERTa v1 (its relative span depends on the input length) and a DeBERTa-v2 with ``conv_kernel_size`` run padded.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from papa.core.architectures import get_adapter


@dataclass(frozen=True)
class CompactBatch:
    """One batch of a compact pass: ``rows [B]`` (into the encoded set) and ``slots [P]`` (sorted, real in a row)."""

    rows: torch.Tensor
    slots: torch.Tensor


def supports_compact(model: nn.Module) -> bool:
    """Whether ``model``'s architecture can run compact passes (its adapter names a position rule)."""
    adapter = get_adapter(model)
    convolves = getattr(model.config, "conv_kernel_size", 0) or 0
    return adapter.position_ids is not None and not convolves


def plan_batches(attention_mask: torch.Tensor, batch_size: int, window: int | None = None) -> list[CompactBatch]:
    """Batches of rows sorted by real-token count (stable) within consecutive windows of ``window`` rows (``None``:
    one) of ``attention_mask [N, L]``; windows come in row order, so a consumer can reassemble one at a time."""
    mask = attention_mask.bool()
    total = mask.shape[0]
    window = total if window is None else window
    batches = []
    for start in range(0, total, max(window, 1)):
        rows = torch.arange(start, min(start + window, total))
        order = rows[torch.argsort(mask[rows].sum(1), stable=True)]
        for offset in range(0, len(order), batch_size):
            chosen = order[offset : offset + batch_size]
            batches.append(CompactBatch(chosen, mask[chosen].any(0).nonzero().flatten()))
    return batches


def natural_position_ids(model: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    """``[B, L]``: the absolute position ids the model's embeddings give the padded ``input_ids [B, L]``."""
    rule = get_adapter(model).position_ids
    if rule == "slot":
        return torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
    if rule == "after_padding":
        padding_idx = getattr(model.config, "pad_token_id", None)
        padding_idx = 1 if padding_idx is None else padding_idx
        real = input_ids.ne(padding_idx).long()
        return torch.cumsum(real, dim=1) * real + padding_idx
    raise ValueError(f"No position rule for {model.config.model_type!r}")


def compact_inputs(model: nn.Module, inputs: dict[str, torch.Tensor], slots: torch.Tensor) -> dict[str, torch.Tensor]:
    """Padded ``inputs [B, L]`` at ``slots [P]`` → ``[B, P]`` (no ``labels``), with the padded pass's position ids."""
    out = {name: tensor[:, slots] for name, tensor in inputs.items() if name != "labels"}
    out["position_ids"] = natural_position_ids(model, inputs["input_ids"])[:, slots]
    return out


def _mpnet_position_bias(
    encoder: nn.Module, slots: torch.Tensor, hidden_states: torch.Tensor, position_ids=None, num_buckets: int = 32
) -> torch.Tensor:
    """MPNet's relative position bias ``[B, H, P, P]`` between the kept slots (the encoder's own buckets and
    embedding; its ``position_ids`` branch cannot take them: it assumes ``[P]`` → ``[P, P, H]``)."""
    relative = slots[None, :] - slots[:, None]  # [P, P], key − query; values: [P, P, H]
    values = encoder.relative_attention_bias(encoder.relative_position_bucket(relative, num_buckets=num_buckets))
    return values.permute(2, 0, 1)[None].expand(hidden_states.size(0), -1, -1, -1).contiguous()


def _deberta_v2_relative_pos(encoder: nn.Module, slots: torch.Tensor) -> torch.Tensor:
    """``[1, P, P]``: the encoder's bucketed relative positions (query − key) between the kept slots."""
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    relative = slots[:, None] - slots[None, :]
    size, maximum = getattr(encoder, "position_buckets", -1), getattr(encoder, "max_relative_positions", -1)
    if size > 0 and maximum > 0:
        relative = make_log_bucket_position(relative, size, maximum)
    return relative.long()[None]


@contextmanager
def slot_positions(model: nn.Module, slots: torch.Tensor) -> Iterator[None]:
    """While inside, ``model`` sees ``[B, P]`` inputs as the padded layout's ``slots [P]``: relative positions and
    head patches use them (absolute ids come in ``position_ids``)."""
    adapter = get_adapter(model)
    base = getattr(model, "base_model", model)
    context = getattr(model, "_papa_context", None)
    handle, encoder = None, getattr(base, "encoder", None)
    if context is not None:
        context.slots = slots
    try:
        if adapter.relative_positions == "mpnet":
            encoder.compute_position_bias = partial(_mpnet_position_bias, encoder, slots)
        elif adapter.relative_positions == "deberta-v2":
            relative = _deberta_v2_relative_pos(encoder, slots)

            def inject(module, args, kwargs):
                kwargs["relative_pos"] = relative
                return args, kwargs

            handle = encoder.register_forward_pre_hook(inject, with_kwargs=True)
        yield
    finally:
        if context is not None:
            context.slots = None
        if adapter.relative_positions == "mpnet":
            encoder.__dict__.pop("compute_position_bias", None)
        if handle is not None:
            handle.remove()


def compact_forward(model: nn.Module, inputs: dict[str, torch.Tensor], slots: torch.Tensor, **kwargs):
    """``model`` on ``inputs [B, L]`` at ``slots [P]``: hidden states ``[B, P, H]``, the padded pass's there."""
    with slot_positions(model, slots):
        return model(**compact_inputs(model, inputs, slots), **kwargs)
