"""The tables of what the probe learned before any head was made constant (controls chapter), each frame of
:mod:`papa.analysis.probe_checks` with its ``*_display`` table and the numbers the prose glues."""

from __future__ import annotations

import math

import pandas as pd

from papa.book import table_format as T
from papa.book import words as W
from papa.book.words import lr_text
from papa.core.fields import PAPER_LR
from papa.core.tasks import task_name


def _cell(group: pd.DataFrame, digits: int = 3) -> str:
    """``0.204 (epoch 4 of 7)``, with ``, at the cap`` when the curve still rose; seeds joined by ``; ``."""
    cap = lambda r: "" if r.converged else ", at the cap"
    return "; ".join(
        f"{W.unsigned_zero(f'{r.heldout:.{digits}f}')} (epoch {r.best_epoch} of {r.epochs_trained}{cap(r)})"
        for r in group.itertuples()
    )


def lr_choice_display(frame: pd.DataFrame) -> T.Table:
    """:func:`papa.analysis.probe_checks.lr_choice_frame` for reading: per model and task the chosen lr, then each
    candidate's cell."""
    lrs = sorted(frame["lr"].unique())
    rows = []
    for (model, task), group in frame.groupby(["model", "task"], sort=False):
        chosen = group.loc[group["chosen"], "lr"]
        row = {"model": model, "task": task_name(task), "chosen_lr": lr_text(chosen.iloc[0]) if len(chosen) else None}
        # 3 digits, or up to 6 where 3 would show different held-out scores (the choice) as equal
        digits = W.distinct_digits(group["heldout"].dropna(), lambda s, d: f"{s:.{d}f}", least=3, most=6)
        row |= {lr: _cell(group[group["lr"] == lr], digits) if (group["lr"] == lr).any() else None for lr in lrs}
        rows.append(row)
    kinds = T.model_task_kinds(frame) | {"chosen_lr": "text"}
    kinds |= {lr: W.text for lr in lrs}
    paper = lambda lr: " (the paper's)" if math.isclose(lr, PAPER_LR) else ""
    headers = {"chosen_lr": "chosen lr"} | {lr: f"held-out at lr {lr_text(lr)}{paper(lr)}" for lr in lrs}
    missing = {lr: "this lr was not a candidate here" for lr in lrs}
    missing["chosen_lr"] = "the chosen lr is not among the candidates' runs"
    return T.table(pd.DataFrame(rows), kinds, headers, missing)


def lr_choice_numbers(frame: pd.DataFrame) -> dict:
    """Counts for the text: model/task pairs, how many chose the paper's lr, the paper-lr pairs whose held-out score
    never rose above 0 (and which), and the paper-lr runs still rising at the cap."""
    if frame.empty:
        return dict(n_lr_pairs=0, n_lr_paper_chosen=0, n_lr_paper_flat=0, lr_paper_flat="none", n_lr_paper_rising=0)
    paper = frame[[math.isclose(lr, PAPER_LR) for lr in frame["lr"]]]
    flat = paper[paper["heldout"] <= 0]
    pairs = lambda rows: int(rows[["model", "task"]].drop_duplicates().shape[0])
    return {
        "n_lr_pairs": pairs(frame),
        "n_lr_paper_chosen": pairs(paper[paper["chosen"]]),
        "n_lr_paper_flat": pairs(flat),
        "lr_paper_flat": _pairs_text({t: sorted(set(g["model"])) for t, g in flat.groupby("task", sort=False)}),
        "n_lr_paper_rising": int((~paper["converged"]).sum()),
    }


def _pairs_text(by_task: dict[str, list[str]]) -> str:
    """``{task: models}`` as "Task (model, model); Task (model)", or "none"."""
    return "; ".join(f"{task_name(t)} ({', '.join(ms)})" for t, ms in by_task.items()) or "none"


