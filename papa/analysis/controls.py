"""Statistics of the controls beside the main results: the convergence flag of a run and the counts per main-table
row (:func:`converged_counts`), epoch curves still climbing (:func:`still_rising`), where each ranking's first heads
sit (:func:`layer_table`) and two studies' seed means side by side (:func:`compare`)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from papa.analysis.results import beyond_seed_range


def converged_flag(value: object) -> bool | None:
    """A convergence flag as True, False or None (no held-out curve), whatever pandas made of it."""
    return None if value is None or (not isinstance(value, (bool, str)) and pd.isna(value)) else bool(value)


def converged_counts(table: pd.DataFrame, main: pd.DataFrame) -> pd.DataFrame:
    """``table`` (:func:`papa.analysis.drop_tables.main_table`) with a ``converged`` column: per model, task, ranking
    (the seeded random orderings pooled as ``random``) and k, ``"<converged> of <runs>"`` of ``main``'s full probes."""
    runs = main.drop_duplicates("run_id")
    runs = runs[runs["probe_input"] == "all"]
    runs = runs.assign(ranking=runs["ranking"].where(~runs["ranking"].str.startswith("random"), "random"))
    converged = lambda s: int(sum(converged_flag(x) is True for x in s))
    counts = runs.groupby(["model", "task", "ranking", "k"])["converged"].agg(converged=converged, runs="size")
    words = {key: f"{c} of {n}" for key, (c, n) in counts.iterrows()}
    keys = zip(table["model"], table["task"], table["ranking"], table["k"])
    return table.assign(converged=[words.get(key) for key in keys])


def still_rising(epochs: pd.DataFrame, curve: str = "score") -> pd.DataFrame:
    """Runs whose ``curve`` ("score": the dev score; "heldout": the held-out training score) is still rising: the
    mean of the last 3 epochs exceeds the mean of the 3 epochs before them by more than 0.002."""
    rows = []
    for run_id, group in epochs.groupby("run_id"):
        scores = group.sort_values("epoch")[curve].dropna().to_numpy()  # no such per-epoch score: not checked
        if len(scores) < 6:
            continue
        gain = scores[-3:].mean() - scores[-6:-3].mean()
        first = group.iloc[0]
        keys = {"run_id": run_id, "model": first["model"], "task": first["task"], "k": int(first["k"])}
        keys |= {"seed": int(first["seed"]), "probe_input": first["probe_input"]}
        rows.append(keys | {"late_gain": float(gain), "rising": bool(gain > 0.002)})
    return pd.DataFrame(rows)


def layer_table(rankings: Mapping[str, list]) -> pd.DataFrame:
    """Per ranking (``"<model>__<task>__<method>"`` → ``[(layer, head), ...]``, most prunable first): how many of
    its first half of the heads sit in each layer."""
    rows = []
    for key, ranking in sorted(rankings.items()):
        model, task, method = key.split("__")
        counts = [0] * (1 + max(layer for layer, _ in ranking))
        for layer, _ in ranking[: int(math.floor(0.5 * len(ranking) + 0.5))]:
            counts[layer] += 1
        layers = {f"layer {i}": c for i, c in enumerate(counts)}
        rows.append({"model": model, "task": task, "ranking": method, **layers})
    return pd.DataFrame(rows)


def compare(a: pd.DataFrame, b: pd.DataFrame, label_a: str, label_b: str) -> pd.DataFrame:
    """Main-metric means of two studies side by side per (task, k), with the seed-spread rule."""
    rows = []
    keys = ["model", "task", "ranking", "k", "probe_input"]
    a_main, b_main = a[a["is_main"]], b[b["is_main"]]
    for key, group_a in a_main.groupby(keys):
        group_b = b_main[(b_main[keys] == pd.Series(dict(zip(keys, key)))).all(axis=1)]
        if group_b.empty:
            continue
        va, vb = group_a["value"].astype(float).tolist(), group_b["value"].astype(float).tolist()
        mean_a, mean_b = sum(va) / len(va), sum(vb) / len(vb)
        row = {"model": key[0], "task": key[1], "ranking": key[2], "k": int(key[3]), label_a: mean_a, label_b: mean_b}
        row |= {f"{label_a} seeds": len(va), f"{label_b} seeds": len(vb), "difference": mean_b - mean_a}
        rows.append(row | {"beyond_seed_range": beyond_seed_range(va, vb)})
    return pd.DataFrame(rows)
