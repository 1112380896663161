"""Every supported architecture from a tiny config, unsupported ones, and model loading."""

from __future__ import annotations

import copy
import re
import time

import pytest
import torch
from tiny import HEADS, LAYERS, TINY_BERT, VOCAB, L  # noqa: E402
from transformers import (
    AutoModel,
    AutoTokenizer,
    BertConfig,
    DebertaConfig,
    DebertaV2Config,
    DistilBertConfig,
    ElectraConfig,
    GPT2Config,
    MPNetConfig,
    RobertaConfig,
    T5Config,
    T5EncoderModel,
)

from papa.core.architectures import ADAPTERS, attn_implementation_for, get_adapter, supported_model_types
from papa.core.constants import estimate_constants
from papa.core.errors import PapaError, UnsupportedArchitectureError
from papa.core.heads import all_heads
from papa.core.models import load_model, resolve_model_path, weights_fingerprint
from papa.core.patching import (
    is_patched,
    load_patched,
    patch_constant_heads,
    prune_qk,
    self_attention_modules,
    unpatch,
)

_COMMON = TINY_BERT
CONFIGS = {
    "bert": lambda: BertConfig(**_COMMON),
    "roberta": lambda: RobertaConfig(**_COMMON, pad_token_id=1),
    "electra": lambda: ElectraConfig(**_COMMON, embedding_size=16),
    "distilbert": lambda: DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=LAYERS, n_heads=HEADS, hidden_dim=37, max_position_embeddings=64),
    "deberta": lambda: DebertaConfig(**_COMMON, relative_attention=True, pos_att_type=["c2p", "p2c"], max_relative_positions=16),
    "deberta-v2": lambda: DebertaV2Config(
        **_COMMON,
        relative_attention=True,
        pos_att_type=["c2p", "p2c"],
        position_buckets=8,
        max_relative_positions=16,
        position_biased_input=False,
    ),
    "mpnet": lambda: MPNetConfig(**_COMMON),
}


def test_every_adapter_has_a_tiny_config():
    assert sorted(CONFIGS) == sorted(set(ADAPTERS) - {"xlm-roberta"})


def _build(arch, attn=None, seed=0):
    config = CONFIGS[arch]()
    torch.manual_seed(seed)
    model = AutoModel.from_config(copy.deepcopy(config), attn_implementation=attn or attn_implementation_for(config))
    return model.eval()


def _batch(arch, lengths, seed=0):
    config = CONFIGS[arch]()
    pad = config.pad_token_id or 0
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (len(lengths), L), generator=g)
    mask = torch.zeros(len(lengths), L, dtype=torch.long)
    for x, n in enumerate(lengths):
        mask[x, :n] = 1
    return {"input_ids": ids.masked_fill(mask == 0, pad), "attention_mask": mask}


@torch.no_grad()
def _hidden(model, batch):
    return model(**batch).last_hidden_state


def _eager_attentions(model, arch, batch):
    eager = _build(arch, attn="eager")
    eager.load_state_dict(model.state_dict())
    with torch.no_grad():
        return eager(**batch, output_attentions=True).attentions


@pytest.mark.parametrize("arch", list(CONFIGS))
def test_architecture(arch, tmp_path):
    model = _build(arch)
    mechanism = get_adapter(model).mechanism
    assert model.config._attn_implementation == ("sdpa" if mechanism == "interface" else "eager")
    assert len(self_attention_modules(model)) == LAYERS
    batch = _batch(arch, [16, 11, 6], seed=1)
    before = _hidden(model, batch)

    # estimation equals the official formula on eager attentions
    cs = estimate_constants(model, batch, batch_size=2)
    attentions = torch.stack(_eager_attentions(model, arch, batch), 1).double()  # [B, layers, H, L, L]
    m = batch["attention_mask"].double()
    pair = m[:, :, None] * m[:, None, :]
    reference = (attentions * pair[:, None, None]).sum(0) / pair.sum(0)
    assert (cs.constants.double() - torch.nan_to_num(reference)).abs().max() <= 1e-6
    assert not is_patched(model) and torch.equal(_hidden(model, batch), before)

    # k = 0 is the identity
    patch_constant_heads(model, cs.constants, [])
    assert torch.equal(_hidden(model, batch), before)
    unpatch(model)

    # all heads constant changes the output; unpatch restores it exactly
    patch_constant_heads(model, cs.constants, all_heads(LAYERS, HEADS))
    constant = _hidden(model, batch)
    assert (constant - before).abs().max() > 1e-3
    if mechanism == "interface":
        prune_qk(model)
        assert (_hidden(model, batch) - constant).abs().max() <= 1e-5
    model.save_pretrained(tmp_path)
    reloaded = load_patched(tmp_path)
    assert type(reloaded) is type(model)
    assert (_hidden(reloaded, batch) - constant).abs().max() <= 1e-6
    unpatch(model)
    assert torch.equal(_hidden(model, batch), before)

    # the example's own attention as constants reproduces the output
    single = {k: v[:1] for k, v in batch.items()}  # length L, no padding
    own = torch.stack([a[0] for a in _eager_attentions(model, arch, single)])
    for heads in ([(0, 1), (1, 0), (1, 3)], all_heads(LAYERS, HEADS)):
        patch_constant_heads(model, own, heads)
        assert (_hidden(model, single) - before[:1]).abs().max() <= 1e-5
        unpatch(model)


