"""The results chapter's robustness sections (:func:`build`): how well the gate draws agree and which ended near
their floor, claim 1 per draw and across the draws, the all-heads drop at the runner-up lr where the lr choice was
within noise, and the claims per model beside the pooled ones. Statistics from :mod:`papa.analysis.robustness` and
:func:`papa.analysis.claims.judge_models`; words here and in :mod:`papa.book.words`; every section says "not in
this grid" where its runs are missing."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from papa.analysis import claims as V
from papa.analysis import robustness as R
from papa.book import words as W
from papa.book.load import BookData
from papa.book.table_format import Table, table
from papa.book.words import and_list, interval_text, lr_text, plural
from papa.core.tasks import task_name

#: The claims the per-model table shows (claim 3 compares models: no verdict per model).
MODEL_CLAIMS = ("claim1", "claim2", "claim2b")


@dataclass
class Robustness:
    """What the robustness sections show, each frame documented where it is built."""

    agreement: pd.DataFrame  # robustness.agreement_frame of the combined rankings
    draws: pd.DataFrame  # the half-heads cells per draw, of the combined ranking and of the draws pooled
    by_draw: pd.DataFrame  # claim 1 per ranking of ``draws``: pooled drop, verdict, reason
    runner_up: pd.DataFrame  # robustness.runner_up_frame
    by_model: pd.DataFrame  # the claims pooled and per model (the front page's table)
    glue: dict = field(default_factory=dict)


def build(data: BookData, cells: pd.DataFrame, judged: V.Judged, ranking: str) -> Robustness:
    """The robustness sections of ``data`` (``cells``/``judged``: the results chapter's claim cells and pooled
    judgement, on ``ranking``)."""
    agreement = R.agreement_frame(data.ranking_meta, data.rankings, ranking)
    draws = sorted({str(r) for r in data.basis.cells["ranking"] if str(r).startswith(f"{ranking}-")})
    drawn, pooled = R.draw_cells(data.basis, draws, ranking), R.draws_pooled_cells(data.basis, data.records, draws)
    both = pd.concat([drawn, pooled], ignore_index=True)
    lrnext = data.study_basis("lrnext") if len(data.studies.get("lrnext", [])) else None
    runner_up = R.runner_up_frame(data.lr_choices, data.basis, lrnext)
    by_draw = by_draw_frame(R.claim1_by_draw(both) if len(both) else {}, ranking)
    by_model = models_frame(judged, V.judge_models(cells))
    glue = {"agreement_summary": agreement_summary(agreement)}
    glue |= {"draws_summary": draws_summary(by_draw, ranking, R.unpooled_pairs(drawn, pooled))}
    glue |= {"runner_up_summary": runner_up_summary(runner_up, data.lr_choices)}
    glue |= {"model_verdicts_summary": model_summary(by_model)}
    return Robustness(agreement, both, by_draw, runner_up, by_model, glue)


def _column(write, frame: pd.DataFrame, *names: str) -> list:
    """``write(*values)`` of each row's values in the columns ``names``."""
    return [write(*values) for values in zip(*(frame[name] for name in names))]


def _overlap_cell(mean: float, half: int, least: float, most: float) -> str | None:
    """``"20.3 of 36 (18–23)"``: the draws' mean first-half overlap and its range; None (a dash) for one draw."""
    return None if W.is_missing(mean) else f"{mean:.1f} of {half} ({least:.0f}–{most:.0f})"


def _rho_cell(mean: float, least: float, most: float) -> str | None:
    """``"+0.41 (+0.30 to +0.52)"``: the draws' mean ρ and its range; None (a dash) for one draw, which has no ρ."""
    return None if W.is_missing(mean) else f"{mean:+.2f} ({least:+.2f} to {most:+.2f})"


def agreement_words(row) -> str:
    """The ranking judgement of one agreement row in words (:data:`papa.book.words.RANKING_REASONS`)."""
    facts = {"overlap": f"{row.overlap:.1f} of {row.half}", "chance": f"{row.overlap_chance:.0f}"}
    facts |= {"p": "n/a" if math.isnan(row.p_value) else f"{row.p_value:.3f}", "rho": f"{row.spearman:+.2f}"}
    return W.RANKING_REASONS[row.reason].format(**facts)


def agreement_summary(agreement: pd.DataFrame) -> str:
    """One sentence: how many pairs' draws agree above chance, which do not, which draws ended near their floor."""
    if agreement.empty:
        return "not in this grid: its rankings combine no gate draws, so no agreement between draws is measured"
    pairs = lambda rows: and_list(W.pair_words(m, t) for m, t in zip(rows["model"], rows["task"])) or "none"
    chance = agreement[agreement["informative"].eq(False)]  # None: one draw, not judged
    near = agreement[agreement["near_floor"].map(len) > 0]
    judged = int(agreement["informative"].notna().sum())
    said = f"{int(agreement['informative'].eq(True).sum())} of {judged} model/task pairs have draws that"
    said += (
        f" agree above chance; no informative ranking (half-heads drop read as a random-heads drop): {pairs(chance)}"
    )
    floor = and_list(
        f"{W.pair_words(m, t)} ({'seed' if len(s) == 1 else 'seeds'} {and_list(s)})"
        for m, t, s in zip(*(near[c] for c in ("model", "task", "near_floor")))
    )
    said += f"; draws whose gate probe ended near its floor: {floor or 'none'}"
    unlearned = agreement[agreement["informative"].eq(True) & agreement["every_near_floor"]]
    if len(unlearned):
        said += (
            f". The draws of {pairs(unlearned)} agree although every one's gate probe ended near its floor: their"
            " ranking orders the heads alike without having learned the task"
        )
    return said