def prediction_share_display(frame: pd.DataFrame) -> T.Table:
    """:func:`papa.analysis.probe_checks.prediction_share_frame` for reading."""
    kinds = T.model_task_kinds(frame) | {"score": "score"}
    kinds |= {"seeds": "int", "predicted_class": "text", "predicted_share": "percent", "label_share": "percent"}
    headers = {"score": "mean score at k = 0", "seeds": "seeds", "predicted_class": "most-predicted class"}
    headers |= {"predicted_share": "share of the predictions", "label_share": "share of the dev labels"}
    return T.table(T.key_text(frame), kinds, headers, {"label_share": "no dev labels stored"})


def _share_cell(predicted: float, labels: float) -> str | None:
    """``87.5% (75.0% of the labels)``; the share of the predictions alone when no labels were stored."""
    if W.is_missing(predicted):
        return None
    return f"{predicted:.1%}" + ("" if W.is_missing(labels) else f" ({labels:.1%} of the labels)")


def _best_cell(model: str | None, score: float, informative: bool | None) -> str | None:
    """``0.320 (big)``, or ``0.240 (big, not informative)`` when that model does not clear its own floor."""
    if model is None or W.is_missing(score):
        return None
    return f"{W.score(score)} ({model}{'' if informative else ', not informative'})"


def near_floor_display(frame: pd.DataFrame) -> T.Table:
    """:func:`papa.analysis.probe_checks.near_floor_frame` for reading: one row per pair near its floor, the checks
    in columns."""
    f, missing = frame, W.is_missing
    losses, more = (f["loss_first"], f["loss_last"]), (f["more_data_score"], f["more_data_setting"])
    seeds = lambda pairs: ", ".join(W.score(v) + ("" if e is None else f" (epoch {e})") for v, e in pairs) or None
    shown = T.key_text(f).assign(
        score_cell=[W.with_interval(W.score, *v) for v in zip(f["score"], f["low"], f["high"])],
        floor_cell=[None if missing(v) else f"{W.score(v)} ({kind})" for v, kind in zip(f["floor"], f["floor_kind"])],
        seeds_cell=[seeds(pairs) for pairs in f["seed_scores"]],
        loss_cell=[None if missing(a) or missing(b) else f"{a:.2f} → {b:.2f}" for a, b in zip(*losses)],
        share_cell=[_share_cell(p, lab) for p, lab in zip(f["predicted_share"], f["label_share"])],
        more_cell=[None if missing(v) else f"{W.score(v)} ({s})" for v, s in zip(*more)],
        best_cell=[_best_cell(*best) for best in zip(f["best_model"], f["best_score"], f["best_informative"])],
    )
    # the long cells wrap (kind "text"), so that the table fits the column instead of scrolling sideways
    kinds = {"model": "text", "task": "text", "score_cell": W.text, "floor_cell": "text", "seeds_cell": "text"}
    kinds |= {"loss_cell": W.text, "heldout": "score", "share_cell": "text", "more_cell": "text", "best_cell": "text"}
    headers = {"score_cell": "k = 0 score [95% interval]", "floor_cell": "higher floor"}
    headers |= {"seeds_cell": "each seed (reported epoch)"}
    headers |= {"loss_cell": "training loss, first → last epoch"}
    headers |= {"heldout": "held-out score at the lr choice", "more_cell": "k = 0 with more training data"}
    headers |= {"share_cell": "most-predicted class: share of the predictions"}
    headers |= {"best_cell": "best other model on the task, k = 0"}
    why = {"score_cell": "no k = 0 run of the full probe", "floor_cell": "no floor measured"}
    why |= {"seeds_cell": "no k = 0 run of the main grid", "loss_cell": "no training loss recorded"}
    why |= {"heldout": "no lr choice ran for this pair", "share_cell": "a token task: no single class per example"}
    why |= {"more_cell": "no training-size study covers this pair", "best_cell": "no other model ran this task"}
    empty = "Every model and task clears its floor: no pair is near it."
    return T.table(shown, kinds, headers, why, empty=empty)


def near_floor_numbers(frame: pd.DataFrame) -> dict:
    """For the text: how many pairs are near their floor and which, as "Task (model, model)"."""
    by_task = {t: list(g["model"]) for t, g in frame.groupby("task", sort=False)} if len(frame) else {}
    return {"n_near_floor": int(len(frame)), "near_floor_pairs": _pairs_text(by_task)}
