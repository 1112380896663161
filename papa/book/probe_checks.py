"""What the probe learned before any head was made constant (controls chapter), so that a k = 0 score near its
floor is read with the reason in view: every candidate lr's held-out score, the share of the most-predicted class
and every pair below its floor beside the checks that say why; each frame with its ``*_display`` table."""

from __future__ import annotations

import math
from collections import Counter

import pandas as pd

from papa.analysis.figure_kit import task_name
from papa.book import table_format as T
from papa.book.load import BookData
from papa.book.studies import size_sensitivity
from papa.book.table_format import lr_text
from papa.core.fields import PAPER_LR


def lr_choice_frame(data: BookData) -> pd.DataFrame:
    """One row per model, task, candidate lr and selection seed of the grid's lr choices: its best held-out score,
    ``best_epoch``, ``epochs_trained``, ``converged`` (stopped rising before the cap) and ``chosen``."""
    rows = []
    for choice in data.lr_choices.values():
        for run in choice.get("runs", []):
            lr = float(run["lr"])
            keys = [choice["model"], choice["task"], lr, int(run.get("seed", 0)), float(run["heldout"])]
            epochs = [int(run["best_epoch"]), int(run["epochs_trained"]), bool(run["converged"])]
            rows.append([*keys, *epochs, math.isclose(lr, float(choice["lr"]), rel_tol=1e-9)])
    columns = ["model", "task", "lr", "seed", "heldout", "best_epoch", "epochs_trained", "converged", "chosen"]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values(["model", "task", "lr", "seed"], ignore_index=True)  # as the other tables: model, task


def _cell(group: pd.DataFrame, digits: int = 3) -> str:
    """``0.204 (epoch 4 of 7)``, with ``, at the cap`` when the curve still rose; seeds joined by ``; ``."""
    cap = lambda r: "" if r.converged else ", at the cap"
    return "; ".join(
        f"{r.heldout:.{digits}f} (epoch {r.best_epoch} of {r.epochs_trained}{cap(r)})" for r in group.itertuples()
    )


def _digits(scores: pd.Series) -> int:
    """3, or up to 6 where 3 would show different held-out scores of one model and task (the choice) as equal."""
    distinct = scores.nunique()
    return next((d for d in range(3, 7) if scores.round(d).nunique() == distinct), 6)


def lr_choice_display(frame: pd.DataFrame) -> T.Table:
    """:func:`lr_choice_frame` for reading: per model and task the chosen lr, then each candidate's cell."""
    lrs = sorted(frame["lr"].unique())
    rows = []
    for (model, task), group in frame.groupby(["model", "task"], sort=False):
        chosen = group.loc[group["chosen"], "lr"]
        row = {"model": model, "task": task_name(task), "chosen_lr": lr_text(chosen.iloc[0]) if len(chosen) else None}
        digits = _digits(group["heldout"])
        row |= {lr: _cell(group[group["lr"] == lr], digits) if (group["lr"] == lr).any() else None for lr in lrs}
        rows.append(row)
    kinds = T.model_task_kinds(frame) | {"chosen_lr": "text"}
    kinds |= {lr: T.text for lr in lrs}
    paper = lambda lr: " (the paper's)" if math.isclose(lr, PAPER_LR) else ""
    headers = {"chosen_lr": "chosen lr"} | {lr: f"held-out at lr {lr_text(lr)}{paper(lr)}" for lr in lrs}
    notes = [
        "Each cell: the best held-out score (the task's main metric, on held-out training examples) and the epoch that"
        ' reached it, of the epochs trained before early stopping ended the run; "at the cap": the curve was still'
        " rising when the run reached its epoch cap."
    ]
    missing = {lr: "this lr was not a candidate here" for lr in lrs}
    missing["chosen_lr"] = "the chosen lr is not among the candidates' runs"
    return T.table(pd.DataFrame(rows), kinds, headers, missing, notes)


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


