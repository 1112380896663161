"""The results chapter's answers, with intervals: the main table, the random baseline, the convergence gate over
the runs, and the paper's claims judged by explicit rules.

Inputs are the tidy frames of :mod:`papa.analysis.results` (:func:`~papa.analysis.results.summarise`,
:func:`~papa.analysis.results.floors_table`) and the paired bootstrap differences of
:func:`papa.analysis.stats.paired_differences`, computed from the result records (which keep the per-example dev
predictions; the tidy frames never copy them).

* :func:`main_table` — per model, task and k (0, ½, ⅞, 15/16, all): the seed mean and spread, the paired
  difference to k = 0 with its 95 % bootstrap interval, the relative drop with its interval, and whether the
  difference is *real* (its interval excludes 0);
* :func:`random_baseline` — at ½ and ⅞ of the heads: each ranking against the pooled seeded random orderings,
  on the same dev examples (:func:`papa.analysis.stats.paired_bootstrap` of ranking − random);
* :func:`gate_runs` — the convergence gate over runs (:func:`papa.analysis.stats.convergence_gate`);
* :func:`claims_verdicts` — claims 1 and 2 on intervals of converged runs, claim 3 by
  :func:`papa.analysis.stats.claim3`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction

import pandas as pd

from papa.analysis.results import ranking_method
from papa.analysis.stats import convergence_gate, paired_bootstrap, run_statistics, score_interval
from papa.core.heads import count_for

#: The fractions of constant heads of the main table (the paper's).
MAIN_FRACTIONS = (Fraction(0), Fraction(1, 2), Fraction(7, 8), Fraction(15, 16), Fraction(1))
#: The fractions at which the random orderings run.
RANDOM_FRACTIONS = (Fraction(1, 2), Fraction(7, 8))
#: Claim 1 holds on a task when the upper end of its relative drop's interval at half the heads is at most this.
HALF_MAX_DROP = 0.05
#: Claim 2 holds when the interval of the average relative drop with all heads constant lies in this range ...
ALL_DROP_RANGE = (0.03, 0.20)
#: ... and no task's drop is shown to exceed this (the paper's largest, ≈ 20 %).
ALL_MAX_DROP = 0.20
CLAIM_VERDICTS = ("reproduced", "not reproduced", "inconclusive", "not testable")
MAIN_COLUMNS = [
    "model",
    "task",
    "ranking",
    "k",
    "fraction",
    "total_heads",
    "metric",
    "score",
    "std",
    "seed_min",
    "seed_max",
    "n_seeds",
    "difference",
    "low",
    "high",
    "relative_drop",
    "relative_low",
    "relative_high",
    "real",
    "n_examples",
]
_KEYS = ["model", "task", "ranking", "k"]


def _k_of(fraction: Fraction, total: int) -> int:
    return count_for(fraction, total) if 0 < fraction < 1 else int(fraction * total)


def main_table(summary: pd.DataFrame, differences: pd.DataFrame, ranking: str = "gates", fractions: Sequence[Fraction] = MAIN_FRACTIONS) -> pd.DataFrame:
    """Per model and task, one row per fraction of constant heads (k = 0 ``none``, ``ranking`` in between,
    k = all ``all``): columns :data:`MAIN_COLUMNS`.

    ``score``, ``std``, ``seed_min``/``seed_max``, ``n_seeds``: the seed mean and spread of :func:`summarise`.
    ``difference``, ``low``, ``high``, ``real``, ``relative_drop``, ``relative_low``/``relative_high``,
    ``n_examples``: the row of ``differences`` (:func:`papa.analysis.stats.paired_differences`) with the same model,
    task, ranking and k, copied as they are (NaN / None at k = 0 or where no run stored dev predictions).
    Only runs of the full probe (``probe_input == "all"``) count.
    """
    rows = summary[summary["probe_input"] == "all"]
    diffs = differences[differences["probe_input"] == "all"].set_index(_KEYS) if len(differences) else None
    out = []
    for (model, task), group in rows.groupby(["model", "task"], sort=True):
        total = int(group["total_heads"].iloc[0])
        ks = dict.fromkeys(_k_of(Fraction(f), total) for f in fractions)  # in order, once (15/16 of 8 heads is all 8)
        for k in ks:
            name = ranking_method(ranking, k, total)
            match = group[(group["k"] == k) & (group["ranking"] == name)]
            if match.empty:
                continue
            row = match.iloc[0]
            record = {
                "model": model,
                "task": task,
                "ranking": name,
                "k": k,
                "fraction": k / total,
                "total_heads": total,
                "metric": row["metric"],
                "score": row["mean"],
                "std": row["std"],
                "seed_min": row["min"],
                "seed_max": row["max"],
                "n_seeds": int(row["n_seeds"]),
                **dict.fromkeys(["difference", "low", "high", "relative_drop", "relative_low", "relative_high", "n_examples"], math.nan),
                "real": None,
            }
            if diffs is not None and (model, task, name, k) in diffs.index:
                d = diffs.loc[[(model, task, name, k)]].iloc[0]
                record.update({key: d[key] for key in ("difference", "low", "high", "relative_drop", "relative_low", "relative_high", "n_examples")})
                record["real"] = bool(d["real"])
            out.append(record)
    return pd.DataFrame(out, columns=MAIN_COLUMNS)


# --- the random baseline -------------------------------------------------------------------------------------


def _family(result: dict) -> tuple[str, int, int]:
    c = result["config"]
    k, total = int(c["constant_heads"]), int(c["total_heads"])
    name = ranking_method(c.get("ranking"), k, total)
    return ("random" if name.startswith("random") else name), k, total


def random_baseline(records: Mapping[str, dict], fractions: Sequence[Fraction] = RANDOM_FRACTIONS, resamples: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Does a ranking beat random? At each of ``fractions``, per model and task with seeded random orderings
    (``random-<n>``, pooled as ``random``): one row per other ranking (gates, deviation ...) with its seed-mean
    ``score``, the pooled random ``random_score``, their ``n_runs``/``n_random``, and the paired bootstrap
    (:func:`papa.analysis.stats.paired_bootstrap`, base = the random runs, other = the ranking's runs, on the same
    dev examples) ``difference`` = ranking − random with ``low``/``high``; ``verdict`` "beats random" when the
    interval lies above 0, "worse than random" below 0, else "no real difference".

    ``records``: the result records of the full probe (runs without dev predictions are skipped).
    """
    groups: dict[tuple, list[dict]] = {}
    for result in records.values():
        c = result["config"]
        if not result.get("dev") or c.get("probe_input", "all") != "all":
            continue
        family, k, total = _family(result)
        groups.setdefault((c["model"], result["task"], c.get("mode"), k, total), {}).setdefault(family, []).append(result)
    out = []
    for (model, task, mode, k, total), by_family in sorted(groups.items(), key=lambda item: tuple(str(x) for x in item[0])):
        if "random" not in by_family or not any(k == _k_of(Fraction(f), total) for f in fractions):
            continue
        random_runs = sorted(by_family["random"], key=lambda r: (r["config"].get("ranking") or "", r["config"]["seed"]))
        for family, runs in sorted(by_family.items()):
            if family == "random":
                continue
            runs = sorted(runs, key=lambda r: r["config"]["seed"])
            token = bool(runs[0]["dev"].get("lengths"))
            stats = paired_bootstrap([run_statistics(r) for r in random_runs], [run_statistics(r) for r in runs], runs[0]["metric"], token, resamples, seed)
            low, high = stats["low"], stats["high"]
            verdict = "beats random" if low > 0 else "worse than random" if high < 0 else "no real difference"
            out.append(
                {
                    "model": model,
                    "task": task,
                    "mode": mode,
                    "k": k,
                    "total_heads": total,
                    "fraction": k / total,
                    "ranking": family,
                    "score": stats["score"],
                    "random_score": stats["base_score"],
                    "n_runs": stats["n_runs"],
                    "n_random": stats["n_base"],
                    "difference": stats["difference"],
                    "low": low,
                    "high": high,
                    "verdict": verdict,
                }
            )
    columns = ["model", "task", "mode", "k", "total_heads", "fraction", "ranking", "score", "random_score", "n_runs", "n_random", "difference", "low", "high", "verdict"]
    return pd.DataFrame(out, columns=columns)


