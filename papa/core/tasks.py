"""The one registry of tasks (:data:`TASKS`): what each task is (columns, label column, main metric), how it is
named in words (display name, metric in words, source corpus) and how large its hub splits are.

Everything that names or sizes a task reads it here: the config schema (:data:`papa.core.fields.Task`), the loaders
(:mod:`papa.probing.data`), run titles (:mod:`papa.pipeline.executed`), time estimates (:mod:`papa.pipeline.estimate`),
the setup page and the figures (:func:`task_name`, :func:`metric_name`). Adding a task is one :class:`TaskSpec` here
(plus its data). The module imports nothing of papa but the errors: every layer may read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from papa.core.errors import PapaError

#: Metrics in words (a metric not listed: its name with spaces).
METRIC_NAMES = {
    "accuracy": "accuracy",
    "matthews_correlation": "Matthews correlation",
    "combined": "mean of accuracy and F1",
    "f1": "F1",
}


@dataclass(frozen=True)
class TaskSpec:
    """One task: ``kind`` ``"sequence"`` (a label per example) or ``"token"`` (a label per word); ``hub_splits``:
    papa's split names → the hub's where they differ (MNLI's ``validation`` is the hub's ``validation_matched``).

    Words: ``display`` (``"SST-2"``), ``source`` (the corpus it comes from) and ``metric_words`` (the main metric as the
    setup page describes it; None: :func:`metric_name` of it). Sizes: ``train_size``/``dev_size``, the hub's training
    and evaluation splits (for estimates without local data)."""

    name: str
    kind: Literal["sequence", "token"]
    hub_path: str
    hub_config: str | None
    local_folder: str
    text_columns: tuple[str, ...]
    label_column: str
    main_metric: str
    display: str
    source: str
    train_size: int
    dev_size: int
    metric_words: str | None = None
    eval_split: str = "validation"
    hub_splits: tuple[tuple[str, str], ...] = ()

    @property
    def is_token_task(self) -> bool:
        return self.kind == "token"

    @property
    def is_pair_task(self) -> bool:
        return len(self.text_columns) == 2

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns of a loaded split: the text columns, then the label column."""
        return (*self.text_columns, self.label_column)

    @property
    def metric_display(self) -> str:
        """The main metric in words (``"entity-level micro F1"`` for NER, else :func:`metric_name`)."""
        return self.metric_words or metric_name(self.main_metric)

    def hub_split(self, split: str) -> str:
        return dict(self.hub_splits).get(split, split)


_GLUE, _CONLL = "GLUE", "CoNLL-2003"
#: The six PAPA tasks, by id (the order every listing uses). Hub sizes: MNLI's full 393k-pair training split (the
#: local stand-in holds a 9k subset) and its matched dev split.
TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec(
            "cola", "sequence", "nyu-mll/glue", "cola", "cola", ("sentence",), "label", "matthews_correlation",
            "CoLA", _GLUE, 8551, 1043,
        ),
        TaskSpec(
            "sst2", "sequence", "nyu-mll/glue", "sst2", "sst2", ("sentence",), "label", "accuracy",
            "SST-2", _GLUE, 67349, 872,
        ),
        TaskSpec(
            "mrpc", "sequence", "nyu-mll/glue", "mrpc", "mrpc", ("sentence1", "sentence2"), "label", "combined",
            "MRPC", _GLUE, 3668, 408,
        ),
        TaskSpec(
            "mnli", "sequence", "nyu-mll/glue", "mnli", "mnli", ("premise", "hypothesis"), "label", "accuracy",
            "MNLI", _GLUE, 392702, 9815, hub_splits=(("validation", "validation_matched"),),
        ),
        TaskSpec(
            "ner", "token", "conll2003", None, "conll2003", ("tokens",), "ner_tags", "f1",
            f"NER ({_CONLL})", _CONLL, 14041, 3250, metric_words="entity-level micro F1",
        ),
        TaskSpec(
            "pos", "token", "conll2003", None, "conll2003", ("tokens",), "pos_tags", "accuracy",
            f"POS ({_CONLL})", _CONLL, 14041, 3250,
        ),
    )
}  # fmt: skip


def get_task(name: str | TaskSpec) -> TaskSpec:
    """Return the :class:`TaskSpec` for ``name`` (a spec is returned unchanged)."""
    if isinstance(name, TaskSpec):
        return name
    key = str(name).strip().lower()
    if key not in TASKS:
        raise PapaError(f"Unknown task {name!r}", f"Use one of: {', '.join(TASKS)}.")
    return TASKS[key]


def task_name(task: str) -> str:
    """A task id in words (``"sst2"`` → ``"SST-2"``); an unknown task keeps its name."""
    spec = TASKS.get(task)
    return spec.display if spec is not None else task


def metric_name(metric: str) -> str:
    """A metric in words (``"matthews_correlation"`` → ``"Matthews correlation"``)."""
    return METRIC_NAMES.get(metric, str(metric).replace("_", " "))
