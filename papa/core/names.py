"""Names that become paths: slugs and run ids that are safe on every filesystem.

A user's name (hub id, model folder, study name) ends up in file names under ``book/runs/<grid>/``. :func:`slug`
keeps a safe name as it is (``minilm-l6``: existing run ids do not move) and turns any other into a readable part plus
a short stable hash (``microsoft-deberta-base-3f9c1a2e``): never ``/``, ``..`` or ``__`` (the run-id separator).
:func:`run_id` joins the parts of a run id and :func:`parse_run_id` reads them back (the one parser of run ids).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from papa.core.fields import PROBE_INPUTS, REPLACEMENTS

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


#: A result's seed part (``s42``), or the ``{seed}`` template of a run's ``out`` parameter.
_SEED_PART = re.compile(r"^s(\d+|\{seed\})$")


@dataclass(frozen=True)
class RunId:
    """The parts of a run id (:func:`parse_run_id`). Probe runs are ``probe__MODEL__TASK__METHOD__k<K>__MODE`` then
    ``extra``: the probe input (not ``all``), the replacement (not ``papa``) and the study (not the main grid), each
    only where it applies; estimate and select_lr runs stop after the task, rank runs after the method, and a chapter
    is its kind alone. ``seed``: a result key's ``__s<seed>`` (None: a run id, or the ``{seed}`` template)."""

    kind: str
    model: str = ""
    task: str = ""
    method: str = ""
    k: int | None = None
    mode: str = ""
    extra: tuple[str, ...] = ()
    seed: int | None = None

    @property
    def probe_input(self) -> str:
        """``embeddings`` for an attention-free floor, else ``all``."""
        return self.extra[0] if self.extra and self.extra[0] in PROBE_INPUTS else "all"

    @property
    def replacement(self) -> str:
        """What replaced the heads (``papa`` unless the id names another mode)."""
        rest = self.extra[self.probe_input != "all" :]
        return rest[0] if rest and rest[0] in REPLACEMENTS else "papa"

    @property
    def study(self) -> str | None:
        """The study the run belongs to (None: the main grid or the floor)."""
        rest = self.extra[(self.probe_input != "all") + (self.replacement != "papa") :]
        return SEPARATOR.join(rest) or None


def name_parts(name: str) -> tuple[str, ...]:
    """A name joined by :func:`run_id` (a run id, or an artefact's stem such as ``minilm-l6__sst2__gates``) split
    into its parts."""
    return tuple(name.split(SEPARATOR))


def parse_run_id(text: str) -> RunId:
    """A run id, a result key (``<run id>__s<seed>``) or a result file's name (``.json``) as a :class:`RunId`."""
    parts = list(name_parts(text.removesuffix(".json")))
    seed = None
    if parts[0] == "probe" and len(parts) > 1 and (match := _SEED_PART.match(parts[-1])):
        parts.pop()
        seed = int(match.group(1)) if match.group(1).isdigit() else None
    kind, rest = parts[0], parts[1:]
    fields = dict(zip(("model", "task", "method"), rest[:2] if kind in ("estimate", "select_lr") else rest[:3]))
    if kind == "probe" and len(rest) > 3:
        k = rest[3].removeprefix("k")
        return RunId(kind, **fields, k=int(k) if k.isdigit() else None, mode=rest[4] if len(rest) > 4 else "",
                     extra=tuple(rest[5:]), seed=seed)  # fmt: skip
    return RunId(kind, **fields, seed=seed)
