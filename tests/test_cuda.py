"""The same numbers on a CUDA device as on the CPU: constant heads (fp32 and fp16), estimation and
cached features. These need a GPU; on a machine without one they are deselected (tests/conftest.py;
the CPU suite covers the same code paths). `benchmarks/run.py --device cuda` times them."""

from __future__ import annotations

import copy

import pytest
import torch
from tiny import HEADS, LAYERS, TINY_BERT  # noqa: E402
from tiny import tiny_batch as _batch
from tiny import tiny_constants as _constants
from transformers import AutoModel, BertConfig

from papa.core.constants import estimate_constants
from papa.core.head_patch import HeadPatch
from papa.core.heads import all_heads
from papa.core.patching import patch_constant_heads, prune_qk, unpatch
from papa.probing.extraction import extract_features

pytestmark = pytest.mark.cuda  # deselected on a machine without a CUDA device (tests/conftest.py)
CUDA = torch.device("cuda")


def _model(seed=0):
    torch.manual_seed(seed)
    return AutoModel.from_config(copy.deepcopy(BertConfig(**TINY_BERT)), attn_implementation="sdpa").eval()


def _to(batch, device):
    return {k: v.to(device) for k, v in batch.items()}


@pytest.mark.parametrize("heads", ["mixed", "all"])
def test_constant_heads_on_cuda_equal_cpu(heads):
    head_set = [(0, 0), (1, 2), (1, 3)] if heads == "mixed" else all_heads(LAYERS, HEADS)
    batch = _batch([16, 9, 3, 1])
    model = _model(1)
    patch_constant_heads(model, _constants(1), head_set)
    prune_qk(model)
    with torch.no_grad():
        cpu = model(**batch).last_hidden_state
        gpu = model.to(CUDA)(**_to(batch, CUDA)).last_hidden_state.cpu()
    assert (cpu - gpu).abs().max() <= 1e-4


def test_constant_heads_in_half_precision_match_float32():
    batch = _to(_batch([16, 12, 5, 2], seed=2), CUDA)
    model = _model(2).to(CUDA)
    patch_constant_heads(model, _constants(2), [(0, 1), (1, 0), (1, 1)])
    with torch.no_grad():
        full = model(**batch).last_hidden_state
        half = model.half()(**batch).last_hidden_state.float()
    assert torch.isfinite(half).all()
    assert (full - half).abs().max() <= 2e-2  # fp16 rounding only; no underflow in the row normalisation


def test_fast_constant_path_equals_the_probabilities_path_on_cuda(monkeypatch):
    batch = _to(_batch([16, 7, 4], seed=3), CUDA)
    model = _model(3).to(CUDA)
    patch_constant_heads(model, _constants(3), [(0, 0), (0, 3), (1, 1)])
    with torch.no_grad():
        fast = model(**batch).last_hidden_state

        def probabilities_path(self, value, key_mask, eps=1e-12):
            probs = self._constant_probs(key_mask, value.shape[2], value.dtype)
            return torch.matmul(probs, value)

        monkeypatch.setattr(HeadPatch, "_constant_output", probabilities_path)
        reference = model(**batch).last_hidden_state
    assert (fast - reference).abs().max() <= 1e-5


def test_estimation_on_cuda_equals_cpu():
    encoded = _batch([16, 16, 10, 6, 3, 1] * 4, seed=4)
    model = _model(4)
    on_cpu = estimate_constants(model, encoded, batch_size=8, device="cpu")
    on_gpu = estimate_constants(copy.deepcopy(model), encoded, batch_size=8, device=CUDA)
    assert (on_cpu.constants - on_gpu.constants.cpu()).abs().max() <= 1e-5
    assert torch.equal(on_cpu.counts.cpu(), on_gpu.counts.cpu())


def test_cached_features_on_cuda_equal_cpu():
    encoded = _batch([16, 11, 5, 2], seed=5)
    encoded["labels"] = torch.tensor([0, 1, 1, 0])
    model = _model(5)
    patch_constant_heads(model, _constants(5), [(0, 2), (1, 1)])
    cpu = extract_features(model, encoded, token_task=False, batch_size=2, device="cpu")
    gpu = extract_features(model.to(CUDA), encoded, token_task=False, batch_size=2, device=CUDA)
    unpatch(model)
    assert gpu.states.device.type == "cpu" and (cpu.states.float() - gpu.states.float()).abs().max() <= 2e-3


@pytest.mark.parametrize("heads", ["none", "mixed", "all"])
def test_compact_passes_on_cuda_equal_padded_passes_on_the_cpu(heads):
    """Issue 25's equivalence on the GPU: compact passes (papa.core.compact) against the padded CPU pass."""
    from papa.core.compact import compact_forward, plan_batches

    head_set = {"none": [], "mixed": [(0, 0), (1, 2), (1, 3)], "all": all_heads(LAYERS, HEADS)}[heads]
    batch = _batch([16, 9, 3, 1, 12, 5, 7], seed=4)
    batch["attention_mask"][:, 10] = 0  # a hole, as the PAPA layout's pads between the segments
    batch["attention_mask"][:, 15] = 1
    model = _model(4)
    if head_set:
        patch_constant_heads(model, _constants(4), head_set)
    with torch.no_grad():
        padded = model(**batch).last_hidden_state
        model.to(CUDA)
        for part in plan_batches(batch["attention_mask"], 3):
            rows = _to({k: v[part.rows] for k, v in batch.items()}, CUDA)
            out = compact_forward(model, rows, part.slots.to(CUDA)).last_hidden_state.cpu()
            real = batch["attention_mask"][part.rows][:, part.slots].bool()
            assert (out - padded[part.rows][:, part.slots])[real].abs().max() <= 1e-4
