"""The results chapter (``notebooks/04_results.md``): :func:`build` computes every frame, figure and glued value
it shows, once, into one :class:`ResultsChapter`. Every score and drop is read from the main grid's
:class:`~papa.analysis.basis.Basis`; the claims are judged once per basis (:func:`papa.analysis.claims.judge`) and
every table, caption and glued value reads those judgements."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from papa.analysis import analogues as P
from papa.analysis import bootstrap as S
from papa.analysis import claims as V
from papa.analysis import drop_tables as F
from papa.analysis import pooled_drops
from papa.analysis.basis import build_basis, claim_cells, retained_gains
from papa.analysis.controls import converged_counts, layer_table
from papa.analysis.figure_kit import Figure
from papa.analysis.figures import fig_score_vs_dynamic_heads
from papa.analysis.run_figures import fig_constants, fig_head_ranking
from papa.book import analogue_figures as AF
from papa.book import words as W
from papa.book.chapters import robustness as RB
from papa.book.load import BookData, gate_numbers, headline_numbers, records_of
from papa.book.studies import drop_checks, drop_checks_summary
from papa.book.words import and_list, interval_text, plural
from papa.core.constants import load_constants
from papa.core.names import SEPARATOR, name_parts
from papa.core.tasks import task_name
from papa.pipeline.plan import ROOT


@dataclass
class ResultsChapter:
    """What the results chapter shows, each frame documented where it is built. :func:`answers` fills the science
    (the fields without a default); :func:`build` adds the rest."""

    data: BookData
    ranking: str
    differences: pd.DataFrame  # paired differences to k = 0 of the basis's runs (bootstrap.paired_differences)
    table: pd.DataFrame  # drop_tables.main_table of the basis's runs, with a ``converged`` count column
    gate: dict  # the convergence gate over the main runs (the basis's)
    basis: str  # which runs the tables and analogues are drawn from, in words
    summary: pd.DataFrame  # the seed means of the basis's runs
    random: pd.DataFrame  # drop_tables.random_baseline
    cells: pd.DataFrame  # basis.claim_cells: the cells the claims average (at half and all heads)
    all_cells: pd.DataFrame  # basis.cells: every model, task, ranking and k > 0
    judged: V.Judged  # the claims judged once on the informative basis
    by_basis: dict[str, V.Judged]  # the claims on every basis of claims.BASES (the informative one is ``judged``)
    claims: pd.DataFrame  # claims_frame: one row per claim
    sensitivity: pd.DataFrame  # sensitivity_frame: one row per basis
    model_drops: pd.DataFrame  # pooled_drops.model_drops of the cells
    paper: pd.DataFrame  # analogues.paper_table of the basis's scores and cells
    drops_by_model: pd.DataFrame = field(default_factory=pd.DataFrame)  # the front page's table
    analogues: list[Figure] = field(default_factory=list)  # the paper's analogues (a)-(c)
    drop_checks: pd.DataFrame = field(default_factory=pd.DataFrame)  # studies.drop_checks of the largest drop
    paper_numbers: pd.DataFrame = field(default_factory=pd.DataFrame)  # the numbers the paper states, and where
    retained: pd.DataFrame = field(default_factory=pd.DataFrame)  # basis.retained_gains beside each drop
    layers: pd.DataFrame = field(default_factory=pd.DataFrame)  # controls.layer_table of every ranking
    figures: list[Figure] = field(default_factory=list)  # every score; the ranking drawn; its constants
    glue: dict = field(default_factory=dict)  # every number and phrase of the prose, by glue key
    robustness: RB.Robustness | None = None  # draws' agreement, claim 1 per draw, runner-up lr, per-model verdicts

    @property
    def better(self) -> tuple[pd.DataFrame, dict]:
        """Claim 3's points (one per model) and statistics with the common ``tasks``."""
        evidence = self.judged.evidence
        return evidence.points, {**evidence.better, "tasks": evidence.common}


def answers(data: BookData, ranking: str | None = None, resamples: int = S.RESAMPLES) -> ResultsChapter:
    """The chapter's science, read from ``data.basis`` (another basis when ``resamples`` is not the default): the
    main table, the random baseline, the claims judged once per basis and the paper's table; with no run converged,
    no claim is testable."""
    basis = data.basis if resamples == S.RESAMPLES else build_basis(data.main, data.records, resamples)
    ranking = ranking or data.config.rank.methods[0]
    cells = claim_cells(basis, ranking)
    if not basis.gated:
        cells = cells.iloc[:0]
    judged = V.judge(cells)
    drops = pooled_drops.model_drops(cells)
    paper = pd.DataFrame()
    if len(basis.summary):
        paper = P.paper_table(basis.summary, basis.floors, cells, ranking, judged.evidence, drops)
    by_basis = V.judge_bases(cells, judged)
    return ResultsChapter(
        data=data,
        ranking=ranking,
        differences=basis.differences,
        table=converged_counts(F.main_table(basis.summary, basis.cells, ranking), data.main),
        gate=basis.gate,
        basis=W.basis_words(basis),
        summary=basis.summary,
        random=F.random_baseline(records_of(data, set(basis.runs["run_id"])), resamples=resamples),
        cells=cells,
        all_cells=basis.cells,
        judged=judged,
        by_basis=by_basis,
        claims=claims_frame(judged, basis.gate),
        sensitivity=sensitivity_frame(by_basis),
        model_drops=drops,
        paper=paper,
    )


