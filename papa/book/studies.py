"""The sensitivity studies of earlier grids (training size, probe settings) and the cached-vs-faithful comparison:
tables the controls chapter shows when a grid runs such studies. Re-exported by :mod:`papa.book`."""

from __future__ import annotations

import pandas as pd

from papa.analysis import results as R
from papa.analysis.drops import train_size_table
from papa.analysis.findings import gate_runs
from papa.book.data import BookData, _study_settings
from papa.book.words import and_list, lr_text, plural


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
        rows.append(
            {
                "model": key[0],
                "task": key[1],
                "ranking": key[2],
                "k": int(key[3]),
                label_a: sum(va) / len(va),
                label_b: sum(vb) / len(vb),
                f"{label_a} seeds": len(va),
                f"{label_b} seeds": len(vb),
                "difference": sum(vb) / len(vb) - sum(va) / len(va),
                "real": R.difference_is_real(va, vb),
            }
        )
    return pd.DataFrame(rows)


def _describe(settings: dict, official: dict, whole_split: int | None = None) -> str:
    """The study's differences from the official setting in words (``whole_split``: the number of
    examples the whole training split turned out to hold, when the study used it)."""
    parts = []
    if settings["lr"] != official["lr"]:
        parts.append(f"lr {settings['lr']}" if isinstance(settings["lr"], str) else f"lr {lr_text(settings['lr'])}")
    if settings["epochs"] != official["epochs"]:
        parts.append(f"{settings['epochs']} epochs")
    if settings["selection"] != official["selection"]:
        parts.append("epoch chosen on held-out training data" if settings["selection"] == "heldout" else f"{settings['selection']} epoch")
    if settings["train_examples"] != official["train_examples"]:
        size = settings["train_examples"]
        whole = "the whole training split" + (f" ({whole_split:,} examples)" if whole_split else "")
        parts.append(whole if size is None else f"{size:,} training examples")
    return ", ".join(parts)


def _probe_change(config: dict, study: dict, model: str, whole_split: int | None = None) -> str:
    """How ``study`` trains ``model``'s full probe otherwise than the main grid, in words (:func:`_describe`): its lr,
    epochs, epoch selection or training size; "" when it changes none of them, probes another input, or runs in
    another mode (then it is no setting of the same probe)."""
    settings, official = _study_settings(config, study, model), _study_settings(config, {}, model)  # per model: its budget sizes
    if study.get("probe_input", "all") != "all" or settings["modes"] != official["modes"]:
        return ""
    return _describe(settings, official, whole_split)


def sensitivity_table(data: BookData) -> pd.DataFrame:
    """Does the size of the PAPA drop depend on how well the probe is trained?

    One row per sensitivity study (a study of the full probe in the main grid's mode that changes the
    probe's lr, epochs, epoch selection or training size) × model × task: the k = 0 and k = all means over seeds
    and the relative drop, under the official setting and under the study's, and whether each
    score's change exceeds the seed spread (:func:`papa.analysis.results.difference_is_real`).
    """
    rows = []
    for study in data.config.get("studies", []):
        frame = data.studies.get(study["name"])
        if frame is None or frame.empty:
            continue
        for (model, task), group in frame[frame["is_main"] & (frame["probe_input"] == "all")].groupby(["model", "task"]):
            if not _probe_change(data.config, study, model):
                continue
            base = data.main[data.main["is_main"] & (data.main["probe_input"] == "all") & (data.main["model"] == model) & (data.main["task"] == task)]
            scores = {}
            for label, df in (("official", base), ("study", group)):
                for name, ranking in (("k0", "none"), ("kall", "all")):
                    scores[label, name] = df.loc[df["ranking"] == ranking, "value"].astype(float).tolist()
            if not all(scores.values()):
                continue
            mean = {key: sum(v) / len(v) for key, v in scores.items()}
            chosen = group.loc[group["ranking"].isin(["none", "all"]), "selected_epoch"].astype(float)
            rows.append(
                {
                    "study": study["name"],
                    "setting": _probe_change(data.config, study, model, int(group["train_examples"].max())),
                    "train examples official": int(base["train_examples"].max()),
                    "train examples study": int(group["train_examples"].max()),
                    "model": model,
                    "task": task,
                    "k=0 official": mean["official", "k0"],
                    "k=all official": mean["official", "kall"],
                    "drop official": R.relative_drop(mean["official", "kall"], mean["official", "k0"]),
                    "k=0 study": mean["study", "k0"],
                    "k=all study": mean["study", "kall"],
                    "drop study": R.relative_drop(mean["study", "kall"], mean["study", "k0"]),
                    "k=0 change real": R.difference_is_real(scores["official", "k0"], scores["study", "k0"]),
                    "k=all change real": R.difference_is_real(scores["official", "kall"], scores["study", "kall"]),
                    "mean epoch reported": float(chosen.mean()),
                }
            )
    return pd.DataFrame(rows)


