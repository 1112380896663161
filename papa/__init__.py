"""papa — Probing Analysis for PLMs' Attention (Hassid et al., 2022) on unmodified transformers.

Five-line use::

    import papa
    lm = papa.load_model("minilm-l6")
    enc = papa.encode_sequences(lm.tokenizer, ["a fine film", "a dull one"], max_length=64)
    cs = papa.estimate_constants(lm.model, enc)
    papa.patch_constant_heads(lm.model, cs.constants, papa.all_heads(6, 12)[:36])
    hidden = lm.model(**enc).last_hidden_state
"""

from __future__ import annotations

__version__ = "0.1.0"

from .architectures import get_adapter, supported_model_types
from .constants import ConstantSet, estimate_constants, load_constants, save_constants
from .errors import PapaError
from .experiment import estimate_task_constants, prepare_inputs, run_probe, save_result
from .heads import all_heads, count_for, first_k, load_ranking, paper_counts, random_ranking, save_ranking
from .layout import encode_sequences, encode_words
from .models import DEFAULT_MODEL, LoadedModel, load_model, pick_device
from .patching import (
    constant_heads_of,
    gate_lambdas,
    is_patched,
    load_patched,
    masked_rownorm,
    patch_constant_heads,
    patch_gates,
    prune_qk,
    unpatch,
)

__all__ = [
    "ConstantSet", "DEFAULT_MODEL", "LoadedModel", "PapaError", "__version__", "all_heads", "constant_heads_of",
    "count_for", "encode_sequences", "encode_words", "estimate_constants", "first_k", "gate_lambdas",
    "get_adapter", "is_patched", "load_patched", "load_constants", "load_model", "load_ranking", "masked_rownorm",
    "paper_counts", "patch_constant_heads", "patch_gates", "pick_device", "prune_qk", "random_ranking",
    "save_constants", "save_ranking", "supported_model_types", "unpatch",
    "estimate_task_constants", "prepare_inputs", "run_probe", "save_result", "compute_ranking",
]


_LAZY_MODULES = {"figures", "results", "book", "grid", "notebook", "ranking", "io"}


def __getattr__(name: str):
    """Lazy access to ``compute_ranking`` and to the heavier submodules (figures, results, book, grid)."""
    import importlib

    if name == "compute_ranking":
        return importlib.import_module(".ranking", __name__).compute_ranking
    if name in _LAZY_MODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'papa' has no attribute {name!r}")
