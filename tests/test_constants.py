"""Constant estimation against a brute-force reference, and the constants file format."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest
import torch
from tiny import HEADS, LAYERS, TINY_BERT, VOCAB, averaged  # noqa: E402
from transformers import AutoModel, BertConfig

from papa.core.constants import ConstantSet, check_values, estimate_constants, load_constants, save_constants
from papa.core.errors import ConstantsMismatchError, CorruptFileError, PapaError
from papa.core.patching import is_patched, patch_constant_heads, unpatch
from papa.pipeline.plan import ROOT

CONFIG = BertConfig(**TINY_BERT)


def _pair(seed: int = 0):
    """The same random weights twice: SDPA (what papa patches) and eager (the reference)."""
    torch.manual_seed(seed)
    sdpa = AutoModel.from_config(copy.deepcopy(CONFIG), attn_implementation="sdpa").eval()
    eager = AutoModel.from_config(copy.deepcopy(CONFIG), attn_implementation="eager").eval()
    eager.load_state_dict(sdpa.state_dict())
    return sdpa, eager


def _random_batch(n: int, length: int, seed: int, holes: bool = False, max_real: int | None = None):
    """``n`` examples of random real lengths in ``[1, max_real]``; with ``holes`` masks like the PAPA
    layout (a prefix, a middle block starting at L/2, and the last position)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (n, length), generator=g)
    mask = torch.zeros(n, length, dtype=torch.long)
    max_real = max_real or length
    for x in range(n):
        if holes:
            a = int(torch.randint(1, length // 2 + 1, (1,), generator=g))
            b = int(torch.randint(0, length // 2, (1,), generator=g))
            mask[x, :a] = 1
            mask[x, length // 2 : length // 2 + b] = 1
            mask[x, -1] = 1
        else:
            mask[x, : int(torch.randint(1, max_real + 1, (1,), generator=g))] = 1
    mask[0, :max_real] = 1  # one example as long as allowed
    ids = ids.masked_fill(mask == 0, 0)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def _brute_force(eager, encoded):
    """The official formula, one example at a time, from eager ``output_attentions``."""
    n, length = encoded["input_ids"].shape
    num = torch.zeros(LAYERS, HEADS, length, length, dtype=torch.float64)
    den = torch.zeros(length, length, dtype=torch.float64)
    attentions, masks = [], []
    with torch.no_grad():
        for x in range(n):
            out = eager(**{k: v[x : x + 1] for k, v in encoded.items()}, output_attentions=True)
            a = torch.stack([layer[0] for layer in out.attentions]).double()  # [layers, heads, L, L]
            m = encoded["attention_mask"][x].double()
            pair = torch.einsum("i,j->ij", m, m)
            num += a * pair
            den += pair
            attentions.append(a), masks.append(pair)
    constants = torch.where(den > 0, num / den.clamp_min(1), torch.zeros_like(num))
    squared = torch.zeros(LAYERS, HEADS, dtype=torch.float64)
    for a, pair in zip(attentions, masks):
        squared += ((a - constants) ** 2 * pair).sum((-1, -2))
    return constants, den, squared / den.sum()


def _loop_reference_cell(eager, encoded, layer, head, i, j):
    """One cell of C with explicit loops (no broadcasting at all)."""
    total, count = 0.0, 0
    with torch.no_grad():
        for x in range(encoded["input_ids"].shape[0]):
            m = encoded["attention_mask"][x]
            if m[i] and m[j]:
                out = eager(**{k: v[x : x + 1] for k, v in encoded.items()}, output_attentions=True)
                total += float(out.attentions[layer][0, head, i, j])
                count += 1
    return total / count if count else 0.0


@pytest.mark.parametrize("batch_size", [4, 3, 64])
def test_estimator_matches_brute_force(batch_size):
    sdpa, eager = _pair(0)
    encoded = _random_batch(10, 12, seed=1)
    cs = estimate_constants(sdpa, encoded, batch_size=batch_size)
    ref, counts, deviation = _brute_force(eager, encoded)
    assert cs.constants.shape == (LAYERS, HEADS, 12, 12) and cs.constants.dtype == torch.float32
    assert (cs.constants.double() - ref).abs().max() <= 1e-6
    assert torch.equal(cs.counts, counts)
    assert (cs.deviation.double() - deviation).abs().max() <= 1e-6
    assert cs.meta["num_examples"] == 10 and cs.meta["max_length"] == 12
    # not row-normalised: with padding, rows of C do not sum to 1
    assert (cs.constants.sum(-1) - 1).abs().max() > 1e-3


def test_estimator_with_layout_holes_and_unobserved_cells():
    sdpa, eager = _pair(1)
    holey = _random_batch(7, 16, seed=2, holes=True)
    cs = estimate_constants(sdpa, holey, batch_size=3)
    ref, counts, deviation = _brute_force(eager, holey)
    assert (cs.constants.double() - ref).abs().max() <= 1e-6
    assert torch.equal(cs.counts, counts)
    assert (cs.deviation.double() - deviation).abs().max() <= 1e-6
    # an explicit-loop check of single cells, including one involving a hole
    for layer, head, i, j in [(0, 0, 0, 0), (1, 3, 0, 15), (0, 2, 15, 8), (1, 1, 8, 9)]:
        assert (
            abs(float(cs.constants[layer, head, i, j]) - _loop_reference_cell(eager, holey, layer, head, i, j)) <= 1e-6
        )

    short = _random_batch(5, 12, seed=3, max_real=7)  # positions 7.. are never real
    cs = estimate_constants(sdpa, short, batch_size=2)
    assert torch.all(cs.counts[7:] == 0) and torch.all(cs.counts[:, 7:] == 0)
    assert torch.all(cs.constants[..., 7:, :] == 0) and torch.all(cs.constants[..., :, 7:] == 0)
    assert not torch.isnan(cs.constants).any() and not torch.isnan(cs.deviation).any()
    assert (cs.constants.double() - _brute_force(eager, short)[0]).abs().max() <= 1e-6


def test_constant_of_a_single_full_example_is_its_attention():
    sdpa, eager = _pair(2)
    encoded = _random_batch(1, 10, seed=4)
    encoded["attention_mask"][:] = 1
    cs = estimate_constants(sdpa, encoded)
    with torch.no_grad():
        attn = torch.stack([a[0] for a in eager(**encoded, output_attentions=True).attentions])
    assert (cs.constants - attn).abs().max() <= 1e-6
    assert (cs.constants.sum(-1) - 1).abs().max() <= 1e-5
    assert cs.deviation.abs().max() <= 1e-8  # zero up to float32 rounding of the squared sums


def test_estimation_restores_the_model():
    sdpa, _ = _pair(3)
    encoded = _random_batch(4, 8, seed=5)
    sdpa.train()
    with torch.no_grad():
        sdpa.eval()
        before = sdpa(**encoded).last_hidden_state
        sdpa.train()
    estimate_constants(sdpa, encoded, batch_size=3)
    assert sdpa.training and not is_patched(sdpa)
    assert sdpa.config._attn_implementation == "sdpa" and not hasattr(sdpa.config, "papa")
    assert not any("papa_patch" in name for name, _ in sdpa.named_modules())
    sdpa.eval()
    with torch.no_grad():
        assert torch.equal(sdpa(**encoded).last_hidden_state, before)


def test_estimation_errors():
    sdpa, _ = _pair(4)
    encoded = _random_batch(4, 8, seed=6)
    with pytest.raises(PapaError):
        estimate_constants(sdpa, encoded, batch_size=0)
    with pytest.raises(PapaError):
        estimate_constants(sdpa, {k: v[:0] for k, v in encoded.items()})
    patch_constant_heads(sdpa, torch.rand(LAYERS, HEADS, 8, 8), [(0, 0)])
    sdpa.train()
    with pytest.raises(PapaError, match="already patched"):
        estimate_constants(sdpa, encoded)
    assert sdpa.training  # a refused model keeps its mode and its patch
    assert sdpa.config.papa["constant_heads"] == [[0, 0]]
    unpatch(sdpa)


# -- files ----------------------------------------------------------------------------------------
def _constant_set(length=6):
    g = torch.Generator().manual_seed(0)
    real = torch.arange(length)[None, :] < torch.randint(1, length + 1, (8,), generator=g)[:, None]  # [8, L]
    counts = real.double().T @ real.double()  # [L, L]: examples in which both positions are real
    return ConstantSet(
        averaged(torch.rand(LAYERS, HEADS, length, length, generator=g) + 0.5, counts),
        counts,
        torch.rand(LAYERS, HEADS, generator=g),
        {"model": "tiny", "fingerprint": "abc123", "relayout": True, "task": "sst2"},
    )


def test_save_load_roundtrip(tmp_path):
    cs = _constant_set()
    path = save_constants(tmp_path / "c.safetensors", cs)
    back = load_constants(path)
    assert torch.equal(back.constants, cs.constants) and torch.equal(back.counts, cs.counts)
    assert torch.equal(back.deviation, cs.deviation)
    assert back.constants.dtype == torch.float32 and back.counts.dtype == torch.float64
    for key, value in cs.meta.items():
        assert back.meta[key] == value
    assert back.meta["path"] == str(path) and back.max_length == 6
    assert not list(tmp_path.glob(".*.tmp"))  # atomic write leaves no temporary file


def _data_offset(raw: bytes) -> int:
    return 8 + int.from_bytes(raw[:8], "little")


def test_truncated_file_is_corrupt(tmp_path):
    path = save_constants(tmp_path / "c.safetensors", _constant_set())
    raw = path.read_bytes()
    for cut in (len(raw) - 5, _data_offset(raw) + 3, 20, 4):
        bad = tmp_path / f"cut{cut}.safetensors"
        bad.write_bytes(raw[:cut])
        with pytest.raises(CorruptFileError):
            load_constants(bad)


def test_flipped_byte_fails_checksum(tmp_path):
    path = save_constants(tmp_path / "c.safetensors", _constant_set())
    raw = bytearray(path.read_bytes())
    header = json.loads(raw[8 : _data_offset(raw)])
    begin, end = header["constants"]["data_offsets"]
    raw[_data_offset(raw) + begin + (end - begin) // 2] ^= 0x01
    bad = tmp_path / "flip.safetensors"
    bad.write_bytes(bytes(raw))
    with pytest.raises(CorruptFileError, match="checksum"):
        load_constants(bad)


def test_not_a_papa_file_and_missing_file(tmp_path):
    from safetensors.torch import save_file

    other = tmp_path / "other.safetensors"
    save_file({"constants": torch.zeros(1, 1, 2, 2)}, str(other))
    with pytest.raises(CorruptFileError):
        load_constants(other)
    with pytest.raises(PapaError):
        load_constants(tmp_path / "missing.safetensors")


def test_check_compatible():
    cs = _constant_set(6)
    assert (
        cs.check_compatible(fingerprint="abc123", num_layers=LAYERS, num_heads=HEADS, max_length=6, relayout=True) is cs
    )
    assert cs.check_compatible() is cs  # nothing asked, nothing checked
    with pytest.raises(ConstantsMismatchError, match="model weights"):
        cs.check_compatible(fingerprint="other")
    with pytest.raises(ConstantsMismatchError, match="length"):
        cs.check_compatible(max_length=8)
    with pytest.raises(ConstantsMismatchError, match="relayout"):
        cs.check_compatible(relayout=False)
    with pytest.raises(ConstantsMismatchError, match="layers"):
        cs.check_compatible(num_layers=3)
    with pytest.raises(ConstantsMismatchError, match="heads"):
        cs.check_compatible(num_heads=12)


# -- values no estimate can produce ------------------------------------------------------------------------
def _committed_constants() -> list[Path]:
    """Every constants file committed under book/runs (the default book's 18 among them)."""
    listed = subprocess.run(
        ["git", "ls-files", "book/runs/**.safetensors"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / name for name in listed if "/constants/" in name]


COMMITTED = _committed_constants()


def test_the_committed_constants_files_are_all_listed():
    assert len([p for p in COMMITTED if "/runs/default/" in str(p)]) == 18


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(ROOT / "book" / "runs")))
def test_every_committed_constants_file_is_within_the_estimators_bounds(path):
    """Checked on load, and by hand here: [0, 1], the count-weighted row identity, finite means and deviation."""
    constant_set = load_constants(path)  # raises on any bound
    constants, counts = constant_set.constants.double(), constant_set.counts
    assert 0 <= constants.min() and constants.max() <= 1
    real = counts.diagonal() > 0
    weighted = torch.einsum("lhij,ij->lhi", constants, counts)[..., real]
    assert torch.allclose(weighted, counts.diagonal()[real].expand_as(weighted), rtol=1e-6, atol=0)
    assert (constants[..., counts == 0] == 0).all()
    assert 0 <= constant_set.deviation.min() and constant_set.deviation.max() <= 1
    assert constant_set.output_means is None or torch.isfinite(constant_set.output_means).all()


def test_a_plain_row_sum_can_exceed_one_by_hand():
    """Why the bound is on count-weighted rows: two examples of lengths 2 and 4, query 0. The first attends 0.5/0.5
    to keys 0, 1; the second 0.5/0.5 to keys 2, 3. C[0] = [0.25, 0.25, 0.5, 0.5] sums to 1.5, yet
    Σ_j counts[0, j] C[0, j] = 2·0.25 + 2·0.25 + 1·0.5 + 1·0.5 = 2 = counts[0, 0]."""
    counts = torch.tensor([[2, 2, 1, 1], [2, 2, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]], dtype=torch.float64)
    row = torch.tensor([0.25, 0.25, 0.5, 0.5], dtype=torch.float64)
    constants = torch.zeros(1, 1, 4, 4)
    constants[0, 0] = torch.stack([row, row, torch.full((4,), 0.25), torch.full((4,), 0.25)]).float()
    tensors = {"constants": constants, "counts": counts, "deviation": torch.zeros(1, 1)}
    check_values(tensors, "by-hand.safetensors")  # accepted: each row's identity holds
    assert constants[0, 0, 0].sum() == 1.5


def _rewritten(tmp_path: Path, name: str, change) -> Path:
    """A constants file written by save_constants (a valid checksum) whose tensors ``change`` edited."""
    constant_set = _constant_set()
    constant_set.output_means = torch.zeros(LAYERS, HEADS, 6, 3)
    change(constant_set)
    return save_constants(tmp_path / name, constant_set)


def _scaled(factor):
    def change(cs):
        cs.constants = cs.constants * factor

    return change


def _nan_constants(cs):
    cs.constants[0, 0, 0, 0] = float("nan")


def _inf_means(cs):
    cs.output_means[1, 2, 3, 0] = float("inf")


def _huge_deviation(cs):
    cs.deviation[0, 0] = 2.0


def _odd_counts(cs):
    cs.counts[0, 1] += 0.5


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            _scaled(-1),
            "holds constants from -0.4962 to -0.08418, outside [0, 1] where a mean of attention probabilities",
        ),
        (_scaled(3), "holds constants from 0.2525 to 1.489, outside [0, 1]"),
        (
            _scaled(0.99),
            "has rows that are not averaged attention: sum_j counts[i, j] * C[l, h, i, j] must equal counts[i, i] "
            "(each example's attention row sums to 1), and is off by up to 0.01 of it",
        ),
        (_nan_constants, "holds non-finite values (NaN or Inf) in 'constants'"),
        (_inf_means, "holds non-finite values (NaN or Inf) in 'output_means'"),
        (_huge_deviation, "has a 'deviation' outside [0, 1] (a mean squared difference of two probabilities)"),
        (_odd_counts, "has 'counts' that are not a symmetric matrix of whole numbers >= 0"),
    ],
    ids=["negated", "times-3", "times-0.99", "nan", "inf-means", "deviation", "counts"],
)
def test_constants_no_estimate_can_produce_are_refused_naming_the_file(tmp_path, change, problem):
    path = _rewritten(tmp_path, "edited.safetensors", change)
    with pytest.raises(CorruptFileError) as err:
        load_constants(path)
    message = str(err.value)
    assert message.startswith(f"Constants file {path} ") and problem in message, message
    assert message.endswith("Estimate it again with `papa estimate` (a file papa estimated always passes this check).")


def test_the_probe_cli_refuses_them_with_exit_2_writing_nothing(tmp_path, capsys, monkeypatch):
    from papa.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = _rewritten(tmp_path, "neg.safetensors", _scaled(-1))
    out = tmp_path / "result.json"
    argv = ["probe", "--task", "sst2", "--constants", str(path), "--constant-heads", "all", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"papa: error: Constants file {path} holds constants from -0.4962") and "learning" not in err
    assert not out.exists()