#: Study keys that leave the probe as the main grid trains it, apart from how much of the training split it sees.
_SIZE_KEYS = {"name", "chapter", "models", "tasks", "fractions", "seeds", "methods", "max_train_examples", "pool_examples", "heldout_examples"}


def size_studies(config: dict) -> list[str]:
    """The studies that change only the training size: for each of their models, the main grid's lr (or lr
    choice), epochs, epoch selection, modes and held-out draw (``probe.per_model`` included) and dev split, no key
    outside :data:`_SIZE_KEYS`, and another training size than that model's in the main grid."""
    same = ("lr", "epochs", "selection", "modes", "heldout_examples")

    def only_size(study: dict, model: str) -> bool:
        settings, official = _study_settings(config, study, model), _study_settings(config, {}, model)
        return all(settings[key] == official[key] for key in same) and settings["train_examples"] != official["train_examples"]

    return [
        study["name"]
        for study in config.get("studies", [])
        if set(study) <= _SIZE_KEYS and study.get("models", config["models"]) and all(only_size(study, model) for model in study.get("models", config["models"]))
    ]


def train_size_study(data: BookData) -> pd.DataFrame:
    """:func:`papa.analysis.drops.train_size_table` at the official probe setting (the main grid's lr,
    epochs, epoch selection and mode), for the model × task pairs run at more than one size."""
    official = _study_settings(data.config, {})
    lr = None if isinstance(official["lr"], str) else official["lr"]  # "select": any chosen lr
    table = train_size_table(data.tidy, lr, official["epochs"], official["selection"], official["modes"][0])
    sizes = table.groupby(["model", "task"])["train_examples"].transform("nunique")
    return table[sizes > 1].reset_index(drop=True)


def size_extremes(sizes: pd.DataFrame) -> dict[str, str]:
    """The first model × task of :func:`train_size_study` at its smallest and largest training size, for the
    results chapter's prose: ``size_model``, ``size_task``, ``size_small``/``size_large`` (examples) and
    ``drop_all_small_train``/``drop_all_large_train`` (relative drop with every head constant); "n/a" without one."""
    from papa.pipeline.executed import task_name

    if sizes.empty:
        return dict.fromkeys(("size_model", "size_task", "size_small", "size_large", "drop_all_small_train", "drop_all_large_train"), "n/a")
    first = sizes.iloc[0]
    pair = sizes[(sizes["model"] == first["model"]) & (sizes["task"] == first["task"])].sort_values("train_examples")
    small, large = pair.iloc[0], pair.iloc[-1]
    return {
        "size_model": str(first["model"]),
        "size_task": task_name(str(first["task"])),
        "size_small": f"{int(small['train_examples']):,}",
        "size_large": f"{int(large['train_examples']):,}",
        "drop_all_small_train": f"{small['drop']:.1%}",
        "drop_all_large_train": f"{large['drop']:.1%}",
    }


def _span(values) -> str:
    """``[2, 6, 2]`` → ``"2–6"`` (one value: itself)."""
    low, high = int(min(values)), int(max(values))
    return f"{low}" if low == high else f"{low}\u2013{high}"


