"""Every supported architecture from a tiny config, unsupported ones, and model loading."""

from __future__ import annotations

import copy
import hashlib
import re

import pytest
import torch
from tiny import HEADS, LAYERS, TINY_BERT, VOCAB, L, tiny_tokenizer  # noqa: E402
from transformers import (
    AutoModel,
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

from papa.core.architectures import (
    ADAPTERS,
    attn_implementation_for,
    get_adapter,
    self_attention_modules,
    supported_model_types,
)
from papa.core.constants import estimate_constants
from papa.core.errors import PapaError, UnsupportedArchitectureError
from papa.core.heads import all_heads
from papa.core.models import load_model, resolve_model_path, weights_fingerprint
from papa.core.patching import (
    is_patched,
    load_patched,
    patch_constant_heads,
    prune_qk,
    unpatch,
)

_COMMON = TINY_BERT
CONFIGS = {
    "bert": lambda: BertConfig(**_COMMON),
    "roberta": lambda: RobertaConfig(**_COMMON, pad_token_id=1),
    "electra": lambda: ElectraConfig(**_COMMON, embedding_size=16),
    "distilbert": lambda: DistilBertConfig(
        vocab_size=VOCAB, dim=32, n_layers=LAYERS, n_heads=HEADS, hidden_dim=37, max_position_embeddings=64
    ),
    "deberta": lambda: DebertaConfig(
        **_COMMON, relative_attention=True, pos_att_type=["c2p", "p2c"], max_relative_positions=16
    ),
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
        getattr(module, dropout_name).register_forward_hook(
            lambda mod, args, out, layer=layer: seen.__setitem__(layer, out)
        )
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
    """A tokenizer whose 100 entries fit the tiny models' embedding matrix (papa refuses one that does not)."""
    return tiny_tokenizer()


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


class _NetworkCall(OSError):
    """Raised by the patched transports: any attempt to reach the network."""


@pytest.fixture
def no_network(monkeypatch, tmp_path):
    """Every way out (socket connect, name lookup, huggingface_hub's HTTP session) records the attempt and
    raises; the Hugging Face cache is an empty folder, so no hub id is cached."""
    import socket

    import huggingface_hub.constants

    attempts: list[str] = []

    def refuse(what):
        def call(*args, **kwargs):
            attempts.append(what)
            raise _NetworkCall(f"test: no network ({what})")

        return call

    monkeypatch.setattr(socket.socket, "connect", refuse("socket.connect"))
    monkeypatch.setattr(socket.socket, "connect_ex", refuse("socket.connect_ex"))
    monkeypatch.setattr(socket, "create_connection", refuse("socket.create_connection"))
    monkeypatch.setattr(socket, "getaddrinfo", refuse("socket.getaddrinfo"))
    try:
        import huggingface_hub.utils._http as hub_http

        for name in ("get_session", "get_async_session"):
            if hasattr(hub_http, name):
                monkeypatch.setattr(hub_http, name, refuse(f"huggingface_hub {name}"))
    except ImportError:  # pragma: no cover - an older huggingface_hub
        pass
    empty = tmp_path / "hf-cache"
    empty.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(empty))
    monkeypatch.setenv("HF_HUB_CACHE", str(empty))
    return attempts


@pytest.mark.parametrize("hub_id", ["bert-base-uncased", "papa-tests-no-such-org/no-such-model"])
def test_hub_id_offline_fails_without_touching_the_network(monkeypatch, no_network, hub_id):
    from papa.core.models import DEFAULT_MODEL, EMBEDDED_MODELS

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PapaError) as err:
        load_model(hub_id)
    assert no_network == []  # refused before any connection, name lookup or HTTP request
    message = str(err.value)
    assert hub_id in message and "HF_HUB_OFFLINE" in message
    assert DEFAULT_MODEL in EMBEDDED_MODELS and f"`{DEFAULT_MODEL}`" in message  # the embedded model to use instead


def test_hub_id_unreachable_fails_after_one_connection_attempt(monkeypatch, no_network):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example.invalid")
    with pytest.raises(PapaError) as err:
        load_model("bert-base-uncased")
    assert no_network == ["socket.create_connection"]  # one probe of the endpoint, no hub client retries
    message = str(err.value)
    assert "'bert-base-uncased' is not cached" in message and "hub.example.invalid" in message
    assert "`minilm-l6`" in message


# -- weights fingerprints: they tell weights apart, and constants follow them -------------------------
def _file_digests(folder) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.glob("*.safetensors"))}


