"""What the probe learned before any head was made constant, so that a k = 0 score near its floor is read with the
reason in view: every candidate lr's held-out score (:func:`lr_choice_frame`), the share of the most-predicted class
(:func:`prediction_share_frame`) and every pair below its floor beside the checks that say why
(:func:`near_floor_frame`)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class Checks:
    """The frames :func:`near_floor_frame` reads beside the floors: :func:`lr_choice_frame`,
    :func:`prediction_share_frame`, and the training-size studies' rows (``train examples study``/``official``,
    ``model``, ``task``, ``k=0 study``, ``setting``)."""

    lr_choices: pd.DataFrame
    prediction_share: pd.DataFrame
    size: pd.DataFrame


def lr_choice_frame(lr_choices: Mapping[str, dict]) -> pd.DataFrame:
    """One row per model, task, candidate lr and selection seed of the lr choices (``"<model>__<task>"`` → a
    :func:`papa.probing.protocol.select_lr` record): its best held-out score,
    ``best_epoch``, ``epochs_trained``, ``converged`` (stopped rising before the cap) and ``chosen``."""
    rows = []
    for choice in lr_choices.values():
        for run in choice.get("runs", []):
            lr = float(run["lr"])
            keys = [choice["model"], choice["task"], lr, int(run.get("seed", 0)), float(run["heldout"])]
            epochs = [int(run["best_epoch"]), int(run["epochs_trained"]), bool(run["converged"])]
            rows.append([*keys, *epochs, math.isclose(lr, float(choice["lr"]), rel_tol=1e-9)])
    columns = ["model", "task", "lr", "seed", "heldout", "best_epoch", "epochs_trained", "converged", "chosen"]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values(["model", "task", "lr", "seed"], ignore_index=True)  # as the other tables: model, task


def prediction_share_frame(runs: pd.DataFrame, records: Mapping[str, dict]) -> pd.DataFrame:
    """Per model and sequence task, over the k = 0 seeds of ``runs`` (tidy rows of the main grid, the book's basis
    the converged ones; ``records`` by run id): the mean score, the class predicted most often on the dev split, and
    its share of the predictions and of the dev labels."""
    k0 = runs[(runs["k"] == 0) & (runs["probe_input"] == "all") & runs["is_main"]]
    rows = []
    for (model, task), group in k0.groupby(["model", "task"], sort=True):
        predictions: Counter = Counter()
        labels: Counter = Counter()
        names: list = []
        counted = []  # the runs whose predictions are counted: the score and seeds are theirs too
        for run_id, value in zip(group["run_id"], group["value"].astype(float)):
            dev = records.get(run_id, {}).get("dev") or {}
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


NEAR_FLOOR_COLUMNS = (
    "model task metric score low high floor floor_kind seed_scores loss_first loss_last heldout predicted_share"
    " label_share more_data_score more_data_setting best_model best_score best_informative"
).split()


def near_floor_frame(
    floors: pd.DataFrame, runs: pd.DataFrame, records: Mapping[str, dict], checks: Checks
) -> pd.DataFrame:
    """Every model and task whose k = 0 probe is not informative (``floors``), with the checks
    (:data:`NEAR_FLOOR_COLUMNS`) that tell a probe that cannot read the task from one that has not learned to: scores,
    floor, seeds (the k = 0 runs of ``runs``, as :func:`prediction_share_frame`; ``records`` by run id), training
    losses, held-out score, class shares, more training data, and the best other model on the task (``checks``: the
    other frames they read)."""
    if floors.empty or "informative" not in floors:
        return pd.DataFrame(columns=NEAR_FLOOR_COLUMNS)
    lr = checks.lr_choices
    heldout = lr[lr["chosen"]].groupby(["model", "task"])["heldout"].max().to_dict() if len(lr) else {}
    shares = {(r.model, r.task): (r.predicted_share, r.label_share) for r in checks.prediction_share.itertuples()}
    more: dict = {}  # (model, task) -> (training examples, k = 0 mean, setting in words) of its largest size study
    for row in checks.size.to_dict("records"):
        examples, pair = row["train examples study"], (row["model"], row["task"])
        if examples > row["train examples official"] and examples > more.get(pair, (-1,))[0]:  # more than the main's
            more[pair] = (examples, row["k=0 study"], row["setting"])
    k0 = runs[(runs["k"] == 0) & (runs["probe_input"] == "all") & runs["is_main"]].drop_duplicates("run_id")
    rows = []
    for row in floors[~floors["informative"].astype(bool)].itertuples():
        pair = (row.model, row.task)
        runs = k0[(k0["model"] == row.model) & (k0["task"] == row.task)].sort_values("seed")
        epochs = [(records.get(r) or {}).get("epochs") or [] for r in runs["run_id"]]
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
