"""The one typed schema of each kind of run's parameters (the notebooks' parameters cells, the ``papa`` flags) and
of the probe result record (pydantic v2, strict).

Names, defaults and field types come from :mod:`papa.core.fields`; grid configs are :mod:`papa.core.grid_schema`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from papa.core.fields import (
    DEFAULT_HELDOUT_FRACTION,
    DEFAULT_LR_GRID,
    DEFAULT_MODEL,
    DEFAULT_SEED,
    DEFAULT_TRAIN_EXAMPLES,
    LR_SELECTION_SEED,
    PAPER_EPOCHS,
    PAPER_LR,
    PAPER_MAX_LENGTH,
    ConfigValueError,
    Count,
    Device,
    Examples,
    MaxLength,
    Method,
    Mode,
    ModelName,
    NonNegative,
    ProbeInput,
    Rate,
    Replacement,
    Selection,
    Share,
    StrictModel,
    Task,
    unique_values,
)


# --- parameters of each kind of run (the notebooks' parameters cells) -----------------------------------------------
class EstimateParams(StrictModel):
    """``notebooks/01_estimate_constants.md`` and ``papa estimate``."""

    model: ModelName = Field(DEFAULT_MODEL, description="encoder: embedded name (minilm-l6), local folder or hub id")
    task: Task = Field(description="task: cola, sst2, mrpc, mnli, ner or pos")
    max_examples: Examples = Field(None, description="average over the first N training examples (null: all)")
    max_length: MaxLength = Field(PAPER_MAX_LENGTH, description="fixed input length L (8..512)")
    relayout: bool = Field(True, description="PAPA layout: segment 2 at L/2, final [SEP] at L-1")
    device: Device = Field("auto", description="auto (GPU when present), cpu, cuda, cuda:N or mps")
    out: str = Field(description="output .safetensors file")


class RankParams(StrictModel):
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
    warm_epochs: NonNegative = Field(
        0, description="gates: epochs of the probe alone on cached k = 0 features first (0: a fresh probe)"
    )
    warm_lr: Rate = Field(1e-3, description="gates: the probe's lr when warm-started (the gates keep lr)")
    warm_examples: Examples = Field(
        None, description="gates: training examples of the warm start (null: the gate run's own)"
    )
    draws: list[str] = Field(
        [], description="gates: ranking files of gate draws (gates-<seed>) to combine by mean λ instead of training"
    )
    out: str = Field(description="output ranking .json file")


class ProbeParams(StrictModel):
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
    seeds: Annotated[list[int], Field(min_length=1), AfterValidator(unique_values)] = Field(
        [DEFAULT_SEED], description="probe seeds, one result file each"
    )
    epochs: Count = Field(PAPER_EPOCHS, description="training epochs (the paper: 15)")
    lr: Rate | None = Field(
        PAPER_LR, description="learning rate (the paper: 2e-5); null: the lr of lr_file (the grid's lr: select)"
    )
    lr_file: str = Field("", description="an lr choice from the select_lr run (its lr replaces lr)")
    lr_choice: Literal["chosen", "runner-up"] = Field(
        "chosen", description="with lr_file: its chosen lr, or the runner-up (the second-best lr it tried)"
    )
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

    @model_validator(mode="after")
    def _lr_given(self):
        if self.lr is None and not self.lr_file:
            raise ConfigValueError(
                "lr is null and no lr_file gives one",
                "Set lr (e.g. 2e-5) or lr_file (a select_lr run's choice).",
                at=("lr",),
            )
        return self


class SelectLrParams(StrictModel):
    """``notebooks/06_select_lr.md``: one (model, task)'s probe lr, chosen at k = 0 on held-out training examples."""

    model: ModelName = Field(DEFAULT_MODEL, description="encoder: embedded name, local folder or hub id")
    task: Task = Field(description="task: cola, sst2, mrpc, mnli, ner or pos")
    lrs: Annotated[list[Rate], Field(min_length=1), AfterValidator(unique_values)] = Field(
        DEFAULT_LR_GRID, description="the lrs tried"
    )
    seeds: Annotated[list[int], Field(min_length=1), AfterValidator(unique_values)] = Field(
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


class ChapterParams(StrictModel):
    """The chapters: ``notebooks/04_results.md``, ``05_controls.md`` and ``08_replacements.md``."""

    grid_config: str = Field("configs/default.yaml", description="the grid config whose runs this chapter aggregates")


RUN_PARAMS: dict[str, type[StrictModel]] = {
    "estimate": EstimateParams,
    "rank": RankParams,
    "select_lr": SelectLrParams,
    "probe": ProbeParams,
    "results": ChapterParams,
    "controls": ChapterParams,
    "replacements": ChapterParams,
}


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
    constants_sha256: str | None = None  # the constants file's checksum (runs that read constants)
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
    feature_cache_keys: list[str] = []  # cache entries read or written (extraction.get_features)
    timings: dict[str, float]
    data: DataRecord
    provenance: dict[str, Any]
    dev: dict[str, Any] | None = None  # per-example predictions and labels (paired bootstrap)
    convergence: dict[str, Any] | None = None  # held-out curve, best epoch, converged (early stopping)
