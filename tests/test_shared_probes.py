"""Probes that share the encoder's work give each seed the result it gets alone: run_probes against
run_probe seed by seed, the float32 feature copy against per-batch conversion, fused AdamW against the per-tensor
loop, and large scoring batches against small ones."""

from __future__ import annotations

import copy

import pytest
import torch
from tiny import TINY_BERT, tiny_batch
from transformers import BertConfig, BertModel

from papa.core.models import LoadedModel, load_model
from papa.core.tasks import get_task
from papa.probing.experiment import run_probe, run_probes
from papa.probing.extraction import extract_features
from papa.probing.probe import CachedSource, ProbeConfig, SequenceProbe, TokenProbe, make_optimizer, predict
from papa.probing.task_inputs import TaskInputs

VOLATILE = ("timings", "provenance", "feature_cache_hits")  # hits: the later runs read what the first one cached


def _model() -> BertModel:
    torch.manual_seed(0)
    return BertModel(copy.deepcopy(BertConfig(**TINY_BERT))).eval()


def _tiny_inputs(pool: int = 40) -> tuple[LoadedModel, TaskInputs]:
    lengths = [(3 + 7 * i) % 16 + 1 for i in range(pool)]
    train = tiny_batch(lengths, seed=1)
    train["labels"] = (train["input_ids"][:, 1] > 50).long()
    evals = tiny_batch([(5 + 3 * i) % 16 + 1 for i in range(23)], seed=4)
    evals["labels"] = (evals["input_ids"][:, 1] > 50).long()
    lm = LoadedModel("tiny", _model(), tokenizer=None, source="local", fingerprint="0123456789abcdef")
    return lm, TaskInputs(
        get_task("sst2"), ["negative", "positive"], train, evals, list(range(pool)), list(range(23)), 16, True
    )


def _stable(result: dict) -> dict:
    return {key: value for key, value in result.items() if key not in VOLATILE}


def _without_losses(result: dict) -> dict:
    return {
        **_stable(result),
        "epochs": [{k: v for k, v in record.items() if k != "train_loss"} for record in result["epochs"]],
    }


@pytest.mark.parametrize("chunk", [None, 5], ids=["whole-dev", "dev-in-chunks"])
def test_shared_seeds_give_each_seed_its_own_result(chunk, tmp_path, monkeypatch):
    monkeypatch.setenv("PAPA_CACHE_DIR", str(tmp_path))
    lm, inputs = _tiny_inputs()
    protocol = dict(
        model=lm, inputs=inputs, epochs=6, lr=1e-3, batch_size=4, device="cpu", selection="heldout", patience=2,
        pool_examples=40, max_train_examples=24, heldout_examples=8, dev_every_epoch=False, eval_chunk_examples=chunk,
    )  # fmt: skip
    together = run_probes(seeds=[5, 6, 7], **protocol)
    alone = [run_probe(seed=seed, **protocol) for seed in (5, 6, 7)]
    assert [r["config"]["seed"] for r in together] == [5, 6, 7]
    assert [_stable(r) for r in together] == [_stable(r) for r in alone]
    assert len({r["data"]["fit_indices_sha"] for r in together}) == 3  # each seed its own draw
    shares = [r["timings"] for r in together]
    assert all(t["total"] >= t["train"] and t["features"] == shares[0]["features"] for t in shares)


def test_faithful_seeds_run_together_give_each_seed_its_own_result(tmp_path, monkeypatch):
    """Faithful mode (the live encoder in train mode, dropout on): each seed's dropout draws come from its own seed."""
    monkeypatch.setenv("PAPA_CACHE_DIR", str(tmp_path))
    lm, inputs = _tiny_inputs(pool=16)
    protocol = dict(
        model=lm, inputs=inputs, mode="faithful", epochs=2, lr=1e-3, batch_size=4, device="cpu", max_train_examples=16
    )
    together = run_probes(seeds=[5, 6], **protocol)
    alone = [run_probe(seed=seed, **protocol) for seed in (5, 6)]
    assert [_stable(r) for r in together] == [_stable(r) for r in alone]
    assert together[0]["epochs"] != together[1]["epochs"]  # the seeds differ


