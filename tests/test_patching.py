"""Constant-head patching on a tiny BERT: identities, masking, fast vs generic path, save/reload."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from tiny import HEADS, LAYERS, TINY_BERT, L  # noqa: E402
from tiny import tiny_batch as _batch
from tiny import tiny_constants as _constants
from transformers import AutoModel, BertConfig, BertForSequenceClassification

from papa.core.architectures import self_attention_modules
from papa.core.errors import ConstantsMismatchError, CorruptFileError, PapaError
from papa.core.head_patch import HeadPatch, masked_rownorm
from papa.core.heads import all_heads
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

CONFIG = BertConfig(**TINY_BERT)


def _model(seed=0, attn="sdpa"):
    torch.manual_seed(seed)
    return AutoModel.from_config(copy.deepcopy(CONFIG), attn_implementation=attn).eval()


def _eager_twin(model):
    eager = AutoModel.from_config(copy.deepcopy(CONFIG), attn_implementation="eager").eval()
    eager.load_state_dict(model.state_dict())
    return eager


@torch.no_grad()
def _hidden(model, batch):
    return model(**batch).last_hidden_state


def _own_attention(model, batch):
    with torch.no_grad():
        out = _eager_twin(model)(**batch, output_attentions=True)
    return torch.stack([a[0] for a in out.attentions])  # [layers, heads, L, L]


# -- identities -----------------------------------------------------------------------------------
def test_empty_head_set_is_identity():
    model = _model()
    batch = _batch([16, 9, 3])
    before = model(**batch)
    patch_constant_heads(model, _constants(), [])
    assert is_patched(model) and constant_heads_of(model) == []
    after = model(**batch)
    assert torch.equal(after.last_hidden_state, before.last_hidden_state)
    assert torch.equal(after.pooler_output, before.pooler_output)


def test_empty_head_set_is_identity_for_a_task_model():
    torch.manual_seed(0)
    model = BertForSequenceClassification(copy.deepcopy(CONFIG)).eval()
    batch = _batch([16, 5])
    with torch.no_grad():
        before = model(**batch).logits
        patch_constant_heads(model, _constants(), [])
        assert torch.equal(model(**batch).logits, before)


@pytest.mark.parametrize(
    "heads",
    [[(0, 1), (1, 0), (1, 3)], [(0, h) for h in range(HEADS)], all_heads(LAYERS, HEADS)],
    ids=["three", "layer0", "all"],
)
def test_own_attention_as_constant_reproduces_output(heads):
    model = _model(1)
    batch = _batch([L], seed=1)
    before = _hidden(model, batch)
    patch_constant_heads(model, _own_attention(model, batch), heads)
    assert constant_heads_of(model) == sorted(heads)
    assert (_hidden(model, batch) - before).abs().max() <= 1e-5


def test_constant_patch_changes_output_and_unpatch_restores_exactly():
    model = _model(2)
    batch = _batch([16, 11, 4], seed=2)
    before = _hidden(model, batch)
    patch_constant_heads(model, _constants(seed=2), [(0, 0), (1, 2)])
    assert model.config._attn_implementation == "papa"
    changed = _hidden(model, batch)
    assert (changed - before).abs().max() > 1e-3
    prune_qk(model)
    assert (_hidden(model, batch) - changed).abs().max() <= 1e-5
    assert model.encoder.layer[0].attention.self.query.out_features == 24
    unpatch(model)
    assert not is_patched(model) and model.config._attn_implementation == "sdpa"
    assert not hasattr(model.config, "papa") and not hasattr(model.encoder.layer[0].attention.self, "papa_patch")
    assert model.encoder.layer[0].attention.self.query.out_features == 32
    assert torch.equal(_hidden(model, batch), before)


# -- masking --------------------------------------------------------------------------------------
def _loop_rownorm(c, m):
    """Explicit-loop ``rownorm(C ⊙ m mᵀ)`` for one ``[L, L]`` matrix."""
    n = c.shape[-1]
    out = torch.zeros(n, n, dtype=torch.float64)
    for i in range(n):
        if not m[i]:
            continue
        total = sum(float(c[i, j]) for j in range(n) if m[j])
        for j in range(n):
            if m[j] and total > 0:
                out[i, j] = float(c[i, j]) / total
    return out


def test_masked_rownorm():
    g = torch.Generator().manual_seed(0)
    c = torch.rand(3, 8, 8, generator=g)
    c[1, 2] = 0  # a row never observed: stays 0, no NaN
    mask = torch.tensor(
        [[1, 1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 1, 0, 1], [1, 0, 0, 0, 0, 0, 0, 0]], dtype=torch.bool
    )
    out = masked_rownorm(c, mask)
    assert out.shape == (3, 3, 8, 8) and not torch.isnan(out).any()
    for b in range(3):
        for h in range(3):
            assert (out[b, h].double() - _loop_rownorm(c[h], mask[b])).abs().max() <= 1e-6
        pad = ~mask[b]
        assert torch.all(out[b][:, :, pad] == 0)  # no mass on padded keys
        assert torch.all(out[b][:, pad, :] == 0)  # pad rows are 0
        rows = out[b].sum(-1)[:, mask[b]]
        expected = torch.ones_like(rows)
        if b < 2:
            expected[1, 2] = 0  # the never-observed row (position 2 is real in examples 0 and 1)
        assert (rows - expected).abs().max() <= 1e-6
    batched = masked_rownorm(c[None].expand(3, -1, -1, -1), mask)  # [B, n, L, L] input
    assert torch.allclose(batched, out)


def test_probabilities_used_by_constant_heads():
    """Call the patch's attention directly: constant heads output rownorm(C ⊙ m mᵀ) V."""
    model = _model(3)
    constants = _constants(seed=3)
    patch_constant_heads(model, constants, [(0, 1), (0, 3)])
    module = self_attention_modules(model)[0]
    patch = module.papa_patch
    mask = torch.ones(2, L, dtype=torch.bool)
    mask[1, 6:] = False
    mask[0, 9:12] = False
    patch.context.key_mask = mask
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, HEADS, L, 8, generator=g) for _ in range(3))
    out, _ = patch.attend(module, q, k, v, mask[:, None, None, :].expand(2, 1, L, L), dropout=0.0, scaling=8**-0.5)
    out = out.transpose(1, 2)  # [B, H, L, d]
    for b in range(2):
        for h in (1, 3):
            probs = _loop_rownorm(constants[0, h], mask[b])
            assert torch.all(probs[~mask[b]] == 0) and torch.all(probs[:, ~mask[b]] == 0)
            assert (probs.sum(-1)[mask[b]] - 1).abs().max() <= 1e-9
            assert (out[b, h].double() - probs @ v[b, h].double()).abs().max() <= 1e-5
            assert torch.all(out[b, h][~mask[b]] == 0)  # pad rows attend to nothing
    dyn = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :], scale=8**-0.5)
    assert (out[:, [0, 2]] - dyn[:, [0, 2]]).abs().max() <= 1e-5