# --- the convergence gate over runs --------------------------------------------------------------------------


def baseline_intervals(records: Mapping[str, dict], main: pd.DataFrame, resamples: int = 2000, seed: int = 0) -> dict[tuple, tuple[float, float]]:
    """Per (model, task, mode): the 95% bootstrap interval over dev examples of the k = 0 probe's seed-mean score
    (the main metric, :func:`papa.analysis.stats.score_interval`), from the dev predictions of ``main``'s k = 0
    runs on all states. A group has none unless every run stores its dev predictions and all score the same dev
    examples (one ``data.eval_indices_sha``), so the interval is always about the seeds the score averages."""
    rows = main[(main["k"] == 0) & (main["probe_input"] == "all") & main["is_main"]]
    intervals = {}
    for (model, task, mode), group in rows.groupby(["model", "task", "mode"], sort=True):
        runs = [records.get(r) or {} for r in sorted(set(group["run_id"]))]
        if not all(r.get("dev") for r in runs) or len({((r.get("data") or {}).get("eval_indices_sha"), len(r["dev"]["labels"])) for r in runs}) != 1:
            continue
        token = bool(runs[0]["dev"].get("lengths"))
        found = score_interval([run_statistics(r) for r in runs], runs[0]["metric"], token, resamples, seed)
        intervals[model, task, mode] = (found["low"], found["high"])
    return intervals