def test_an_lr_grid_shares_the_features_and_keeps_lr_major_order(tmp_path, monkeypatch):
    monkeypatch.setenv("PAPA_CACHE_DIR", str(tmp_path))
    lm, inputs = _tiny_inputs()
    protocol = dict(
        model=lm,
        inputs=inputs,
        epochs=4,
        batch_size=4,
        device="cpu",
        selection="heldout",
        patience=2,
        pool_examples=40,
        max_train_examples=24,
        heldout_examples=8,
    )
    grid = run_probes(seeds=[1, 2], lrs=[1e-3, 2e-5], dev_every_epoch=False, score_dev=False, **protocol)
    assert [(r["config"]["lr"], r["config"]["seed"]) for r in grid] == [(1e-3, 1), (1e-3, 2), (2e-5, 1), (2e-5, 2)]
    alone = run_probe(seed=2, lr=2e-5, dev_every_epoch=False, score_dev=False, **protocol)
    assert _stable(grid[3]) == _stable(alone)


@pytest.mark.parametrize("token", [False, True], ids=["sequence", "token"])
@pytest.mark.parametrize("probe_input", ["all", "embeddings"])
def test_the_float32_copy_gives_the_batches_of_per_batch_conversion(token, probe_input):
    encoded = tiny_batch([16, 3, 9, 12, 1, 7], seed=2)
    if token:
        labels = torch.randint(0, 3, encoded["input_ids"].shape)
        labels[encoded["attention_mask"] == 0] = -100
        encoded["labels"] = labels
    else:
        encoded["labels"] = torch.tensor([0, 1, 1, 0, 1, 0])
    features = extract_features(_model(), encoded, token)
    converted, per_batch = CachedSource(features, probe_input, float32=True), CachedSource(features, probe_input)
    assert converted.selected and not per_batch.selected
    rows = torch.tensor([4, 0, 5, 2])
    (a, *rest_a), labels_a = converted.batch(rows)
    (b, *rest_b), labels_b = per_batch.batch(rows)
    assert a.dtype == torch.float32 and torch.equal(a, b) and torch.equal(labels_a, labels_b)
    assert all(torch.equal(x, y) for x, y in zip(rest_a, rest_b))
    assert a.shape[1] == (1 if probe_input == "embeddings" else 3)


def _floor_model() -> BertModel:
    """The tiny BERT with larger weights, so that its first layer moves the states well beyond float16 rounding."""
    torch.manual_seed(0)
    return BertModel(BertConfig(**TINY_BERT, initializer_range=0.3)).eval()


@pytest.mark.parametrize("compact", [True, False], ids=["compact", "padded"])
def test_the_attention_free_floor_reads_the_embedding_layer(compact):
    """``Features.states[:, 0]`` is the model's ``hidden_states[0]`` (the input to the first attention layer) at the
    real positions, and the floor's sources (cached and live) hand the probe that state, never a later one."""
    from papa.probing.probe import LiveSource

    model = _floor_model()
    lengths = [16, 3, 9, 12, 1, 7]
    encoded = tiny_batch(lengths, seed=5)
    encoded["labels"] = torch.tensor([0, 1, 1, 0, 1, 0])
    with torch.no_grad():
        hidden = model(**{k: v for k, v in encoded.items() if k != "labels"}, output_hidden_states=True).hidden_states
    assert (hidden[1] - hidden[0]).abs().max() > 0.5  # layer 1 is not layer 0: a wrong index cannot pass
    features = extract_features(model, encoded, token_task=False, compact=compact)
    real = features.mask  # [N, P] real tokens at the kept positions
    layer0 = hidden[0][:, features.positions]  # [N, P, H]
    assert real.sum() == sum(lengths)
    assert (features.states[:, 0][real].float() - layer0[real]).abs().max() <= 2e-3  # float16 storage
    rows = torch.tensor([4, 0, 5, 2])
    for float32 in (True, False):
        (states, mask, _), _ = CachedSource(features, "embeddings", float32=float32).batch(rows)
        assert states.shape[1] == 1
        assert (states[:, 0][mask].float() - layer0[rows][mask]).abs().max() <= 2e-3
    live_source = LiveSource(model, encoded, False, "cpu", train_mode=False, probe_input="embeddings")
    (live, live_mask), _ = live_source.batch(rows)
    real = live_mask.bool()
    assert live.shape[1] == 1 and torch.allclose(live[:, 0][real], hidden[0][rows][real], atol=1e-6)