def agreement_display(agreement: pd.DataFrame) -> Table:
    """:func:`papa.analysis.robustness.agreement_frame` for reading: overlap and ρ against chance, the near-floor
    draws and the judgement."""
    frame = agreement.assign(
        task=agreement["task"].map(task_name),
        overlap_cell=_column(_overlap_cell, agreement, "overlap", "half", "overlap_min", "overlap_max"),
        chance_cell=[f"{c:.0f}" for c in agreement["overlap_chance"]],
        rho_cell=_column(_rho_cell, agreement, "spearman", "spearman_min", "spearman_max"),
        floor_cell=[and_list(s) or "none" for s in agreement["near_floor"]],
        reading=[
            agreement_words(row) + ("; every draw near its floor: not learned from the task" if unlearned else "")
            for row, unlearned in zip(
                agreement.itertuples(), agreement["every_near_floor"] & agreement["informative"].eq(True)
            )
        ],
    )
    kinds = dict.fromkeys(["model", "task", "overlap_cell", "chance_cell", "rho_cell", "floor_cell", "reading"], "text")
    headers = {"overlap_cell": "first-half overlap, mean (range)", "chance_cell": "chance (n/4)"}
    headers |= {"rho_cell": "Spearman ρ, mean (range); chance 0", "floor_cell": "draws near their floor (seed)"}
    empty = "Not in this grid: its rankings combine no gate draws, so no agreement between draws is measured."
    return table(frame, kinds, headers, empty=empty)


def ranking_label(ranking: str, method: str) -> str:
    """``"gates-42"`` → ``"draw 42"``, ``"draws"`` → ``"the draws pooled"``, ``method`` (the ranking that combines
    the draws) → ``"gates, combined (mean λ)"``."""
    if ranking == "draws":
        return "the draws pooled"
    if ranking == method:
        return f"{ranking}, combined (mean λ)"
    return f"draw {ranking.rsplit('-', 1)[1]}" if ranking.startswith(f"{method}-") else ranking


def by_draw_frame(judged: dict, method: str) -> pd.DataFrame:
    """Claim 1 per ranking (:func:`papa.analysis.robustness.claim1_by_draw`): ranking, pairs, drop with interval,
    verdict and reason; the combined ``method`` ranking first, the pooled draws last."""
    order = lambda r: (r != method, r == "draws", r)
    rows = []
    for ranking in sorted(judged, key=order):
        pooled, judgement = judged[ranking]
        drop = interval_text(pooled["value"], pooled["low"], pooled["high"])
        rows.append(
            [
                ranking_label(ranking, method),
                pooled["n"],
                drop,
                W.verdict_words(judgement),
                W.reason("claim1", judgement),
            ]
        )
    return pd.DataFrame(rows, columns=["ranking", "pairs", "drop", "verdict", "reason"])


def draws_summary(by_draw: pd.DataFrame, ranking: str, unpooled: list[tuple[str, str]] = ()) -> str:
    """One sentence: claim 1's verdict per draw and across the draws, and the pairs whose draws are not pooled
    (:func:`papa.analysis.robustness.unpooled_pairs`)."""
    if by_draw.empty:
        return f"not in this grid: no half-heads probe ran on the single gate draws of the {ranking} ranking"
    each = and_list(f"{r} {v} ({d})" for r, v, d in zip(by_draw["ranking"], by_draw["verdict"], by_draw["drop"]))
    said = f"on the {int(by_draw['pairs'].max())} informative pairs every draw ran, claim 1 reads: {each}"
    if unpooled:
        pairs = and_list(W.pair_words(m, t) for m, t in unpooled)
        said += (
            f"; the draws of {pairs} are not pooled (fewer than two of their runs pair with a converged k = 0 run of"
            " the same probe seed)"
        )
    return said


def draws_display(cells: pd.DataFrame, method: str) -> Table:
    """Claim 1 per draw: each pair's half-heads drop per ranking, ``method`` the one that combines the draws (the
    verdicts: :func:`draws_summary`)."""
    per_pair = cells.assign(
        task=cells["task"].map(task_name),
        ranking=[ranking_label(r, method) for r in cells["ranking"]],
        drop=_column(interval_text, cells, "relative_drop", "relative_low", "relative_high"),
        informative=cells["informative"].astype(bool),
    )
    kinds = {
        "model": "text",
        "task": "text",
        "ranking": "text",
        "drop": "text",
        "n_pairs": "int",
        "informative": "yes/no",
    }
    headers = {"drop": "relative drop, half of the heads [95% interval]", "n_pairs": "probe seeds / draws paired"}
    empty = "Not in this grid: no half-heads probe ran on the single gate draws."
    return table(per_pair, kinds, headers, empty=empty)


