"""The book: data for the chapter notebooks, generated pages, and the Jupyter Book build."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from . import results as R
from .grid import ROOT, load_config


@dataclass
class BookData:
    """Everything a chapter needs from one grid's runs."""

    config: dict
    tidy: pd.DataFrame
    main: pd.DataFrame
    summary: pd.DataFrame
    floors: pd.DataFrame
    epochs: pd.DataFrame
    studies: dict[str, pd.DataFrame] = field(default_factory=dict)

    def glue_all(self) -> None:
        from myst_nb import glue

        glue("n_runs", int(self.tidy["run_id"].nunique()), display=False)
        glue("config_name", self.config["name"], display=False)


def _study_settings(config: dict, study: dict) -> dict:
    probe = config["probe"]
    return {
        "lr": float(study.get("lr", probe.get("lr", 2e-5))),
        "epochs": int(study.get("epochs", probe.get("epochs", 15))),
        "modes": study.get("modes", probe.get("modes", ["cached"])),
        "tasks": study.get("tasks", config["tasks"]),
        "train_examples": study.get("max_train_examples", probe.get("max_train_examples", 1000)),
    }


def study_frame(tidy: pd.DataFrame, config: dict, study: dict | None = None, probe_input: str | None = None) -> pd.DataFrame:
    """Rows of ``tidy`` belonging to a study (the main grid when ``study`` is None): same lr, epochs,
    modes and tasks, and at most the study's training size."""
    s = _study_settings(config, study or {})
    rows = tidy[
        (tidy["lr"].round(12) == round(s["lr"], 12)) & (tidy["epochs"] == s["epochs"]) & tidy["mode"].isin(s["modes"])
        & tidy["task"].isin(s["tasks"]) & (tidy["train_examples"] <= s["train_examples"])
    ]
    limit = rows.groupby("task")["train_examples"].transform("max") if len(rows) else rows["train_examples"]
    rows = rows[rows["train_examples"] == limit]
    if probe_input is not None:
        rows = rows[rows["probe_input"] == probe_input]
    return rows


def load_book_data(config_name: str, runs_dir: str) -> BookData:
    config = load_config(ROOT / "configs" / f"{config_name}.yaml")
    folder = ROOT / runs_dir / "artifacts" / "results"
    tidy = R.load_results(folder)
    main = study_frame(tidy, config)
    summary = R.summarise(main)
    floors = R.floors_table(main)
    epochs = R.epoch_table(folder)
    epochs = epochs[epochs["run_id"].isin(set(main["run_id"]))]
    studies = {s["name"]: study_frame(tidy, config, s) for s in config.get("studies", [])}
    return BookData(config, tidy, main, summary, floors, epochs, studies)
