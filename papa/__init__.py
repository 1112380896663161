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

from papa.core.architectures import get_adapter, supported_model_types
from papa.core.constants import ConstantSet, estimate_constants, load_constants, save_constants
from papa.core.errors import PapaError
from papa.core.head_patch import masked_rownorm
from papa.core.heads import all_heads, count_for, first_k, load_ranking, paper_counts, random_ranking, save_ranking
from papa.core.layout import encode_sequences, encode_words
from papa.core.models import DEFAULT_MODEL, LoadedModel, load_model, pick_device
from papa.core.patching import (
    constant_heads_of,
    gate_lambdas,
    is_patched,
    load_patched,
    patch_constant_heads,
    patch_gates,
    prune_qk,
    unpatch,
)
from papa.core.replacements import REPLACEMENTS
from papa.core.version import __version__

__all__ = [
    "ConstantSet",
    "DEFAULT_MODEL",
    "LoadedModel",
    "PapaError",
    "REPLACEMENTS",
    "__version__",
    "all_heads",
    "constant_heads_of",
    "count_for",
    "encode_sequences",
    "encode_words",
    "estimate_constants",
    "first_k",
    "gate_lambdas",
    "get_adapter",
    "is_patched",
    "load_patched",
    "load_constants",
    "load_model",
    "load_ranking",
    "masked_rownorm",
    "paper_counts",
    "patch_constant_heads",
    "patch_gates",
    "pick_device",
    "prune_qk",
    "random_ranking",
    "save_constants",
    "save_ranking",
    "supported_model_types",
    "unpatch",
    "estimate_task_constants",
    "prepare_inputs",
    "run_probe",
    "run_probes",
    "protocol_text",
    "save_result",
    "compute_ranking",
    "DataSettings",
    "ProbeSettings",
]


#: Short names of the heavier modules, loaded on first use (``papa.figures``, ``papa.results``, ...).
_LAZY_MODULES = {
    "figures": "papa.analysis.figures",
    "results": "papa.analysis.results",
    "book": "papa.book",
    "grid": "papa.pipeline.grid",
    "notebook": "papa.pipeline.notebook",
    "ranking": "papa.probing.ranking",
    "io": "papa.core.io",
}


#: Functions loaded on first use, by the module that defines them: ``import papa`` alone executes papa.core, so a
#: run's key (:mod:`papa.pipeline.sources`) follows only the code its notebook reaches through these names.
_LAZY_NAMES = {
    "compute_ranking": "papa.probing.ranking",
    "estimate_task_constants": "papa.probing.encoding",
    "prepare_inputs": "papa.probing.task_inputs",
    "DataSettings": "papa.probing.params",
    "ProbeSettings": "papa.probing.params",
    "run_probe": "papa.probing.experiment",
    "run_probes": "papa.probing.experiment",
    "protocol_text": "papa.probing.protocol",
    "save_result": "papa.probing.run_training",
}


def __getattr__(name: str):
    """Lazy access to the probing functions (:data:`_LAZY_NAMES`) and the heavier modules (:data:`_LAZY_MODULES`)."""
    import importlib

    if name in _LAZY_NAMES:
        return getattr(importlib.import_module(_LAZY_NAMES[name]), name)
    if name in _LAZY_MODULES:
        return importlib.import_module(_LAZY_MODULES[name])
    raise AttributeError(f"module 'papa' has no attribute {name!r}")
