"""The schema's building blocks: every allowed name, every default (once), and the checked field types.

:mod:`papa.core.schema` and :mod:`papa.core.grid_schema` are built from these. A failed check raises
:class:`ConfigValueError`, which :mod:`papa.core.config_files` turns into one :class:`~papa.core.errors.PapaError`
naming its YAML path or flag. Model names and head fractions are checked for form only (no torch, no hub).
"""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from papa.core.replacements import REPLACEMENT_TABLE
from papa.core.tasks import TASKS as TASK_REGISTRY

# --- names ----------------------------------------------------------------------------------------------------------
#: A task id of the registry (:data:`papa.core.tasks.TASKS`).
Task = Literal[tuple(TASK_REGISTRY)]  # type: ignore[valid-type]
BaseMethod = Literal["gates", "deviation", "random"]
Mode = Literal["cached", "faithful"]
#: What replaces a constant head: a name of the table :data:`papa.core.replacements.REPLACEMENT_TABLE`.
Replacement = Literal[tuple(REPLACEMENT_TABLE)]  # type: ignore[valid-type]
Selection = Literal["final", "heldout"]
ProbeInput = Literal["all", "embeddings"]
Chapter = Literal["results", "controls", "replacements"]
TASKS: tuple[str, ...] = get_args(Task)
METHODS: tuple[str, ...] = get_args(BaseMethod)
MODES: tuple[str, ...] = get_args(Mode)
REPLACEMENTS: tuple[str, ...] = get_args(Replacement)
SELECTIONS: tuple[str, ...] = get_args(Selection)
PROBE_INPUTS: tuple[str, ...] = get_args(ProbeInput)
CHAPTERS: tuple[str, ...] = get_args(Chapter)
#: Study names the grid uses itself (the main probes and the attention-free floor).
RESERVED_STUDY_NAMES = ("main", "floor")
MAX_NAME_LENGTH = 40

# --- every default, once --------------------------------------------------------------------------------------------
DEFAULT_MODEL = "minilm-l6"
PAPER_EPOCHS = 15
PAPER_LR = 2e-5
PAPER_MAX_LENGTH = 64
DEFAULT_SEED = 42
#: The lr selection's probe seed: not a probe seed, so no probe's own held-out draw also chooses its lr.
LR_SELECTION_SEED = 0
DEFAULT_TRAIN_EXAMPLES = 1000
DEFAULT_CONSTANT_EXAMPLES = 2000
DEFAULT_BATCH_SIZE = 64
DEFAULT_HELDOUT_FRACTION = 0.1
DEFAULT_FRACTIONS: list[int | float | str] = [0, 1]
#: The probe lrs :func:`papa.probing.protocol.select_lr` tries at k = 0 (the paper's 2e-5 among them).
DEFAULT_LR_GRID: list[float] = [2e-5, 2e-4, 1e-3]
#: ``lr: select`` in a grid: the lr chosen per (model, task) by the ``select_lr`` run.
SELECT = "select"
#: ``lr: runner-up`` in a study: the second-best lr of that choice (the all-heads drop at it, where the choice is
#: within noise: :func:`papa.probing.protocol.choose_lr`).
RUNNER_UP = "runner-up"
#: The lr settings that read the ``select_lr`` run's record.
CHOSEN_LRS = (SELECT, RUNNER_UP)


class ConfigValueError(ValueError):
    """A failed check of this module; ``at`` continues the path pydantic reports (e.g. ``(2, "name")``)."""

    def __init__(self, message: str, hint: str | None = None, at: tuple[str | int, ...] = ()):
        super().__init__(message)
        self.message, self.hint, self.at = message, hint, at


# --- value types ----------------------------------------------------------------------------------------------------
def _number(value: Any) -> Any:
    """YAML 1.1 reads ``2e-5`` (no dot) as text: accept text that is a number, refuse any other text."""
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            raise ConfigValueError(f"must be a number, got {value!r}") from None
    return value


_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def _device(value: str) -> str:
    if not _DEVICE.match(value):
        raise ConfigValueError(f"{value!r} is not a device", "Use auto, cpu, cuda, cuda:N or mps.")
    return value