def gate_runs(tidy: pd.DataFrame) -> tuple[set[str], dict]:
    """The convergence gate over the runs of ``tidy`` (one row per run × metric, with ``converged``):
    ``(kept run ids, summary)`` of :func:`papa.analysis.stats.convergence_gate` (a run without a held-out curve
    counts as *unknown* and is left out)."""
    runs = tidy.drop_duplicates("run_id")[["run_id", "converged"]] if len(tidy) else pd.DataFrame(columns=["run_id", "converged"])
    kept, summary = convergence_gate(runs.astype({"converged": object}))
    return set(kept["run_id"]), summary


# --- the claims ----------------------------------------------------------------------------------------------


def _at_half(table: pd.DataFrame) -> pd.Series:
    return pd.Series([k == _k_of(Fraction(1, 2), int(t)) and 0 < k < t for k, t in zip(table["k"], table["total_heads"])], index=table.index, dtype=bool)


def _informative(table: pd.DataFrame, floors: pd.DataFrame) -> pd.DataFrame:
    keep = {(m, t) for m, t, ok in zip(floors["model"], floors["task"], floors["informative"]) if ok}
    return table[pd.Series([(m, t) in keep for m, t in zip(table["model"], table["task"])], index=table.index, dtype=bool)]


def _pairs(frame: pd.DataFrame) -> str:
    return ", ".join(
        f"{m}/{t} {d:.1%} [{lo:.1%}, {hi:.1%}]" for m, t, d, lo, hi in zip(frame["model"], frame["task"], frame["relative_drop"], frame["relative_low"], frame["relative_high"])
    )


def _gate_words(gate: Mapping) -> str:
    left = f"{gate['not_converged']} still rising at the cap, {gate['unknown']} without a held-out curve"
    return f"{gate['converged']} of {gate['runs']} runs converged; the gate left out {gate['left_out']} ({left})."


def _real_words(rows: pd.DataFrame) -> str:
    """How many of ``rows``' changes are ``real`` (their paired interval excludes 0), split by the sign of the
    relative drop into drops and gains: ``"3 of 10 changes real (1 drop, 2 gains)"``."""
    real = rows["real"].eq(True)  # None (no interval) is not real
    drops, gains = int((real & (rows["relative_drop"] > 0)).sum()), int((real & (rows["relative_drop"] < 0)).sum())
    parts = [f"{n} {word if n == 1 else word + 's'}" for n, word in ((drops, "drop"), (gains, "gain")) if n]
    return f"{drops + gains} of {len(rows)} changes real" + (f" ({', '.join(parts)})" if parts else "")


