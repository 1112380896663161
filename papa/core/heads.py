"""Head sets and head rankings.

A *ranking* lists every ``(layer, head)`` pair once, the first made constant first; a *head set* is a ranking's first
``k`` or an explicit list. The paper's counts for 144 heads (0, 72, 126, 135, 144) are the fractions 0, 1/2, 7/8,
15/16 and 1; :func:`count_for` maps ``f`` of ``N`` heads to ``floor(f * N + 0.5)``: 72 heads → 0, 36, 63, 68, 72.
"""

from __future__ import annotations

import math
import operator
import random
from collections.abc import Iterable, Sequence
from fractions import Fraction
from pathlib import Path

from papa.core.errors import PapaError
from papa.core.io import atomic_write_json, read_json_verified

Head = tuple[int, int]

#: The paper's head fractions (0, ½, ⅞, 15/16, all).
PAPER_FRACTIONS: tuple[Fraction, ...] = (Fraction(0), Fraction(1, 2), Fraction(7, 8), Fraction(15, 16), Fraction(1))


def all_heads(num_layers: int, num_heads: int) -> list[Head]:
    return [(layer, head) for layer in range(num_layers) for head in range(num_heads)]


def _as_pair(item) -> Head:
    """``[layer, head]`` (two integers) → ``(layer, head)``; anything else is a :class:`PapaError`."""
    try:
        values = list(item) if not isinstance(item, (str, bytes, dict)) else None
    except TypeError:
        values = None
    if values is None or len(values) != 2:
        raise PapaError(f"Head {item!r} is not a [layer, head] pair", "Write heads as [layer, head].")
    try:
        if any(isinstance(x, bool) for x in values):
            raise TypeError
        return operator.index(values[0]), operator.index(values[1])
    except TypeError:
        raise PapaError(
            f"Head {values!r} is not a [layer, head] pair of integers",
            "Write heads as [layer, head] with integer layer and head.",
        ) from None


def validate_head_set(heads: Iterable[Sequence[int]], num_layers: int, num_heads: int) -> list[Head]:
    """Check ``(layer, head)`` pairs are in range and distinct; returns them as sorted tuples."""
    result: list[Head] = []
    for item in heads:
        layer, head = _as_pair(item)
        if not (0 <= layer < num_layers and 0 <= head < num_heads):
            raise PapaError(
                f"Head [{layer}, {head}] is out of range for {num_layers} layers x {num_heads} heads",
                "Layers and heads count from 0.",
            )
        result.append((layer, head))
    if len(set(result)) != len(result):
        duplicates = sorted({h for h in result if result.count(h) > 1})
        raise PapaError(f"Head set lists {[list(h) for h in duplicates]} more than once", "List each head once.")
    return sorted(result)


def count_for(amount: int | float | str | Fraction, total: int) -> int:
    """Number of constant heads for ``amount``: ints (and their strings) are counts; floats, :class:`Fraction` s and
    strings such as ``"7/8"`` or ``"0.5"`` are fractions in ``[0, 1]``. ``1`` is one head; all: ``1.0`` or ``"all"``."""
    if isinstance(amount, str):
        text = amount.strip().lower()
        if text == "all":
            return total
        try:
            amount = int(text) if text.lstrip("-").isdigit() else Fraction(text)
        except (ValueError, ZeroDivisionError):
            raise PapaError(
                f"Cannot read {amount!r} as a head count or fraction", "Use e.g. 36, 0.5, 7/8 or all."
            ) from None
    if isinstance(amount, bool):
        raise PapaError(f"{amount!r} is not a head count", "Use an integer count or a fraction.")
    if isinstance(amount, int):
        if not 0 <= amount <= total:
            raise PapaError(f"Head count {amount} is outside [0, {total}]", f"This model has {total} heads.")
        return amount
    fraction = Fraction(amount).limit_denominator(10_000)
    if not 0 <= fraction <= 1:
        raise PapaError(
            f"Head fraction {float(fraction):g} is outside [0, 1]", "Fractions run from 0 (none) to 1 (all)."
        )
    return int(math.floor(fraction * total + Fraction(1, 2)))


