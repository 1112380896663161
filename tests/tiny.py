"""Shapes of the tiny random-init BERT the unit tests build (no downloads), its random inputs, and the tiny grid
config the runner's tests execute."""

import uuid
from pathlib import Path

import torch
import yaml

LAYERS, HEADS, VOCAB, L = 2, 4, 100, 16
TINY_BERT = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=37,
    max_position_embeddings=64,
)


def tiny_batch(lengths, length=L, seed=0):
    """Random ``input_ids`` and ``attention_mask`` ``[len(lengths), length]``; row i has ``lengths[i]`` real tokens."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (len(lengths), length), generator=g)
    mask = torch.zeros(len(lengths), length, dtype=torch.long)
    for x, n in enumerate(lengths):
        mask[x, :n] = 1
    return {"input_ids": ids.masked_fill(mask == 0, 0), "attention_mask": mask}


def tiny_constants(length=L, seed=0):
    """Random constants ``[LAYERS, HEADS, length, length]``, positive everywhere (pads included)."""
    g = torch.Generator().manual_seed(seed)
    return torch.rand(LAYERS, HEADS, length, length, generator=g) + 0.01


def tiny_tokenizer(vocab_size=VOCAB):
    """A WordPiece tokenizer of exactly ``vocab_size`` entries (the special tokens, then ``w0``, ``w1``, ...), so that
    its ids fit a tiny model's embedding matrix; save it next to the model with ``save_pretrained``."""
    from transformers import BertTokenizer

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    words += [f"w{i}" for i in range(vocab_size - len(words))]
    return BertTokenizer(vocab={word: i for i, word in enumerate(words)})


def averaged(constants, counts):
    """``constants [..., L, L]`` rescaled row by row into values an estimate can produce for ``counts [L, L]``: 0
    where ``counts`` is 0, and ``Σ_j counts[i, j] C[..., i, j] = counts[i, i]`` (papa's load check). With ``counts``
    all equal, each row sums to 1 (values in [0, 1] for positive ``constants``)."""
    constants = constants.double() * (counts > 0)
    weighted = (constants * counts).sum(-1, keepdim=True)
    return (constants * counts.diagonal()[:, None] / weighted.clamp_min(1e-30)).float()


#: The tiny grid the runner's tests execute (minutes on 2 CPU cores): one task, 16 examples, deviation ranking,
#: no floor.
TINY_GRID = {
    "models": ["minilm-l6"],
    "tasks": ["sst2"],
    "max_length": 32,
    "estimate": {"max_examples": 16},
    "rank": {"methods": ["deviation"], "epochs": 1, "max_train_examples": 16, "max_eval_examples": 16},
    "probe": {"fractions": [0, 1], "seeds": [1], "epochs": 1, "max_train_examples": 16, "max_eval_examples": 16},
    "floors": {"attention_free": False},
}


def write_tiny_grid(folder: Path, prefix: str, **changes) -> tuple[Path, str]:
    """:data:`TINY_GRID` with ``changes`` (``models=[...]``), named ``<prefix>-<8 hex digits>`` and written to
    ``folder/<name>.yaml``; returns that path and the name."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    path = Path(folder) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(dict(TINY_GRID, name=name, **changes)))
    return path, name