def claim1(table: pd.DataFrame, floors: pd.DataFrame) -> dict:
    """Claim 1, half the heads constant costs little or nothing, from :func:`main_table` rows of converged runs.

    On each informative model/task with an interval at k = ½ (the ranking's): *small* when the relative drop's
    upper bound is ≤ :data:`HALF_MAX_DROP`, *large* when its lower bound is above it. Verdict: "reproduced" when
    every task is small, "not reproduced" when any is large, else "inconclusive"; "not testable" without a task."""
    half = _informative(table[_at_half(table)], floors).dropna(subset=["relative_low", "relative_high"])
    if half.empty:
        return {"value": math.nan, "verdict": "not testable", "ours": "—", "rule_note": "no informative task with an interval at half the heads"}
    small, large = half["relative_high"] <= HALF_MAX_DROP, half["relative_low"] > HALF_MAX_DROP
    verdict = "reproduced" if small.all() else "not reproduced" if large.any() else "inconclusive"
    mean = float(half["relative_drop"].mean())
    ours = f"{mean:.1%} mean relative drop; {_real_words(half)}: {_pairs(half)}"
    note = f"every task's drop shown ≤ {HALF_MAX_DROP:.0%}: {int(small.sum())} of {len(half)}; shown > {HALF_MAX_DROP:.0%}: {int(large.sum())}"
    return {"value": mean, "verdict": verdict, "ours": ours, "rule_note": note}


def claim2(table: pd.DataFrame, floors: pd.DataFrame) -> dict:
    """Claim 2, all heads constant costs ≈ 8 % on average and ≤ 20 % per task, from :func:`main_table` rows.

    Over the informative model/task pairs with an interval at k = all: the average relative drop with the
    conservative interval [mean of the lower bounds, mean of the upper bounds]. "reproduced" when that interval
    lies inside :data:`ALL_DROP_RANGE` and no task's lower bound exceeds :data:`ALL_MAX_DROP`; "not reproduced"
    when it lies wholly outside the range or some task's lower bound exceeds 20 %; else "inconclusive"."""
    full = _informative(table[(table["k"] > 0) & (table["k"] == table["total_heads"])], floors).dropna(subset=["relative_low", "relative_high"])
    if full.empty:
        return {"value": math.nan, "verdict": "not testable", "ours": "—", "rule_note": "no informative task with an interval at all heads"}
    mean, low, high = (float(full[c].mean()) for c in ("relative_drop", "relative_low", "relative_high"))
    lo_range, hi_range = ALL_DROP_RANGE
    too_large = full["relative_low"] > ALL_MAX_DROP
    if lo_range <= low and high <= hi_range and not too_large.any():
        verdict = "reproduced"
    elif high < lo_range or low > hi_range or too_large.any():
        verdict = "not reproduced"
    else:
        verdict = "inconclusive"
    side = " (smaller than the paper's: attention matters even less here)" if high < lo_range else " (larger than the paper's)" if low > hi_range else ""
    ours = f"{mean:.1%} mean relative drop [{low:.1%}, {high:.1%}]{side}; {_real_words(full)}: {_pairs(full)}"
    note = f"tasks whose drop is shown > {ALL_MAX_DROP:.0%}: {int(too_large.sum())}"
    return {"value": mean, "low": low, "high": high, "verdict": verdict, "ours": ours, "rule_note": note}


