"""What the probe learned before any head was made constant: the learning-rate choices and what the k = 0
probe predicts on the dev split. The controls chapter shows both, so that a task whose k = 0 score is near
its floor (CoLA) is read with the reason in view. Re-exported by :mod:`papa.book`.

* :func:`lr_choice_frame` / :func:`lr_choice_display` — every candidate lr's held-out score, best epoch and
  epochs trained, per model and task (one row per lr choice run, ``papa.probing.protocol.select_lr``);
* :func:`lr_choice_numbers` — the counts the chapter's text glues;
* :func:`prediction_share_frame` / :func:`prediction_share_display` — per model and sequence task at k = 0:
  the share of dev predictions in the most-predicted class against that class's share of the dev labels.
"""

from __future__ import annotations

import math
from collections import Counter

import pandas as pd

from papa.analysis.figure_kit import task_name
from papa.book import tables as T
from papa.book.data import BookData
from papa.book.words import lr_text

__all__ = ["lr_choice_frame", "lr_choice_display", "lr_choice_numbers", "prediction_share_frame", "prediction_share_display"]

#: The paper's probe learning rate, one of the candidates.
PAPER_LR = 2e-5


def lr_choice_frame(data: BookData) -> pd.DataFrame:
    """One row per (model, task, candidate lr) of the grid's lr choices: ``heldout`` (the candidate's best
    held-out score), ``best_epoch``, ``epochs_trained``, ``converged`` (the curve stopped rising before the cap)
    and ``chosen``. Several selection seeds give one row each (column ``seed``)."""
    rows = []
    for choice in data.lr_choices.values():
        for run in choice.get("runs", []):
            rows.append(
                {
                    "model": choice["model"],
                    "task": choice["task"],
                    "lr": float(run["lr"]),
                    "seed": int(run.get("seed", 0)),
                    "heldout": float(run["heldout"]),
                    "best_epoch": int(run["best_epoch"]),
                    "epochs_trained": int(run["epochs_trained"]),
                    "converged": bool(run["converged"]),
                    "chosen": math.isclose(float(run["lr"]), float(choice["lr"]), rel_tol=1e-9),
                }
            )
    columns = ["model", "task", "lr", "seed", "heldout", "best_epoch", "epochs_trained", "converged", "chosen"]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values(["model", "task", "lr", "seed"], ignore_index=True)  # as the other tables: by model and task id


def _cell(group: pd.DataFrame) -> str:
    """``0.204 (epoch 4 of 7)``, with ``, at the cap`` when the curve still rose; seeds joined by ``; ``."""
    return "; ".join(f"{r.heldout:.3f} (epoch {r.best_epoch} of {r.epochs_trained}{'' if r.converged else ', at the cap'})" for r in group.itertuples())


def lr_choice_display(frame: pd.DataFrame) -> T.Table:
    """:func:`lr_choice_frame` for reading: per model and task the chosen lr, then one column per candidate with
    its held-out score and the best of the epochs trained."""
    if frame.empty:
        return T.table(frame.assign(chosen_lr=[]), {"model": "text", "task": "text", "chosen_lr": "text"}, {"chosen_lr": "chosen lr"})
    lrs = sorted(frame["lr"].unique())
    rows = []
    for (model, task), group in frame.groupby(["model", "task"], sort=False):
        chosen = group.loc[group["chosen"], "lr"]
        row = {"model": model, "task": task_name(task), "chosen_lr": lr_text(chosen.iloc[0]) if len(chosen) else None}
        row |= {lr: _cell(group[group["lr"] == lr]) if (group["lr"] == lr).any() else None for lr in lrs}
        rows.append(row)
    kinds = ({"model": "text"} if T.has_several(frame, "model") else {}) | {"task": "text", "chosen_lr": "text"} | {lr: T.text for lr in lrs}
    headers = {"chosen_lr": "chosen lr"} | {lr: f"held-out at lr {lr_text(lr)}" + (" (the paper's)" if math.isclose(lr, PAPER_LR) else "") for lr in lrs}
    notes = [
        "Each cell: the best held-out score (the task's main metric, on held-out training examples) and the epoch that reached it, of the epochs trained"
        ' before early stopping ended the run; "at the cap": the curve was still rising when the run reached its epoch cap.'
    ]
    missing = {lr: "this lr was not a candidate here" for lr in lrs} | {"chosen_lr": "the chosen lr is not among the candidates' runs"}
    return T.table(pd.DataFrame(rows), kinds, headers, missing, notes)


