"""The per-architecture adapter table: where the self-attention modules are and how to hook them.

Each row of :data:`ADAPTERS` only names attributes (nothing is copied from modeling files), for one of two mechanisms:

* ``interface`` — the architecture calls ``ALL_ATTENTION_FUNCTIONS[config._attn_implementation]`` (BERT, RoBERTa,
  XLM-R, ELECTRA, DistilBERT): papa registers a ``"papa"`` attention function (:mod:`papa.core.head_patch`) and
  switches the model to it.
* ``inline`` — the softmax is inside the architecture's forward (DeBERTa v1/v2, MPNet): papa wraps the dropout right
  after it, which sees the probabilities ``[B, H, L, L]``, and, where heads' outputs are read or replaced, pre-hooks
  the output projection (input ``[B, L, H·d]``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import nn

from papa.core.errors import UnsupportedArchitectureError


@dataclass(frozen=True)
class ArchitectureAdapter:
    """How to reach and hook the self-attention of one family of architectures (dotted attribute paths).

    Attributes:
        mechanism: ``"interface"`` or ``"inline"`` (module docstring).
        layers, self_attention: base model → ``nn.ModuleList`` of layers; layer → self-attention module.
        query, key: the Q and K projections (``nn.Linear``, a block of rows per head) when prunable per head.
        probs_dropout: ``inline``: the dropout right after the softmax.
        position_ids: a padded input's absolute position ids, for compact passes (:mod:`papa.core.compact`):
            ``"slot"`` (the slot index) or ``"after_padding"`` (``padding_idx`` + real tokens so far); ``None``:
            always run padded.
        relative_positions: how a compact pass gives the slots' relative positions; ``None``: absolute only.
        context_projection: ``inline``: layer → output projection, input ``[B, L, H·d]`` (heads' outputs read in
            estimation, replaced by ``mean``).
    """

    mechanism: Literal["interface", "inline"]
    layers: str
    self_attention: str
    query: str | None = None
    key: str | None = None
    probs_dropout: str | None = None
    position_ids: Literal["slot", "after_padding"] | None = None
    relative_positions: Literal["mpnet", "deberta-v2"] | None = None
    context_projection: str | None = None


_BERT_LIKE = ArchitectureAdapter(
    "interface", "encoder.layer", "attention.self", query="query", key="key", position_ids="slot"
)
_ROBERTA_LIKE = ArchitectureAdapter(
    "interface", "encoder.layer", "attention.self", query="query", key="key", position_ids="after_padding"
)

#: ``config.model_type`` → adapter.
ADAPTERS: dict[str, ArchitectureAdapter] = {
    "bert": _BERT_LIKE,
    "roberta": _ROBERTA_LIKE,
    "xlm-roberta": _ROBERTA_LIKE,
    "electra": _BERT_LIKE,
    "distilbert": ArchitectureAdapter(
        "interface", "transformer.layer", "attention", query="q_lin", key="k_lin", position_ids="slot"
    ),
    # DeBERTa v1 sizes its relative-attention span by the input's length: a compact pass would change it (runs padded)
    "deberta": ArchitectureAdapter(
        "inline",
        "encoder.layer",
        "attention.self",
        probs_dropout="dropout",
        context_projection="attention.output.dense",
    ),
    "deberta-v2": ArchitectureAdapter(
        "inline",
        "encoder.layer",
        "attention.self",
        probs_dropout="dropout",
        position_ids="slot",
        relative_positions="deberta-v2",
        context_projection="attention.output.dense",
    ),
    "mpnet": ArchitectureAdapter(
        "inline",
        "encoder.layer",
        "attention.attn",
        probs_dropout="dropout",
        position_ids="after_padding",
        relative_positions="mpnet",
        context_projection="attention.attn.o",
    ),
}


def supported_model_types() -> list[str]:
    return sorted(ADAPTERS)


def get_adapter(model: nn.Module) -> ArchitectureAdapter:
    """The adapter for ``model`` (a ``PreTrainedModel``, or its config), or a clear error naming the supported ones."""
    model_type = getattr(getattr(model, "config", model), "model_type", None)
    if model_type not in ADAPTERS:
        raise UnsupportedArchitectureError(
            f"Architecture {model_type!r} is not supported by papa",
            f"Supported model types: {', '.join(supported_model_types())}. "
            "Add a row to papa.core.architectures.ADAPTERS to support another.",
        )
    return ADAPTERS[model_type]


def attn_implementation_for(model: nn.Module) -> str:
    """The attention implementation to load ``model`` (or its config) with: ``"sdpa"`` for ``interface``
    architectures, ``"eager"`` for ``inline`` ones (no SDPA path in transformers; papa hooks their softmax)."""
    return "sdpa" if get_adapter(model).mechanism == "interface" else "eager"


def _get_path(root: nn.Module, dotted: str) -> nn.Module:
    module = root
    for part in dotted.split("."):
        module = getattr(module, part)
    return module


def self_attention_modules(model: nn.Module) -> list[nn.Module]:
    """The self-attention module of every layer, in layer order (``len == num_hidden_layers``)."""
    adapter = get_adapter(model)
    base = getattr(model, "base_model", model)
    return [_get_path(layer, adapter.self_attention) for layer in _get_path(base, adapter.layers)]


def context_projections(model: nn.Module) -> list[nn.Module]:
    """The output projection of every layer (the adapter's ``context_projection``), in layer order."""
    adapter = get_adapter(model)
    if adapter.context_projection is None:
        raise UnsupportedArchitectureError(
            f"The adapter of {model.config.model_type!r} names no context_projection",
            "Add it to the row in papa.core.architectures.ADAPTERS.",
        )
    base = getattr(model, "base_model", model)
    return [_get_path(layer, adapter.context_projection) for layer in _get_path(base, adapter.layers)]