def claims_verdicts(table: pd.DataFrame, floors: pd.DataFrame, gate: Mapping, better: Mapping) -> pd.DataFrame:
    """The paper's three claims: ``table`` is :func:`main_table` of the *converged* runs only, ``floors`` says which
    tasks are informative, ``gate`` is the summary of :func:`gate_runs` and ``better`` the claim-3 dict of
    :func:`papa.analysis.paper.better_models_lose_more`. Columns: claim, paper, ours, verdict, rule."""
    gate_note = " " + _gate_words(gate)
    c1, c2 = claim1(table, floors), claim2(table, floors)
    rule1 = (
        f"Per informative task, the 95% interval of the relative drop at half the heads: reproduced when every upper bound is ≤ {HALF_MAX_DROP:.0%}, "
        f"not reproduced when some lower bound is above it, else inconclusive ({c1['rule_note']})."
    )
    lo_range, hi_range = ALL_DROP_RANGE
    rule2 = (
        f"The average relative drop over informative tasks, with the interval [mean of the lower bounds, mean of the upper bounds]: "
        f"reproduced when it lies in [{lo_range:.0%}, {hi_range:.0%}] and no task's lower bound exceeds {ALL_MAX_DROP:.0%}, not reproduced when it lies "
        f"wholly outside or a task's lower bound exceeds {ALL_MAX_DROP:.0%}, else inconclusive ({c2['rule_note']})."
    )
    n = int(better.get("n", 0))
    if n < 3:
        ours3 = f"{n} {'model' if n == 1 else 'models'} with an informative task"
        rule3 = "With fewer than 3 models the correlation is always ±1 or undefined: not testable."
    else:
        ours3 = f"Spearman ρ {better['spearman']:+.2f} (Pearson r {better['pearson']:+.2f}) over {n} models, one-sided exact p = {better['p_value']:.3f}"
        ours3 += f"; direction: {better['direction']}"
        if better["verdict"] == "inconclusive":
            ours3 += " (not significant)"
        rule3 = "Reproduced when ρ > 0 with exact permutation p < 0.05; contradicted when ρ < 0 likewise; else inconclusive."
        if n == 3:
            rule3 += " With 3 models the smallest possible p is 1/6, so the verdict can at best be inconclusive."
    rows = [
        ("1. Half the heads constant: little or no drop", "≈0–2% relative drop", c1["ours"], c1["verdict"], rule1 + gate_note),
        ("2. All heads constant: modest drop", "8% average relative drop (≤ ~20% per task)", c2["ours"], c2["verdict"], rule2 + gate_note),
        ("3. Better models lose more", "higher-scoring models show larger relative drops (Figure 4)", ours3, better.get("verdict", "not testable"), rule3 + gate_note),
    ]
    return pd.DataFrame(rows, columns=["claim", "paper", "ours", "verdict", "rule"])


def model_drops(table: pd.DataFrame, floors: pd.DataFrame) -> pd.DataFrame:
    """Per model, over its informative tasks with intervals: the mean relative drop at half the heads and at all
    heads, each with the conservative interval [mean of the lower bounds, mean of the upper bounds], and
    ``n_tasks``."""
    table = _informative(table, floors)
    out = []
    for model, group in table.groupby("model", sort=True):
        record: dict = {"model": model, "total_heads": int(group["total_heads"].iloc[0])}
        for name, rows in (("half", group[_at_half(group)]), ("all", group[(group["k"] > 0) & (group["k"] == group["total_heads"])])):
            rows = rows.dropna(subset=["relative_low", "relative_high"])
            record[f"drop_{name}"], record[f"drop_{name}_low"], record[f"drop_{name}_high"] = (
                (float(rows[c].mean()) for c in ("relative_drop", "relative_low", "relative_high")) if len(rows) else (math.nan,) * 3
            )
            record[f"n_tasks_{name}"] = int(len(rows))
        out.append(record)
    columns = ["model", "total_heads"] + [f"{p}{s}" for p in ("drop_half", "drop_all") for s in ("", "_low", "_high")] + ["n_tasks_half", "n_tasks_all"]
    return pd.DataFrame(out, columns=columns)


__all__ = [
    "ALL_DROP_RANGE",
    "ALL_MAX_DROP",
    "CLAIM_VERDICTS",
    "HALF_MAX_DROP",
    "MAIN_COLUMNS",
    "MAIN_FRACTIONS",
    "RANDOM_FRACTIONS",
    "claim1",
    "claim2",
    "claims_verdicts",
    "gate_runs",
    "main_table",
    "model_drops",
    "random_baseline",
]