def test_the_token_floor_reads_the_embedding_layer():
    model = _floor_model()
    encoded = tiny_batch([16, 3, 9, 12], seed=6)
    labels = torch.full(encoded["input_ids"].shape, -100)
    for row, length in enumerate([16, 3, 9, 12]):
        labels[row, 1 : length - 1 : 2] = row % 3
    encoded["labels"] = labels
    with torch.no_grad():
        hidden = model(**{k: v for k, v in encoded.items() if k != "labels"}, output_hidden_states=True).hidden_states
    labelled = labels != -100
    features = extract_features(model, encoded, token_task=True)
    assert (features.states[:, 0].float() - hidden[0][labelled]).abs().max() <= 2e-3
    (states,), _ = CachedSource(features, "embeddings", float32=True).batch(torch.tensor([0, 1, 2, 3]))
    assert states.shape[1] == 1 and (states[:, 0] - hidden[0][labelled]).abs().max() <= 2e-3
    assert (states[:, 0] - hidden[1][labelled]).abs().max() > 0.5


def test_no_float32_copy_above_the_memory_budget(monkeypatch):
    encoded = tiny_batch([16, 3, 9], seed=2)
    encoded["labels"] = torch.tensor([0, 1, 1])
    features = extract_features(_model(), encoded, False)
    monkeypatch.setenv("PAPA_MEMORY_BUDGET_GB", "1e-9")
    source = CachedSource(features, float32=True)
    assert not source.selected and source.features.states.dtype == torch.float16


def _adam_trajectory(fused: bool, steps: int = 300) -> list[torch.Tensor]:
    torch.manual_seed(0)
    probe = SequenceProbe(3, 16, 32, 4)
    params = list(probe.parameters())
    config = ProbeConfig(lr=1e-3)
    optimizer = (
        make_optimizer(params, config)
        if fused
        else torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    )
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        states, mask = torch.randn(8, 3, 16, 32, generator=g), torch.ones(8, 16, dtype=torch.bool)
        loss = torch.nn.functional.cross_entropy(probe(states, mask), torch.randint(0, 4, (8,), generator=g))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return [p.detach().clone() for p in params]


def test_fused_adamw_follows_the_per_tensor_loop():
    torch.manual_seed(0)
    probe = SequenceProbe(3, 16, 32, 4)
    assert make_optimizer(list(probe.parameters()), ProbeConfig()).defaults["fused"] is True
    fused, loop = _adam_trajectory(True), _adam_trajectory(False)
    assert max((a - b).abs().max().item() for a, b in zip(fused, loop)) <= 1e-6
    assert max((a - b).abs().max().item() for a, b in zip(fused, _adam_trajectory(False, steps=0))) > 1e-2  # it trained


def test_predictions_do_not_depend_on_the_scoring_batch():
    encoded = tiny_batch([(3 * i) % 16 + 1 for i in range(37)], seed=3)
    encoded["labels"] = torch.zeros(37, dtype=torch.long)
    source = CachedSource(extract_features(_model(), encoded, False), float32=True)
    torch.manual_seed(2)
    probe = SequenceProbe(3, 16, 32, 5)
    small, large = predict(probe, source, batch_size=4), predict(probe, source)
    assert torch.equal(small[0], large[0]) and torch.equal(small[1], large[1])
    assert len(set(small[0].tolist())) > 1
    token = TokenProbe(3, 32, 4)
    assert token(torch.randn(7, 3, 32)).shape == (7, 4)


@pytest.mark.data
def test_shared_seeds_on_real_data_equal_seed_by_seed_runs(data_dir, tmp_path, monkeypatch):
    """The probe notebook's path (run_probes) against the per-seed path on SST-2 and POS with MiniLM-L6."""
    monkeypatch.setenv("PAPA_CACHE_DIR", str(tmp_path))
    lm = load_model("minilm-l6")
    for task in ("sst2", "pos"):
        common = dict(
            epochs=4,
            lr=1e-3,
            max_train_examples=40,
            max_eval_examples=30,
            max_length=32,
            selection="heldout",
            patience=2,
            pool_examples=64,
            heldout_examples=16,
        )
        together = run_probes(lm, task, seeds=[1, 2], dev_every_epoch=False, eval_chunk_examples=11, **common)
        alone = [
            run_probe(lm, task, seed=seed, dev_every_epoch=False, eval_chunk_examples=11, **common) for seed in (1, 2)
        ]
        for a, b in zip(
            together, alone
        ):  # token tasks pad each probe's token rows to the stack's widest: the losses sum in
            assert _without_losses(a) == _without_losses(b)  # another order, so they agree to float rounding only
            assert all(
                abs(x["train_loss"] - y["train_loss"]) <= 1e-6 * y["train_loss"]
                for x, y in zip(a["epochs"], b["epochs"])
            )
