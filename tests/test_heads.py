"""Head counts, head sets and rankings."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from papa.core.errors import PapaError
from papa.core.heads import (
    all_heads,
    count_for,
    first_k,
    load_ranking,
    paper_counts,
    random_ranking,
    ranking_from_scores,
    save_ranking,
    validate_head_set,
    validate_ranking,
)


def test_paper_counts():
    assert paper_counts(144) == [0, 72, 126, 135, 144]
    assert paper_counts(72) == [0, 36, 63, 68, 72]  # 15/16 * 72 = 67.5 rounds up


@pytest.mark.parametrize(
    "amount,total,expected",
    [
        (0, 144, 0),
        (72, 144, 72),
        (1, 144, 1),
        (144, 144, 144),
        ("36", 72, 36),
        (0.5, 144, 72),
        (Fraction(7, 8), 144, 126),
        ("15/16", 144, 135),
        ("7/8", 72, 63),
        ("15/16", 72, 68),
        (1.0, 72, 72),
        ("all", 72, 72),
        (" ALL ", 10, 10),
        ("0.5", 5, 3),
        (0.0, 72, 0),
        ("1", 72, 1),
    ],
)
def test_count_for(amount, total, expected):
    assert count_for(amount, total) == expected


@pytest.mark.parametrize("amount", [-1, 145, "-3", 1.5, -0.25, "9/8", "lots", "1/0", True, ""])
def test_count_for_rejects(amount):
    with pytest.raises(PapaError):
        count_for(amount, 144)


def test_all_heads_and_first_k():
    heads = all_heads(2, 3)
    assert heads == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert first_k(heads, 0) == [] and first_k(heads, 2) == [(0, 0), (0, 1)] and first_k(heads, 6) == heads
    for bad in (-1, 7):
        with pytest.raises(PapaError):
            first_k(heads, bad)


def test_validate_head_set():
    assert validate_head_set([[1, 0], (0, 2)], 2, 3) == [(0, 2), (1, 0)]
    with pytest.raises(PapaError, match="more than once"):
        validate_head_set([(0, 1), (0, 1)], 2, 3)
    with pytest.raises(PapaError, match="out of range"):
        validate_head_set([(0, 3)], 2, 3)
    with pytest.raises(PapaError, match="out of range"):
        validate_head_set([(-1, 0)], 2, 3)
    with pytest.raises(PapaError, match="pair"):
        validate_head_set([(0, 1, 2)], 2, 3)


def test_validate_ranking():
    ranking = random_ranking(2, 3, seed=0)
    assert validate_ranking(ranking, 2, 3) == ranking
    with pytest.raises(PapaError, match="more than once"):
        validate_ranking(ranking[:-1] + [ranking[0]], 2, 3)
    with pytest.raises(PapaError, match="misses"):
        validate_ranking(ranking[:-1], 2, 3)
    with pytest.raises(PapaError, match="out of range"):
        validate_ranking(ranking + [(2, 0)], 2, 3)


def test_random_ranking_is_a_seeded_permutation():
    a, b, c = random_ranking(12, 12, seed=1), random_ranking(12, 12, seed=1), random_ranking(12, 12, seed=2)
    assert a == b and a != c
    assert sorted(a) == all_heads(12, 12) and len(set(a)) == 144
    assert a != all_heads(12, 12)


def test_ranking_from_scores():
    scores = [[0.3, 0.1, 0.5], [0.1, 0.9, 0.0]]
    assert ranking_from_scores(scores) == [(1, 2), (0, 1), (1, 0), (0, 0), (0, 2), (1, 1)]  # ties by (layer, head)
    assert ranking_from_scores(scores, ascending=False)[0] == (1, 1)


def test_ranking_files(tmp_path):
    ranking = random_ranking(2, 3, seed=4)
    path = save_ranking(tmp_path / "r.json", ranking, {"method": "random"})
    back, meta = load_ranking(path, 2, 3)
    assert back == ranking and meta == {"method": "random"}
    official = tmp_path / "sorted_heads.json"  # the official plain-list format
    official.write_text(json.dumps([list(h) for h in ranking]))
    assert load_ranking(official, 2, 3)[0] == ranking
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps([list(h) for h in ranking[:-1]]))
    with pytest.raises(PapaError, match="misses"):
        load_ranking(broken, 2, 3)
    with pytest.raises(PapaError):
        load_ranking(tmp_path / "missing.json", 2, 3)