@pytest.mark.parametrize("arch", ["deberta", "deberta-v2", "mpnet"])
def test_inline_probabilities_actually_used(arch):
    """A forward hook on the wrapped dropout sees the probabilities that multiply V."""
    model = _build(arch, seed=2)
    constants = torch.rand(LAYERS, HEADS, L, L) + 0.01
    patch_constant_heads(model, constants, [(0, 0), (0, 2), (1, 1)])
    seen = {}
    dropout_name = ADAPTERS[arch].probs_dropout
    for layer, module in enumerate(self_attention_modules(model)):
        getattr(module, dropout_name).register_forward_hook(lambda mod, args, out, layer=layer: seen.__setitem__(layer, out))
    batch = _batch(arch, [16, 9, 4], seed=2)
    _hidden(model, batch)
    mask = batch["attention_mask"].bool()
    for layer, heads in ((0, [0, 2]), (1, [1])):
        probs = seen[layer][:, heads]  # [B, n, L, L]
        for b in range(len(mask)):
            real, pad = mask[b], ~mask[b]
            assert torch.all(probs[b][:, :, pad] == 0)
            assert torch.all(probs[b][:, pad, :] == 0)
            assert (probs[b][:, real].sum(-1) - 1).abs().max() <= 1e-6
            expected = constants[layer, heads][:, real][:, :, real]
            expected = expected / expected.sum(-1, keepdim=True)
            assert (probs[b][:, real][:, :, real] - expected).abs().max() <= 1e-6
    dynamic = seen[0][:, [1, 3]]
    assert not torch.all(dynamic[0] == seen[0][1, [1, 3]])  # input-dependent heads still depend on the input


UNSUPPORTED = {
    "gpt2": lambda: AutoModel.from_config(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64)),
    "t5": lambda: T5EncoderModel(T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4)),
}


@pytest.mark.parametrize("name", list(UNSUPPORTED))
def test_unsupported_architecture(name):
    torch.manual_seed(0)
    model = UNSUPPORTED[name]().train()
    with pytest.raises(UnsupportedArchitectureError) as err:
        patch_constant_heads(model, torch.rand(2, 4, 8, 8), [(0, 0)])
    message = str(err.value)
    assert repr(name) in message and all(t in message for t in supported_model_types())
    with pytest.raises(UnsupportedArchitectureError):
        estimate_constants(model, {"input_ids": torch.randint(0, VOCAB, (2, 8)), "attention_mask": torch.ones(2, 8)})
    assert model.training and not is_patched(model)
    with pytest.raises(UnsupportedArchitectureError):
        get_adapter(model.config)


# -- loading models ---------------------------------------------------------------------------------
def _minilm_tokenizer():
    return AutoTokenizer.from_pretrained(resolve_model_path("minilm-l6")[0])


@pytest.mark.slow
def test_load_embedded_minilm():
    lm = load_model("minilm-l6")
    assert lm.source == "embedded" and lm.name == "minilm-l6"
    assert (lm.num_layers, lm.num_heads, lm.model.config.hidden_size) == (6, 12, 384)
    assert lm.model.config.model_type == "bert" and lm.model.config._attn_implementation == "sdpa"
    assert not lm.model.training and not any(p.requires_grad for p in lm.model.parameters())
    assert re.fullmatch(r"[0-9a-f]{16}", lm.fingerprint)
    path = resolve_model_path("minilm-l6")[0]
    assert weights_fingerprint.__wrapped__(path) == lm.fingerprint  # recomputed from the files, not the cache
    enc = lm.tokenizer(["a fine film"], return_tensors="pt")
    with torch.no_grad():
        assert lm.model(**enc).last_hidden_state.shape == (1, enc["input_ids"].shape[1], 384)


def _save_with_tokenizer(model, folder):
    model.save_pretrained(folder)
    _minilm_tokenizer().save_pretrained(folder)


@pytest.mark.parametrize("arch", ["bert", "deberta", "mpnet"])
def test_load_local_folder(tmp_path, arch):
    model = _build(arch, seed=3)
    _save_with_tokenizer(model, tmp_path)
    lm = load_model(str(tmp_path))
    assert lm.source == "local" and lm.num_layers == LAYERS and lm.num_heads == HEADS
    assert lm.model.config._attn_implementation == attn_implementation_for(model.config)
    batch = _batch(arch, [16, 7])
    assert torch.equal(_hidden(lm.model, batch), _hidden(model, batch))
    assert lm.fingerprint == weights_fingerprint(str(tmp_path))


def test_load_local_unsupported_folder(tmp_path):
    UNSUPPORTED["gpt2"]().save_pretrained(tmp_path)
    with pytest.raises(UnsupportedArchitectureError, match="gpt2"):
        load_model(str(tmp_path))


@pytest.mark.parametrize("hub_id", ["bert-base-uncased", "papa-tests-no-such-org/no-such-model"])
def test_hub_id_offline_fails_fast(monkeypatch, hub_id):
    from papa.core.models import _hub_cached

    if _hub_cached(hub_id):
        pytest.skip(f"{hub_id} is in the local Hugging Face cache")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    with pytest.raises(PapaError) as err:
        load_model(hub_id)
    assert time.perf_counter() - started < 5
    assert "minilm-l6" in str(err.value) and hub_id in str(err.value)


@pytest.mark.parametrize("name", ["./no/such/folder", "/no/such/model", "model.bin", "a/b/c"])
def test_unknown_local_path(name):
    with pytest.raises(PapaError, match="Unknown model"):
        load_model(name)


def test_folder_without_config(tmp_path):
    with pytest.raises(PapaError, match="config.json"):
        load_model(str(tmp_path))
