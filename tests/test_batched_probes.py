"""A run's probes trained as one stacked model give each probe the result the single-probe route
(:func:`train_probe`, :func:`predict`) gives it alone: the same epochs, best epoch, held-out curve and dev
predictions, the same train losses and weights to float rounding; and a probe's logits do not depend on its batch."""

from __future__ import annotations

import pytest
import torch

from papa.core.errors import PapaError
from papa.probing.features import Features
from papa.probing.probe import (
    CachedSource,
    ProbeConfig,
    SequenceProbe,
    SubsetSource,
    TokenProbe,
    build_probe,
    predict,
    seed_everything,
    train_probe,
)
from papa.probing.stacked import ProbeStack, predict_stacked, stacked_logits
from papa.probing.stacked_training import StackedMember, device_rng_state, train_stacked
from papa.probing.task_inputs import draw_from_pool

S, L, H, C = 3, 8, 16, 3


def _features(token: bool, n: int = 60, seed: int = 0) -> Features:
    """Synthetic float16 features whose labels follow one hidden unit (learnable, not trivially)."""
    g = torch.Generator().manual_seed(seed)
    if token:
        lengths = torch.randint(1, 5, (n,), generator=g)
        example = torch.repeat_interleave(torch.arange(n), lengths)
        states = torch.randn(len(example), S, H, generator=g)
        labels = (states[:, 1, 0] > 0.3).long() + (states[:, 2, 1] > 0.8).long()
        return Features(states.half(), labels, example=example)
    states = torch.randn(n, S, 6, H, generator=g)
    mask = torch.arange(6)[None] < torch.randint(2, 7, (n, 1), generator=g)
    score = (states[:, 2, :, 0] * mask).sum(1)
    labels = (score > 0.5).long() + (score > 1.5).long()
    return Features(states.half(), labels, mask=mask, positions=torch.tensor([0, 1, 2, 3, 5, 6]))


def _metrics(preds: torch.Tensor, labels: torch.Tensor) -> dict:
    return {"main": float((preds == labels).float().mean())}


def _probe(token: bool, config: ProbeConfig):
    seed_everything(config.seed)
    return build_probe(token, S, L, H, C, config)


def _alone(source, dev, token, config, fit, held):
    """The single-probe route: train_probe on the seed's draw, held-out and dev scored by predict."""
    probe = _probe(token, config)
    evaluate = lambda p: _metrics(*predict(p, dev))  # noqa: E731
    heldout = lambda p: _metrics(*predict(p, SubsetSource(source, held)))  # noqa: E731
    history = train_probe(probe, SubsetSource(source, fit), evaluate, config, heldout=heldout)
    probe.load_state_dict(history.best_state)
    return history, predict(probe, dev)[0]


def _together(source, dev, token, configs, draws):
    members = []
    for config, (fit, held) in zip(configs, draws):
        probe = _probe(token, config)
        members.append(StackedMember(probe, config, fit, device_rng_state("cpu"), held, _metrics))
    histories = train_stacked(members, source, (dev, _metrics))
    for member, history in zip(members, histories):
        member.probe.load_state_dict(history.best_state)
    return histories, predict_stacked(ProbeStack([m.probe for m in members]), dev)[0]


def _assert_same(alone, together):
    (a, a_dev), (b, b_dev) = alone, together
    assert [len(a.epochs), a.best_epoch, a.stopped_early] == [len(b.epochs), b.best_epoch, b.stopped_early]
    for x, y in zip(a.epochs, b.epochs):
        assert {k: v for k, v in x.items() if k != "train_loss"} == {k: v for k, v in y.items() if k != "train_loss"}
        assert abs(x["train_loss"] - y["train_loss"]) <= 1e-5
    assert all((a.best_state[k] - b.best_state[k]).abs().max() <= 1e-5 for k in a.best_state)
    assert torch.equal(a_dev, b_dev)


@pytest.mark.parametrize("token", [False, True], ids=["sequence", "token"])
def test_stacked_seeds_and_lrs_give_each_probe_its_train_probe_result(token):
    """Three seeds and two lrs in one stack (with dropout: each seed's own masks); the seeds stop at different
    epochs, so the stopped ones stay frozen while the others train."""
    source, dev = CachedSource(_features(token), float32=True), CachedSource(_features(token, 30, seed=1))
    configs = [
        ProbeConfig(lr=lr, epochs=12, batch_size=8, seed=seed, patience=2, dropout=0.3)
        for lr in (3e-3, 3e-2)
        for seed in (5, 6, 7)
    ]
    draws = [draw_from_pool(60, 40, 12, c.seed) for c in configs]
    together = _together(source, dev, token, configs, draws)
    for config, draw, (history, preds) in zip(configs, draws, zip(*together)):
        _assert_same(_alone(source, dev, token, config, *draw), (history, preds))
    trained = [len(h.epochs) for h in together[0]]
    assert (
        len(set(trained)) > 1 and min(trained) < 12
    )  # some stopped early, at different epochs: freezing was exercised


