"""The replacement modes of a head set (papa.core.replacements.REPLACEMENT_TABLE) against independent routes.

Each independent route writes a head's output by hand: a forward pre-hook on the layer's output projection (its
path written here per architecture, not read from the adapter table) overwrites the head's columns of its input
``[B, L, H·d]`` with what the mode should give. transformers 5.24 has no ``head_mask`` for BERT any more, so
``zero`` is checked against zeroed columns of that input. ``papa`` itself is covered by tests/test_patching.py.
"""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
import torch
from test_compact import COMPACT_ARCHS, assert_compact_equals_padded, papa_layout_batch
from test_models import CONFIGS, _batch, _build
from tiny import HEADS, LAYERS, L

from papa.core.constants import ConstantSet, estimate_constants, load_constants, save_constants
from papa.core.errors import ConstantsMismatchError, CorruptFileError, PapaError
from papa.core.heads import all_heads
from papa.core.patching import load_patched, patch_constant_heads, unpatch
from papa.core.replacements import REPLACEMENTS

HEAD_DIM = 32 // HEADS
SOME = [(0, 1), (1, 0), (1, 3)]
#: per architecture: the list of layers, and from one layer its output projection (input: the heads' outputs)
PROJECTIONS = {
    "bert": ("encoder.layer", "attention.output.dense"),
    "roberta": ("encoder.layer", "attention.output.dense"),
    "electra": ("encoder.layer", "attention.output.dense"),
    "distilbert": ("transformer.layer", "attention.out_lin"),
    "deberta": ("encoder.layer", "attention.output.dense"),
    "deberta-v2": ("encoder.layer", "attention.output.dense"),
    "mpnet": ("encoder.layer", "attention.attn.o"),
}
#: per architecture: from one layer, the module whose first input is the layer's hidden states, and its V projection
VALUES = {
    "bert": ("attention.self", "value"),
    "deberta-v2": ("attention.self", "value_proj"),
    "mpnet": ("attention.attn", "v"),
}


def _get(module: torch.nn.Module, dotted: str) -> torch.nn.Module:
    for part in dotted.split("."):
        module = getattr(module, part)
    return module


def _layers(model, arch):
    return list(_get(model, PROJECTIONS[arch][0]))


@contextmanager
def _written_heads(model, arch, heads, head_output):
    """While inside, each ``(layer, head)`` of ``heads`` outputs ``head_output(layer, head, hidden) → [B, L, d]``
    (``hidden``: the layer's input ``[B, L, D]``), written into its output projection's input."""
    handles, hidden = [], {}
    for index, layer in enumerate(_layers(model, arch)):
        mine = [h for (lay, h) in heads if lay == index]
        if not mine:
            continue

        def keep(module, args, kwargs, index=index):
            hidden[index] = args[0] if args else kwargs["hidden_states"]

        def write(module, args, index=index, mine=mine):
            outputs = args[0].clone()
            for head in mine:
                outputs[..., head * HEAD_DIM : (head + 1) * HEAD_DIM] = head_output(index, head, hidden.get(index))
            return (outputs,)

        handles.append(layer.register_forward_pre_hook(keep, with_kwargs=True))
        handles.append(_get(layer, PROJECTIONS[arch][1]).register_forward_pre_hook(write))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def _hidden(model, batch):
    return model(**batch).last_hidden_state


def _patched(model, mode, heads, means=None):
    patch_constant_heads(model, torch.rand(LAYERS, HEADS, L, L) + 0.01, heads, replacement=mode, output_means=means)
    try:
        return _hidden(model, BATCH)
    finally:
        unpatch(model)


BATCH = _batch("bert", [16, 9, 3, 1], seed=5)  # all tiny configs but RoBERTa share pad id 0


# -- each mode against its hand-written route --------------------------------------------------------
@pytest.mark.parametrize("arch", list(VALUES))
@pytest.mark.parametrize("heads", [SOME, all_heads(LAYERS, HEADS)], ids=["some", "all"])
def test_uniform_is_the_mean_of_v_over_the_real_tokens(arch, heads):
    model = _build(arch)
    m = BATCH["attention_mask"].float()[:, :, None]  # [B, L, 1]
    module, value = VALUES[arch]

    def mean_of_v(layer, head, hidden):
        v = _get(_layers(model, arch)[layer], f"{module}.{value}")(hidden)[
            ..., head * HEAD_DIM : (head + 1) * HEAD_DIM
        ]  # [B, L, d]
        return ((v * m).sum(1, keepdim=True) / m.sum(1, keepdim=True)) * m  # the mean at real rows, 0 at pads

    with _written_heads(model, arch, heads, mean_of_v):
        reference = _hidden(model, BATCH)
    assert (_patched(model, "uniform", heads) - reference).abs().max() <= 1e-5