def test_the_fingerprint_tells_weights_apart_and_not_folders(tmp_path):
    """Through load_model: another seed, one changed value or another dtype are other weights; the same tensors
    saved elsewhere in shards (other files, other bytes) are the same weights."""
    import papa

    a, b = _build("bert", seed=0), _build("bert", seed=1)
    assert any(not torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    _save_with_tokenizer(a, tmp_path / "a")
    _save_with_tokenizer(b, tmp_path / "b")
    a.save_pretrained(tmp_path / "elsewhere" / "copy of a", max_shard_size="20KB")
    _minilm_tokenizer().save_pretrained(tmp_path / "elsewhere" / "copy of a")
    shards = _file_digests(tmp_path / "elsewhere" / "copy of a")
    assert len(shards) > 1 and not set(shards.values()) & set(_file_digests(tmp_path / "a").values())  # other files
    one, other, copy_of_one = (papa.load_model(str(tmp_path / f)) for f in ("a", "b", "elsewhere/copy of a"))
    assert torch.equal(_hidden(copy_of_one.model, _batch("bert", [16, 7])), _hidden(one.model, _batch("bert", [16, 7])))
    assert re.fullmatch(r"[0-9a-f]{16}", one.fingerprint)
    assert one.fingerprint != other.fingerprint  # other weights (another seed)
    assert one.fingerprint == copy_of_one.fingerprint  # the same weights in another folder and other files
    with torch.no_grad():
        a.encoder.layer[1].attention.self.query.weight[0, 0] += 1.0  # one changed value
    _save_with_tokenizer(a, tmp_path / "a, edited")
    _save_with_tokenizer(b.half(), tmp_path / "b in float16")  # the same values rounded: other tensors
    edited, half = (papa.load_model(str(tmp_path / f)).fingerprint for f in ("a, edited", "b in float16"))
    assert len({one.fingerprint, other.fingerprint, edited, half}) == 4


def test_a_folder_without_safetensors_has_no_fingerprint(tmp_path):
    _build("bert").save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(PapaError) as err:
        weights_fingerprint(str(tmp_path))
    assert err.value.problem == f"The model {tmp_path} has no weights (no *.safetensors file)"
    from safetensors.torch import save_file

    for part in ("a", "b"):  # one tensor name in two files: which one the model loads is undefined
        save_file({"encoder.weight": torch.zeros(2, 2)}, str(tmp_path / f"{part}.safetensors"))
    with pytest.raises(PapaError) as err:
        weights_fingerprint(str(tmp_path))
    assert (
        err.value.problem == f"The model {tmp_path} stores the tensor encoder.weight twice (in two *.safetensors files)"
    )


def test_constants_of_one_model_are_refused_for_another(tmp_path):
    import papa
    from papa.core.errors import ConstantsMismatchError

    for name, seed in (("a", 0), ("b", 1)):
        _save_with_tokenizer(_build("bert", seed=seed), tmp_path / name)
    _build("bert", seed=0).save_pretrained(tmp_path / "copy of a", max_shard_size="20KB")  # other files, same tensors
    _minilm_tokenizer().save_pretrained(tmp_path / "copy of a")
    a, b, copy_of_a = (papa.load_model(str(tmp_path / name)) for name in ("a", "b", "copy of a"))
    batch = _batch("bert", [16, 9, 5, 12])
    constants = papa.estimate_constants(a.model, batch, meta={"fingerprint": a.fingerprint, "relayout": True})
    path = papa.save_constants(tmp_path / "constants-of-a.safetensors", constants)
    ranking, meta = papa.compute_ranking("deviation", a, constants=str(path), device="cpu")  # its own model: accepted
    assert sorted(ranking) == all_heads(LAYERS, HEADS) and meta["constants"] == papa.load_constants(path).meta["sha256"]
    assert papa.compute_ranking("deviation", copy_of_a, constants=str(path), device="cpu")[0] == ranking  # same weights
    with pytest.raises(ConstantsMismatchError) as err:
        papa.compute_ranking("deviation", b, constants=str(path), device="cpu")
    assert f"model weights: file has {a.fingerprint}, this run needs {b.fingerprint}" in str(err.value)


@pytest.mark.parametrize("name", ["./no/such/folder", "/no/such/model", "model.bin", "a/b/c"])
def test_unknown_local_path(name):
    with pytest.raises(PapaError, match="Unknown model"):
        load_model(name)


def test_folder_without_config(tmp_path):
    with pytest.raises(PapaError, match="config.json"):
        load_model(str(tmp_path))
