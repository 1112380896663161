"""Several probes of one architecture run as one model: their parameters stacked on a leading probe dimension.

A :class:`ProbeStack` holds a run's ``R`` probes (its seeds; during the lr choice, its lrs) stacked
(``position_weights [R, S, L]``, ``dense.weight [R, H, S·H]``, ``dense.bias [R, H]``, ``classifier.weight [R, C,
H]``, ``classifier.bias [R, C]``) and computes all their logits in one forward of batched products, equal per probe to
:class:`~papa.probing.probe.SequenceProbe` / :class:`~papa.probing.probe.TokenProbe`'s to float rounding (tested).
:func:`predict_stacked` scores the stack in one pass over a cached source, every probe on the same examples (dev) or
each on its own (a seed's held-out draw), through one reused float32 buffer (:class:`StateGatherer`); a probe's logits
do not depend on its batch (tested at 1, 7 and 256). :func:`predict_eval_in_chunks` does so chunk by chunk.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch import nn

from papa.core.constants import ConstantSet
from papa.core.errors import PapaError
from papa.core.models import LoadedModel
from papa.probing.extraction import get_features
from papa.probing.params import ProbeSettings
from papa.probing.probe import CachedSource, SequenceProbe, TokenProbe, select_states
from papa.probing.task_inputs import TaskInputs

#: Rows gathered and scored per forward pass (per probe when each scores its own): the steadiest of the fast sizes
#: measured on SST-2 dev (minilm-l6, 3 stacked probes, 2 loaded CPU cores: 128 rows 2.5-2.8 s, 256 1.6-3.5,
#: 64 3.1-6.8; one by one with ``predict``: 5.7-7.1 s).
EVAL_BATCH = 128


class ProbeStack(nn.Module):
    """``R`` probes of one kind and shape computed as one (module docstring). ``bind``: the probes' parameters become
    views of the stack (training), else it holds copies (scoring); :meth:`restack` keeps some (those still training)."""

    def __init__(self, probes: Sequence[nn.Module], bind: bool = False):
        super().__init__()
        kinds = {type(probe) for probe in probes}
        if not probes or len(kinds) != 1 or not issubclass(kinds.pop(), (SequenceProbe, TokenProbe)):
            raise PapaError(
                "A probe stack needs one or more probes of one kind (SequenceProbe or TokenProbe)",
                "Stack the probes of one run only.",
            )
        self.probes, self.bind = list(probes), bind
        self.sequence = isinstance(self.probes[0], SequenceProbe)
        self.dropout = self.probes[0].dropout.p if self.sequence else 0.0
        self._parameters_of = [dict(probe.named_parameters()) for probe in self.probes]
        shapes = [{name: tuple(p.shape) for name, p in params.items()} for params in self._parameters_of]
        if any(shape != shapes[0] for shape in shapes):
            raise PapaError(
                "The probes of a stack differ in shape",
                "Stack the probes of one run only (one model, task and probe_input).",
            )
        self.names = list(self._parameters_of[0])
        self.restack(range(len(self.probes)))

    def restack(self, members: Sequence[int]) -> None:
        """Stack the probes ``members`` (indices into the probes given), in that order."""
        self.members = list(members)
        self.stacked = {
            name: torch.stack([self._parameters_of[r][name].detach() for r in self.members]) for name in self.names
        }
        if self.bind:
            for name, tensor in self.stacked.items():
                for i, r in enumerate(self.members):
                    self._parameters_of[r][name].data = tensor[i]
                tensor.requires_grad_()

    def release(self) -> None:
        """Give every bound probe its own parameters again (copies of the current values)."""
        for params in self._parameters_of:
            for param in params.values():
                param.data = param.data.clone()

    def forward(
        self,
        states: torch.Tensor,
        mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        shared: bool = False,
        dropout: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits ``[R, B, labels]``. ``states``: sequence tasks ``[R, B, S, P, H]`` (a batch per probe) or
        ``[B, S, P, H]`` (``shared`` by all), with ``mask [R, B, P]`` / ``[B, P]`` and kept ``positions [P]``; token
        tasks ``[R, T, S, H]`` / ``[T, S, H]``. ``dropout``: multiplier ``[R, B, H]`` after the tanh (training)."""
        t, count = self.stacked, len(self.members)
        if self.sequence:
            # [R, S, P]
            weights = t["position_weights"] if positions is None else t["position_weights"][:, :, positions]
            mask = mask.to(states.dtype)
            if shared:
                pooled = torch.einsum("rbsl,bslh->rbsh", weights[:, None] * mask[None, :, None, :], states)
            else:
                pooled = torch.einsum("rbsl,rbslh->rbsh", weights[:, None] * mask[:, :, None, :], states)
            pooled = pooled.flatten(2)  # [R, B, S*H]
        else:
            pooled = states.flatten(1)[None].expand(count, -1, -1) if shared else states.flatten(2)
        rows = pooled.shape[1]
        hidden = torch.tanh(
            torch.baddbmm(t["dense.bias"][:, None].expand(-1, rows, -1), pooled, t["dense.weight"].transpose(1, 2))
        )
        if dropout is not None:
            hidden = hidden * dropout
        return torch.baddbmm(
            t["classifier.bias"][:, None].expand(-1, rows, -1), hidden, t["classifier.weight"].transpose(1, 2)
        )


