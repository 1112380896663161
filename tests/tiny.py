"""Shapes of the tiny random-init BERT the unit tests build (no downloads), and its random inputs."""

import torch

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