def prediction_share_frame(data: BookData) -> pd.DataFrame:
    """Per model and sequence task, over the main grid's k = 0 seeds: the mean score, the class predicted most often
    on the dev split, and its share of the predictions and of the dev labels."""
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
                continue  # no stored predictions, or a token task (flat tokens, sentence lengths): no class per example
            predictions.update(dev["predictions"])
            labels.update(dev.get("labels") or [])
            names = dev.get("label_names") or names
            counted.append(value)
        if not predictions:
            continue
        top, count = predictions.most_common(1)[0]
        name = str(names[top]) if top < len(names) else str(top)
        label_share = labels[top] / sum(labels.values()) if labels else math.nan
        keys = [model, task, group["metric"].iloc[0], sum(counted) / len(counted), len(counted), name]
        rows.append([*keys, count / sum(predictions.values()), label_share])
    columns = "model task metric score seeds predicted_class predicted_share label_share".split()
    return pd.DataFrame(rows, columns=columns)


def prediction_share_display(frame: pd.DataFrame) -> T.Table:
    """:func:`prediction_share_frame` for reading."""
    kinds = T.model_task_kinds(frame) | {"score": "score"}
    kinds |= {"seeds": "int", "predicted_class": "text", "predicted_share": "percent", "label_share": "percent"}
    headers = {"score": "mean score at k = 0", "seeds": "seeds", "predicted_class": "most-predicted class"}
    headers |= {"predicted_share": "share of the predictions", "label_share": "share of the dev labels"}
    return T.table(T.key_text(frame), kinds, headers, {"label_share": "no dev labels stored"})


NEAR_FLOOR_COLUMNS = (
    "model task metric score low high floor floor_kind seed_scores loss_first loss_last heldout predicted_share"
    " label_share more_data_score more_data_setting best_model best_score best_informative"
).split()


def near_floor_frame(data: BookData) -> pd.DataFrame:
    """Every model and task whose k = 0 probe is not informative, with the checks (:data:`NEAR_FLOOR_COLUMNS`) that
    tell a probe that cannot read the task from one that has not learned to: scores, floor, seeds, training losses,
    held-out score, class shares, more training data, and the best other model on the task."""
    floors = data.floors
    if floors.empty or "informative" not in floors:
        return pd.DataFrame(columns=NEAR_FLOOR_COLUMNS)
    lr = lr_choice_frame(data)
    heldout = lr[lr["chosen"]].groupby(["model", "task"])["heldout"].max().to_dict() if len(lr) else {}
    shares = {(r.model, r.task): (r.predicted_share, r.label_share) for r in prediction_share_frame(data).itertuples()}
    more: dict = {}  # (model, task) -> (training examples, k = 0 mean, setting in words) of its largest size study
    for row in size_sensitivity(data).to_dict("records"):
        examples, pair = row["train examples study"], (row["model"], row["task"])
        if examples > row["train examples official"] and examples > more.get(pair, (-1,))[0]:  # more than the main's
            more[pair] = (examples, row["k=0 study"], row["setting"])
    main = data.main
    k0 = main[(main["k"] == 0) & (main["probe_input"] == "all") & main["is_main"]].drop_duplicates("run_id")
    rows = []
    for row in floors[~floors["informative"].astype(bool)].itertuples():
        pair = (row.model, row.task)
        runs = k0[(k0["model"] == row.model) & (k0["task"] == row.task)].sort_values("seed")
        epochs = [(data.records.get(r) or {}).get("epochs") or [] for r in runs["run_id"]]
        losses = [[e.get("train_loss") for e in curve] for curve in epochs]
        losses = [curve for curve in losses if curve and None not in curve]
        majority, free = float(row.majority), float(row.attention_free)
        free_higher = not math.isnan(free) and (math.isnan(majority) or free > majority)  # as floors_table's nanmax
        seeds = [(float(v), None if pd.isna(e) else int(e)) for v, e in zip(runs["value"], runs["selected_epoch"])]
        loss = [sum(c[i] for c in losses) / len(losses) if losses else math.nan for i in (0, -1)]
        peers = floors[(floors["task"] == row.task) & (floors["model"] != row.model) & floors["baseline"].notna()]
        best = peers.loc[peers["baseline"].astype(float).idxmax()] if len(peers) else None
        record = [*pair, row.metric, *map(float, (row.baseline, row.baseline_low, row.baseline_high))]
        record += [free, "attention-free"] if free_higher else [majority, "majority"]
        record += [seeds, *loss, heldout.get(pair, math.nan), *shares.get(pair, (math.nan, math.nan))]
        record += more.get(pair, (0, math.nan, None))[1:]
        b = best
        record += [None, math.nan, None] if b is None else [b["model"], float(b["baseline"]), bool(b["informative"])]
        rows.append(record)
    return pd.DataFrame(rows, columns=NEAR_FLOOR_COLUMNS)


