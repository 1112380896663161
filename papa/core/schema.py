"""The one typed schema (pydantic v2, strict): grid configs, each kind of run's parameters, the result record.

Every default and allowed name lives here; the grid loader (:func:`papa.pipeline.plan.load_config`), grid expansion,
the ``papa`` flags and ``papa grid schema`` derive from these models. A bad value is one
:class:`~papa.core.errors.PapaError` naming its YAML path (``studies[2].lr``) or flag (``--epochs``), with a hint
(:mod:`papa.core.config_files` words it). Model names and head fractions are checked for form only (no torch, no hub).
"""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_type_hints

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, create_model, model_validator

# --- names ----------------------------------------------------------------------------------------------------------
Task = Literal["cola", "sst2", "mrpc", "mnli", "ner", "pos"]
BaseMethod = Literal["gates", "deviation", "random"]
Mode = Literal["cached", "faithful"]
#: What replaces a constant head: PAPA's task-average matrix, uniform attention, zero, or its mean output per position.
Replacement = Literal["papa", "uniform", "zero", "mean"]
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


_RANDOM = re.compile(r"^random-(\d+)$")


def _method(value: str) -> str:
    """A head ordering: gates, deviation, random, or ``random-<seed>`` (a seeded random ordering)."""
    if value in METHODS or _RANDOM.match(value):
        return value
    raise ConfigValueError(
        f"Unknown ranking method {value!r}",
        f"Use one of {', '.join(METHODS)}, or random-<seed> (e.g. random-1) for a seeded random ordering.",
    )


def _name(value: str) -> str:
    if not re.match(r"^[a-z0-9][a-z0-9_-]*$", value) or "__" in value or len(value) > MAX_NAME_LENGTH:
        raise ConfigValueError(
            f"name {value!r} is not a safe name",
            f"Use at most {MAX_NAME_LENGTH} characters of a-z, 0-9, - and single _ (it names folders and run ids).",
        )
    return value


def _unique(values: list) -> list:
    seen: dict[Any, int] = {}
    for index, value in enumerate(values):
        if value in seen:
            raise ConfigValueError(
                f"{value!r} is listed twice (items {seen[value]} and {index})", "List each value once.", at=(index,)
            )
        seen[value] = index
    return values


def _unique_fractions(values: list) -> list:
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


def _nonempty_unique(item: Any) -> Any:
    return Annotated[list[item], Field(min_length=1), AfterValidator(_unique)]


