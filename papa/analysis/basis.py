"""The book's one basis: the only place that turns result records into scores, floors and drops.

:func:`build_basis` reads one set of runs once: the convergence gate (:func:`gate_runs`; a set of which no run passes,
as the literal final-epoch setting, is kept whole with ``gated`` False), the kept runs' seed means (``summary``) and
``floors``, their ``differences`` to k = 0 (:func:`papa.analysis.bootstrap.paired_differences`, paired by probe seed
on the same dev examples) and one cell per model × task × ranking × k > 0 (:data:`CELL_COLUMNS`). A relative drop is
shown only where the k = 0 score is above 0 on every bootstrap resample.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pandas as pd

from papa.analysis import bootstrap as S
from papa.analysis import results as R
from papa.core.errors import PapaError
from papa.core.heads import count_for
from papa.core.tasks import get_task

#: Columns of :attr:`Basis.cells` (``samples``: the relative drop on every resample, an ``[R]`` array per cell).
CELL_COLUMNS = (
    "model task family mode ranking k total_heads fraction score_0 score paired_score_0 paired_score difference low"
    " high real relative_drop relative_low relative_high n_pairs n_examples informative samples"
).split()


def task_family(task: str) -> str:
    """``"token"`` for a token-level task, ``"sentence"`` for a sentence-level one, ``"other"`` for a task papa
    does not know (from the task's spec, :func:`papa.core.tasks.get_task`)."""
    try:
        return "token" if get_task(task).is_token_task else "sentence"
    except PapaError:
        return "other"


def gate_runs(tidy: pd.DataFrame) -> tuple[set[str], dict]:
    """The convergence gate over the runs of ``tidy`` (one row per run × metric, with ``converged``): the ids of
    the converged runs, and a summary counting ``runs``, ``converged``, ``not_converged`` (the held-out curve still
    rose at the epoch cap), ``unknown`` (no held-out curve), ``left_out`` and ``left_out_runs`` (their ids)."""
    runs = tidy.drop_duplicates("run_id") if len(tidy) else pd.DataFrame(columns=["run_id", "converged"])
    flags = runs["converged"].astype(object)
    converged = flags.map(lambda x: x is True or x is np.True_)
    not_converged = int(flags.map(lambda x: x is False or x is np.False_).sum())
    left = sorted(runs.loc[~converged, "run_id"])
    summary = {"runs": len(runs), "converged": int(converged.sum()), "not_converged": not_converged}
    summary |= {"unknown": len(runs) - int(converged.sum()) - not_converged, "left_out": len(left)}
    return set(runs.loc[converged, "run_id"]), summary | {"left_out_runs": left}


def baseline_intervals(records: Mapping[str, dict], runs: pd.DataFrame, resamples: int = S.RESAMPLES) -> dict:
    """Per (model, task, mode): the 95% bootstrap interval over dev examples of the full k = 0 probe's seed-mean
    score; none unless every run stores its dev predictions, all on the same dev examples."""
    rows = runs[(runs["k"] == 0) & (runs["probe_input"] == "all") & runs["is_main"]]
    intervals = {}
    for (model, task, mode), group in rows.groupby(["model", "task", "mode"], sort=True):
        found = [records.get(r) or {} for r in sorted(set(group["run_id"]))]
        dev_set = lambda r: ((r.get("data") or {}).get("eval_indices_sha"), len((r.get("dev") or {}).get("labels", [])))
        dev_sets = {dev_set(r) for r in found}
        if not all(r.get("dev") for r in found) or len(dev_sets) != 1:
            continue
        token = bool(found[0]["dev"].get("lengths"))
        stats = [S.run_statistics(r) for r in found]
        interval = S.score_interval(stats, found[0]["metric"], token, resamples, 0)
        intervals[model, task, mode] = (interval["low"], interval["high"])
    return intervals


@dataclass(frozen=True)
class Basis:
    """One set of runs read on the book's basis (module docstring). Frames are pandas; never mutate them."""

    gated: bool  # False when no run had a held-out curve (kept whole)
    gate: dict  # gate_runs' summary over every run
    runs: pd.DataFrame  # the kept runs (one row per run × metric)
    summary: pd.DataFrame  # seed means of the kept runs (results.summarise)
    floors: pd.DataFrame  # results.floors_table of the kept runs
    differences: pd.DataFrame  # stats.paired_differences of the kept runs
    cells: pd.DataFrame  # CELL_COLUMNS, one row per model, task, ranking and k > 0

    def score(self, model: str, task: str, ranking: str, k: int) -> float:
        """The seed mean of the kept runs of the full probe at ``k`` (NaN without one)."""
        rows = rows_of(self.summary[self.summary["probe_input"] == "all"], model, task, ranking, k)
        return float(rows["mean"].iloc[0]) if len(rows) else math.nan

    def cell(self, model: str, task: str, ranking: str, k: int) -> pd.Series | None:
        """The cell of one model, task, ranking and k > 0, or None without a paired drop there."""
        rows = rows_of(self.cells, model, task, ranking, k)
        return rows.iloc[0] if len(rows) else None


def rows_of(frame: pd.DataFrame, model: str, task: str, ranking: str, k: int) -> pd.DataFrame:
    """The rows of ``frame`` (the summary, the cells) of one model, task, ranking and k."""
    f = frame
    return f[(f["model"] == model) & (f["task"] == task) & (f["ranking"] == ranking) & (f["k"] == k)]


def _cells(differences: pd.DataFrame, summary: pd.DataFrame, floors: pd.DataFrame) -> pd.DataFrame:
    rows = []
    full = summary[summary["probe_input"] == "all"] if len(summary) else summary
    means = full.set_index(["model", "task", "ranking", "k"])["mean"].to_dict() if len(full) else {}
    diffs = differences[differences["probe_input"] == "all"] if len(differences) else differences
    informative = {(m, t): bool(ok) for m, t, ok in zip(floors["model"], floors["task"], floors["informative"])}
    for r in diffs.itertuples(index=False) if len(diffs) else []:
        total, key = int(round(r.k / r.fraction)), (r.model, r.task)
        samples = np.asarray(r.relative_samples, dtype=float)
        clear = bool(np.isfinite(samples).all() and math.isfinite(r.relative_drop))  # s̄₀ > 0 on every resample
        relative = [float(x) if clear else math.nan for x in (r.relative_drop, r.relative_low, r.relative_high)]
        # the pooled random orderings have no seed mean of their own (their runs score under random-<n>)
        score = math.nan if r.ranking == "random" else float(means.get((*key, r.ranking, int(r.k)), math.nan))
        score_0 = float(means.get((*key, "none", 0), math.nan))
        rows.append(
            [r.model, r.task, task_family(r.task), r.mode, r.ranking, int(r.k), total, r.k / total, score_0, score]
            + [float(r.base_score), float(r.score), float(r.difference), float(r.low), float(r.high), bool(r.real)]
            + [*relative, int(r.n_runs), int(r.n_examples), informative.get(key, False), samples]
        )
    frame = pd.DataFrame(rows, columns=CELL_COLUMNS)
    return frame.sort_values(["model", "task", "ranking", "k"], ignore_index=True)


def build_basis(runs: pd.DataFrame, records: Mapping[str, dict], resamples: int = S.RESAMPLES) -> Basis:
    """The basis of ``runs`` (:func:`papa.analysis.results.load_results` rows of one probe setting in one execution
    mode) with their ``records`` (run id → result record)."""
    modes = sorted(set(runs["mode"].dropna())) if len(runs) else []
    if len(modes) > 1:
        what = f"One basis reads one execution mode, but these runs hold {', '.join(modes)}"
        raise PapaError(what, "Build one basis per mode.")
    kept, gate = gate_runs(runs)
    gated = bool(kept)
    ids = kept if gated else set(runs["run_id"])
    chosen = runs[runs["run_id"].isin(ids)]
    chosen_records = {run_id: records[run_id] for run_id in sorted(ids) if run_id in records}
    summary = R.summarise(chosen)
    rising = R.attention_free_values(runs[~runs["run_id"].isin(ids)])  # no converged floor: those still rising
    floors = R.floors_table(chosen, intervals=baseline_intervals(chosen_records, chosen, resamples), rising=rising)
    differences = S.paired_differences(chosen_records, resamples=resamples)
    return Basis(gated, gate, chosen, summary, floors, differences, _cells(differences, summary, floors))


def claim_cells(basis: Basis, ranking: str) -> pd.DataFrame:
    """The cells the claims average, with ``at``: "half" (½ of the heads constant in ``ranking``'s order) and "all"
    (every head constant)."""
    cells = basis.cells
    half = [count_for(Fraction(1, 2), int(total)) for total in cells["total_heads"]]
    label = lambda k, t, h, r: "all" if k == t else "half" if k == h and r == ranking else None
    at = [label(*row) for row in zip(cells["k"], cells["total_heads"], half, cells["ranking"])]
    chosen = cells.assign(at=pd.Series(at, index=cells.index, dtype=object)).dropna(subset=["at"])
    return chosen.sort_values(["model", "task", "at"], ignore_index=True)


def retained_gains(basis: Basis) -> pd.DataFrame:
    """Per model, task, ranking and k > 0: the score, the cell's relative drop, and the retained gain
    ``(s̄ₖ − f) / (s̄₀ − f)`` of its paired scores over the higher floor ``f`` (NaN for a pair not informative)."""
    floors = basis.floors.set_index(["model", "task"])
    rows = []
    for cell in basis.cells.itertuples(index=False):
        if (cell.model, cell.task) not in floors.index:
            continue
        floor = floors.loc[(cell.model, cell.task)]
        higher = float(np.nanmax([floor["majority"], floor["attention_free"], -math.inf]))  # as floors_table's floor
        informative = bool(floor["informative"])
        gain = R.retained_gain(cell.paired_score, cell.paired_score_0, higher) if informative else math.nan
        keys = [cell.model, cell.task, cell.ranking, cell.k, cell.fraction, cell.score, cell.n_pairs]
        rows.append([*keys, cell.relative_drop, gain, informative])
    columns = "model task ranking k fraction score n_pairs relative_drop retained_gain informative".split()
    return pd.DataFrame(rows, columns=columns).sort_values(["model", "task", "k", "ranking"], ignore_index=True)


def k0_and_all(basis: Basis, model: str, task: str) -> dict | None:
    """One model × task's k = 0 and all-heads sides: the scores ``k0``/``all``, the paired ``seeds`` with their
    scores and means (``paired_k0``/``paired_all``), and the cell's relative drop; None without both sides paired."""
    runs = basis.runs[(basis.runs["model"] == model) & (basis.runs["task"] == task) & basis.runs["is_main"]]
    runs = runs[runs["probe_input"] == "all"]
    base, full = runs[runs["ranking"] == "none"], runs[runs["ranking"] == "all"]
    seeds = sorted(set(base["seed"]) & set(full["seed"]))
    if not seeds or full.empty:
        return None
    total = int(full["total_heads"].iloc[0])
    cell = basis.cell(model, task, "all", total)
    pick = lambda frame: frame.set_index("seed").loc[seeds, "value"].astype(float).tolist()
    k0_scores, all_scores = pick(base), pick(full)
    paired_k0, paired_all = float(np.mean(k0_scores)), float(np.mean(all_scores))
    out = {"seeds": seeds, "k0_scores": k0_scores, "all_scores": all_scores, "k0": basis.score(model, task, "none", 0)}
    out |= {"all": basis.score(model, task, "all", total), "paired_k0": paired_k0, "paired_all": paired_all}
    if cell is None:  # no stored dev predictions, no bootstrap: the same paired drop, from the seeds' scores
        out |= {"drop": R.relative_drop(paired_all, paired_k0), "low": math.nan, "high": math.nan, "real": None}
    else:
        out |= {"drop": cell["relative_drop"], "low": cell["relative_low"], "high": cell["relative_high"]}
        out["real"] = bool(cell["real"])
    return out | {"runs": pd.concat([base[base["seed"].isin(seeds)], full[full["seed"].isin(seeds)]])}


def basis_score(results: Iterable[dict]) -> tuple[float | None, bool]:
    """A probe run's score on the chapters' basis (:mod:`papa.analysis.basis`' convergence gate), from the results of
    its seeds: the mean of the converged seeds' scores and True; without a converged seed, the mean of every seed's
    and False; ``(None, False)`` without a result."""
    scores = [(float(r["score"]), (r.get("convergence") or {}).get("converged") is True) for r in results]
    converged = [score for score, ok in scores if ok]
    chosen = converged or [score for score, _ in scores]
    return (sum(chosen) / len(chosen) if chosen else None), bool(converged)