def _share_cell(predicted: float, labels: float) -> str | None:
    """``87.5% (75.0% of the labels)``; the share of the predictions alone when no labels were stored."""
    if T.is_missing(predicted):
        return None
    return f"{predicted:.1%}" + ("" if T.is_missing(labels) else f" ({labels:.1%} of the labels)")


def _best_cell(model: str | None, score: float, informative: bool | None) -> str | None:
    """``0.320 (big)``, or ``0.240 (big, not informative)`` when that model does not clear its own floor."""
    if model is None or T.is_missing(score):
        return None
    return f"{score:.3f} ({model}{'' if informative else ', not informative'})"


def near_floor_display(frame: pd.DataFrame) -> T.Table:
    """:func:`near_floor_frame` for reading: one row per pair near its floor, the checks in columns."""
    f, missing = frame, T.is_missing
    losses, more = (f["loss_first"], f["loss_last"]), (f["more_data_score"], f["more_data_setting"])
    seeds = lambda pairs: ", ".join(f"{v:.3f}" + ("" if e is None else f" (epoch {e})") for v, e in pairs) or None
    shown = T.key_text(f).assign(
        score_cell=[T.with_interval(T.score, *v) for v in zip(f["score"], f["low"], f["high"])],
        floor_cell=[None if missing(v) else f"{v:.3f} ({kind})" for v, kind in zip(f["floor"], f["floor_kind"])],
        seeds_cell=[seeds(pairs) for pairs in f["seed_scores"]],
        loss_cell=[None if missing(a) or missing(b) else f"{a:.2f} → {b:.2f}" for a, b in zip(*losses)],
        share_cell=[_share_cell(p, lab) for p, lab in zip(f["predicted_share"], f["label_share"])],
        more_cell=[None if missing(v) else f"{v:.3f} ({s})" for v, s in zip(*more)],
        best_cell=[_best_cell(*best) for best in zip(f["best_model"], f["best_score"], f["best_informative"])],
    )
    # the long cells wrap (kind "text"), so that the table fits the column instead of scrolling sideways
    kinds = {"model": "text", "task": "text", "score_cell": T.text, "floor_cell": "text", "seeds_cell": "text"}
    kinds |= {"loss_cell": T.text, "heldout": "score", "share_cell": "text", "more_cell": "text", "best_cell": "text"}
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
    notes = [
        "Scores are the task's main metric, averaged over probe seeds; the held-out score is on held-out training"
        " examples, the others on the dev split.",
        "A k = 0 score without an interval: not every seed stored its dev predictions.",
    ]
    empty = "Every model and task clears its floor: no pair is near it."
    return T.table(shown, kinds, headers, why, notes, empty=empty)


def near_floor_numbers(frame: pd.DataFrame) -> dict:
    """For the text: how many pairs are near their floor and which, as "Task (model, model)"."""
    by_task = {t: list(g["model"]) for t, g in frame.groupby("task", sort=False)} if len(frame) else {}
    return {"n_near_floor": int(len(frame)), "near_floor_pairs": _pairs_text(by_task)}
