"""Config values as words for the generated pages: lists joined with "and", counts in words,
head fractions, study names, durations. No page ever shows a Python list or a ``(s)`` plural."""

from __future__ import annotations

from fractions import Fraction

from papa.analysis.figure_kit import task_name
from papa.pipeline.executed import study_words

_SMALL = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]

__all__ = ["and_list", "count", "duration", "fraction_words", "lr_text", "plural", "study_words", "task_name"]


def and_list(items, conjunction: str = "and") -> str:
    """``["a", "b", "c"]`` → ``"a, b and c"``; one item is itself, none is ``""``."""
    items = [str(i) for i in items]
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} {conjunction} {items[-1]}"


def count(n: int, noun: str, nouns: str | None = None) -> str:
    """``count(3, "seed")`` → ``"three seeds"``; ``count(1, "model")`` → ``"one model"``; 13 and up in digits."""
    word = _SMALL[n] if 0 <= n < len(_SMALL) else f"{n:,}"
    return f"{word} {plural(n, noun, nouns)}"


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    return noun if n == 1 else (nouns or f"{noun}s")


def lr_text(lr: float) -> str:
    """A learning rate as a person writes it: ``2e-5``, ``1.5e-4`` and ``1e-3`` below 0.01, ``0.01`` and ``0.1`` from
    there up."""
    value = float(lr)
    if value != 0 and abs(value) < 0.01:
        mantissa, exponent = f"{value:e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return f"{value:g}"


def fraction_words(value) -> str:
    """A head fraction of a config or a table (``0``, ``"1/2"``, ``0.875``, ``63 / 72``, ``1``) in words: no head, half,
    7/8, all."""
    fraction = Fraction(str(value).strip()).limit_denominator(10_000)
    if fraction == 0:
        return "none"
    if fraction == 1:
        return "all"
    if fraction == Fraction(1, 2):
        return "half"
    return f"{fraction.numerator}/{fraction.denominator}"


def duration(seconds: float | None) -> str:
    """``42.3`` → ``"42 s"``; ``754`` → ``"12.6 min"``; ``7300`` → ``"2.0 h"``; None → ``""``."""
    if seconds is None:
        return ""
    seconds = float(seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