_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def _model_name(value: str) -> str:
    """An embedded name or hub id (``org/name``), or an existing local folder."""
    if _HUB_ID.match(value) and ".." not in value or Path(value).expanduser().is_dir():
        return value
    raise ConfigValueError(
        f"Unknown model {value!r} (not a name, hub id or existing folder)",
        "Use minilm-l6, minilm-l3, mpnet-base, a local model folder or a hub id.",
    )


def parse_fraction(value: int | float | str) -> Fraction:
    """A head fraction (``0``, ``1/2``, ``0.875``, ``1``) as an exact :class:`~fractions.Fraction` in [0, 1]."""
    try:
        fraction = Fraction(str(value).strip())
    except (ValueError, ZeroDivisionError):
        raise ConfigValueError(
            f"head fraction {value!r} is not a number", "Write fractions as 0, 1/2, 7/8, 15/16 or 1."
        ) from None
    if not 0 <= fraction <= 1:
        raise ConfigValueError(
            f"head fraction {value!r} is outside [0, 1]", "Fractions run from 0 (no constant head) to 1 (all heads)."
        )
    return fraction


def _fraction(value: int | float | str) -> int | float | str:
    parse_fraction(value)
    return value


_SEEDED = re.compile(r"^(random|gates)-(\d+)$")


def _method(value: str) -> str:
    """A head ordering: gates, deviation, random, ``random-<seed>`` (a seeded random ordering) or ``gates-<seed>`` (one
    gate draw)."""
    if value in METHODS or _SEEDED.match(value):
        return value
    raise ConfigValueError(
        f"Unknown ranking method {value!r}",
        f"Use one of {', '.join(METHODS)}, random-<seed> (e.g. random-1) for a seeded random ordering, or "
        "gates-<seed> (e.g. gates-43) for one gate draw.",
    )


def _name(value: str) -> str:
    if not re.match(r"^[a-z0-9][a-z0-9_-]*$", value) or "__" in value or len(value) > MAX_NAME_LENGTH:
        raise ConfigValueError(
            f"name {value!r} is not a safe name",
            f"Use at most {MAX_NAME_LENGTH} characters of a-z, 0-9, - and single _ (it names folders and run ids).",
        )
    return value


def unique_values(values: list) -> list:
    seen: dict[Any, int] = {}
    for index, value in enumerate(values):
        if value in seen:
            raise ConfigValueError(
                f"{value!r} is listed twice (items {seen[value]} and {index})", "List each value once.", at=(index,)
            )
        seen[value] = index
    return values


def unique_fractions(values: list) -> list:
    seen: dict[Fraction, int] = {}
    for index, value in enumerate(values):
        fraction = parse_fraction(value)
        if fraction in seen:
            raise ConfigValueError(
                f"head fraction {value!r} is listed twice (items {seen[fraction]} and {index})",
                "List each fraction once.",
                at=(index,),
            )
        seen[fraction] = index
    return values


Count = Annotated[int, Field(ge=1)]
NonNegative = Annotated[int, Field(ge=0)]
Rate = Annotated[float, BeforeValidator(_number), Field(gt=0, allow_inf_nan=False)]
Share = Annotated[float, BeforeValidator(_number), Field(gt=0, lt=1, allow_inf_nan=False)]
MaxLength = Annotated[int, Field(ge=8, le=512)]
Device = Annotated[str, AfterValidator(_device)]
ModelName = Annotated[str, AfterValidator(_model_name)]
HeadFraction = Annotated[int | float | str, AfterValidator(_fraction)]
Name = Annotated[str, AfterValidator(_name)]
Examples = Count | None  # null: the whole split
Method = Annotated[str, AfterValidator(_method)]
#: Per task where a grid wants it (``max_eval_examples: {ner: 1000, pos: 1000}``; a task not listed: the whole split).
PerTaskExamples = Examples | dict[Task, Examples]


def nonempty_unique(item: Any) -> Any:
    """A non-empty list of ``item`` without repeats."""
    return Annotated[list[item], Field(min_length=1), AfterValidator(unique_values)]


Fractions = Annotated[list[HeadFraction], Field(min_length=1), AfterValidator(unique_fractions)]


class StrictModel(BaseModel):
    """A schema model that refuses unknown keys and coerces nothing."""

    model_config = ConfigDict(extra="forbid", strict=True)
