"""The grid config's schema (pydantic v2, strict): sections, studies, cross-checks, and :func:`study_settings`.

The grid loader (:func:`papa.pipeline.plan.load_config`), grid expansion and ``papa grid schema`` derive from
:class:`GridConfig`; names, defaults and field types come from :mod:`papa.core.fields`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_type_hints

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model, model_validator

from papa.core.fields import (
    CHOSEN_LRS,
    DEFAULT_BATCH_SIZE,
    DEFAULT_CONSTANT_EXAMPLES,
    DEFAULT_FRACTIONS,
    DEFAULT_HELDOUT_FRACTION,
    DEFAULT_LR_GRID,
    DEFAULT_SEED,
    DEFAULT_TRAIN_EXAMPLES,
    LR_SELECTION_SEED,
    PAPER_EPOCHS,
    PAPER_LR,
    PAPER_MAX_LENGTH,
    RESERVED_STUDY_NAMES,
    RUNNER_UP,
    SELECT,
    Chapter,
    ConfigValueError,
    Count,
    Device,
    Examples,
    Fractions,
    HeadFraction,
    MaxLength,
    Method,
    Mode,
    ModelName,
    Name,
    NonNegative,
    PerTaskExamples,
    ProbeInput,
    Rate,
    Replacement,
    Selection,
    Share,
    StrictModel,
    Task,
    nonempty_unique,
    parse_fraction,
    unique_fractions,
)


# --- the grid config ------------------------------------------------------------------------------------------------
class EstimateSection(StrictModel):
    max_examples: Count = Field(
        DEFAULT_CONSTANT_EXAMPLES, description="first N training examples averaged into the constants"
    )
    batch_size: Count = Field(DEFAULT_BATCH_SIZE, description="encoder batch size")


class RankSection(StrictModel):
    methods: nonempty_unique(Method) = Field(
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
    seed: int = Field(DEFAULT_SEED, description="gates: random seed (one draw; unused when seeds lists several)")
    seeds: nonempty_unique(int) | None = Field(
        None,
        description="gates: one draw per seed (gates-<seed>, each a ranking method); with two or more, gates ranks "
        "by the draws' mean λ (unset: the one draw at seed)",
    )
    warm_epochs: NonNegative = Field(
        0, description="gates: epochs of the probe alone on cached k = 0 features before the gate epochs (0: none)"
    )
    warm_lr: Rate = Field(1e-3, description="gates: the probe's lr when warm-started (the gates keep lr)")
    warm_examples: Examples = Field(
        None,
        description="gates: training examples of the warm start, the probes' seeded subset of that size (null: the "
        "gate run's own); the probe pool's size reuses its k = 0 features",
    )

    def draw_seeds(self) -> list[int]:
        """The gate draws' seeds: ``seeds``, else ``[seed]``."""
        return list(self.seeds or [self.seed])


class _ProbeSettings(StrictModel):
    fractions: Fractions = Field(
        DEFAULT_FRACTIONS, description="shares of all heads made constant: 0, 1/2, 7/8, 15/16, 1"
    )
    seeds: nonempty_unique(int) = Field([DEFAULT_SEED], description="probe seeds")
    single_seed_fractions: Annotated[list[HeadFraction], AfterValidator(unique_fractions)] = Field(
        [], description="fractions run with the first seed only"
    )
    modes: nonempty_unique(Mode) = Field(["cached"], description="cached and/or faithful")
    replacements: nonempty_unique(Replacement) = Field(
        ["papa"], description="what replaces the constant heads: papa, uniform, zero, mean"
    )
    epochs: Count = Field(PAPER_EPOCHS, description="probe training epochs (the paper: 15)")
    lr: Rate | Literal["select", "runner-up"] = Field(
        PAPER_LR,
        description="probe learning rate (the paper: 2e-5), or select: chosen per model and task by lr_selection, "
        "or runner-up: the second-best lr of that choice",
    )
    max_train_examples: Examples = Field(
        DEFAULT_TRAIN_EXAMPLES,
        description="training examples (null: the whole split); with a pool, what each seed draws",
    )
    max_eval_examples: PerTaskExamples = Field(
        None, description="evaluation examples (null: the whole split), or a mapping per task"
    )
    methods: nonempty_unique(Method) | None = Field(None, description="orderings probed (unset: rank.methods)")
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


def _overrides(section: type[BaseModel], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every field of ``section`` but ``skip`` as an optional override: unset inherits the section's value."""
    hints = get_type_hints(section, include_extras=True)
    return {
        name: (hints[name], Field(None, description=f"{field.description} (unset: the probe section's)"))
        for name, field in section.model_fields.items()
        if name not in skip
    }


#: Settings one model overrides (``probe.per_model``): any probe key but the orderings and fractions.
ModelSettings = create_model(
    "ModelSettings",
    __base__=StrictModel,
    __doc__="Probe settings for one model (e.g. smaller sizes for a slow model); unset keys inherit the probe section.",
    **_overrides(_ProbeSettings, skip=("fractions", "methods", "single_seed_fractions")),
)


class ProbeSection(_ProbeSettings):
    per_model: dict[ModelName, ModelSettings] = Field(
        {}, description="settings one model overrides, e.g. smaller sizes for a slow model"
    )


class LrSelectionSection(StrictModel):
    lrs: nonempty_unique(Rate) = Field(DEFAULT_LR_GRID, description="lrs tried at k = 0 (include the paper's 2e-5)")
    seeds: nonempty_unique(int) = Field(
        [LR_SELECTION_SEED], description="probe seeds averaged per lr (best not a probe seed)"
    )
    epochs: Count | None = Field(
        None, description="the cap of early stopping while choosing (unset: the model's probe cap)"
    )


class FloorsSection(StrictModel):
    attention_free: bool = Field(True, description="the same probe on the embedding layer only, at k = 0")


class _StudyBase(StrictModel):
    name: Name = Field(description="names the study's run ids (a-z, 0-9, -, _)")
    chapter: Chapter = Field("controls", description="the chapter that reports it")
    tasks: nonempty_unique(Task) | None = Field(None, description="a subset of the grid's tasks (unset: all)")
    models: nonempty_unique(ModelName) | None = Field(None, description="a subset of the grid's models (unset: all)")
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


class GridConfig(StrictModel):
    """A grid: models × tasks × head fractions × seeds × modes, plus studies (``configs/*.yaml``)."""

    model_config = ConfigDict(title="papa grid config", json_schema_extra={"$comment": "written by `papa grid schema`"})

    name: Name = Field(description="names book/runs/<name>/ (a-z, 0-9, -, _)")
    description: str = Field("", description="what this grid is for")
    models: nonempty_unique(ModelName) = Field(
        description="embedded names (minilm-l6, minilm-l3, mpnet-base), local folders or hub ids"
    )
    tasks: nonempty_unique(Task) = Field(description="cola, sst2, mrpc, mnli, ner, pos")
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
    if (settings["patience"] is not None or settings["lr"] in CHOSEN_LRS) and settings["selection"] != "heldout":
        raise ConfigValueError(
            f"patience and lr: {settings['lr'] if settings['lr'] == RUNNER_UP else SELECT} choose on held-out "
            "training examples",
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
    if settings["lr"] in CHOSEN_LRS and (settings["pool_examples"] is None or settings["patience"] is None):
        raise ConfigValueError(
            f"lr: {settings['lr']} needs a training pool and patience (the lr is chosen as the probes train)",
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
