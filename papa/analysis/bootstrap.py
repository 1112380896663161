"""Two-level bootstrap intervals over probe seeds and dev examples: of a seed-mean score (:func:`score_interval`) and
of its paired difference to k = 0 (:func:`paired_bootstrap`, :func:`paired_differences`).

Every metric is a function of sums over dev examples of a per-example count vector
(:func:`papa.probing.metrics.statistics.example_statistics`, ``[N, D]``, the statistics the reported scores are
computed from), so a resample only re-weights rows: ``(correct, 1)`` for accuracy, the one-hot confusion cell
(``C × C``) for MCC, ``(tp, fp, fn, tn)`` of label 1 for F1 and ``combined``, and per sentence ``(correct,
predicted, true spans)`` for NER's F1 (seqeval's default mode) or ``(correct tokens, tokens)`` for POS.

A resample has two levels: it draws the ``S`` probe seeds with replacement (:func:`resample_seeds`; paired runs are
drawn as pairs, so a seed's k = 0 and k runs stay together), then ``N`` dev examples with replacement
(:func:`resample_rows`), and averages the drawn seeds' metrics. The interval is the 2.5 and 97.5 percentiles of the
``R`` resampled values, so it covers both the seed-to-seed spread and the dev sample; a difference is *real* only when
its interval excludes 0. With one seed the seed level draws nothing, and the interval covers the dev examples alone.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

import numpy as np
import pandas as pd

from papa.analysis.results import ranking_family, relative_drop
from papa.core.errors import PapaError
from papa.core.tasks import get_task
from papa.probing.metrics.statistics import example_statistics, metric_from_sums

RESAMPLES = 2000


def _stack(per_seed: Sequence[np.ndarray], what: str) -> np.ndarray:
    if not per_seed:
        raise PapaError(f"No runs {what}", "Pass the per-seed statistics of at least one run.")
    shapes = {s.shape for s in per_seed}
    if len(shapes) != 1:
        what = f"The runs {what} hold statistics of different shapes {sorted(shapes)}"
        raise PapaError(what, "Compare runs on the same dev examples.")
    return np.stack(per_seed)


def _check_resamples(resamples: int) -> None:
    if resamples < 1:
        raise PapaError(f"Bootstrap resamples {resamples} out of range", "Use e.g. resamples=2000.")


def percentile_interval(samples: np.ndarray) -> tuple[float, float]:
    """The central 95% interval of bootstrap ``samples`` ``[R]``: its 2.5 and 97.5 percentiles."""
    low, high = np.quantile(samples, [0.025, 0.975])
    return float(low), float(high)


def dev_set_name(task: str, eval_sha: str | None) -> str:
    """The stream a dev set's examples are resampled on: the task's data folder (NER and POS share theirs) and the
    hash of the evaluated indices, so every run scored on the same examples draws the same resamples; the task alone
    without a hash."""
    return f"{get_task(task).local_folder}:{eval_sha}" if eval_sha else task


def resample_rows(n: int, resamples: int = RESAMPLES, seed: int = 0, dev_set: str | None = None) -> np.ndarray:
    """The bootstrap draws ``[R, N]`` (row ``r``: the example indices of resample ``r``) from ``default_rng(seed)``, or
    with a ``dev_set`` from ``default_rng([seed, CRC-32 of dev_set])``: one stream per dev set, shared by its runs."""
    rng = np.random.default_rng(seed if dev_set is None else [seed, zlib.crc32(dev_set.encode("utf-8"))])
    return rng.integers(0, n, size=(resamples, n), dtype=np.int64)


def resample_seeds(
    n_seeds: int, resamples: int = RESAMPLES, seed: int = 0, dev_set: str | None = None, stream: int = 1
) -> np.ndarray:
    """The seed level of the bootstrap: ``[R, S]`` counts (row ``r``: how often resample ``r`` draws each of the
    ``S`` seeds; each row sums to ``S``), from ``default_rng([seed, stream])``, or with a ``dev_set`` from
    ``default_rng([seed, CRC-32 of dev_set, stream])``: streams apart from :func:`resample_rows`' rows (``stream``
    ≥ 1; unpaired sides draw their seeds from streams 1 and 2)."""
    key = [seed, stream] if dev_set is None else [seed, zlib.crc32(dev_set.encode("utf-8")), stream]
    draws = np.random.default_rng(key).integers(0, n_seeds, size=(resamples, n_seeds), dtype=np.int64)
    counts = np.zeros((resamples, n_seeds))
    np.add.at(counts, (np.repeat(np.arange(resamples), n_seeds), draws.ravel()), 1.0)
    return counts


def _resampled_means(
    stacks: Sequence[np.ndarray],
    metric: str,
    token: bool,
    resamples: int,
    rows: np.ndarray,
    seed_counts: Sequence[np.ndarray],
) -> list[np.ndarray]:
    """Per stack of per-seed statistics ``[S, N, D]`` (all on the same ``N`` dev examples) and its seed draws
    ``seed_counts [R, S]`` (:func:`resample_seeds`): the mean over the drawn seeds of the metric on each of
    ``resamples`` bootstrap resamples of the examples ``[R]``; every stack sees the same example resamples
    (``rows [R, N]``, :func:`resample_rows`)."""
    n = stacks[0].shape[1]
    if rows.shape != (resamples, n):
        what = f"The resample draws have shape {rows.shape}, not ({resamples}, {n})"
        raise PapaError(what, "Draw them with resample_rows(n, resamples, ...).")
    means = [np.empty(resamples) for _ in stacks]
    for start in range(0, resamples, 256):
        chunk = rows[start : start + 256]
        weights = np.zeros((len(chunk), n))
        np.add.at(weights, (np.repeat(np.arange(len(chunk)), n), chunk.ravel()), 1.0)  # [R', N] times drawn
        for mean, stack, counts in zip(means, stacks, seed_counts):
            sums = np.einsum("rn,snd->rsd", weights, stack)
            per_seed = metric_from_sums(metric, sums, token)  # [R', S]
            mean[start : start + len(chunk)] = (per_seed * counts[start : start + len(chunk)]).sum(1) / len(stack)
    return means


def score_interval(
    per_seed: Sequence[np.ndarray], metric: str, token: bool = False, resamples: int = RESAMPLES, seed: int = 0
) -> dict:
    """The seed-mean ``metric`` of runs on the same dev examples (one ``[N, D]`` statistics array per seed, as
    :func:`example_statistics`), with its 95% two-level bootstrap interval over seeds and dev examples: ``score``,
    ``low``, ``high``."""
    stack = _stack(per_seed, "to score")
    _check_resamples(resamples)
    rows, counts = resample_rows(stack.shape[1], resamples, seed), resample_seeds(len(stack), resamples, seed)
    (means,) = _resampled_means([stack], metric, token, resamples, rows, [counts])
    low, high = percentile_interval(means)
    return {"score": float(metric_from_sums(metric, stack.sum(1), token).mean()), "low": low, "high": high}


def paired_bootstrap(
    base: Sequence[np.ndarray],
    other: Sequence[np.ndarray],
    metric: str,
    token: bool = False,
    resamples: int = RESAMPLES,
    seed: int = 0,
    pairs: Sequence[tuple[int, int]] | None = None,
    rows: np.ndarray | None = None,
    dev_set: str | None = None,
) -> dict:
    """The difference ``other − base`` of the seed-mean metric, with a 95% two-level bootstrap interval over probe
    seeds and dev examples (the module docstring).

    ``base``/``other``: one ``[N, D]`` statistics array per seed at k = 0 and at k, on the same dev examples;
    ``rows [R, N]`` fixes the example resamples, else they are :func:`resample_rows` of ``seed`` and ``dev_set``;
    the seeds are drawn by :func:`resample_seeds` of ``seed`` and ``dev_set``. Given ``pairs`` (``(i, j)``: base run
    ``i`` and run ``j`` share a probe seed) only paired runs count, and a resample draws pairs, so both sides of a
    seed move together; without ``pairs`` each side draws its own seeds. Returns the scores, ``difference`` with
    ``low``/``high`` and ``real``, the relative drop with its interval and ``[R]`` ``relative_samples`` (NaN where a
    k = 0 score is ≤ 0), and the counts.
    """
    b, o = _stack(base, "at k = 0"), _stack(other, "at k")
    unpaired = 0
    if pairs is not None:
        pairs = list(pairs)
        if not pairs:
            fix = "Compare runs of the same seeds (the gate may have left one side's out)."
            raise PapaError("No run at k shares a probe seed with a run at k = 0", fix)
        unpaired = len(b) + len(o) - len({i for i, _ in pairs}) - len({j for _, j in pairs})
        b, o = b[[i for i, _ in pairs]], o[[j for _, j in pairs]]
    if b.shape[1:] != o.shape[1:]:
        fix = "Compare runs on the same dev examples (the whole dev split)."
        raise PapaError(f"The runs score {b.shape[1]} and {o.shape[1]} dev examples", fix)
    base_seeds, other_seeds = metric_from_sums(metric, b.sum(1), token), metric_from_sums(metric, o.sum(1), token)
    base_score, score = float(base_seeds.mean()), float(other_seeds.mean())
    paired = np.array([y - x for x, y in zip(base_seeds, other_seeds)])  # the (re-ordered) pairs, in order
    _check_resamples(resamples)
    rows = resample_rows(b.shape[1], resamples, seed, dev_set) if rows is None else rows
    counts_base = resample_seeds(len(b), resamples, seed, dev_set)
    counts_other = counts_base if pairs is not None else resample_seeds(len(o), resamples, seed, dev_set, 2)
    m_base, m_other = _resampled_means([b, o], metric, token, resamples, rows, [counts_base, counts_other])
    differences = m_other - m_base
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = np.where(m_base > 0, (m_base - m_other) / m_base, math.nan)
    low, high = percentile_interval(differences)
    rel_low, rel_high = percentile_interval(relative) if np.isfinite(relative).all() else (math.nan, math.nan)
    out = {"base_score": base_score, "score": score, "difference": score - base_score, "low": low, "high": high}
    out |= {"real": bool(low > 0 or high < 0), "relative_drop": relative_drop(score, base_score)}
    out |= {"relative_low": rel_low, "relative_high": rel_high, "seed_min": float(paired.min())}
    out |= {"seed_max": float(paired.max()), "n_examples": int(b.shape[1]), "n_base": len(b), "n_runs": len(o)}
    return out | {"n_unpaired": int(unpaired), "resamples": int(resamples), "relative_samples": relative}


def run_statistics(result: dict) -> np.ndarray:
    """The ``[N, D]`` statistics of one result record (its ``dev`` predictions; see :mod:`papa.probing.experiment`)."""
    dev = result.get("dev")
    if not dev:
        what = f"The result of {result.get('config', {}).get('model')}/{result.get('task')} stores no dev predictions"
        raise PapaError(what, "Rerun it with a papa that records them.")
    names = dev.get("label_names")
    classes = len(names or []) or None
    return example_statistics(result["metric"], dev["predictions"], dev["labels"], dev.get("lengths"), names, classes)


def paired_differences(results: dict[str, dict], resamples: int = RESAMPLES) -> pd.DataFrame:
    """For every (model, task, ranking, k > 0) group of runs with dev predictions, :func:`paired_bootstrap` against
    the same model and task's k = 0 runs (same probe settings and dev examples), paired by probe seed: one row per
    group, its keys and the bootstrap's fields. Seeded random orderings are pooled as ``random``. Every dev set
    draws from its own stream (:func:`resample_rows`), so all models and k of a task share their resamples."""
    groups: dict[tuple, list[dict]] = {}
    for result in results.values():
        if not result.get("dev"):
            continue
        c = result["config"]
        k, total = int(c["constant_heads"]), int(c["total_heads"])
        dev_sha = (result.get("data") or {}).get("eval_indices_sha")
        setting = (c.get("mode"), c.get("probe_input", "all"), c.get("lr"), c.get("selection", "final"), dev_sha)
        groups.setdefault((c["model"], result["task"], ranking_family(c), k, total, setting), []).append(result)
    rows = []
    order = lambda item: (item[0][0], item[0][1], item[0][3], item[0][2], str(item[0][5]))
    for (model, task, ranking, k, total, setting), runs in sorted(groups.items(), key=order):
        base = groups.get((model, task, "none", 0, total, setting))
        if k == 0 or not base:
            continue
        base_runs, other_runs = (sorted(rs, key=lambda r: r["config"]["seed"]) for rs in (base, runs))
        position = {r["config"]["seed"]: i for i, r in enumerate(base_runs)}
        seeds = [r["config"]["seed"] for r in other_runs]
        pairs = [(position[s], j) for j, s in enumerate(seeds) if s in position]
        if not pairs:
            continue  # no common seed (the gate left them out): no paired interval
        metric, token = base_runs[0]["metric"], bool(base_runs[0]["dev"].get("lengths"))
        dev_set = dev_set_name(task, setting[4])
        base_stats, other_stats = [run_statistics(r) for r in base_runs], [run_statistics(r) for r in other_runs]
        stats = paired_bootstrap(base_stats, other_stats, metric, token, resamples, 0, pairs, dev_set=dev_set)
        keys = {"model": model, "task": task, "ranking": ranking, "k": k, "fraction": k / total}
        rows.append(keys | {"mode": setting[0], "probe_input": setting[1], "dev_set": dev_set, **stats})
    return pd.DataFrame(rows)


def convergence_table(results: dict[str, dict]) -> pd.DataFrame:
    """One row per run: ``run_id``, ``converged`` (None for a run without a held-out curve), ``best_epoch``,
    ``epochs_trained``, ``stopped_early`` (from each result's ``convergence`` record)."""
    keys = ["converged", "best_epoch", "epochs_trained", "stopped_early"]
    rows = [[run_id, *((r.get("convergence") or {}).get(key) for key in keys)] for run_id, r in results.items()]
    return pd.DataFrame(rows, columns=["run_id", *keys])