def test_constant_heads_ignore_padded_tokens():
    model = _model(4)
    patch_constant_heads(model, _constants(seed=4), all_heads(LAYERS, HEADS))
    batch = _batch([16, 7, 2], seed=4)
    other = {k: v.clone() for k, v in batch.items()}
    other["input_ids"][other["attention_mask"] == 0] = 42
    a, b = _hidden(model, batch), _hidden(model, other)
    real = batch["attention_mask"].bool()
    assert (a[real] - b[real]).abs().max() <= 1e-6


# -- fast path vs generic path --------------------------------------------------------------------
def _generic_attend_constant(self, query, key, value, attention_mask, dropout, scaling):
    """Eager attention followed by ``transform_probs`` (the generic path), for the reference."""
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    probs = self.transform_probs(torch.softmax(scores.float(), -1).to(query.dtype))
    return torch.matmul(probs, value).transpose(1, 2).contiguous(), None


MASKS = {
    "per_example": [16, 12, 5, 1],
    "identical_full": [16, 16, 16],
    "identical_partial": [9, 9, 9],
}
HEADSETS = {
    "mixed": [(0, 0), (0, 2), (1, 1)],
    "layer_all_constant": [(0, 0), (0, 1), (0, 2), (0, 3), (1, 3)],
    "all": all_heads(LAYERS, HEADS),
}


