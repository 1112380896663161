"""Atomic, verified file writing and reading.

Every artefact papa writes (constants, rankings, results, manifests, notebooks) goes through
:func:`atomic_write_bytes` / :func:`atomic_write_text` / :func:`atomic_write_json`: the content is
written to a temporary file in the same folder, flushed and fsynced, then renamed over the target,
so a reader never sees a half-written file and a killed writer leaves the old file intact.
JSON artefacts carry a ``sha256`` of their canonical body, checked by :func:`read_json_verified`.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
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


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temporary file + fsync + rename)."""

    def write(handle) -> None:
        handle.write(data)

    return atomic_write_with(path, write)


def atomic_write_with(path: str | os.PathLike, write, by_path: bool = False) -> Path:
    """Atomically create ``path`` with ``write(handle)`` (or ``write(temporary_path)`` when ``by_path``).

    For large artefacts (cached features of a big training set) ``by_path`` lets a library stream
    to the temporary file instead of building the whole content in memory first. The file gets the
    usual permissions (0666 minus the umask), not mkstemp's private 0600.
    """
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as err:
        raise _os_error(target, err) from None
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
        raise _os_error(target, err) from None
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


def read_json_verified(path: str | os.PathLike, what: str = "file") -> dict:
    """Read a JSON object written by :func:`atomic_write_json` and check its ``sha256``."""
    path = Path(path)
    if not path.is_file():
        raise PapaError(f"The {what} {path} does not exist", "Check the path, or create it first.")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CorruptFileError(
            f"The {what} {path} is not valid JSON ({err.__class__.__name__})",
            "It is corrupt or truncated: delete it and create it again.",
        ) from None
    if not isinstance(obj, dict):
        raise CorruptFileError(f"The {what} {path} does not hold a JSON object", "Delete it and create it again.")
    stored = obj.pop("sha256", None)
    if stored is not None and stored != sha256_bytes(canonical_json(obj).encode("utf-8")):
        raise CorruptFileError(
            f"The {what} {path} fails its checksum",
            "It was edited or corrupted: delete it and create it again.",
        )
    return obj


def _silent_unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _os_error(target: Path, err: OSError) -> PapaError:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return PapaError(f"No space left to write {target}", "Free disk space or choose another output folder.")
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return PapaError(f"Cannot write {target}: the folder is not writable", "Choose a writable output folder.")
    return PapaError(f"Cannot write {target}: {err.strerror}", "Check the output path.")