def drop_checks(data: BookData, model: str, task: str) -> pd.DataFrame:
    """Does one model × task's drop with every head constant survive another way of training the probe?

    One row per probe setting that ran the pair at k = 0 and with every head constant: the main grid's, then
    each study that trains the same probe otherwise (:func:`_probe_change`: another lr, epochs, epoch selection or
    training size; the studies of :func:`sensitivity_table`). Each setting on the book's basis: the seeds whose runs passed the
    convergence gate at both k = 0 and all heads (every seed where no run has a held-out curve). Columns: ``setting`` ("main grid" or the study's name),
    ``change`` (the study's differences in words; "" for the main grid), ``lr`` (the lr its runs used), ``seeds``,
    ``k0_scores`` and ``all_scores`` (per seed, in seed order), their means ``k0`` and ``all``, the relative
    ``drop`` of the means, ``apart`` (every all-heads score below every k = 0 score), ``epoch_reported`` and
    ``epochs_trained`` (``"2–6"``: the range over both sides' runs) and ``cap`` (the epochs allowed).
    """
    sources = [("main grid", "", data.main)]
    for study in data.config.get("studies", []):
        frame, change = data.studies.get(study["name"]), _probe_change(data.config, study, model)
        if frame is not None and not frame.empty and change:
            sources.append((study["name"], change, frame))
    rows = []
    for name, change, frame in sources:
        pair = frame[frame["is_main"] & (frame["probe_input"] == "all") & (frame["model"] == model) & (frame["task"] == task)]
        if pair.empty:
            continue
        kept, _ = gate_runs(pair)  # the book's basis: seeds whose runs converged on both sides (all, where none has a curve)
        if kept:
            converged = pair[pair["run_id"].isin(kept)]
            seeds = set(converged.loc[converged["ranking"] == "none", "seed"]) & set(converged.loc[converged["ranking"] == "all", "seed"])
            pair = pair[pair["seed"].isin(seeds)]
        k0 = pair[pair["ranking"] == "none"].sort_values("seed")
        full = pair[pair["ranking"] == "all"].sort_values("seed")
        if k0.empty or full.empty:
            continue
        runs = pd.concat([k0, full])
        trained = [((data.records.get(run_id) or {}).get("convergence") or {}).get("epochs_trained", epochs) for run_id, epochs in zip(runs["run_id"], runs["epochs"])]
        k0_scores, all_scores = k0["value"].astype(float).tolist(), full["value"].astype(float).tolist()
        k0_mean, all_mean = sum(k0_scores) / len(k0_scores), sum(all_scores) / len(all_scores)
        lrs = runs["lr"].dropna().unique()
        rows.append(
            {
                "setting": name,
                "change": change,
                "lr": float(lrs[0]) if len(lrs) == 1 else float("nan"),
                "seeds": int(min(len(k0), len(full))),
                "k0_scores": k0_scores,
                "all_scores": all_scores,
                "k0": k0_mean,
                "all": all_mean,
                "drop": R.relative_drop(all_mean, k0_mean),
                "apart": max(all_scores) < min(k0_scores),
                "epoch_reported": _span(runs["selected_epoch"].astype(int)),
                "epochs_trained": _span(trained),
                "cap": int(runs["epochs"].max()),
            }
        )
    return pd.DataFrame(rows, columns=["setting", "change", "lr", "seeds", "k0_scores", "all_scores", "k0", "all", "drop", "apart", "epoch_reported", "epochs_trained", "cap"])


def drop_checks_summary(checks: pd.DataFrame) -> str:
    """:func:`drop_checks` in words: in how many settings the seeds' scores are apart, and each drop; and, where another
    setting's k = 0 probe scores higher than the main grid's, whether that better-trained probe loses more or less."""
    if checks.empty:
        return "no run to check"
    apart = int(checks["apart"].sum())
    where = "In every setting" if apart == len(checks) else f"In {apart} of {len(checks)} settings"
    drops = and_list(f"{row.drop:.1%} ({'the main grid' if row.setting == 'main grid' else row.change}; {row.seeds} {plural(row.seeds, 'seed')})" for row in checks.itertuples())
    sentence = f"{where}, every seed's score with every head constant lies below every seed's score at k = 0; the drop is {drops}"
    best, main = checks.loc[checks["k0"].idxmax()], checks[checks["setting"] == "main grid"]
    if best["setting"] != "main grid" and len(main):
        main = main.iloc[0]
        sentence += (
            f". The best-trained probe at k = 0 is not the main grid's: {best['change']} ({best['seeds']} {plural(best['seeds'], 'seed')}) scores"
            f" {best['k0']:.3f} against {main['k0']:.3f},"
            f" and loses {'more' if best['drop'] > main['drop'] else 'less'} with every head constant"
        )
    return sentence


__all__ = ["compare", "drop_checks", "drop_checks_summary", "sensitivity_table", "size_extremes", "size_studies", "train_size_study"]