def build(data: BookData) -> ResultsChapter:
    """The results chapter of a grid's committed runs (:func:`papa.book.load.load_book_data`)."""
    glue = headline_numbers(data)
    chapter = answers(data, glue["ranking"])
    glue |= answer_numbers(chapter)  # verdicts and drops with intervals, on the one basis
    largest = chapter.judged.judgements["claim2b"].pair  # the largest single drop's pair
    checks = pd.DataFrame() if largest is None else drop_checks(data, *largest)
    glue["largest_drop_summary"] = drop_checks_summary(checks)
    shown = shown_ranking(data.floors, data.rankings, chapter.ranking)
    ranking = ranking_figure(data.rankings, shown, sorted(set(data.main["k"])))
    constants = constants_figure(data.config.name, shown)
    chapter.drops_by_model = drops_by_model(chapter)
    chapter.analogues = analogue_figures(chapter)
    chapter.drop_checks = checks
    chapter.paper_numbers = W.paper_numbers_frame()
    chapter.retained = retained_gains(data.basis)
    chapter.layers = layer_table(data.rankings)
    chapter.figures = [fig_score_vs_dynamic_heads(data.summary, data.floors), ranking, constants]
    chapter.robustness = RB.build(data, chapter.cells, chapter.judged, chapter.ranking)
    chapter.glue = glue | chapter.robustness.glue
    return chapter


def analogue_figures(chapter: ResultsChapter) -> list[Figure]:
    """The paper's analogues (a)–(c) of the chapter's basis, claim 3's captioned with its one judgement."""
    points, better = chapter.better
    claim3 = chapter.judged.judgements["claim3"]
    caption = f"Verdict: {W.verdict_words(claim3)}. {W.reason('claim3', claim3)}"
    data = (chapter.summary, chapter.data.floors, chapter.all_cells)
    return AF.analogue_figures(*data, chapter.ranking, (points, better, caption))


def claims_frame(judged: V.Judged, gate: dict) -> pd.DataFrame:
    """One row per claim (:data:`~papa.analysis.claims.CLAIMS`): claim, paper, ours (the number, its pooled interval
    and what it averages), verdict, reason, rule (with the gate's counts)."""
    rows = []
    for claim in V.CLAIMS:
        words, judgement = W.CLAIM_WORDS[claim.key], judged.judgements[claim.key]
        ours = _ours(claim.key, judged.evidence, judgement)
        reason, rule = W.reason(claim.key, judgement), words.rule + W.gate_words(gate)
        rows.append([words.title, words.paper, ours, W.verdict_words(judgement), reason, rule])
    return pd.DataFrame(rows, columns=["claim", "paper", "ours", "verdict", "reason", "rule"])


def _ours(key: str, evidence: V.Evidence, judgement: V.Judgement) -> str:
    """The claims table's "ours" cell of claim ``key``: its number (``judgement``'s) and what it averages."""
    number = W.claim_number(judgement)
    if key in ("claim1", "claim2"):
        p = evidence.half if key == "claim1" else evidence.all
        what = f"average relative drop over {p['n']} informative model/task {plural(p['n'], 'pair')}"
        return number + f"; {what}" + (f" ({p['excluded']} left out: drop undefined)" if p["excluded"] else "")
    if key == "claim2b":
        defined = int(evidence.bound["relative_drop"].notna().sum())
        undefined = len(evidence.bound) - defined
        left = f" ({undefined} left out: drop undefined)" if undefined else ""
        return f"largest single drop {number}, of {defined} informative model/task {plural(defined, 'pair')}{left}"
    points = evidence.points
    columns = (points[c] for c in ("model", "drop", "low", "high", "score"))
    per_model = ", ".join(f"{m} {interval_text(d, lo, hi)} at {W.score(s)}" for m, d, lo, hi, s in zip(*columns))
    over = f" over {', '.join(task_name(t) for t in evidence.common)}" if evidence.common else ""
    return number + (f"; drop at k = 0 score, per model{over}: {per_model}" if per_model else "")


def sensitivity_frame(by_basis: dict[str, V.Judged]) -> pd.DataFrame:
    """One row per basis of :data:`~papa.analysis.claims.BASES`: the pairs it averages, each claim's number and
    verdict, and the paper's number for that basis."""
    rows = []
    for code, _, families in V.BASES:
        judged = by_basis[code]
        half, full = judged.evidence.half, judged.evidence.all
        row = {"basis": W.BASIS_WORDS[code], "n_half": half["n"], "n_all": full["n"]}
        row |= {"excluded_half": half["excluded"], "excluded_all": full["excluded"]}  # pairs, each side
        for claim in V.CLAIMS:
            judgement = judged.judgements[claim.key]
            row |= {claim.key: W.claim_number(judgement), f"{claim.key}_verdict": W.verdict_words(judgement)}
        rows.append(row | {"paper": W.PAPER_BY_BASIS["families" if families else "all"]})
    return pd.DataFrame(rows)


