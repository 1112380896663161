"""Check a model folder as a whole before any weights load: its tokenizer, its size and its checkpoint's tensors.

:func:`check_model_fits` reads only JSON, the safetensors headers (never a tensor) and the tokenizer, and builds the
model on PyTorch's ``meta`` device (shapes, no memory). It refuses, each with one :class:`PapaError` naming the
folder:

* no tokenizer files (transformers would make up a 5-token vocabulary: every word ``[UNK]``), or a tokenizer whose
  ids do not fit the embedding matrix (more entries than rows, or fewer than half of them: another model's tokenizer);
* a config whose layer count is absurd (over :data:`MAX_LAYERS`) or whose parameter count is far beyond what the
  checkpoint holds (:data:`SIZE_SLACK`), before anything of that size is built;
* a checkpoint that does not match the config: a weight the model needs but the checkpoint lacks (transformers would
  initialise it at random), a tensor of another shape, or a tensor of the encoder the model has no place for (e.g.
  layers 6 and 7 of 8 under a config of 6). Tensors outside the encoder (a task head: ``cls.*``, ``classifier.*``)
  and unsaved buffers (``position_ids``) are dropped as transformers drops them; so is a missing pooler, since papa
  reads hidden states and attention only, never ``pooler_output``.
"""

from __future__ import annotations

import json
import math
import re
import struct
from pathlib import Path

from papa.core.errors import PapaError

#: More layers than any released encoder has by far: a config asking for more is refused before anything is built.
MAX_LAYERS = 512
#: A config may describe at most this many times the parameters its checkpoint holds (checked before it is built).
SIZE_SLACK = 2.0
#: A safetensors header larger than this is not one papa (or anyone) wrote for an encoder.
MAX_HEADER_BYTES = 100_000_000
#: Files from which transformers builds a tokenizer; a folder needs at least one.
TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "spm.model",
    "sentencepiece.bpe.model",
    "spiece.model",
    "tokenizer.model",
)
_REDO = "Save the model and its tokenizer again with save_pretrained, into a folder of their own."
_SHOWN = 5


def _shown(keys: list[str]) -> str:
    more = f" and {len(keys) - _SHOWN} more" if len(keys) > _SHOWN else ""
    return ", ".join(keys[:_SHOWN]) + more


