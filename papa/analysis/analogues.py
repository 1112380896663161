"""Data for the paper's figures and tables beside its claims, from a basis's seed means (``summary``),
floors and cells (:mod:`papa.analysis.basis`): tidy frames (a)–(d) that :mod:`papa.book.analogue_figures` draws."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd

from papa.analysis.basis import rows_of
from papa.analysis.claims import MAX_DROP_ALL, PAPER_DROP_ALL, Evidence
from papa.analysis.pooled_drops import DROP_COLUMNS, claim3_points, model_drops
from papa.analysis.results import SHARED_RANKINGS, main_mode
from papa.core.heads import count_for


def _rows(summary: pd.DataFrame) -> pd.DataFrame:
    return summary[(summary["mode"] == main_mode(summary)) & (summary["probe_input"] == "all")]


def _informative(floors: pd.DataFrame) -> set[tuple[str, str]]:
    return {(m, t) for m, t, ok in zip(floors["model"], floors["task"], floors["informative"]) if ok}


def score_vs_dynamic_heads(summary: pd.DataFrame, floors: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """(a) The paper's Figure 2: one row per model × task × ranking × k (k = 0 and all repeated under every ranking)
    with ``dynamic_heads`` = total − k, the seed mean ``score`` and range, the floors, and the cell's 95% interval of
    the paired difference shifted onto the k = 0 score (``low``/``high``) with ``real``."""
    rows = _rows(summary)
    floor_of = floors.set_index(["model", "task"])[["majority", "attention_free"]]
    out = []
    for (model, task), group in rows.groupby(["model", "task"], sort=True):
        methods = sorted(set(group["ranking"]) - set(SHARED_RANKINGS)) or ["none"]
        base = group.loc[group["k"] == 0, "mean"]
        for ranking in methods:
            for _, row in group[group["ranking"].isin([ranking, *SHARED_RANKINGS])].sort_values("k").iterrows():
                k, total = int(row["k"]), int(row["total_heads"])
                record = dict(model=model, task=task, ranking=ranking, k=k, total_heads=total, dynamic_heads=total - k)
                record |= dict(metric=row["metric"], score=row["mean"], seed_min=row["min"], seed_max=row["max"])
                record |= {f: floor_of[f].get((model, task), math.nan) for f in ("majority", "attention_free")}
                record |= {"low": math.nan, "high": math.nan, "real": None}
                match = rows_of(cells, model, task, row["ranking"], row["k"]) if row["k"] > 0 and len(base) else []
                if len(match):
                    d, score_0 = match.iloc[0], float(base.iloc[0])
                    record |= dict(low=score_0 + d["low"], high=score_0 + d["high"], real=bool(d["real"]))
                out.append(record)
    return pd.DataFrame(out)


def relative_score_vs_constant_fraction(
    summary: pd.DataFrame, floors: pd.DataFrame, cells: pd.DataFrame, ranking: str = "gates"
) -> pd.DataFrame:
    """(b) Per model and k: ``relative_score`` = 1 − the cell's relative drop (1 at k = 0), averaged over the
    model's informative tasks that have a drop at that k (``n_tasks``, ``tasks``), against ``fraction`` = k / total."""
    rows = _rows(summary)
    keep = _informative(floors)
    drops = {(c.model, c.task, c.ranking, int(c.k)): c.relative_drop for c in cells.itertuples()}
    out = []
    for model, group in rows.groupby("model", sort=True):
        ratios: dict[int, list[tuple[str, float]]] = {}
        for task, by_task in group.groupby("task", sort=True):
            if (model, task) not in keep or not (by_task["k"] == 0).any():
                continue
            for _, row in by_task[by_task["ranking"].isin([ranking, *SHARED_RANKINGS])].iterrows():
                k = int(row["k"])
                drop = 0.0 if k == 0 else drops.get((model, task, row["ranking"], k), math.nan)
                if not math.isnan(drop):
                    ratios.setdefault(k, []).append((task, 1 - drop))
        total = int(group["total_heads"].iloc[0])
        for k in sorted(ratios):
            values = ratios[k]
            mean = float(np.mean([v for _, v in values]))
            out.append([model, ranking, k, k / total, mean, len(values), ", ".join(t for t, _ in values)])
    return pd.DataFrame(out, columns=["model", "ranking", "k", "fraction", "relative_score", "n_tasks", "tasks"])


def paper_table(
    summary: pd.DataFrame,
    floors: pd.DataFrame,
    cells: pd.DataFrame,
    ranking: str = "gates",
    evidence: Evidence | None = None,
    drops: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """(d) Per model and task: the scores at k = 0, ½ (``ranking``) and all heads, the cells' drops
    (:func:`papa.analysis.basis.claim_cells`) and ``informative``; per model an ``average`` row over its informative
    tasks (pooled drops with intervals, ``max_drop_all``) and a ``common`` row with claim 3's point; every row with
    the paper's ``paper_average_drop_all`` and ``paper_max_drop_all``. ``evidence`` (:func:`papa.analysis.claims.
    evidence` of ``cells``) and ``drops`` (:func:`papa.analysis.pooled_drops.model_drops` of ``cells``): read
    rather than computed again when given."""
    rows = _rows(summary)
    keep = _informative(floors)
    by_cell = dict(zip(zip(cells["model"], cells["task"], cells["at"]), cells["relative_drop"]))
    by_mean = dict(zip(zip(rows["model"], rows["task"], rows["ranking"], rows["k"]), rows["mean"]))
    points, common = (evidence.points, evidence.common) if evidence is not None else claim3_points(cells)
    drops = (model_drops(cells) if drops is None else drops).set_index("model")[DROP_COLUMNS]
    out = []
    for model, group in rows.groupby("model", sort=True):
        total = int(group["total_heads"].iloc[0])
        half = count_for(Fraction(1, 2), total)
        sides = {"score_0": (0, "none"), "score_half": (half, ranking), "score_all": (total, "all")}
        per_task = []
        for task in sorted(set(group["task"])):
            record = {"model": model, "task": task}
            record |= {c: float(by_mean.get((model, task, r, k), math.nan)) for c, (k, r) in sides.items()}
            record |= {f"drop_{at}": by_cell.get((model, task, at), math.nan) for at in ("half", "all")}
            per_task.append(record | {"informative": (model, task) in keep})
        informative = pd.DataFrame([r for r in per_task if r["informative"]])
        average = {"model": model, "task": "average", "informative": True}
        for column in ("score_0", "score_half", "score_all"):
            average[column] = float(informative[column].mean()) if len(informative) else math.nan
        average["max_drop_all"] = float(informative["drop_all"].max()) if len(informative) else math.nan
        average["n_tasks"] = int(len(informative))
        average |= drops.reindex([model]).iloc[0].to_dict()  # pooled over its informative tasks
        extra = []
        point = points[points["model"] == model]
        if len(point) and len(points) > 1:
            p = point.iloc[0]
            row = {"model": model, "task": "common", "informative": True, "score_0": p["score"], "drop_all": p["drop"]}
            row |= {"drop_all_low": p["low"], "drop_all_high": p["high"], "n_tasks": int(p["n_tasks"])}
            extra.append(row | {"tasks": ", ".join(common)})
        out.extend(per_task + [average] + extra)
    frame = pd.DataFrame(out)
    return frame.assign(paper_average_drop_all=PAPER_DROP_ALL, paper_max_drop_all=MAX_DROP_ALL)