@pytest.mark.parametrize("masks", list(MASKS), ids=list(MASKS))
@pytest.mark.parametrize("heads", list(HEADSETS), ids=list(HEADSETS))
def test_fast_path_equals_generic_path(monkeypatch, masks, heads):
    model = _model(5)
    batch = _batch(MASKS[masks], seed=5)
    patch_constant_heads(model, _constants(seed=5), HEADSETS[heads])
    with monkeypatch.context() as m:
        m.setattr(HeadPatch, "_attend_constant", _generic_attend_constant)
        generic = _hidden(model, batch)
    fast = _hidden(model, batch)
    assert (fast - generic).abs().max() <= 1e-5
    assert (_hidden(model, batch) - generic).abs().max() <= 1e-5  # again (cached constant probabilities)
    prune_qk(model)
    assert (_hidden(model, batch) - generic).abs().max() <= 1e-5
    # the generic path really differs from the unpatched model
    unpatch(model)
    assert (_hidden(model, batch) - generic).abs().max() > 1e-3


def test_fast_path_with_constants_longer_than_the_input(monkeypatch):
    model = _model(6)
    batch = _batch([12, 7], length=12, seed=6)
    patch_constant_heads(model, _constants(length=L, seed=6), [(0, 1), (1, 0), (1, 2)])
    with monkeypatch.context() as m:
        m.setattr(HeadPatch, "_attend_constant", _generic_attend_constant)
        generic = _hidden(model, batch)
    assert (_hidden(model, batch) - generic).abs().max() <= 1e-5


def test_cache_follows_the_mask():
    """The all-real cache must not leak into a padded batch or another length."""
    model = _model(7)
    patch_constant_heads(model, _constants(seed=7), [(0, 0), (1, 1)])
    full, padded, short = _batch([16, 16], seed=7), _batch([16, 6], seed=7), _batch([10, 10], length=10, seed=7)
    ref = {name: _hidden(model, b) for name, b in (("padded", padded), ("short", short))}
    _hidden(model, full)
    assert torch.equal(_hidden(model, padded), ref["padded"]) and torch.equal(_hidden(model, short), ref["short"])


def test_cache_follows_the_constants():
    """Constants edited in place, then replaced, are not served from probabilities cached for the old ones (the
    cache serves training passes with attention dropout: the probabilities path)."""
    heads, batch = [(0, 0), (1, 1)], _batch([16, 16], seed=7)

    def trained_pass(constants, model=None):
        if model is None:
            model = patch_constant_heads(_model(7), constants, heads)
        torch.manual_seed(0)  # the same dropout draws in every pass
        return _hidden(model.train(), batch), model

    first, model = trained_pass(_constants(seed=7))
    assert torch.equal(trained_pass(_constants(seed=7), model)[0], first)  # unchanged constants: the same result
    patches = [module.papa_patch for module in self_attention_modules(model)]
    edited, replaced = _constants(seed=8), _constants(seed=9)
    with torch.no_grad():
        for patch in patches:
            patch.constants.copy_(edited[patch.layer, patch.constant_heads])
    assert torch.equal(trained_pass(edited, model)[0], trained_pass(edited)[0])
    for patch in patches:
        patch.constants = replaced[patch.layer, patch.constant_heads].clone()
    assert torch.equal(trained_pass(replaced, model)[0], trained_pass(replaced)[0])


