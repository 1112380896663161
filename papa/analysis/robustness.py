"""Whether the verdicts survive their own draws: how well the gate draws of one (model, task) agree
(:func:`agreement_frame`, judged by :func:`ranking_judgement`), claim 1 per draw and across the draws
(:func:`draw_cells`, :func:`draws_pooled_cells`, :func:`unpooled_pairs`, :func:`claim1_by_draw`), and the all-heads
drop at the runner-up lr where the lr choice was within noise (:func:`runner_up_frame`). Codes only;
:mod:`papa.book.words` writes them.

Agreement reads the combined ``gates`` ranking file's metadata (:func:`papa.probing.ranking.combine_draws`): its
``draws`` (seed and ``probe_check``: ``final``, ``floor``, ``chance``, ``near_floor``) and the pairwise
``agreement`` (``seeds``, ``overlap``, ``overlap_chance``, ``spearman``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction

import numpy as np
import pandas as pd

from papa.analysis import bootstrap as S
from papa.analysis.basis import Basis, k0_and_all, task_family
from papa.analysis.claims import Judgement, claim1_verdict
from papa.analysis.pooled_drops import pooled_drop
from papa.core.heads import count_for
from papa.core.names import name_parts

#: The one-sided level at which the draws' first-half overlap must lie above chance.
AGREEMENT_ALPHA = 0.05
#: Why a ranking is or is not informative (codes; :data:`papa.book.words.RANKING_REASONS` writes them).
RANKING_REASONS = ("above_chance", "overlap_at_chance", "order_at_chance", "one_draw")
AGREEMENT_COLUMNS = (
    "model task heads half pairs overlap overlap_min overlap_max overlap_chance p_value spearman spearman_min"
    " spearman_max near_floor draws every_near_floor informative reason"
).split()


def overlap_p_value(overlap: float, n: int) -> float:
    """``P(X ≥ overlap)`` for ``X`` the first-half overlap of two random orderings of ``n`` heads (hypergeometric:
    ``n // 2`` heads drawn from ``n`` of which ``n // 2`` are marked); a fractional ``overlap`` is rounded down."""
    half, at_least = n // 2, max(0, int(math.floor(overlap)))
    total = math.comb(n, half)
    return sum(math.comb(half, x) * math.comb(n - half, half - x) for x in range(at_least, half + 1)) / total


def ranking_judgement(agreement: Sequence[Mapping], n: int) -> tuple[bool | None, str, float]:
    """Whether a ranking combined from gate draws of ``n`` heads is informative: the draws' mean first-half overlap
    lies above chance (one-sided hypergeometric p < :data:`AGREEMENT_ALPHA`, the mean held to one pair's
    distribution, which is conservative) and their mean Spearman ρ above 0. Returns ``(informative, reason, p)``;
    None with fewer than two draws (nothing to agree)."""
    if not agreement:
        return None, "one_draw", math.nan
    p = overlap_p_value(float(np.mean([a["overlap"] for a in agreement])), n)
    if p >= AGREEMENT_ALPHA:
        return False, "overlap_at_chance", p
    if float(np.mean([a["spearman"] for a in agreement])) <= 0:
        return False, "order_at_chance", p
    return True, "above_chance", p


def agreement_frame(meta: Mapping[str, Mapping], rankings: Mapping[str, list], method: str = "gates") -> pd.DataFrame:
    """Per (model, task) whose ``method`` ranking combines draws (``meta``: ``"<model>__<task>__<method>"`` → its
    ranking file's metadata; ``rankings``: the same stems → heads): heads, half, pairs of draws, the mean, least and
    largest first-half overlap with its chance (``n/4``) and the mean's p, the same for Spearman ρ (chance 0), the
    seeds of the draws whose gate probe ended near its floor (``near_floor``), the draws' seeds, whether every draw
    ended near its floor (``every_near_floor``: agreement without having learned the task), and
    :func:`ranking_judgement` (:data:`AGREEMENT_COLUMNS`)."""
    rows = []
    for stem, found in sorted(meta.items()):
        model, task, name = name_parts(stem)
        draws = found.get("draws") or []
        if name != method or not draws or stem not in rankings:
            continue
        n, pairs = len(rankings[stem]), list(found.get("agreement") or [])
        informative, reason, p = ranking_judgement(pairs, n)
        overlaps = [float(a["overlap"]) for a in pairs] or [math.nan]
        rhos = [float(a["spearman"]) for a in pairs] or [math.nan]
        near = [d.get("seed") for d in draws if d.get("near_floor")]
        row = [model, task, n, n // 2, len(pairs), float(np.mean(overlaps)), min(overlaps), max(overlaps), n / 4, p]
        seeds = [d.get("seed") for d in draws]
        every_near = bool(seeds) and set(near) == set(seeds)
        row += [float(np.mean(rhos)), min(rhos), max(rhos), near, seeds, every_near, informative, reason]
        rows.append(row)
    return pd.DataFrame(rows, columns=AGREEMENT_COLUMNS)


def _half(total: int) -> int:
    return count_for(Fraction(1, 2), int(total))


def draw_cells(basis: Basis, draws: Sequence[str], method: str = "gates") -> pd.DataFrame:
    """The half-heads cells of ``basis`` of each draw's own ranking (``draws``: ``gates-<seed>``) and of the combined
    ``method`` ranking, on the (model, task) pairs some draw ran: the basis's cell columns and ``at = "half"``."""
    cells = basis.cells
    if cells.empty or not draws:
        return cells.assign(at=pd.Series(dtype=object)).iloc[:0]
    half = cells[np.array([int(k) == _half(t) for k, t in zip(cells["k"], cells["total_heads"])], dtype=bool)]
    ran = set(zip(*(half.loc[half["ranking"].isin(draws), c] for c in ("model", "task"))))
    keep = half["ranking"].isin([*draws, method]) & np.array([pair in ran for pair in zip(half["model"], half["task"])])
    return half[keep].assign(at="half").sort_values(["model", "task", "ranking"], ignore_index=True)


def draws_pooled_cells(basis: Basis, records: Mapping[str, dict], draws: Sequence[str]) -> pd.DataFrame:
    """Per (model, task): the half-heads drop of the draws' runs pooled as one ranking (``ranking = "draws"``), as the
    random baseline pools its orderings: each draw's run is paired with the k = 0 run of its probe seed and the
    bootstrap draws those pairs, so its interval covers the draw-to-draw spread (and the dev examples), not the
    probe seeds' (one seed each). The same cell columns as :func:`draw_cells`, on the same dev-set streams as the
    basis's cells."""
    runs = basis.runs.drop_duplicates("run_id")
    runs = runs[runs["probe_input"] == "all"]
    rows = []
    for (model, task), group in runs.groupby(["model", "task"], sort=True):
        total = int(group["total_heads"].iloc[0])
        mine = group[group["ranking"].isin(draws) & (group["k"] == _half(total))].sort_values(["ranking", "seed"])
        base = group[group["ranking"] == "none"].sort_values("seed")
        position = {seed: i for i, seed in enumerate(base["seed"])}
        pairs = [(position[s], j) for j, s in enumerate(mine["seed"]) if s in position]
        found = [records.get(r) for r in [*base["run_id"], *mine["run_id"]]]
        if len(pairs) < 2 or not all(r and r.get("dev") for r in found):
            continue
        first = found[0]
        dev_set = S.dev_set_name(task, (first.get("data") or {}).get("eval_indices_sha"))
        stats = [S.run_statistics(r) for r in found]
        token = bool(first["dev"].get("lengths"))
        sides = (stats[: len(base)], stats[len(base) :])
        st = S.paired_bootstrap(*sides, first["metric"], token, pairs=pairs, dev_set=dev_set)
        rows.append(_pooled_row(model, task, total, st, basis))
    columns = [*basis.cells.columns, "at"]
    return pd.DataFrame(rows, columns=columns) if rows else pd.DataFrame(columns=columns)


def unpooled_pairs(drawn: pd.DataFrame, pooled: pd.DataFrame) -> list[tuple[str, str]]:
    """The (model, task) pairs with a draw's own cell in ``drawn`` (:func:`draw_cells`) but no cell in ``pooled``
    (:func:`draws_pooled_cells`): fewer than two of their draws' kept runs pair with a kept k = 0 run of the same
    probe seed (a draw run or that k = 0 run did not converge), so their draws are not pooled."""
    own = drawn[drawn["ranking"].astype(str).str.contains("-")] if len(drawn) else drawn
    done = set(zip(pooled["model"], pooled["task"])) if len(pooled) else set()
    return sorted({(str(m), str(t)) for m, t in zip(own["model"], own["task"])} - done) if len(own) else []


def _pooled_row(model: str, task: str, total: int, st: dict, basis: Basis) -> dict:
    """One pooled-draws cell in :data:`papa.analysis.basis.CELL_COLUMNS` (and ``at``) from a paired bootstrap."""
    floors = basis.floors
    informative = floors.loc[(floors["model"] == model) & (floors["task"] == task), "informative"]
    samples = np.asarray(st["relative_samples"], dtype=float)
    clear = bool(np.isfinite(samples).all())
    relative = [st[c] if clear else math.nan for c in ("relative_drop", "relative_low", "relative_high")]
    k = _half(total)
    mode = next(iter(basis.runs["mode"].dropna()), None)  # one basis reads one execution mode
    return {
        "model": model, "task": task, "family": task_family(task), "mode": mode, "ranking": "draws", "k": k,
        "total_heads": total,
        "fraction": k / total, "score_0": basis.score(model, task, "none", 0), "score": st["score"],
        "paired_score_0": st["base_score"], "paired_score": st["score"], "difference": st["difference"],
        "low": st["low"], "high": st["high"], "real": st["real"], "relative_drop": relative[0],
        "relative_low": relative[1], "relative_high": relative[2], "n_pairs": st["n_runs"],
        "n_examples": st["n_examples"], "informative": bool(informative.iloc[0]) if len(informative) else False,
        "samples": samples, "at": "half",
    }  # fmt: skip


def claim1_by_draw(cells: pd.DataFrame) -> dict[str, tuple[dict, Judgement]]:
    """Claim 1 per ranking of ``cells`` (:func:`draw_cells` and :func:`draws_pooled_cells` together), on the
    informative pairs every ranking of ``cells`` has: per ranking the pooled drop and its judgement."""
    usable = cells[cells["informative"].astype(bool) & cells["relative_drop"].notna()]
    rankings = sorted(set(usable["ranking"]))
    pairs = [set(zip(g["model"], g["task"])) for _, g in usable.groupby("ranking")]
    common = set.intersection(*pairs) if pairs else set()
    out = {}
    for ranking in rankings:
        shared = np.array([p in common for p in zip(usable["model"], usable["task"])], dtype=bool)
        mine = usable[(usable["ranking"] == ranking).to_numpy() & shared]
        pooled = pooled_drop(mine)
        out[ranking] = (pooled, claim1_verdict(pooled["value"], pooled["low"], pooled["high"]))
    return out


def _by_lr(record: Mapping, field: str, lr: float) -> object:
    """An lr choice record's per-lr ``field`` (keyed by ``repr(lr)``) at ``lr``, NaN without it."""
    return (record.get(field) or {}).get(repr(float(lr)), math.nan)


RUNNER_UP_COLUMNS = (
    "model task lr runner_up heldout runner_up_heldout stderr runner_up_stderr converged runner_up_converged"
    " paired drop low high runner_up_paired runner_up_drop runner_up_low runner_up_high"
).split()


def runner_up_frame(lr_choices: Mapping[str, Mapping], main: Basis, runner_up: Basis | None) -> pd.DataFrame:
    """Per lr choice within noise (``within_noise`` in the record of :func:`papa.probing.protocol.select_lr`): both
    lrs' mean held-out scores, standard errors and convergence, and the all-heads relative drop with its interval
    at the chosen lr (``main``) and at the runner-up (``runner_up``: the ``lrnext`` study's basis), each after
    ``paired``: whether that lr has k = 0 and all-heads runs of a shared seed (NaN drop without; a paired drop is NaN
    where it is undefined, a resampled k = 0 score ≤ 0)."""
    rows = []
    for _, record in sorted(lr_choices.items()):
        if not record.get("within_noise") or record.get("runner_up") is None:
            continue
        model, task = record["model"], record["task"]
        lr, other = record["lr"], record["runner_up"]
        at = [_by_lr(record, f, v) for f in ("heldout", "stderr", "converged") for v in (lr, other)]
        row = [model, task, lr, other, at[0], at[1], at[2], at[3], at[4], at[5]]
        for basis in (main, runner_up):
            side = k0_and_all(basis, model, task) if basis is not None else None
            row += [False, *[math.nan] * 3] if side is None else [True, side["drop"], side["low"], side["high"]]
        rows.append(row)
    return pd.DataFrame(rows, columns=RUNNER_UP_COLUMNS)