def checkpoint_shapes(folder: Path, name: str) -> dict[str, tuple[int, ...]]:
    """``{tensor name: shape}`` over the folder's ``*.safetensors`` files, from their headers only (no tensor read)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for file in sorted(folder.glob("*.safetensors")):
        broken = PapaError(f"The model {name}: {file.name} is not a readable safetensors file", _REDO)
        try:
            with file.open("rb") as handle:
                (size,) = struct.unpack("<Q", handle.read(8))
                if size > MAX_HEADER_BYTES:
                    raise broken
                header = json.loads(handle.read(size))
        except (OSError, struct.error, ValueError):
            raise broken from None
        if not isinstance(header, dict):
            raise broken
        for key, entry in header.items():
            if key == "__metadata__":
                continue
            shape = entry.get("shape") if isinstance(entry, dict) else None
            if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
                raise broken
            if key in shapes:
                raise PapaError(f"The model {name} stores the tensor {key} twice (in two *.safetensors files)", _REDO)
            shapes[key] = tuple(shape)
    return shapes


def _meta_model(config, name: str):
    """The ``AutoModel`` of ``config`` on the meta device (shapes only, no memory)."""
    import torch
    from transformers import AutoModel

    from papa.core.architectures import attn_implementation_for

    try:
        with torch.device("meta"):
            return AutoModel.from_config(config, attn_implementation=attn_implementation_for(config))
    except PapaError:
        raise
    except Exception as err:  # noqa: BLE001 - transformers' own refusals of an inconsistent config
        problem = f"The model {name}: its config.json does not describe a model transformers can build ({err})"
        raise PapaError(problem[:600], "Fix config.json, or save the model again with save_pretrained.") from None


def _parameter_count(config, name: str) -> int:
    """The parameters ``config`` describes, from meta models of 1 and 2 layers (never building all of them)."""
    import copy

    layers = config.num_hidden_layers
    counts = []
    for n in (1, 2):
        small = copy.deepcopy(config)
        small.num_hidden_layers = n
        counts.append(sum(p.numel() for p in _meta_model(small, name).state_dict().values()))
    return counts[0] + (layers - 1) * (counts[1] - counts[0])


def _check_size(config, name: str, held: int) -> None:
    """Refuse an absurd layer count, or a config describing far more parameters than the checkpoint holds."""
    layers = getattr(config, "num_hidden_layers", None)
    if not isinstance(layers, int) or isinstance(layers, bool) or not 1 <= layers <= MAX_LAYERS:
        raise PapaError(
            f"The model {name}: its config.json asks for {str(layers)[:40]} layers (num_hidden_layers), "
            f"not a whole number from 1 to {MAX_LAYERS}",
            "Set num_hidden_layers to the number of layers the checkpoint holds.",
        )
    described = _parameter_count(config, name)
    if described > SIZE_SLACK * held:
        raise PapaError(
            f"The model {name}: its config.json describes {described:,} parameters ({layers} layers), "
            f"far more than the {held:,} its checkpoint holds",
            "Make config.json match the weights (num_hidden_layers, hidden_size, ...), or save the model again "
            "with save_pretrained.",
        )


def _match_keys(model, shapes: dict[str, tuple[int, ...]], name: str) -> None:
    """Refuse missing, unexpected or misshapen encoder tensors (see the module docstring for what is dropped)."""
    expected = {key: tuple(tensor.shape) for key, tensor in model.state_dict().items()}
    prefix = f"{model.base_model_prefix}." if model.base_model_prefix else ""
    if prefix and any(key.startswith(prefix) for key in shapes) and not any(key in expected for key in shapes):
        shapes = {key.removeprefix(prefix): shape for key, shape in shapes.items() if key.startswith(prefix)}
    unsaved = {key for key, _ in model.named_buffers()} - set(expected)
    ignored = [re.compile(p) for p in getattr(model, "_keys_to_ignore_on_load_unexpected", None) or []]
    tops = {key.split(".", 1)[0] for key in expected}  # the encoder's own parts: embeddings, encoder, pooler
    unexpected = sorted(
        key
        for key in shapes
        if key not in expected
        and key.split(".", 1)[0] in tops
        and key not in unsaved
        and not any(p.search(key) for p in ignored)
    )
    missing = sorted(key for key in expected if key not in shapes and not key.startswith("pooler."))
    wrong = sorted(
        f"{key} {list(shapes[key])} (config: {list(shape)})"
        for key, shape in expected.items()
        if key in shapes and shapes[key] != shape
    )
    fix = "Make config.json match the weights, or save the model again with save_pretrained."
    if missing:
        raise PapaError(
            f"The model {name}: its checkpoint lacks {len(missing)} weights its config.json needs "
            f"({_shown(missing)}); transformers would initialise them at random",
            fix,
        )
    if wrong:
        raise PapaError(
            f"The model {name}: {len(wrong)} tensors do not have the shape config.json gives: {_shown(wrong)}", fix
        )
    if unexpected:
        raise PapaError(
            f"The model {name}: its checkpoint holds {len(unexpected)} encoder tensors config.json has no place "
            f"for ({_shown(unexpected)}); transformers would drop them",
            fix,
        )


def _check_tokenizer(folder: Path, name: str, rows: int) -> None:
    """Refuse a folder without tokenizer files, or a tokenizer whose ids do not fit the ``rows`` embedding rows."""
    from transformers import AutoTokenizer

    if not any((folder / file).is_file() for file in TOKENIZER_FILES):
        raise PapaError(
            f"The model {name} has no tokenizer files (none of {', '.join(TOKENIZER_FILES)}): every word would "
            "become one unknown token",
            "Save the model's tokenizer into the folder too (tokenizer.save_pretrained(folder)).",
        )
    try:
        size = len(AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False))
    except (OSError, ValueError, TypeError) as err:
        raise PapaError(f"The model {name}: its tokenizer cannot be read ({str(err)[:300]})", _REDO) from None
    if size > rows or size < math.ceil(rows / 2):
        why = "ids beyond the last row" if size > rows else "fewer than half its rows: another model's tokenizer"
        raise PapaError(
            f"The model {name}: its tokenizer has {size:,} entries but its embedding matrix {rows:,} rows ({why})",
            "Save the tokenizer the model was trained with into the folder.",
        )


def check_model_fits(folder: str | Path, name: str | None = None) -> None:
    """Refuse a local model folder whose tokenizer, size or checkpoint does not fit its config (module docstring);
    reads headers and JSON only, and builds the model on the meta device."""
    from transformers import AutoConfig

    folder = Path(folder)
    name = name or str(folder)
    shapes = checkpoint_shapes(folder, name)
    try:
        config = AutoConfig.from_pretrained(str(folder), trust_remote_code=False)
    except (OSError, ValueError, TypeError) as err:
        problem = f"The model {name}: its config.json cannot be read ({str(err)[:300]})"
        raise PapaError(problem, "Point --model at a folder written by save_pretrained.") from None
    _check_size(config, name, sum(math.prod(shape) for shape in shapes.values()))
    model = _meta_model(config, name)
    _match_keys(model, shapes, name)
    _check_tokenizer(folder, name, model.get_input_embeddings().weight.shape[0])
