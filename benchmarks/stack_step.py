"""One probe training step, mpnet-base-shaped, on the CPU: a probe alone against the stacked probes of a run.

Issue 37 asked the seeds of a run to train as one batched model (:class:`papa.probing.stacked.ProbeStack`). On two
CPU cores the grid's probe runs came out slower than before it, and this file isolates why: one forward, backward
and fused AdamW step of a sequence probe (``[B, S, P, H]`` states, ``S = 13`` hidden states of ``H = 768``),

* alone: :class:`~papa.probing.probe.SequenceProbe` as :func:`~papa.probing.probe.train_probe` steps it;
* stacked, ``R`` = 1 and 3 probes: :class:`ProbeStack` as :func:`~papa.probing.stacked_training.train_stacked`
  steps it (shared backward, each probe handed its gradient slice, its own AdamW);

and the dense layer ``[B, S·H] → [B, H]`` (forward and backward) written four ways. Synthetic inputs; run with
nothing else on the machine::

    .venv/bin/python -m benchmarks.stack_step
"""

import time

import torch
import torch.nn.functional as F

from papa.probing.probe import ProbeConfig, SequenceProbe, make_optimizer
from papa.probing.stacked import ProbeStack
from papa.probing.stacked_training import _each_logits

B, S, P, H, LABELS, LENGTH = 16, 13, 40, 768, 2, 64


def _milliseconds(step, repeats: int = 30) -> float:
    for _ in range(3):
        step()
    started = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - started) / repeats * 1000


def probe_steps() -> dict[str, float]:
    """Milliseconds per training step: alone, and stacked with R = 1 and 3 (per step of all R)."""
    torch.manual_seed(0)
    states, mask, positions = torch.randn(B, S, P, H), torch.ones(B, P), torch.arange(P)
    probe = SequenceProbe(S, LENGTH, H, LABELS, 0.1)
    optimizer = make_optimizer(list(probe.parameters()), ProbeConfig())

    def alone():
        optimizer.zero_grad()
        probe(states, mask, positions).sum().backward()
        optimizer.step()

    times = {"alone": _milliseconds(alone)}
    for r in (1, 3):
        probes = [SequenceProbe(S, LENGTH, H, LABELS, 0.1) for _ in range(r)]
        stack = ProbeStack(probes, bind=True)
        optimizers = [make_optimizer(list(p.parameters()), ProbeConfig()) for p in probes]
        stacked_states = states[None].expand(r, -1, -1, -1, -1).contiguous()
        stacked_mask, dropout = mask[None].expand(r, -1, -1), torch.ones(r, B, H)

        def stacked(stack=stack, optimizers=optimizers, x=stacked_states, m=stacked_mask, d=dropout):
            logits = stack(x, m, positions, dropout=d)
            for tensor in stack.stacked.values():
                tensor.grad = None
            logits.sum().backward()
            for i, (opt, params) in enumerate(zip(optimizers, stack._parameters_of)):
                for name, tensor in stack.stacked.items():
                    params[name].grad = tensor.grad[i]  # each probe's slice of the stacked gradients
                opt.step()
                opt.zero_grad(set_to_none=True)

        times[f"batched products R={r}"] = _milliseconds(stacked)

        def lockstep(probes=probes, optimizers=optimizers, x=stacked_states, m=stacked_mask, d=dropout):
            for opt in optimizers:
                opt.zero_grad(set_to_none=True)
            _each_logits(probes, True, [x, m, positions], d).sum().backward()
            for opt in optimizers:
                opt.step()

        times[f"lockstep R={r} (train_stacked)"] = _milliseconds(lockstep)
    return times


def dense_layer() -> dict[str, float]:
    """Milliseconds per forward and backward of the dense layer (one probe, ``R`` = 1), written four ways."""
    torch.manual_seed(0)
    pooled = torch.randn(1, B, S * H, requires_grad=True)
    weight, bias = torch.randn(1, H, S * H, requires_grad=True), torch.randn(1, H, requires_grad=True)
    ways = {
        "baddbmm, transposed weight (ProbeStack)": lambda: torch.baddbmm(
            bias[:, None].expand(-1, B, -1), pooled, weight.transpose(1, 2)
        ),
        "matmul": lambda: torch.matmul(pooled, weight.transpose(1, 2)) + bias[:, None],
        "einsum": lambda: torch.einsum("rbk,rhk->rbh", pooled, weight) + bias[:, None],
        "F.linear per probe (nn.Linear)": lambda: torch.stack([F.linear(pooled[0], weight[0], bias[0])]),
    }
    times = {}
    for name, forward in ways.items():

        def step(forward=forward):
            weight.grad = pooled.grad = bias.grad = None
            forward().sum().backward()

        times[name] = _milliseconds(step)
    return times


if __name__ == "__main__":
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; B={B} S={S} P={P} H={H}")
    for name, ms in (probe_steps() | dense_layer()).items():
        print(f"{name:45s} {ms:7.1f} ms")