def runner_up_summary(frame: pd.DataFrame, lr_choices: dict) -> str:
    """One sentence: the pairs whose lr choice was within noise, with both lrs' all-heads drops."""
    if not lr_choices or not any("within_noise" in r for r in lr_choices.values()):
        return "not in this grid: its lr choices record no runner-up and no noise"
    if frame.empty:
        return "no lr choice of this grid was within noise of its runner-up"
    each = []
    for r in frame.itertuples():
        chosen = f"{drop_cell(r.paired, r.drop, r.low, r.high)} at {lr_text(r.lr)}"
        other = f"{drop_cell(r.runner_up_paired, r.runner_up_drop, r.runner_up_low, r.runner_up_high)}"
        each.append(f"{W.pair_words(r.model, r.task)} {chosen} and {other} at {lr_text(r.runner_up)}")
    n = len(frame)
    lead = f"{n} lr {plural(n, 'choice')} within noise; the all-heads drop at the chosen lr and at the runner-up"
    return f"{lead}: {and_list(each)}"


def drop_cell(paired: bool, drop: float, low: float, high: float) -> str:
    """A drop with its interval; ``"undefined"`` where its runs are paired but a resampled k = 0 score reaches 0,
    ``"–"`` where the runs at that lr are not in the grid."""
    return "undefined" if bool(paired) and W.is_missing(drop) else interval_text(drop, low, high)


def _lr_cell(lr: float, heldout: float, stderr: float, converged: object) -> str:
    """``"1e-3: 0.812 ± 0.004"`` (``", still rising"`` when that lr had not converged)."""
    return f"{lr_text(lr)}: {W.score(heldout)} ± {W.score(stderr)}{'' if converged is True else ', still rising'}"


def runner_up_display(frame: pd.DataFrame) -> Table:
    """:func:`papa.analysis.robustness.runner_up_frame` for reading."""
    shown = frame.assign(
        task=frame["task"].map(task_name),
        chosen=_column(_lr_cell, frame, "lr", "heldout", "stderr", "converged"),
        other=_column(_lr_cell, frame, *(f"runner_up{x}" for x in ("", "_heldout", "_stderr", "_converged"))),
        drop_chosen=_column(drop_cell, frame, "paired", "drop", "low", "high"),
        drop_other=_column(drop_cell, frame, *(f"runner_up_{x}" for x in ("paired", "drop", "low", "high"))),
    )
    kinds = dict.fromkeys(["model", "task", "chosen", "other", "drop_chosen", "drop_other"], "text")
    headers = {"chosen": "chosen lr: held-out mean ± s.e.", "other": "runner-up: held-out mean ± s.e."}
    headers |= {"drop_chosen": "all heads: drop at the chosen lr", "drop_other": "all heads: drop at the runner-up"}
    return table(shown, kinds, headers, empty="No lr choice of this grid was within noise of its runner-up.")


def models_frame(judged: V.Judged, per_model: dict[str, V.Judged]) -> pd.DataFrame:
    """The claims pooled and per model: one row per basis ("all models", then each model), per claim of
    :data:`MODEL_CLAIMS` its number and verdict, and the pairs each averages."""
    rows = []
    for name, one in [("all models (pooled)", judged), *per_model.items()]:
        row = {"models": name, "pairs, half": one.evidence.half["n"], "pairs, all": one.evidence.all["n"]}
        for key in MODEL_CLAIMS:
            judgement = one.judgements[key]
            row |= {key: W.claim_number(judgement), f"{key}_verdict": W.verdict_words(judgement)}
        rows.append(row)
    return pd.DataFrame(rows)


def model_summary(frame: pd.DataFrame) -> str:
    """One sentence: claims 1 and 2a per model."""
    rows = frame.iloc[1:]
    if rows.empty:
        return "no model has an informative pair"
    each = (
        f"{m}: claim 1 {a}, claim 2a {b}"
        for m, a, b in zip(rows["models"], rows["claim1_verdict"], rows["claim2_verdict"])
    )
    return "per model, " + "; ".join(each)


def models_display(frame: pd.DataFrame) -> Table:
    """:func:`models_frame` for reading (the front page's table)."""
    kinds = dict.fromkeys(frame.columns, "text") | {"pairs, half": "int", "pairs, all": "int"}
    titles = {"claim1": "1. half constant", "claim2": "2a. all constant, average", "claim2b": "2b. largest drop"}
    headers = {key: f"{title}: drop [95% interval]" for key, title in titles.items()}
    headers |= {f"{key}_verdict": f"{title.split('.')[0]}. verdict" for key, title in titles.items()}
    note = (
        "Each row judges the claims by the same rules on its own informative model/task pairs; the intervals resample"
        " probe seeds, then dev examples (two-level bootstrap). Claim 3 compares models: no verdict per model."
    )
    return table(frame, kinds, headers, notes=[note])