class StateGatherer:
    """Gathers rows of a :class:`CachedSource`'s read states into one reused float32 buffer of ``capacity`` rows or
    more (token batches vary in rows); the returned view ``[M, ...]`` is overwritten by the next call."""

    def __init__(self, source: CachedSource, capacity: int):
        f = source.features
        self.states = f.states if source.selected else select_states(f.states, source.probe_input)
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        shape, device = (capacity, *self.states.shape[1:]), self.states.device
        self.buffer = torch.empty(shape, dtype=torch.float32, device=device)
        self.staging = (
            None if self.states.dtype == torch.float32 else torch.empty(shape, dtype=self.states.dtype, device=device)
        )

    def __call__(self, rows: torch.Tensor) -> torch.Tensor:
        rows = rows.to(self.states.device)
        count = len(rows)
        if count > len(self.buffer):
            self._allocate(max(count, 2 * len(self.buffer)))
        if self.staging is None:
            return torch.index_select(self.states, 0, rows, out=self.buffer[:count])
        torch.index_select(self.states, 0, rows, out=self.staging[:count])
        return self.buffer[:count].copy_(self.staging[:count])


def padded_rows(rows: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-probe rows of unequal counts as one index ``[R, M]`` (short ones repeat their first row, or 0) and a mask
    ``[R, M]`` of the real ones."""
    width = max(len(r) for r in rows)
    index = torch.zeros(len(rows), width, dtype=torch.long)
    real = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        index[i] = r[0] if len(r) else 0
        index[i, : len(r)], real[i, : len(r)] = r, True
    return index, real


def stacked_inputs(source: CachedSource, gather: StateGatherer, index: torch.Tensor) -> tuple[tuple, torch.Tensor]:
    """The stack's inputs and labels for rows ``index`` (``[M]``: one batch for all probes; ``[R, M]``: one each)."""
    f, flat = source.features, index.flatten().to(source.features.states.device)
    states = gather(flat).view(*index.shape, *gather.states.shape[1:])
    labels = f.labels[flat].view(index.shape)
    if f.is_token:
        return (states,), labels
    return (states, f.mask[flat].view(*index.shape, -1), f.positions), labels


@torch.no_grad()
def stacked_logits(
    stack: ProbeStack,
    source: CachedSource,
    examples: Sequence[torch.Tensor] | None = None,
    batch_size: int = EVAL_BATCH,
    gather: StateGatherer | None = None,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each probe's logits and true labels, ``([R] logits [M, labels], [R] labels [M])``, flat over labelled tokens.
    ``examples`` None: all probes score all of ``source`` in a shared pass; else ``examples[i]``: probe ``i``'s own."""
    count = len(stack.members)
    gather = gather or StateGatherer(source, batch_size * (1 if examples is None else count))
    device = stack.stacked[stack.names[0]].device
    shared = examples is None
    index, real = (
        (source.rows(torch.arange(source.num_examples)), None)
        if shared
        else padded_rows([source.rows(e) for e in examples])
    )
    logits, labels = [], []
    for start in range(0, index.shape[-1], batch_size):
        inputs, y = stacked_inputs(source, gather, index[..., start : start + batch_size])
        logits.append(stack(*[x.to(device) for x in inputs], shared=shared).cpu())
        labels.append(y.cpu())
    width = stack.stacked["classifier.bias"].shape[-1]
    out = torch.cat(logits, dim=1) if logits else torch.empty(count, 0, width)
    if shared:
        truth = torch.cat(labels) if labels else torch.empty(0, dtype=torch.long)
        return list(out), [truth] * count
    truth = torch.cat(labels, dim=1)
    return [x[m] for x, m in zip(out, real)], [y[m] for y, m in zip(truth, real)]


def predict_stacked(
    stack: ProbeStack,
    source: CachedSource,
    examples: Sequence[torch.Tensor] | None = None,
    batch_size: int = EVAL_BATCH,
    gather: StateGatherer | None = None,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each stacked probe's predicted and true labels (see :func:`stacked_logits`)."""
    logits, labels = stacked_logits(stack, source, examples, batch_size, gather)
    return [x.argmax(-1) for x in logits], labels


def predict_eval_in_chunks(
    lm: LoadedModel,
    inputs: TaskInputs,
    heads,
    constants: ConstantSet | None,
    probes: Sequence[nn.Module],
    device,
    settings: ProbeSettings,
    keys: list[str] | None = None,
) -> tuple[list[torch.Tensor], torch.Tensor, dict]:
    """``([R] predictions, labels, cache hits per chunk)``, flat, on the eval split ``settings.eval_chunk_examples``
    examples at a time: each chunk's features (of the settings' probe input and replacement) are extracted (or read
    from the cache unless ``use_cache`` is false), scored in one stacked pass and dropped, so a large dev split (MNLI
    on a 768-wide, 13-state model: 12.5 GB) never sits in memory at once. ``keys``: the run's cache keys, appended."""
    chunk, probe_input, replacement = settings.eval_chunk_examples, settings.probe_input, settings.replacement
    use_cache = settings.use_cache
    stack = ProbeStack(probes)
    preds, labels, hits = [[] for _ in probes], [], {}
    total = len(inputs.eval_indices)
    for start in range(0, total, chunk):
        rows = slice(start, min(start + chunk, total))
        part = dataclasses.replace(
            inputs, eval={k: v[rows] for k, v in inputs.eval.items()}, eval_indices=inputs.eval_indices[rows]
        )
        features, hits[f"eval_{start}"] = get_features(
            lm, part, "eval", heads, constants, device, use_cache=use_cache, keys=keys, replacement=replacement
        )
        predictions, truth = predict_stacked(stack, CachedSource(features, probe_input, device))
        for out, p in zip(preds, predictions):
            out.append(p)
        labels.append(truth[0])
        del features
    return [torch.cat(p) for p in preds], torch.cat(labels), hits
