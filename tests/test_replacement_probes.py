"""A probe run with a replacement mode: ``run_probes(replacement=...)`` and ``papa probe --replacement``
replace the k heads by that mode, record it, key the cached features by it, and refuse a bad name or a ``mean``
without stored means with one clear error. The modes' exactness is tests/test_replacement_modes.py's."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from papa.cli import main
from papa.core.constants import estimate_constants, load_constants, save_constants
from papa.core.errors import PapaError
from papa.core.fields import REPLACEMENTS as SCHEMA_REPLACEMENTS
from papa.core.patching import patch_constant_heads, unpatch
from papa.core.replacements import REPLACEMENTS
from papa.probing.experiment import run_probes
from papa.probing.extraction import extract_features, get_features
from tests.test_probe_cli import recorded  # noqa: F401  (the fixture)
from tests.test_probing import _tiny_gate_run

ALL = 8  # the tiny model's 2 layers × 4 heads


def test_the_schema_and_the_patching_table_name_the_same_modes():
    assert SCHEMA_REPLACEMENTS == REPLACEMENTS == ("papa", "uniform", "zero", "mean")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    lm, inputs = _tiny_gate_run()
    folder = tmp_path_factory.mktemp("constants")
    constants = estimate_constants(
        lm.model, inputs.train, meta={"fingerprint": lm.fingerprint, "max_length": 16, "relayout": True}
    )
    with_means = save_constants(folder / "with_means.safetensors", constants)
    without = save_constants(folder / "without_means.safetensors", dataclasses.replace(constants, output_means=None))
    return lm, inputs, constants, with_means, without


def _run(tiny, replacement, k=ALL, constants_file=None):
    lm, inputs, _, with_means, _ = tiny
    options = dict(mode="cached", seeds=[42], epochs=1, inputs=inputs, use_cache=False, device="cpu")
    return run_probes(lm, "sst2", str(constants_file or with_means), None, k, replacement=replacement, **options)[0]


@pytest.mark.parametrize("replacement", ["uniform", "zero", "mean"])
def test_a_replacement_run_trains_on_that_modes_features_and_records_it(tiny, replacement, tmp_path, monkeypatch):
    monkeypatch.setenv("PAPA_CACHE_DIR", str(tmp_path))
    lm, inputs, constants, with_means, _ = tiny
    heads = [(layer, head) for layer in range(2) for head in range(4)]
    patch_constant_heads(
        lm.model, constants.constants, heads, replacement=replacement, output_means=constants.output_means
    )
    try:
        by_hand = extract_features(lm.model, inputs.eval, False)  # the mode patched by hand
    finally:
        unpatch(lm.model)
    keys: list[str] = []
    features, _ = get_features(
        lm,
        inputs,
        "eval",
        heads,
        load_constants(with_means),
        "cpu",
        use_cache=False,
        keys=keys,
        replacement=replacement,
    )
    assert torch.equal(features.states, by_hand.states)
    papa, _ = get_features(
        lm, inputs, "eval", heads, load_constants(with_means), "cpu", use_cache=False, replacement="papa"
    )
    assert not torch.equal(features.states[:, -1], papa.states[:, -1])
    options = dict(mode="cached", seeds=[42], epochs=1, inputs=inputs, device="cpu", replacement=replacement)
    result = run_probes(lm, "sst2", str(with_means), None, ALL, **options)[0]
    assert result["config"]["replacement"] == replacement and result["config"]["constant_heads"] == ALL
    assert keys[0] in result["feature_cache_keys"]  # the run read the features of its mode


def test_papa_is_the_default_and_k0_is_the_same_run_under_every_mode(tiny):
    lm, inputs, _, with_means, _ = tiny
    default = run_probes(
        lm,
        "sst2",
        str(with_means),
        None,
        ALL,
        mode="cached",
        seeds=[42],
        epochs=1,
        inputs=inputs,
        use_cache=False,
        device="cpu",
    )[0]
    papa = _run(tiny, "papa")
    assert (default["config"]["replacement"], default["score"], default["dev"]) == ("papa", papa["score"], papa["dev"])
    zero_k0, papa_k0 = _run(tiny, "zero", k=0), _run(tiny, "papa", k=0)
    assert zero_k0["dev"] == papa_k0["dev"] and zero_k0["score"] == papa_k0["score"]


def test_the_feature_cache_keys_tell_the_modes_apart(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("PAPA_CACHE_DIR", str(tmp_path))
    lm, inputs, _, with_means, _ = tiny
    keys = {}
    for replacement in ("papa", "zero"):
        for k in (0, ALL):
            options = dict(mode="cached", seeds=[42], epochs=1, inputs=inputs, device="cpu", replacement=replacement)
            keys[replacement, k] = set(
                run_probes(lm, "sst2", str(with_means), None, k, **options)[0]["feature_cache_keys"]
            )
    assert keys["papa", 0] == keys["zero", 0]  # nothing replaced: one feature set
    assert not keys["papa", ALL] & keys["zero", ALL]


def test_a_bad_mode_or_mean_without_means_is_one_clear_error(tiny):
    with pytest.raises(PapaError, match=r"Unknown replacement 'resample'") as bad:
        _run(tiny, "resample")
    assert bad.value.hint == "Use one of papa, uniform, zero, mean."
    with pytest.raises(
        PapaError, match=r"The replacement 'mean' needs the heads' mean outputs.*Re-run `papa estimate`"
    ):
        _run(tiny, "mean", constants_file=tiny[4])
    assert _run(tiny, "zero", constants_file=tiny[4])["config"]["replacement"] == "zero"  # no means needed


def test_the_replacement_flag_reaches_run_probe(recorded, tmp_path, capsys):  # noqa: F811
    assert main(["probe", "--task", "sst2", "--replacement", "zero", "--out", str(tmp_path / "r.json")]) == 0
    assert recorded[0]["replacement"] == "zero"
    assert main(["probe", "--task", "sst2", "--replacement", "bogus", "--out", str(tmp_path / "s.json")]) != 0
    assert (
        "Unknown replacement 'bogus' at --replacement. Use one of papa, uniform, zero, mean." in capsys.readouterr().err
    )