def lr_choice_numbers(frame: pd.DataFrame) -> dict:
    """Counts for the chapter's text: model/task pairs, how many chose the paper's lr, the paper-lr runs whose
    held-out score never rose above 0 (``lr_paper_flat``, as "Task (model, model)"), and the paper-lr runs still
    rising at the epoch cap."""
    if frame.empty:
        return {"n_lr_pairs": 0, "n_lr_paper_chosen": 0, "n_lr_paper_flat": 0, "lr_paper_flat": "none", "n_lr_paper_rising": 0}
    paper = frame[[math.isclose(lr, PAPER_LR) for lr in frame["lr"]]]
    flat = paper[paper["heldout"] <= 0]
    by_task = {t: sorted(set(g["model"])) for t, g in flat.groupby("task", sort=False)}
    return {
        "n_lr_pairs": int(frame[["model", "task"]].drop_duplicates().shape[0]),
        "n_lr_paper_chosen": int(paper.loc[paper["chosen"], ["model", "task"]].drop_duplicates().shape[0]),
        "n_lr_paper_flat": int(flat[["model", "task"]].drop_duplicates().shape[0]),
        "lr_paper_flat": "; ".join(f"{task_name(t)} ({', '.join(ms)})" for t, ms in by_task.items()) or "none",
        "n_lr_paper_rising": int((~paper["converged"]).sum()),
    }


def prediction_share_frame(data: BookData) -> pd.DataFrame:
    """Per model and sequence task, over the k = 0 probe seeds of the main grid: the mean score, the class the
    probes predict most often on the dev split, its share of the predictions (``predicted_share``) and of the dev
    labels (``label_share``). A probe that learned little predicts one class far more often than it occurs."""
    main = data.main[(data.main["k"] == 0) & (data.main["probe_input"] == "all") & data.main["is_main"]]
    rows = []
    for (model, task), group in main.groupby(["model", "task"], sort=True):
        predictions: Counter = Counter()
        labels: Counter = Counter()
        names: list = []
        counted = []  # the runs whose predictions are counted: the score and seeds are theirs too
        for run_id, value in zip(group["run_id"], group["value"].astype(float)):
            dev = data.records.get(run_id, {}).get("dev") or {}
            if not dev.get("predictions") or dev.get("lengths"):
                continue  # no stored predictions, or a token task (flat tokens with sentence lengths): no class per example
            predictions.update(dev["predictions"])
            labels.update(dev.get("labels") or [])
            names = dev.get("label_names") or names
            counted.append(value)
        if not predictions:
            continue
        top, count = predictions.most_common(1)[0]
        rows.append(
            {
                "model": model,
                "task": task,
                "metric": group["metric"].iloc[0],
                "score": sum(counted) / len(counted),
                "seeds": len(counted),
                "predicted_class": str(names[top]) if top < len(names) else str(top),
                "predicted_share": count / sum(predictions.values()),
                "label_share": labels[top] / sum(labels.values()) if labels else math.nan,
            }
        )
    return pd.DataFrame(rows, columns=["model", "task", "metric", "score", "seeds", "predicted_class", "predicted_share", "label_share"])


def prediction_share_display(frame: pd.DataFrame) -> T.Table:
    """:func:`prediction_share_frame` for reading."""
    kinds = ({"model": "text"} if T.has_several(frame, "model") else {}) | {
        "task": "text",
        "score": "score",
        "seeds": "int",
        "predicted_class": "text",
        "predicted_share": "percent",
        "label_share": "percent",
    }
    headers = {
        "score": "mean score at k = 0",
        "seeds": "seeds",
        "predicted_class": "most-predicted class",
        "predicted_share": "share of the predictions",
        "label_share": "share of the dev labels",
    }
    return T.table(T.key_text(frame), kinds, headers, {"label_share": "no dev labels stored"})