# -- gates and trainable constants ----------------------------------------------------------------
def test_gates_interpolate_between_attention_and_constants():
    model = _model(8)
    batch = _batch([16, 10], seed=8)
    constants = _constants(seed=8)
    before = _hidden(model, batch)
    lambdas = patch_gates(model, constants)
    assert len(lambdas) == LAYERS and torch.equal(gate_lambdas(model), torch.zeros(LAYERS, HEADS))
    with torch.no_grad():
        for lam in lambdas:
            lam.fill_(50.0)  # sigmoid = 1: the model's own attention
    assert (_hidden(model, batch) - before).abs().max() <= 1e-5
    with torch.no_grad():
        for lam in lambdas:
            lam.fill_(-50.0)  # sigmoid = 0: all heads constant
    gated = _hidden(model, batch)
    unpatch(model)
    patch_constant_heads(model, constants, all_heads(LAYERS, HEADS))
    assert (_hidden(model, batch) - gated).abs().max() <= 1e-5
    unpatch(model)
    lambdas = patch_gates(model, constants)
    model(**batch).last_hidden_state.pow(2).sum().backward()
    assert all(lam.grad is not None and lam.grad.abs().sum() > 0 for lam in lambdas)


def test_trainable_constants_receive_gradients():
    model = _model(9)
    batch = _batch([16, 9], seed=9)
    patch_constant_heads(model, _constants(seed=9), [(0, 1), (1, 2), (1, 3)], trainable=True)
    patches = [m.papa_patch for m in self_attention_modules(model)]
    assert all(isinstance(p.constants, torch.nn.Parameter) and p.constants.requires_grad for p in patches)
    params = {n for n, _ in model.named_parameters()}
    assert "encoder.layer.1.attention.self.papa_patch.constants" in params
    model(**batch).last_hidden_state.pow(2).sum().backward()
    for p in patches:
        assert p.constants.grad is not None and p.constants.grad.abs().sum() > 0
    # frozen constants are buffers, not parameters
    unpatch(model)
    patch_constant_heads(model, _constants(seed=9), [(0, 1)])
    assert not any("papa_patch" in n for n, _ in model.named_parameters())
    assert any("papa_patch.constants" in n for n, _ in model.named_buffers())


# -- save and reload ------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["frozen", "trainable", "pruned", "empty"])
def test_save_and_load_patched(tmp_path, variant):
    model = _model(10)
    batch = _batch([16, 8, 3], seed=10)
    heads = [] if variant == "empty" else [(0, 3), (1, 0), (1, 1), (1, 2), (1, 3)]
    patch_constant_heads(model, _constants(seed=10), heads, trainable=variant == "trainable")
    if variant == "pruned":
        prune_qk(model)
    expected = _hidden(model, batch)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["papa"]["mode"] == "constant" and saved["papa"]["max_length"] == L
    assert not any("attn_implementation" in key for key in saved)  # the "papa" switch is not saved
    reloaded = load_patched(tmp_path)
    assert is_patched(reloaded) and constant_heads_of(reloaded) == heads
    assert not reloaded.training
    assert torch.equal(_hidden(reloaded, batch), expected)
    if variant == "trainable":
        assert isinstance(self_attention_modules(reloaded)[1].papa_patch.constants, torch.nn.Parameter)
    # the reloaded model unpatches to the plain model it was built from
    unpatch(reloaded)
    if variant != "pruned":
        unpatch(model)
        assert torch.equal(_hidden(reloaded, batch), _hidden(model, batch))


def test_load_patched_ignores_a_saved_attention_switch(tmp_path):
    """A config.json that names the "papa" attention (hand-edited, or a future transformers) still reloads."""
    model = _model(14)
    patch_constant_heads(model, _constants(seed=14), [(0, 0), (1, 3)])
    batch = _batch([16, 5], seed=14)
    expected = _hidden(model, batch)
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["attn_implementation"] = "papa"
    (tmp_path / "config.json").write_text(json.dumps(config))
    reloaded = load_patched(tmp_path)
    assert torch.equal(_hidden(reloaded, batch), expected)
    unpatch(reloaded)
    assert reloaded.config._attn_implementation == "sdpa"