def test_probes_with_unequal_training_sets_take_their_own_steps():
    """One probe with 13 training examples beside one with 24 (batch 4): 4 and 6 steps an epoch, each its own Adam
    count."""
    source, dev = CachedSource(_features(False), float32=True), CachedSource(_features(False, 30, seed=1))
    configs = [ProbeConfig(lr=1e-2, epochs=4, batch_size=4, seed=seed, patience=3) for seed in (1, 2)]
    draws = [draw_from_pool(60, 13, 10, 1), draw_from_pool(60, 24, 10, 2)]
    together = _together(source, dev, False, configs, draws)
    for config, draw, result in zip(configs, draws, zip(*together)):
        _assert_same(_alone(source, dev, False, config, *draw), result)


@pytest.mark.parametrize("token", [False, True], ids=["sequence", "token"])
def test_logits_do_not_depend_on_the_scoring_batch_and_equal_each_probes_own(token):
    features = _features(token, 300)
    source = CachedSource(features)
    torch.manual_seed(3)
    probes = [TokenProbe(S, H, C) if token else SequenceProbe(S, L, H, C) for _ in range(3)]
    stack = ProbeStack(probes)
    by_batch = [stacked_logits(stack, source, batch_size=size)[0] for size in (1, 7, 256)]
    for other in by_batch[1:]:
        assert all((x - y).abs().max() <= 1e-6 for x, y in zip(by_batch[0], other))
    (states, *rest), _ = source.batch(torch.arange(source.num_examples))
    for probe, logits in zip(probes, by_batch[0]):
        probe.eval()
        with torch.no_grad():
            assert (probe(states, *rest) - logits).abs().max() <= 1e-5
    own = [torch.tensor([4, 1, 7]), torch.tensor([0, 2]), torch.tensor([9])]  # each probe its own examples
    own_logits, own_labels = stacked_logits(stack, source, own, batch_size=2)
    for i, examples in enumerate(own):
        rows = source.rows(examples)
        assert (own_logits[i] - by_batch[0][i][rows]).abs().max() <= 1e-6 and torch.equal(
            own_labels[i], features.labels[rows]
        )


def test_a_stack_refuses_probes_of_different_kinds_and_mismatched_settings():
    with pytest.raises(PapaError, match="A probe stack needs one or more probes of one kind"):
        ProbeStack([SequenceProbe(S, L, H, C), TokenProbe(S, H, C)])
    with pytest.raises(PapaError, match="The probes of a stack differ in shape"):
        ProbeStack([TokenProbe(S, H, C), TokenProbe(S, H, C + 1)])
    source = CachedSource(_features(False), float32=True)
    members = [
        StackedMember(SequenceProbe(S, L, H, C), ProbeConfig(batch_size=b), torch.arange(10), device_rng_state("cpu"))
        for b in (4, 8)
    ]
    with pytest.raises(
        PapaError, match="The probes trained together must share epochs, batch_size, patience, probe_input, dropout"
    ):
        train_stacked(members, source)


def test_a_dropout_mask_replaces_the_probes_own_dropout_by_that_multiplier():
    """``dropout_mask`` multiplies the tanh output in place of ``nn.Dropout`` (what the stacked training passes: each
    probe's own mask, drawn from its own random stream): by hand on a sequence and a token probe."""
    torch.manual_seed(3)
    sequence, token = SequenceProbe(3, 5, 4, 2, dropout=0.5), TokenProbe(3, 4, 2)
    states, mask = torch.randn(2, 3, 5, 4), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    drop = torch.tensor([[2.0, 0.0, 2.0, 2.0], [0.0, 2.0, 2.0, 0.0]])
    pooled = torch.einsum("bsl,bslh->bsh", sequence.position_weights[None] * mask[:, None, :].float(), states)
    hidden = torch.tanh(sequence.dense(pooled.flatten(1)))
    sequence.train()  # its own dropout would draw a mask: the given one is used instead, and no random number is drawn
    before = torch.get_rng_state()
    assert torch.equal(sequence(states, mask, dropout_mask=drop), sequence.classifier(hidden * drop))
    assert torch.equal(torch.get_rng_state(), before)
    sequence.eval()
    assert torch.equal(sequence(states, mask), sequence.classifier(hidden))
    rows = torch.randn(4, 3, 4)
    hidden = torch.tanh(token.dense(rows.flatten(1)))
    assert torch.equal(token(rows, dropout_mask=drop.repeat(2, 1)), token.classifier(hidden * drop.repeat(2, 1)))
    assert torch.equal(token(rows), token.classifier(hidden))