def paper_counts(total: int) -> list[int]:
    """The paper's head counts for a model with ``total`` heads (``[0, 72, 126, 135, 144]`` for 144)."""
    return [count_for(f, total) for f in PAPER_FRACTIONS]


def first_k(ranking: Sequence[Head], k: int) -> list[Head]:
    if not 0 <= k <= len(ranking):
        raise PapaError(f"Head count {k} is outside [0, {len(ranking)}]", f"The ranking covers {len(ranking)} heads.")
    return [tuple(h) for h in ranking[:k]]


def validate_ranking(ranking: Sequence[Sequence[int]], num_layers: int, num_heads: int) -> list[Head]:
    """A ranking must list every head of the model exactly once."""
    if isinstance(ranking, (str, bytes)) or not isinstance(ranking, Sequence):
        raise PapaError(
            f"A ranking is a list of [layer, head] pairs, got {type(ranking).__name__}", "Compute it with `papa rank`."
        )
    heads = [_as_pair(h) for h in ranking]
    validate_head_set(heads, num_layers, num_heads)  # range and duplicates
    missing = sorted(set(all_heads(num_layers, num_heads)) - set(heads))
    if missing:
        raise PapaError(
            f"The ranking misses {len(missing)} heads (first: {list(missing[0])})",
            f"A ranking lists all {num_layers * num_heads} heads once; compute it with `papa rank`.",
        )
    return heads


def random_ranking(num_layers: int, num_heads: int, seed: int) -> list[Head]:
    heads = all_heads(num_layers, num_heads)
    random.Random(seed).shuffle(heads)
    return heads


def ranking_from_scores(scores, ascending: bool = True) -> list[Head]:
    """Rank heads globally (across layers) by a ``[layers, heads]`` score; ties by (layer, head)."""
    import torch

    scores = torch.as_tensor(scores, dtype=torch.float64)
    num_layers, num_heads = scores.shape
    flat = scores.flatten().tolist()
    order = sorted(range(len(flat)), key=lambda i: (flat[i] if ascending else -flat[i], i))
    return [(i // num_heads, i % num_heads) for i in order]


def save_ranking(path: str | Path, ranking: Sequence[Head], meta: dict) -> Path:
    """Write ``{"ranking": [[layer, head], ...], "meta": {...}}`` atomically with a checksum."""
    return atomic_write_json(path, {"ranking": [list(h) for h in ranking], "meta": meta})


def load_ranking(
    path: str | Path, num_layers: int | None = None, num_heads: int | None = None
) -> tuple[list[Head], dict]:
    """Read a ranking file (or a plain JSON list, as the official ``sorted_heads.json``) and validate it."""
    import json

    path = Path(path)
    remedy = "recompute it with `papa rank`"
    foreign = (
        f"Check the path: pass a ranking written by papa ({remedy}). "
        "Do not delete this file: nothing shows papa wrote it."
    )
    try:
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    except OSError as err:
        raise PapaError(
            f"Cannot read the ranking {path}: {err.strerror}", "Check the path and the file's permissions."
        ) from None
    if text.lstrip().startswith("["):
        try:
            obj = {"ranking": json.loads(path.read_bytes().decode("utf-8")), "meta": {}}
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise PapaError(f"{path} is not a papa ranking file (not valid JSON)", foreign) from None
    else:
        obj = read_json_verified(path, "ranking", remedy)
    if "ranking" not in obj:
        raise PapaError(f"{path} is not a papa ranking file (it holds no 'ranking')", foreign)
    ranking = obj["ranking"]
    if num_layers is not None and num_heads is not None:
        ranking = validate_ranking(ranking, num_layers, num_heads)
    return [tuple(h) for h in ranking], obj.get("meta", {})