def answer_numbers(chapter: ResultsChapter) -> dict:
    """The numbers the prose and the front page cite, by glue key, every one from the claims' one judgement: per
    claim its verdict, number, reason and table text; the gate's counts; the pooled drops at half and all heads and
    the largest single drop; the bootstrap's resamples and seed."""
    d = chapter.differences
    resamples = int(d["resamples"].iloc[0]) if len(d) else S.RESAMPLES
    evidence = chapter.judged.evidence
    numbers: dict = gate_numbers(chapter.gate) | {
        "analogue_basis": chapter.basis,
        "claim3_n": int(evidence.better.get("n", 0)),
        "claim3_tasks": and_list(task_name(t) for t in evidence.common) or "no task",
        "pooled_resamples": f"{resamples:,}",
        "pooled_seed": "0",
        "paper_drop_all": W.percent(V.PAPER_DROP_ALL, 0),
        "paper_max_drop_all": W.percent(V.MAX_DROP_ALL, 0),
    }
    for claim, row in zip(V.CLAIMS, chapter.claims.itertuples()):
        key = claim.key
        numbers |= {f"{key}_verdict": row.verdict, f"{key}_reason": row.reason}
        numbers[f"{key}_number"] = W.claim_number(chapter.judged.judgements[key])
    for name, pooled in (("half", evidence.half), ("all", evidence.all)):
        numbers[f"n_pairs_{name}"] = pooled["n"]
    largest = chapter.judged.judgements["claim2b"]
    numbers["drop_all_max"] = largest.value
    numbers["drop_all_max_pair"] = "no pair" if largest.pair is None else W.pair_words(*largest.pair)
    numbers["random_summary"] = W.random_summary(chapter.random, chapter.ranking)
    return numbers


def drops_by_model(chapter: ResultsChapter) -> pd.DataFrame:
    """The front page's per-model table: heads, and the pooled drops at half and all heads with their intervals and
    the number of informative pairs each averages (the paper's table's average rows show the same numbers)."""
    rows = []
    for r in chapter.model_drops.itertuples():
        half = interval_text(r.drop_half, r.drop_half_low, r.drop_half_high)
        full = interval_text(r.drop_all, r.drop_all_low, r.drop_all_high)
        rows.append([r.model, int(r.total_heads), half, int(r.n_tasks_half), full, int(r.n_tasks_all)])
    half_header = f"drop, half of the heads constant ({chapter.ranking})"
    columns = ["model", "heads", half_header, "pairs, half", "drop, all heads constant", "pairs, all"]
    return pd.DataFrame(rows, columns=columns)


def shown_ranking(floors: pd.DataFrame, rankings: Mapping[str, list], ranking: str) -> str:
    """The ``<model>__<task>__<method>`` stem of the ranking the chapter draws: ``ranking`` on the largest
    model's first informative task (``floors``), else the largest model's first ranking of any kind."""
    pairs = zip(floors["model"], floors["task"], floors["informative"])
    informative = [f"{m}__{t}__{ranking}" for m, t, ok in pairs if ok]
    candidates = [stem for stem in informative if stem in rankings] or sorted(rankings)[:1]
    return max(candidates, key=lambda stem: len(rankings[stem]))


def ranking_figure(rankings: Mapping[str, list], stem: str, k_values: list[int]) -> Figure:
    """The heatmap of ranking ``stem`` (:func:`shown_ranking`) with the k values the main grid ran."""
    heads = rankings[stem]
    layers, per_layer = 1 + max(layer for layer, _ in heads), 1 + max(head for _, head in heads)
    return fig_head_ranking(heads, layers, per_layer, k_values=k_values, source=stem)


def constants_figure(config_name: str, stem: str) -> Figure:
    """Four constant matrices (the first two heads of the first and the last layer) of the shown ranking's model and
    task (else of the grid's first constants file), its caption naming both; a :func:`placeholder_figure` when the
    grid has no constants file."""
    folder = ROOT / "book" / "runs" / config_name / "artifacts" / "constants"
    pair = folder / f"{SEPARATOR.join(name_parts(stem)[:-1])}.safetensors"
    found = [pair] if pair.is_file() else sorted(folder.glob("*.safetensors"))
    if not found:
        why = "No constants file in this grid's runs: no constant matrix to draw."
        return AF.placeholder_figure("fig-constants", why)
    constant_set = load_constants(found[0])
    last = constant_set.constants.shape[0] - 1  # [layers, heads, L, L]
    meta = constant_set.meta
    picks = [(0, 0), (0, 1), (last, 0), (last, 1)]
    source = f"{task_name(meta['task'])} ({meta['num_examples']:,} examples) for {meta['model']}"
    return fig_constants(constant_set.constants, picks=picks, source=source)
