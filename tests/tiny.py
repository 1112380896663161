"""Shapes of the tiny random-init BERT the unit tests build (no downloads)."""

LAYERS, HEADS, VOCAB, L = 2, 4, 100, 16
TINY_BERT = dict(
    vocab_size=VOCAB, hidden_size=32, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
    intermediate_size=37, max_position_embeddings=64,
)