@pytest.mark.parametrize("arch", ["bert", "distilbert", "deberta", "mpnet"])
def test_zero_equals_zeroed_columns_of_the_output_projection(arch):
    model = _build(arch)
    batch_shape = BATCH["input_ids"].shape
    with _written_heads(model, arch, SOME, lambda layer, head, hidden: torch.zeros(*batch_shape, HEAD_DIM)):
        reference = _hidden(model, BATCH)
    patched = _patched(model, "zero", SOME)
    assert (patched - reference).abs().max() <= 1e-5
    assert (patched - _hidden(model, BATCH)).abs().max() > 1e-3  # the heads mattered


@pytest.mark.parametrize("arch", ["bert", "distilbert", "deberta-v2", "mpnet"])
@pytest.mark.parametrize("heads", [SOME, all_heads(LAYERS, HEADS)], ids=["some", "all"])
def test_mean_equals_writing_the_stored_vectors(arch, heads):
    model = _build(arch)
    means = torch.randn(LAYERS, HEADS, L, HEAD_DIM, generator=torch.Generator().manual_seed(1))
    m = BATCH["attention_mask"].float()[:, :, None]
    with _written_heads(model, arch, heads, lambda layer, head, hidden: means[layer, head][None] * m):
        reference = _hidden(model, BATCH)
    assert (_patched(model, "mean", heads, means) - reference).abs().max() <= 1e-5


@pytest.mark.parametrize("arch", ["bert", "mpnet"])
@pytest.mark.parametrize("mode", REPLACEMENTS)
def test_every_mode_with_no_heads_is_the_unpatched_model(arch, mode):
    model = _build(arch)
    assert torch.equal(_patched(model, mode, [], torch.randn(LAYERS, HEADS, L, HEAD_DIM)), _hidden(model, BATCH))


# -- the mean outputs, estimated in the constants' pass ----------------------------------------------
def _naive_means(model, arch, encoded):
    """Each example alone through the unpatched model; its heads' outputs read at the output projection."""
    sums = torch.zeros(LAYERS, HEADS, L, HEAD_DIM, dtype=torch.float64)
    seen = torch.zeros(L, dtype=torch.float64)
    outputs = {}
    handles = [
        _get(layer, PROJECTIONS[arch][1]).register_forward_pre_hook(
            lambda module, args, i=i: outputs.__setitem__(i, args[0][0])
        )
        for i, layer in enumerate(_layers(model, arch))
    ]
    try:
        for x in range(encoded["input_ids"].shape[0]):
            with torch.no_grad():
                model(**{k: v[x : x + 1] for k, v in encoded.items() if k != "labels"})
            for position in range(L):
                if encoded["attention_mask"][x, position]:
                    seen[position] += 1
                    for layer in range(LAYERS):
                        sums[layer, :, position] += outputs[layer][position].view(HEADS, HEAD_DIM).double()
    finally:
        for handle in handles:
            handle.remove()
    for position in range(L):
        if seen[position]:
            sums[:, :, position] /= seen[position]
    return sums.float(), seen


