"""Atomic, verified file writing and reading.

Every artefact papa writes goes through :func:`atomic_write_with` (a temporary sibling, fsynced, then renamed over
the target): a reader never sees a half-written file, a killed writer leaves the old one. Temporaries
(:data:`TEMP_NAME`) have 0666 minus the umask from the start, never a private 0600 leftover;
:func:`remove_stale_temp_files` removes them. JSON artefacts carry a ``sha256`` of their canonical body
(:func:`read_json_verified` checks it).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from papa.core.errors import CorruptFileError, PapaError


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _default_mode() -> int:
    """The mode a plain ``open(path, "w")`` would give (0666 minus the umask); mkstemp's is 0600."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


#: The names :func:`atomic_write_with` and :func:`temporary_file` give their temporary files:
#: ``.<target name>.<8 characters of tempfile's alphabet>.tmp``.
TEMP_NAME = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temporary file + fsync + rename)."""

    def write(handle) -> None:
        handle.write(data)

    return atomic_write_with(path, write)


def _make_temp(target: Path, setting: str | None) -> tuple[int, str]:
    """An open temporary file next to ``target`` (papa's temp name), already at the umask's mode."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as err:
        raise _os_error(target, err, setting) from None
    try:
        os.fchmod(fd, _default_mode())
    except OSError as err:
        os.close(fd)
        _silent_unlink(tmp)
        raise _os_error(target, err, setting) from None
    return fd, tmp


def temporary_file(target: str | os.PathLike, setting: str | None = None) -> Path:
    """The path of a new empty temporary file for ``target`` (papa's temp name, umask permissions); the caller fills
    it and renames it over ``target`` (or deletes it)."""
    fd, tmp = _make_temp(Path(target), setting)
    os.close(fd)
    return Path(tmp)


def atomic_write_with(path: str | os.PathLike, write, by_path: bool = False, setting: str | None = None) -> Path:
    """Atomically create ``path`` with ``write(handle)``, or ``write(temporary_path)`` when ``by_path`` (a library
    streams a large artefact to the file). ``setting`` names what chose the folder (``"PAPA_CACHE_DIR"``), for the
    hints of a full or read-only disk."""
    target = Path(path)
    fd, tmp = _make_temp(target, setting)
    try:
        if by_path:
            os.close(fd)
            write(tmp)
            fd = os.open(tmp, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        else:
            with os.fdopen(fd, "wb") as handle:
                write(handle)
                handle.flush()
                os.fsync(handle.fileno())
        os.chmod(tmp, _default_mode())
        os.replace(tmp, target)
    except OSError as err:
        _silent_unlink(tmp)
        raise _os_error(target, err, setting) from None
    except BaseException:
        _silent_unlink(tmp)
        raise
    return target


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def atomic_write_json(path: str | os.PathLike, obj: dict, checksum: bool = True) -> Path:
    """Write a JSON object atomically; with ``checksum`` it gains a ``sha256`` of its body."""
    body = {k: v for k, v in obj.items() if k != "sha256"}
    if checksum:
        body["sha256"] = sha256_bytes(canonical_json(body).encode("utf-8"))
    return atomic_write_text(path, canonical_json(body))


def read_json_verified(
    path: str | os.PathLike,
    what: str = "file",
    remedy: str = "write it again with papa",
    require_checksum: bool = False,
) -> dict:
    """Read a JSON object written by :func:`atomic_write_json` and check its ``sha256``; ``what``: the kind of file
    ("ranking"), ``remedy``: how papa makes a good one. A non-object (or, with ``require_checksum``, one without
    ``sha256``) is not a papa file, and the hint never advises deleting it: nothing shows papa wrote it."""
    path = Path(path)
    if not path.is_file():
        raise PapaError(f"The {what} {path} does not exist", "Check the path, or create it first.")
    foreign = (
        f"Check the path: pass a {what} written by papa ({remedy}). "
        "Do not delete this file: nothing shows papa wrote it."
    )
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise PapaError(
            f"Cannot read the {what} {path}: {err.strerror}", "Check the path and the file's permissions."
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CorruptFileError(f"{path} is not a papa {what} file (not valid JSON)", foreign) from None
    if not isinstance(obj, dict):
        raise CorruptFileError(f"{path} is not a papa {what} file (not a JSON object)", foreign)
    stored = obj.pop("sha256", None)
    if stored is None and require_checksum:
        raise CorruptFileError(f"{path} is not a papa {what} file (no sha256 checksum)", foreign)
    if stored is not None and stored != sha256_bytes(canonical_json(obj).encode("utf-8")):
        raise CorruptFileError(
            f"The {what} {path} fails its checksum",
            f"It was edited or corrupted after papa wrote it: {remedy} (papa replaces the file).",
        )
    return obj


def remove_stale_temp_files(folder: str | os.PathLike, min_age_s: float = 0.0) -> list[Path]:
    """Delete (and return, sorted) the temporaries killed atomic writers left in ``folder`` and below: only plain files
    named like :data:`TEMP_NAME`. ``min_age_s`` spares more recent ones (another process's writer may be running:
    use 0 only while holding the lock of every writer of ``folder``)."""
    root = Path(folder)
    if not root.is_dir():
        return []
    now = time.time()
    removed = []
    for directory, _, files in os.walk(root):
        for name in files:
            path = Path(directory) / name
            if not TEMP_NAME.fullmatch(name):
                continue
            try:
                info = path.lstat()
                if not os.path.isfile(path) or os.path.islink(path) or now - info.st_mtime < min_age_s:
                    continue
                path.unlink()
            except OSError:
                continue
            removed.append(path)
    return sorted(removed)


def _silent_unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def write_error(target: Path, err: OSError, setting: str | None = None) -> PapaError:
    """The :class:`PapaError` for an ``OSError`` writing ``target`` (``setting``: as in :func:`atomic_write_with`)."""
    return _os_error(target, err, setting)


def _os_error(target: Path, err: OSError, setting: str | None = None) -> PapaError:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = (
            f"Free disk space there, or set {setting} to a folder on a larger disk."
            if setting
            else "Free disk space or choose another output folder."
        )
        return PapaError(f"No space left to write {target}", hint)
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        hint = f"Set {setting} to a writable folder." if setting else "Choose a writable output folder."
        return PapaError(f"Cannot write {target}: the folder is not writable", hint)
    return PapaError(
        f"Cannot write {target}: {err.strerror}", f"Check {setting}." if setting else "Check the output path."
    )