def test_load_patched_from_a_task_model(tmp_path):
    torch.manual_seed(11)
    model = BertForSequenceClassification(copy.deepcopy(CONFIG)).eval()
    patch_constant_heads(model, _constants(seed=11), [(0, 2), (1, 1)])
    batch = _batch([16, 4], seed=11)
    expected = _hidden(model.bert, batch)
    model.save_pretrained(tmp_path)
    reloaded = load_patched(tmp_path)
    assert constant_heads_of(reloaded) == [(0, 2), (1, 1)]
    assert torch.equal(_hidden(reloaded, batch), expected)


def test_load_patched_errors(tmp_path):
    plain = _model(12)
    plain.save_pretrained(tmp_path / "plain")
    with pytest.raises(PapaError, match="constant heads"):
        load_patched(tmp_path / "plain")
    with pytest.raises(PapaError, match="config.json"):
        load_patched(tmp_path / "nothing")
    # config.papa names a head whose constants were not saved
    patch_constant_heads(plain, _constants(), [(0, 1)])
    plain.save_pretrained(tmp_path / "bad")
    config = json.loads((tmp_path / "bad" / "config.json").read_text())
    config["papa"]["constant_heads"] = [[0, 1], [1, 1]]
    (tmp_path / "bad" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CorruptFileError, match="layer 1"):
        load_patched(tmp_path / "bad")
    config["papa"]["constant_heads"] = [[0, 1], [0, 2]]  # layer 0 saved with one head, config says two
    (tmp_path / "bad" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CorruptFileError, match="shape"):
        load_patched(tmp_path / "bad")


# -- errors ---------------------------------------------------------------------------------------
def test_patch_errors():
    model = _model(13)
    with pytest.raises(ConstantsMismatchError):
        patch_constant_heads(model, torch.rand(LAYERS + 1, HEADS, L, L), [(0, 0)])
    with pytest.raises(ConstantsMismatchError):
        patch_constant_heads(model, torch.rand(LAYERS, HEADS, L, L - 1), [(0, 0)])
    with pytest.raises(ConstantsMismatchError):
        patch_constant_heads(model, torch.rand(HEADS, L, L), [(0, 0)])
    with pytest.raises(ConstantsMismatchError, match="positions"):
        patch_constant_heads(model, torch.rand(LAYERS, HEADS, 66, 66), [(0, 0)])
    with pytest.raises(ConstantsMismatchError):
        patch_gates(model, torch.rand(LAYERS, HEADS + 1, L, L))
    with pytest.raises(PapaError, match="out of range"):
        patch_constant_heads(model, _constants(), [(LAYERS, 0)])
    with pytest.raises(PapaError, match="more than once"):
        patch_constant_heads(model, _constants(), [(0, 0), (0, 0)])
    assert not is_patched(model)  # failed calls leave nothing behind
    with pytest.raises(PapaError, match="prune_qk"):
        prune_qk(model)
    patch_constant_heads(model, _constants(), [(0, 0)])
    with pytest.raises(PapaError, match="already patched"):
        patch_constant_heads(model, _constants(), [(0, 1)])
    with pytest.raises(PapaError, match="exceeds"):
        model(**_batch([17], length=L + 1))
    model(**_batch([L]))  # exactly L is fine


def test_a_call_without_input_ids_or_inputs_embeds_says_what_to_pass():
    model = _model(14)
    patch_constant_heads(model, _constants(), [(0, 0)])
    with pytest.raises(PapaError) as err:
        model(attention_mask=_batch([L])["attention_mask"])
    assert str(err.value) == (
        "A patched model was called with neither input_ids nor inputs_embeds. "
        "Pass input_ids [batch, L] (with attention_mask [batch, L]) or inputs_embeds [batch, L, hidden]."
    )