Fractions = Annotated[list[HeadFraction], Field(min_length=1), AfterValidator(_unique_fractions)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


# --- parameters of each kind of run (the notebooks' parameters cells) -----------------------------------------------
class EstimateParams(_Strict):
    """``notebooks/01_estimate_constants.md`` and ``papa estimate``."""

    model: ModelName = Field(DEFAULT_MODEL, description="encoder: embedded name (minilm-l6), local folder or hub id")
    task: Task = Field(description="task: cola, sst2, mrpc, mnli, ner or pos")
    max_examples: Examples = Field(None, description="average over the first N training examples (null: all)")
    max_length: MaxLength = Field(PAPER_MAX_LENGTH, description="fixed input length L (8..512)")
    relayout: bool = Field(True, description="PAPA layout: segment 2 at L/2, final [SEP] at L-1")
    device: Device = Field("auto", description="auto (GPU when present), cpu, cuda, cuda:N or mps")
    out: str = Field(description="output .safetensors file")


class RankParams(_Strict):
    """``notebooks/02_rank_heads.md`` and ``papa rank``."""

    model: ModelName = Field(DEFAULT_MODEL, description="encoder: embedded name, local folder or hub id")
    task: Task = Field(description="task: cola, sst2, mrpc, mnli, ner or pos")
    method: Method = Field(description="ranking method: gates, deviation or random")
    constants: str = Field("", description="constants file from `papa estimate` (needed by gates)")
    epochs: Count = Field(PAPER_EPOCHS, description="gates: training epochs")
    lr: Rate = Field(PAPER_LR, description="gates: learning rate of the gates and the probe")
    max_train_examples: Examples = Field(
        DEFAULT_TRAIN_EXAMPLES, description="gates: training examples (null: the whole split)"
    )
    max_eval_examples: Examples = Field(None, description="gates: evaluation examples (null: the whole split)")
    seed: int = Field(DEFAULT_SEED, description="random seed")
    data_seed: NonNegative = Field(0, description="seed of the training subset")
    device: Device = Field("auto", description="auto (GPU when present), cpu, cuda, cuda:N or mps")
    out: str = Field(description="output ranking .json file")


class ProbeParams(_Strict):
    """``notebooks/03_probe.md``; ``papa probe`` spells ``k`` as ``--constant-heads`` and one ``--seed``."""

    model: ModelName = Field(DEFAULT_MODEL, description="encoder: embedded name, local folder or hub id")
    task: Task = Field(description="task: cola, sst2, mrpc, mnli, ner or pos")
    k: NonNegative = Field(0, description="number of constant heads")
    constants: str = Field("", description="constants file (needed when k > 0)")
    ranking: str = Field("", description="ranking file (needed when 0 < k < all heads)")
    mode: Mode = Field("cached", description="cached (features once, eval mode) or faithful (live encoder, train mode)")
    replacement: Replacement = Field(
        "papa",
        description="what replaces the k heads: papa (the constant), uniform, zero or mean (needs the constants file)",
    )
    seeds: Annotated[list[int], Field(min_length=1), AfterValidator(_unique)] = Field(
        [DEFAULT_SEED], description="probe seeds, one result file each"
    )
    epochs: Count = Field(PAPER_EPOCHS, description="training epochs (the paper: 15)")
    lr: Rate = Field(PAPER_LR, description="learning rate (the paper: 2e-5); unused when lr_file is set")
    lr_file: str = Field("", description="an lr choice from the select_lr run (its lr replaces lr)")
    patience: Count | None = Field(
        None,
        description="early stopping: epochs without a held-out gain (epochs is then the cap; needs selection heldout)",
    )
    pool_examples: Examples = Field(
        None, description="a training pool of this size; each seed draws max_train_examples + heldout_examples from it"
    )
    heldout_examples: Count | None = Field(None, description="with a pool: held-out training examples each seed draws")
    dev_every_epoch: bool = Field(
        True, description="score the dev split after every epoch (false: once, by the reported probe)"
    )
    eval_chunk_examples: Count | None = Field(
        None, description="score the dev split this many examples at a time (bounds memory)"
    )
    probe_input: ProbeInput = Field(
        "all", description="all hidden states, or embeddings only (the attention-free floor)"
    )
    selection: Selection = Field(
        "final", description="reported epoch: final (the paper) or heldout (best on held-out training examples)"
    )
    heldout_fraction: Share = Field(
        DEFAULT_HELDOUT_FRACTION, description="with selection heldout: the share of the training subset held out"
    )
    max_train_examples: Examples = Field(
        DEFAULT_TRAIN_EXAMPLES, description="training examples (seeded subset; null: the whole split)"
    )
    max_eval_examples: Examples = Field(None, description="evaluation examples (seeded subset; null: the whole split)")
    data_seed: NonNegative = Field(0, description="seed of the subsets, shared by all probe seeds")
    max_length: MaxLength = Field(PAPER_MAX_LENGTH, description="fixed input length L (8..512)")
    relayout: bool = Field(True, description="PAPA layout")
    device: Device = Field("auto", description="auto (GPU when present), cpu, cuda, cuda:N or mps")
    out: str = Field(description="result file per seed ({seed} is filled in)")


class SelectLrParams(_Strict):
    """``notebooks/06_select_lr.md``: one (model, task)'s probe lr, chosen at k = 0 on held-out training examples."""

    model: ModelName = Field(DEFAULT_MODEL, description="encoder: embedded name, local folder or hub id")
    task: Task = Field(description="task: cola, sst2, mrpc, mnli, ner or pos")
    lrs: Annotated[list[Rate], Field(min_length=1), AfterValidator(_unique)] = Field(
        DEFAULT_LR_GRID, description="the lrs tried"
    )
    seeds: Annotated[list[int], Field(min_length=1), AfterValidator(_unique)] = Field(
        [LR_SELECTION_SEED], description="probe seeds averaged per lr"
    )
    epochs: Count = Field(PAPER_EPOCHS, description="the cap of early stopping while choosing")
    patience: Count = Field(3, description="early stopping: epochs without a held-out gain")
    pool_examples: Count = Field(DEFAULT_TRAIN_EXAMPLES, description="the training pool (as the probes')")
    max_train_examples: Count = Field(
        DEFAULT_TRAIN_EXAMPLES, description="training examples each seed draws from the pool"
    )
    heldout_examples: Count = Field(100, description="held-out training examples each seed draws (they choose the lr)")
    data_seed: NonNegative = Field(0, description="seed of the pool")
    max_length: MaxLength = Field(PAPER_MAX_LENGTH, description="fixed input length L (8..512)")
    relayout: bool = Field(True, description="PAPA layout")
    device: Device = Field("auto", description="auto (GPU when present), cpu, cuda, cuda:N or mps")
    out: str = Field(description="output lr choice .json file")


class ChapterParams(_Strict):
    """The chapters: ``notebooks/04_results.md``, ``05_controls.md`` and ``08_replacements.md``."""

    grid_config: str = Field("configs/default.yaml", description="the grid config whose runs this chapter aggregates")


RUN_PARAMS: dict[str, type[_Strict]] = {
    "estimate": EstimateParams,
    "rank": RankParams,
    "select_lr": SelectLrParams,
    "probe": ProbeParams,
    "results": ChapterParams,
    "controls": ChapterParams,
    "replacements": ChapterParams,
}


# --- the grid config ------------------------------------------------------------------------------------------------
class EstimateSection(_Strict):
    max_examples: Count = Field(
        DEFAULT_CONSTANT_EXAMPLES, description="first N training examples averaged into the constants"
    )
    batch_size: Count = Field(DEFAULT_BATCH_SIZE, description="encoder batch size")


class RankSection(_Strict):
    methods: _nonempty_unique(Method) = Field(
        ["gates"], description="head orderings to compute: gates, deviation, random"
    )
    epochs: Count = Field(PAPER_EPOCHS, description="gates: epochs of joint gate + probe training")
    lr: Rate = Field(PAPER_LR, description="gates: learning rate")
    max_train_examples: Examples = Field(
        DEFAULT_TRAIN_EXAMPLES, description="gates: training examples (null: the whole split)"
    )
    max_eval_examples: Examples = Field(
        None, description="gates: evaluation examples (unset: probe.max_eval_examples; null: the whole split)"
    )
    seed: int = Field(DEFAULT_SEED, description="gates: random seed")


class _ProbeSettings(_Strict):
    fractions: Fractions = Field(
        DEFAULT_FRACTIONS, description="shares of all heads made constant: 0, 1/2, 7/8, 15/16, 1"
    )
    seeds: _nonempty_unique(int) = Field([DEFAULT_SEED], description="probe seeds")
    single_seed_fractions: Annotated[list[HeadFraction], AfterValidator(_unique_fractions)] = Field(
        [], description="fractions run with the first seed only"
    )
    modes: _nonempty_unique(Mode) = Field(["cached"], description="cached and/or faithful")
    replacements: _nonempty_unique(Replacement) = Field(
        ["papa"], description="what replaces the constant heads: papa, uniform, zero, mean"
    )
    epochs: Count = Field(PAPER_EPOCHS, description="probe training epochs (the paper: 15)")
    lr: Rate | Literal["select"] = Field(
        PAPER_LR,
        description="probe learning rate (the paper: 2e-5), or select: chosen per model and task by lr_selection",
    )
    max_train_examples: Examples = Field(
        DEFAULT_TRAIN_EXAMPLES,
        description="training examples (null: the whole split); with a pool, what each seed draws",
    )
    max_eval_examples: PerTaskExamples = Field(
        None, description="evaluation examples (null: the whole split), or a mapping per task"
    )
    methods: _nonempty_unique(Method) | None = Field(None, description="orderings probed (unset: rank.methods)")
    selection: Selection = Field("final", description="reported epoch: final or heldout")
    heldout_fraction: Share = Field(
        DEFAULT_HELDOUT_FRACTION, description="with selection heldout: share of the training subset held out"
    )
    patience: Count | None = Field(
        None, description="early stopping on held-out training examples (epochs is then the cap)"
    )
    pool_examples: Examples = Field(
        None, description="a training pool of this size, features extracted once; each seed draws its own examples"
    )
    heldout_examples: Count | None = Field(None, description="with a pool: held-out training examples each seed draws")
    dev_every_epoch: bool = Field(
        True, description="score the dev split after every epoch (false: once, by the reported probe)"
    )
    eval_chunk_examples: Count | None = Field(None, description="score the dev split this many examples at a time")


def _overrides(section: type[BaseModel]) -> dict[str, Any]:
    """Every field of ``section`` as an optional override: unset inherits the section's value."""
    hints = get_type_hints(section, include_extras=True)
    return {
        name: (hints[name], Field(None, description=f"{field.description} (unset: the probe section's)"))
        for name, field in section.model_fields.items()
    }


#: Settings one model overrides (``probe.per_model``): any probe key but the orderings and fractions.
ModelSettings = create_model(
    "ModelSettings",
    __base__=_Strict,
    __doc__="Probe settings for one model (e.g. smaller sizes for a slow model); unset keys inherit the probe section.",
    **{
        k: v
        for k, v in _overrides(_ProbeSettings).items()
        if k not in ("fractions", "methods", "single_seed_fractions")
    },
)


class ProbeSection(_ProbeSettings):
    per_model: dict[ModelName, ModelSettings] = Field(
        {}, description="settings one model overrides, e.g. smaller sizes for a slow model"
    )


class LrSelectionSection(_Strict):
    lrs: Annotated[list[Rate], Field(min_length=1), AfterValidator(_unique)] = Field(
        DEFAULT_LR_GRID, description="lrs tried at k = 0 (include the paper's 2e-5)"
    )
    seeds: _nonempty_unique(int) = Field(
        [LR_SELECTION_SEED], description="probe seeds averaged per lr (best not a probe seed)"
    )
    epochs: Count | None = Field(
        None, description="the cap of early stopping while choosing (unset: the model's probe cap)"
    )


class FloorsSection(_Strict):
    attention_free: bool = Field(True, description="the same probe on the embedding layer only, at k = 0")


class _StudyBase(_Strict):
    name: Name = Field(description="names the study's run ids (a-z, 0-9, -, _)")
    chapter: Chapter = Field("controls", description="the chapter that reports it")
    tasks: _nonempty_unique(Task) | None = Field(None, description="a subset of the grid's tasks (unset: all)")
    models: _nonempty_unique(ModelName) | None = Field(None, description="a subset of the grid's models (unset: all)")
    probe_input: ProbeInput = Field("all", description="all hidden states, or embeddings only")

    @model_validator(mode="after")
    def _not_reserved(self):
        if self.name in RESERVED_STUDY_NAMES:
            raise ConfigValueError(
                f"the study name {self.name!r} is reserved",
                f"Rename the study: {', '.join(RESERVED_STUDY_NAMES)} are the grid's own.",
                at=("name",),
            )
        return self


#: One extra study: any probe-section key overrides the probe section; unset keys inherit it.
Study = create_model(
    "Study",
    __base__=_StudyBase,
    __doc__="An extra set of probe runs with its own settings.",
    **_overrides(_ProbeSettings),
)


class GridConfig(_Strict):
    """A grid: models × tasks × head fractions × seeds × modes, plus studies (``configs/*.yaml``)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        title="papa grid config",
        json_schema_extra={"$comment": "written by `papa grid schema`"},
    )

    name: Name = Field(description="names book/runs/<name>/ (a-z, 0-9, -, _)")
    description: str = Field("", description="what this grid is for")
    models: _nonempty_unique(ModelName) = Field(
        description="embedded names (minilm-l6, minilm-l3, mpnet-base), local folders or hub ids"
    )
    tasks: _nonempty_unique(Task) = Field(description="cola, sst2, mrpc, mnli, ner, pos")
    max_length: MaxLength = Field(PAPER_MAX_LENGTH, description="fixed input length L (8..512)")
    relayout: bool = Field(True, description="PAPA layout")
    data_seed: NonNegative = Field(0, description="seed of the training and evaluation subsets")
    device: Device = Field("auto", description="auto, cpu, cuda, cuda:N or mps")
    estimate: EstimateSection = Field(default_factory=EstimateSection)
    rank: RankSection = Field(default_factory=RankSection)
    lr_selection: LrSelectionSection = Field(
        default_factory=LrSelectionSection, description="how lr: select chooses the probe's lr"
    )
    probe: ProbeSection
    floors: FloorsSection = Field(default_factory=FloorsSection)
    studies: list[Study] = Field([], description="extra probe runs with their own settings")

    @model_validator(mode="after")
    def _consistent(self):
        if all(parse_fraction(f) == 0 for f in self.probe.fractions):
            raise ConfigValueError(
                "fractions [0] alone leave nothing to compare",
                "Add 1 (all heads constant) or 1/2, e.g. fractions: [0, 1/2, 1].",
                at=("probe", "fractions"),
            )
        names: dict[str, int] = {}
        for index, study in enumerate(self.studies):
            if study.name in names:
                raise ConfigValueError(
                    f"the study name {study.name!r} is used twice (studies {names[study.name]} and {index})",
                    "Give each study its own name.",
                    at=("studies", index, "name"),
                )
            names[study.name] = index
            for key, allowed in (("models", self.models), ("tasks", self.tasks)):
                for position, value in enumerate(getattr(study, key) or []):
                    if value not in allowed:
                        raise ConfigValueError(
                            f"{value!r} is not one of the grid's {key}",
                            f"Add it to the top-level {key}, or use one of {', '.join(allowed)}.",
                            at=("studies", index, key, position),
                        )
        if "max_eval_examples" not in self.rank.model_fields_set:
            evaluation = self.probe.max_eval_examples
            self.rank.max_eval_examples = evaluation if not isinstance(evaluation, dict) else None
        for model in self.probe.per_model:
            if model not in self.models:
                raise ConfigValueError(
                    f"{model!r} is not one of the grid's models",
                    f"Use one of {', '.join(self.models)}.",
                    at=("probe", "per_model"),
                )
        checks = [(("probe",), study_settings(self))]
        checks += [(("probe", "per_model", model), study_settings(self, None, model)) for model in self.probe.per_model]
        checks += [
            (("studies", i), study_settings(self, s, model))
            for i, s in enumerate(self.studies)
            for model in (s.models or self.models)
        ]
        for where, settings in checks:
            _check_protocol(settings, where)
        return self


def _check_protocol(settings: dict[str, Any], at: tuple) -> None:
    """The protocol's keys go together: patience and lr: select choose on held-out examples, a pool needs draws."""
    if (settings["patience"] is not None or settings["lr"] == SELECT) and settings["selection"] != "heldout":
        raise ConfigValueError(
            "patience and lr: select choose on held-out training examples",
            "Set selection: heldout.",
            at=(*at, "selection"),
        )
    if settings["pool_examples"] is not None and (
        settings["heldout_examples"] is None or settings["max_train_examples"] is None
    ):
        raise ConfigValueError(
            "a training pool needs max_train_examples and heldout_examples (what each seed draws)",
            "Set e.g. max_train_examples: 2000 and heldout_examples: 200.",
            at=(*at, "pool_examples"),
        )
    if settings["lr"] == SELECT and (settings["pool_examples"] is None or settings["patience"] is None):
        raise ConfigValueError(
            "lr: select needs a training pool and patience (the lr is chosen as the probes train)",
            "Set pool_examples, heldout_examples and patience.",
            at=(*at, "lr"),
        )
    if settings["eval_chunk_examples"] is not None and settings["dev_every_epoch"]:
        raise ConfigValueError(
            "eval_chunk_examples scores the dev split once, in chunks",
            "Set dev_every_epoch: false, or drop eval_chunk_examples.",
            at=(*at, "eval_chunk_examples"),
        )


def study_settings(grid: GridConfig, study: BaseModel | None = None, model: str | None = None) -> dict[str, Any]:
    """Effective probe settings: the probe section, updated by ``probe.per_model[model]``, then by ``study``'s keys."""
    settings = grid.probe.model_dump(exclude={"per_model"})
    if model is not None and model in grid.probe.per_model:
        settings.update(grid.probe.per_model[model].model_dump(exclude_unset=True))
    if study is not None:
        settings.update(study.model_dump(include=study.model_fields_set - set(_StudyBase.model_fields)))
    return settings


# --- the result record (papa.probing.experiment.run_probe → save_result) --------------------------------------------
class ResultConfig(BaseModel):
    """What produced a result: the model, task, heads and probe settings."""

    model_config = ConfigDict(extra="allow")

    model: str
    task: str
    constant_heads: NonNegative
    total_heads: Count
    ranking: str | None = None
    constants: str | None = None
    mode: Mode
    replacement: Replacement = "papa"
    seed: int
    lr: float
    epochs: Count
    batch_size: Count
    weight_decay: float
    dropout: float
    probe_input: ProbeInput = "all"
    max_length: int
    relayout: bool
    data_seed: int
    selection: Selection = "final"
    heldout_fraction: float | None = None
    patience: int | None = None
    dev_every_epoch: bool = True
    pool_examples: int | None = None
    heldout_examples: int | None = None


class DataRecord(BaseModel):
    model_config = ConfigDict(extra="allow")

    train_examples: NonNegative
    eval_examples: NonNegative
    train_indices_sha: str
    eval_indices_sha: str
    pool_examples: int | None = None
    heldout_examples: int | None = None
    fit_indices_sha: str | None = None
    heldout_indices_sha: str | None = None


class ResultRecord(BaseModel):
    """One probe result JSON (``save_result``); ``epochs``: per epoch ``epoch``, ``train_loss`` and metrics."""

    model_config = ConfigDict(extra="allow")

    config: ResultConfig
    task: str
    metric: str
    score: float
    metrics: dict[str, float]
    selected_epoch: Count
    epochs: list[dict[str, Any]]
    floors: dict[str, Any]
    heads: list[list[int]]
    feature_cache_hits: dict[str, Any] = {}
    feature_cache_keys: list[str] = []  # cache entries read or written (protocol.release_private_features)
    timings: dict[str, float]
    data: DataRecord
    provenance: dict[str, Any]
    dev: dict[str, Any] | None = None  # per-example predictions and labels (paired bootstrap)
    convergence: dict[str, Any] | None = None  # held-out curve, best epoch, converged (early stopping)
