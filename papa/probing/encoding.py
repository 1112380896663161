"""A task's examples encoded with the PAPA layout, and a task's constants estimated from them.

Kept apart from the probe's training and scoring (:mod:`papa.probing.task_inputs`, :mod:`papa.probing.experiment`)
because an estimate run (``notebooks/01_estimate_constants.md``) executes it: an edit there never changes the
constants' run key (nor every key downstream).
"""

from __future__ import annotations

import torch

from papa.core.constants import ConstantSet
from papa.core.layout import check_max_length, encode_sequences, encode_words
from papa.core.models import LoadedModel, load_model, pick_device
from papa.core.tasks import TaskSpec, get_task
from papa.probing.data import load_task_split


def encode_split(lm: LoadedModel, spec: TaskSpec, dataset, max_length: int, relayout: bool) -> dict[str, torch.Tensor]:
    """Encode a loaded split with the PAPA layout: ``input_ids``/``attention_mask`` ``[N, L]`` plus ``labels``
    (``[N]`` or ``[N, L]``)."""
    if spec.is_token_task:
        return encode_words(lm.tokenizer, dataset["tokens"], dataset[spec.label_column], max_length, relayout)
    columns = [dataset[c] for c in spec.text_columns]
    encoded = encode_sequences(lm.tokenizer, columns[0], columns[1] if len(columns) > 1 else None, max_length, relayout)
    encoded["labels"] = torch.tensor(dataset[spec.label_column], dtype=torch.long)
    return encoded


def estimate_task_constants(
    model: str | LoadedModel = "minilm-l6",
    task: str = "sst2",
    split: str = "train",
    max_examples: int | None = None,
    max_length: int = 64,
    relayout: bool = True,
    batch_size: int = 64,
    data_dir: str | None = None,
    device: str | None = None,
    progress: bool = False,
) -> ConstantSet:
    """Constants ``[layers, heads, L, L]`` of ``model`` over the first ``max_examples`` examples of a task's
    ``split``."""
    from papa.core.constants import estimate_constants
    from papa.core.version import __version__

    spec = get_task(task)
    torch_device = pick_device(device)
    lm = model if isinstance(model, LoadedModel) else load_model(model, torch_device)
    check_max_length(max_length, getattr(lm.model.config, "max_position_embeddings", None))
    dataset = load_task_split(spec, split, data_dir)
    if max_examples is not None:
        dataset = dataset.select(range(min(max_examples, len(dataset))))
    encoded = encode_split(lm, spec, dataset, max_length, relayout)
    meta = {
        "model": lm.name,
        "fingerprint": lm.fingerprint,
        "task": spec.name,
        "split": split,
        "relayout": relayout,
        "papa_version": __version__,
        "device": str(torch_device),
    }
    return estimate_constants(lm.model, encoded, batch_size, torch_device, progress=progress, meta=meta)
