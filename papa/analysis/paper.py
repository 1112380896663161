"""Data for the paper's figures and tables, beside its claims (issue 14): tidy pandas frames that the book's
chart helpers draw.

All inputs are :func:`papa.analysis.results.summarise` (seed means per model, task, ranking, k) and
:func:`papa.analysis.results.floors_table` (floors, k = 0 baselines, which tasks are informative); the paired
bootstrap differences of :func:`papa.analysis.stats.paired_differences` add intervals where given. Filter the
runs through :func:`papa.analysis.stats.convergence_gate` before summarising, so that only converged runs count.

* (a) :func:`score_vs_dynamic_heads` — Figure 2: per task, the score against the number of input-dependent
  (not constant) heads, one line per model and ranking, with the majority and attention-free floors;
* (b) :func:`relative_score_vs_constant_fraction` — per model, the score relative to k = 0 averaged over the
  informative tasks, against the fraction of constant heads;
* (c) :func:`better_models_lose_more` — one point per model (x: average relative drop with all heads constant,
  y: average k = 0 score, both over that model's informative tasks) and the claim-3 verdict with its n;
* (d) :func:`paper_table` — per model and task, the scores at k = 0, ½ and all with the relative drops, and
  each model's average over its informative tasks, beside the paper's 8 % average and ≤ 20 % maximum.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd

from papa.analysis.drops import _pick_mode
from papa.analysis.results import SHARED_RANKINGS, relative_drop
from papa.analysis.stats import claim3, model_points
from papa.core.heads import count_for

#: The paper's average relative drop with all heads constant, and its largest per-task drop.
PAPER_AVERAGE_DROP_ALL = 0.08
PAPER_MAX_DROP_ALL = 0.20


def _rows(summary: pd.DataFrame, mode: str | None) -> pd.DataFrame:
    mode = _pick_mode(summary, mode)
    return summary[(summary["mode"] == mode) & (summary["probe_input"] == "all")]


def _informative(floors: pd.DataFrame) -> set[tuple[str, str]]:
    return {(m, t) for m, t, ok in zip(floors["model"], floors["task"], floors["informative"]) if ok}


def score_vs_dynamic_heads(summary: pd.DataFrame, floors: pd.DataFrame, differences: pd.DataFrame | None = None, mode: str | None = None) -> pd.DataFrame:
    """(a) One row per model × task × ranking × k: ``dynamic_heads`` = total − k, ``score`` (seed mean),
    ``seed_min``/``seed_max``, the floors ``majority``/``attention_free`` of that model and task, and with
    ``differences`` the 95 % interval of the paired difference to k = 0 shifted onto the k = 0 score
    (``low``/``high``; k = 0 itself: NaN) and ``real``. The shared rows (k = 0, k = all) are repeated under every
    ranking, so each line runs from all heads input-dependent to none."""
    rows = _rows(summary, mode)
    floor_of = floors.set_index(["model", "task"])[["majority", "attention_free"]]
    out = []
    for (model, task), group in rows.groupby(["model", "task"], sort=True):
        methods = sorted(set(group["ranking"]) - set(SHARED_RANKINGS)) or ["none"]
        base = group.loc[group["k"] == 0, "mean"]
        for ranking in methods:
            for _, row in group[group["ranking"].isin([ranking, *SHARED_RANKINGS])].sort_values("k").iterrows():
                record = {
                    "model": model,
                    "task": task,
                    "ranking": ranking,
                    "k": int(row["k"]),
                    "total_heads": int(row["total_heads"]),
                    "dynamic_heads": int(row["total_heads"] - row["k"]),
                    "metric": row["metric"],
                    "score": row["mean"],
                    "seed_min": row["min"],
                    "seed_max": row["max"],
                    "majority": floor_of["majority"].get((model, task), math.nan),
                    "attention_free": floor_of["attention_free"].get((model, task), math.nan),
                    "low": math.nan,
                    "high": math.nan,
                    "real": None,
                }
                if differences is not None and row["k"] > 0 and len(base):
                    match = differences[
                        (differences["model"] == model) & (differences["task"] == task) & (differences["k"] == row["k"]) & (differences["ranking"] == row["ranking"])
                    ]
                    if len(match):
                        d = match.iloc[0]
                        record.update(low=float(base.iloc[0]) + d["low"], high=float(base.iloc[0]) + d["high"], real=bool(d["real"]))
                out.append(record)
    return pd.DataFrame(out)


def relative_score_vs_constant_fraction(summary: pd.DataFrame, floors: pd.DataFrame, ranking: str = "gates", mode: str | None = None) -> pd.DataFrame:
    """(b) Per model and k: ``relative_score`` = score_k / score_0 averaged over the model's informative tasks,
    against ``fraction`` = k / total (constant heads); ``n_tasks`` and ``tasks`` say what was averaged."""
    rows = _rows(summary, mode)
    keep = _informative(floors)
    out = []
    for model, group in rows.groupby("model", sort=True):
        ratios: dict[int, list[tuple[str, float]]] = {}
        for task, by_task in group.groupby("task", sort=True):
            base = by_task.loc[by_task["k"] == 0, "mean"]
            if (model, task) not in keep or base.empty or base.iloc[0] == 0:
                continue
            for _, row in by_task[by_task["ranking"].isin([ranking, *SHARED_RANKINGS])].iterrows():
                ratios.setdefault(int(row["k"]), []).append((task, row["mean"] / base.iloc[0]))
        total = int(group["total_heads"].iloc[0])
        for k in sorted(ratios):
            values = ratios[k]
            out.append(
                {
                    "model": model,
                    "ranking": ranking,
                    "k": k,
                    "fraction": k / total,
                    "relative_score": float(np.mean([v for _, v in values])),
                    "n_tasks": len(values),
                    "tasks": ", ".join(t for t, _ in values),
                }
            )
    return pd.DataFrame(out, columns=["model", "ranking", "k", "fraction", "relative_score", "n_tasks", "tasks"])


def _drop_all(group: pd.DataFrame) -> float:
    base, full = group.loc[group["k"] == 0, "mean"], group.loc[group["k"] == group["total_heads"], "mean"]
    return relative_drop(full.iloc[0], base.iloc[0]) if len(base) and len(full) else math.nan


def better_models_lose_more(summary: pd.DataFrame, floors: pd.DataFrame, mode: str | None = None) -> tuple[pd.DataFrame, dict]:
    """(c) ``(points, verdict)``: one point per model with ``drop`` (average relative drop with all heads constant)
    and ``score`` (average k = 0 score), ``n_tasks``, averaged over the tasks informative for *every* model
    (:func:`papa.analysis.stats.model_points`; the verdict's ``tasks`` lists them); and the claim-3 verdict of
    :func:`papa.analysis.stats.claim3` (with fewer than 3 models: "not testable")."""
    rows = _rows(summary, mode)
    keep = _informative(floors)
    per_task = []
    for (model, task), by_task in rows.groupby(["model", "task"], sort=True):
        drop = _drop_all(by_task)
        if (model, task) in keep and not math.isnan(drop):
            per_task.append({"model": model, "task": task, "drop": drop, "score": float(by_task.loc[by_task["k"] == 0, "mean"].iloc[0])})
    frame, common = model_points(pd.DataFrame(per_task, columns=["model", "task", "drop", "score"]))
    return frame, {**claim3(frame), "tasks": common}


def _mean_at(by_task: pd.DataFrame, k: int, ranking: str) -> float:
    values = by_task.loc[(by_task["k"] == k) & (by_task["ranking"] == ranking), "mean"]
    return float(values.iloc[0]) if len(values) else math.nan


def paper_table(summary: pd.DataFrame, floors: pd.DataFrame, ranking: str = "gates", mode: str | None = None) -> pd.DataFrame:
    """(d) Per model and task: ``score_0``, ``score_half`` (½ of the heads constant, ``ranking``), ``score_all``,
    ``drop_half`` and ``drop_all`` (relative drops), ``informative``; then per model a row ``task = "average"``
    over its informative tasks, whose ``max_drop_all`` is the largest per-task drop. Every row carries the
    paper's ``paper_average_drop_all`` (8 %) and ``paper_max_drop_all`` (20 %)."""
    rows = _rows(summary, mode)
    keep = _informative(floors)
    out = []
    for model, group in rows.groupby("model", sort=True):
        total = int(group["total_heads"].iloc[0])
        half = count_for(Fraction(1, 2), total)
        per_task = []
        for task, by_task in group.groupby("task", sort=True):
            score_0, score_half, score_all = (_mean_at(by_task, k, r) for k, r in ((0, "none"), (half, ranking), (total, "all")))
            record = {
                "model": model,
                "task": task,
                "score_0": score_0,
                "score_half": score_half,
                "score_all": score_all,
                "drop_half": relative_drop(score_half, score_0),
                "drop_all": relative_drop(score_all, score_0),
                "informative": (model, task) in keep,
            }
            per_task.append(record)
        informative = pd.DataFrame([r for r in per_task if r["informative"]])
        average = {"model": model, "task": "average", "informative": True}
        for column in ("score_0", "score_half", "score_all", "drop_half", "drop_all"):
            average[column] = float(informative[column].mean()) if len(informative) else math.nan
        average["max_drop_all"] = float(informative["drop_all"].max()) if len(informative) else math.nan
        average["n_tasks"] = int(len(informative))
        out.extend(per_task + [average])
    frame = pd.DataFrame(out)
    return frame.assign(paper_average_drop_all=PAPER_AVERAGE_DROP_ALL, paper_max_drop_all=PAPER_MAX_DROP_ALL)
