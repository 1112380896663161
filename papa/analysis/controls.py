"""Statistics of the controls beside the main results: the convergence flag of a run and the counts per main-table
row (:func:`converged_counts`), epoch curves still climbing (:func:`still_rising`), where each ranking's first heads
sit (:func:`layer_table`), two studies' seed means side by side (:func:`compare`), and the main grid's drop beside
the studies that train the probe otherwise (:func:`setting_change`, :func:`drop_check`)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from papa.analysis.basis import Basis, k0_and_all
from papa.analysis.results import beyond_seed_range
from papa.core.names import name_parts


def converged_flag(value: object) -> bool | None:
    """A convergence flag as True, False or None (no held-out curve), whatever pandas made of it."""
    return None if value is None or (not isinstance(value, (bool, str)) and pd.isna(value)) else bool(value)


def converged_counts(table: pd.DataFrame, main: pd.DataFrame) -> pd.DataFrame:
    """``table`` (:func:`papa.analysis.drop_tables.main_table`) with ``n_converged`` and ``n_runs``: per model, task,
    ranking (the seeded random orderings pooled as ``random``) and k, how many of ``main``'s full probes converged."""
    runs = main.drop_duplicates("run_id")
    runs = runs[runs["probe_input"] == "all"]
    runs = runs.assign(ranking=runs["ranking"].where(~runs["ranking"].str.startswith("random"), "random"))
    converged = lambda s: int(sum(converged_flag(x) is True for x in s))
    counts = runs.groupby(["model", "task", "ranking", "k"])["converged"].agg(converged=converged, runs="size")
    keys = list(zip(table["model"], table["task"], table["ranking"], table["k"]))
    found = lambda column: [counts[column].get(key, pd.NA) for key in keys]
    return table.assign(n_converged=found("converged"), n_runs=found("runs"))


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
        model, task, method = name_parts(key)
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


def _span(values) -> str:
    """``[2, 6, 2]`` → ``"2–6"`` (one value: itself)."""
    low, high = int(min(values)), int(max(values))
    return f"{low}" if low == high else f"{low}\u2013{high}"


#: The columns of :func:`drop_check`'s row (``setting`` and ``change`` first).
DROP_CHECK_COLUMNS = "setting change lr seeds k0_scores all_scores k0 all drop apart epoch_reported epochs_trained cap"


def drop_check(basis: Basis, records: Mapping[str, dict], model: str, task: str) -> list | None:
    """One setting's row of the largest drop's checks (:data:`DROP_CHECK_COLUMNS` after ``setting`` and ``change``):
    on ``basis`` (:func:`papa.analysis.basis.k0_and_all`), the lr, the paired seeds' scores and means, the drop,
    ``apart`` (every all-heads score below every k = 0 score), the ranges of epochs reported and trained (``"2–6"``)
    and the epoch cap; None when the pair did not run on both sides."""
    side = k0_and_all(basis, model, task)
    if side is None:
        return None
    runs = side["runs"]
    convergence = [(records.get(run_id) or {}).get("convergence") or {} for run_id in runs["run_id"]]
    trained = [c.get("epochs_trained", epochs) for c, epochs in zip(convergence, runs["epochs"])]
    lrs = runs["lr"].dropna().unique()
    lr = float(lrs[0]) if len(lrs) == 1 else float("nan")
    row = [lr, len(side["seeds"]), side["k0_scores"], side["all_scores"], side["paired_k0"], side["paired_all"]]
    row += [side["drop"], max(side["all_scores"]) < min(side["k0_scores"])]
    return row + [_span(runs["selected_epoch"].astype(int)), _span(trained), int(runs["epochs"].max())]


def setting_change(official: Basis, study: Basis, model: str, task: str) -> dict | None:
    """One model × task under the main grid's basis (``official``) and a study's: the k = 0 and all-heads scores and
    relative drops, the training examples, whether each score's change exceeds both seed ranges
    (:func:`papa.analysis.results.beyond_seed_range`) and the study's mean epoch reported; None without both."""
    main, ours = k0_and_all(official, model, task), k0_and_all(study, model, task)
    if main is None or ours is None:
        return None
    b = study.runs
    examples = int(b.loc[(b["model"] == model) & (b["task"] == task) & b["is_main"], "train_examples"].max())
    row = {"train examples official": int(main["runs"]["train_examples"].max()), "train examples study": examples}
    for side, name in ((main, "official"), (ours, "study")):
        row |= {f"k=0 {name}": side["k0"], f"k=all {name}": side["all"], f"drop {name}": side["drop"]}
    for k, scores in (("0", "k0_scores"), ("all", "all_scores")):
        row[f"k={k} change beyond seed range"] = beyond_seed_range(main[scores], ours[scores])
    return row | {"mean epoch reported": float(ours["runs"]["selected_epoch"].astype(float).mean())}
