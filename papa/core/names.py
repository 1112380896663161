"""Names that become paths: slugs and run ids that are safe on every filesystem.

A name typed by a user (a hub id such as ``microsoft/deberta-base``, a local model folder, a study
name) ends up in file names under ``book/runs/<grid>/``. :func:`slug` keeps a name that is already
safe as it is (``minilm-l6`` stays ``minilm-l6``, so existing run ids do not move) and turns any other
into a readable part plus a short stable hash of the raw name (``microsoft-deberta-base-3f9c1a2e``):
never ``/``, never ``..``, never ``__`` (the run-id separator), lower case, at most :data:`MAX_SLUG`
characters. Two different raw names never share a slug (the hash tells them apart).
"""

from __future__ import annotations

import hashlib
import re

#: Longest slug and longest run id (file names stay far below the usual 255-byte limit).
MAX_SLUG = 80
MAX_RUN_ID = 120
HASH_LENGTH = 8
#: A name that is already safe: lower-case letters, digits, ``.``, ``-`` and single ``_``; starts with a letter or digit.
SAFE_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9.-]|_(?!_))*$")
#: The run-id separator: parts are joined with it, so no part may contain it.
SEPARATOR = "__"


def short_hash(text: str, length: int = HASH_LENGTH) -> str:
    """The first ``length`` hex digits of the sha256 of ``text`` (stable across machines and runs)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def is_safe(name: str, max_length: int = MAX_SLUG) -> bool:
    """True when ``name`` can be used as a path component as it is."""
    return bool(SAFE_NAME.match(name)) and ".." not in name and len(name) <= max_length and not name.endswith(".")


def slug(name: str, max_length: int = MAX_SLUG) -> str:
    """``name`` when it is already safe, else ``<readable>-<hash>``: ``[a-z0-9._-]``, no ``..``, no ``__``,
    at most ``max_length`` characters, the same on every machine, distinct for distinct names."""
    if is_safe(name, max_length):
        return name
    readable = re.sub(r"[^a-z0-9.]+", "-", name.lower())
    readable = re.sub(r"\.{2,}", ".", readable)
    readable = re.sub(r"-*\.-*", ".", readable).strip(".-")
    readable = readable[: max_length - HASH_LENGTH - 1].rstrip(".-")
    return f"{readable}-{short_hash(name)}" if readable else short_hash(name)


def run_id(*parts: str) -> str:
    """Parts (each made safe with :func:`slug`) joined by ``__``; an id longer than :data:`MAX_RUN_ID`
    keeps its first characters and ends with a hash of the whole id."""
    joined = SEPARATOR.join(slug(str(part)) for part in parts)
    if len(joined) <= MAX_RUN_ID:
        return joined
    head = joined[: MAX_RUN_ID - HASH_LENGTH - 1].rstrip("._-")
    return f"{head}-{short_hash(joined)}"
