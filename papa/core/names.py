"""Names that become paths: slugs and run ids that are safe on every filesystem.

A user's name (hub id, model folder, study name) ends up in file names under ``book/runs/<grid>/``. :func:`slug`
keeps a safe name as it is (``minilm-l6``: existing run ids do not move) and turns any other into a readable part plus
a short stable hash (``microsoft-deberta-base-3f9c1a2e``): never ``/``, ``..`` or ``__`` (the run-id separator).
"""

from __future__ import annotations

import hashlib
import re

#: Longest slug and longest run id (file names stay far below the usual 255-byte limit).
MAX_SLUG = 80
MAX_RUN_ID = 120
HASH_LENGTH = 8
#: An already safe name: lower-case letters, digits, ``.``, ``-`` and single ``_``; starts with a letter or digit.
SAFE_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9.-]|_(?!_))*$")
#: The run-id separator: parts are joined with it, so no part may contain it.
SEPARATOR = "__"


def short_hash(text: str, length: int = HASH_LENGTH) -> str:
    """The first ``length`` hex digits of the sha256 of ``text`` (stable across machines and runs)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def slug(name: str, max_length: int = MAX_SLUG) -> str:
    """``name`` if safe, else ``<readable>-<hash>``: ``[a-z0-9._-]``, no ``..`` or ``__``, at most ``max_length``."""
    if SAFE_NAME.match(name) and ".." not in name and len(name) <= max_length and not name.endswith("."):
        return name  # usable as a path component as it is
    readable = re.sub(r"[^a-z0-9.]+", "-", name.lower())
    readable = re.sub(r"\.{2,}", ".", readable)
    readable = re.sub(r"-*\.-*", ".", readable).strip(".-")
    readable = readable[: max_length - HASH_LENGTH - 1].rstrip(".-")
    return f"{readable}-{short_hash(name)}" if readable else short_hash(name)


def run_id(*parts: str) -> str:
    """``parts``, each a :func:`slug`, joined by ``__``; beyond :data:`MAX_RUN_ID`: its start, then a hash of it all."""
    joined = SEPARATOR.join(slug(str(part)) for part in parts)
    if len(joined) <= MAX_RUN_ID:
        return joined
    head = joined[: MAX_RUN_ID - HASH_LENGTH - 1].rstrip("._-")
    return f"{head}-{short_hash(joined)}"