@pytest.mark.parametrize("compact", [False, True], ids=["padded", "compact"])
@pytest.mark.parametrize("arch", list(CONFIGS))
def test_estimated_means_equal_a_naive_loop(arch, compact):
    model = _build(arch)
    encoded = papa_layout_batch(arch, "single", rows=9, seed=4)  # slots L/2 − 1 .. L − 2 are never real
    expected, seen = _naive_means(model, arch, encoded)
    estimated = estimate_constants(model, encoded, batch_size=4, compact=compact).output_means
    assert estimated.shape == (LAYERS, HEADS, L, HEAD_DIM) and estimated.dtype == torch.float32
    assert (estimated - expected).abs().max() <= 1e-5
    assert seen[L // 2 - 1 : L - 1].eq(0).all() and estimated[:, :, L // 2 - 1 : L - 1].eq(0).all()


# -- compact passes ------------------------------------------------------------------------------------
def _compact_equals_padded(model, batch, heads, mode, means):
    length = batch["input_ids"].shape[1]
    constants = torch.rand(model.config.num_hidden_layers, model.config.num_attention_heads, length, length) + 0.01
    patch_constant_heads(model, constants, heads, replacement=mode, output_means=means)
    try:
        assert_compact_equals_padded(model, batch, 3)
    finally:
        unpatch(model)


@pytest.mark.parametrize("layout", ["papa", "plain"])
@pytest.mark.parametrize("mode", REPLACEMENTS)
@pytest.mark.parametrize("arch", COMPACT_ARCHS)
def test_compact_passes_equal_padded_ones_in_every_mode(arch, mode, layout):
    model = _build(arch)
    if layout == "papa":
        batch = {k: v for k, v in papa_layout_batch(arch, "pair", rows=7, seed=6).items() if k != "labels"}
    else:
        batch = _batch(arch, [16, 12, 9, 5, 3, 2, 1], seed=6)
    means = torch.randn(LAYERS, HEADS, L, HEAD_DIM, generator=torch.Generator().manual_seed(2))
    for heads in (SOME, all_heads(LAYERS, HEADS)):
        _compact_equals_padded(model, batch, heads, mode, means)


SENTENCES = [
    "a fine film",
    "the plot is dull and far too long",
    "it rains",
    "what a waste of two hours of my life",
    "brilliant",
    "not bad at all, really",
]


@pytest.fixture(scope="module", params=["minilm-l6", "mpnet-base"])
def real_model(request):
    from papa.core.models import load_model

    try:
        return load_model(request.param, device="cpu")
    except PapaError as err:  # mpnet-base when its weights are not installed
        pytest.skip(str(err))


@pytest.mark.parametrize("relayout", [True, False], ids=["papa-layout", "plain"])
def test_compact_passes_equal_padded_ones_on_real_encoders(real_model, relayout):
    from papa.core.layout import encode_sequences

    batch = encode_sequences(real_model.tokenizer, SENTENCES, SENTENCES[::-1], max_length=32, relayout=relayout)
    estimated = estimate_constants(real_model.model, batch, batch_size=3, compact=False)
    heads = all_heads(real_model.num_layers, real_model.num_heads)[::2]
    for mode in REPLACEMENTS:
        _compact_equals_padded(real_model.model, batch, heads, mode, estimated.output_means)


# -- errors, files and reloading -----------------------------------------------------------------------
def test_a_bad_mode_name_and_missing_means_are_one_clear_error_each():
    model, constants = _build("bert"), torch.rand(LAYERS, HEADS, L, L)
    with pytest.raises(PapaError) as bad:
        patch_constant_heads(model, constants, SOME, replacement="resample")
    assert str(bad.value) == "Unknown replacement 'resample'. Use one of papa, uniform, zero, mean."
    missing = (
        "The replacement 'mean' needs the heads' mean outputs, and "
        "these constants hold none (estimated before they were stored). "
        "Re-run `papa estimate` for this model and task to write them."
    )
    with pytest.raises(PapaError) as no_means:
        patch_constant_heads(model, constants, SOME, replacement="mean")
    assert str(no_means.value) == missing
    old = ConstantSet(constants, torch.ones(L, L, dtype=torch.float64), torch.zeros(LAYERS, HEADS))
    with pytest.raises(PapaError) as checked:
        old.check_compatible(replacement="mean")
    assert str(checked.value) == missing
    for mode in ("papa", "uniform", "zero"):
        assert old.check_compatible(replacement=mode) is old
    with pytest.raises(ConstantsMismatchError, match=r"expected \[layers, heads, L, d\] = \[2, 4, 16, 8\]"):
        patch_constant_heads(model, constants, SOME, replacement="mean", output_means=torch.zeros(LAYERS, HEADS, L, 4))
    with pytest.raises(PapaError, match="Only the 'papa' replacement has trainable constants, not 'uniform'"):
        patch_constant_heads(model, constants, SOME, trainable=True, replacement="uniform")
    assert not hasattr(model, "_papa_context")  # nothing was installed


def test_means_are_saved_under_the_files_digest_and_older_files_still_load(tmp_path):
    model = _build("bert")
    estimated = estimate_constants(
        model, papa_layout_batch("bert", "pair", rows=6), batch_size=4, meta={"task": "sst2"}
    )
    path = save_constants(tmp_path / "c.safetensors", estimated)
    loaded = load_constants(path)
    assert torch.equal(loaded.output_means, estimated.output_means)
    old = save_constants(
        tmp_path / "old.safetensors",
        ConstantSet(estimated.constants, estimated.counts, estimated.deviation, {"task": "sst2"}),
    )
    assert load_constants(old).output_means is None and load_constants(old).meta["sha256"] != loaded.meta["sha256"]
    data = bytearray(path.read_bytes())
    header_length = int.from_bytes(data[:8], "little")
    data[8 + header_length + json.loads(data[8 : 8 + header_length])["output_means"]["data_offsets"][0]] ^= (
        0xFF  # a byte of the means
    )
    (tmp_path / "bad.safetensors").write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match="fails its checksum"):
        load_constants(tmp_path / "bad.safetensors")


@pytest.mark.parametrize("mode", REPLACEMENTS)
def test_a_saved_model_reloads_with_its_replacement(mode, tmp_path):
    model = _build("bert")
    means = torch.randn(LAYERS, HEADS, L, HEAD_DIM)
    patch_constant_heads(model, torch.rand(LAYERS, HEADS, L, L) + 0.01, SOME, replacement=mode, output_means=means)
    expected = _hidden(model, BATCH)
    model.save_pretrained(tmp_path)
    reloaded = load_patched(tmp_path)
    assert reloaded.config.papa["replacement"] == mode
    assert (_hidden(reloaded, BATCH) - expected).abs().max() <= 1e-6
