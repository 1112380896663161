"""The setup chapter (``book/setup.md``) from a grid config: the template ``book/templates/setup.md`` filled with
values computed here (no size typed by hand, no config syntax, every name from the config escaped)."""

from __future__ import annotations

from fractions import Fraction
from functools import partial

from papa.book.studies import size_studies
from papa.book.templates import Markdown, code, fill, join, model, pieces
from papa.book.words import and_list, count, fraction_words, lr_text, plural
from papa.core.fields import PAPER_EPOCHS, PAPER_LR, RUNNER_UP, SELECT
from papa.core.grid_schema import GridConfig, Study, study_settings
from papa.core.tasks import get_task, task_name
from papa.pipeline.executed import study_words
from papa.pipeline.plan import grid_model

_piece = partial(fill, "setup")
#: The models the book describes (a piece ``model-<name>`` of the template each); another model is named by its id.
EMBEDDED = {name.removeprefix("model-") for name in pieces("setup") if name.startswith("model-")} - {"other"}

_TASK_KINDS = {"sequence": "one label per sentence or pair", "token": "one label per word"}


def lr_words(value) -> str:
    """A learning rate as people write it: ``2e-05`` → ``2e-5``, ``0.01`` → ``0.01``
    (:func:`papa.book.words.lr_text`); ``select`` and ``runner-up`` in words."""
    if value == SELECT:
        return "the one chosen for its model and task"
    if value == RUNNER_UP:
        return "the runner-up of the lr choice for its model and task"
    return lr_text(value)


def _size(size) -> Markdown:
    return _piece("size-all") if size is None else _piece("size", examples=f"{int(size):,}")


def _dev_words(value) -> Markdown:
    """``max_eval_examples`` (a count, None, or a count per task) as words."""
    if value is None:
        return _piece("dev-all")
    if isinstance(value, dict):
        caps = {task_name(t): f"{int(n):,}" for t, n in value.items() if n is not None}
        capped = [_piece("dev-task", task=t, examples=n) for t, n in caps.items()]
        return _piece("dev-capped", capped=Markdown(and_list(capped))) if capped else _piece("dev-all")
    return _piece("dev-at-most", examples=f"{int(value):,}")


def _protocol(settings: dict) -> Markdown:
    """How a probe trains and what it reports, from one set of probe settings (:func:`study_settings`)."""
    epochs = count(int(settings["epochs"]), "epoch")
    if settings["pool_examples"]:
        keys = ("max_train_examples", "heldout_examples", "pool_examples")
        train, heldout, pool = (f"{int(settings[key]):,}" for key in keys)
        data = _piece("data-pool", train=train, heldout=heldout, pool=pool)
    else:
        data = _piece("data-subset", size=_size(settings["max_train_examples"]))
    if settings["patience"]:
        length = _piece("length-patience", patience=count(int(settings["patience"]), "epoch"), epochs=epochs)
    else:
        length = _piece("length-fixed", epochs=epochs)
    lr = settings["lr"]
    rate = _piece("rate-select") if lr == "select" else _piece("rate", lr=lr_words(lr))
    return _piece("protocol", data=data, length=length, rate=rate)


def constant_share_words(fractions) -> str:
    """``[0, "1/2", "7/8", 1]`` → ``"none, half, 7/8 and all of the heads constant"``."""
    words = [fraction_words(f) for f in sorted(fractions, key=lambda f: Fraction(str(f)))]
    if words == ["none"]:
        return "no head constant"
    return and_list(words) + " of the heads constant"


def _seeds(seeds) -> str:
    return f"{count(len(seeds), 'seed')} ({and_list(seeds)})"


def _study(study: Study, grid: GridConfig) -> Markdown:
    """One further study as a sentence: what it is, where it is read, and what it runs."""
    given = study.model_fields_set
    named = Markdown(and_list(model(m) for m in study.models or grid.models))
    tasks = and_list(task_name(t) for t in study.tasks or grid.tasks)
    parts = [_piece("study-models", models=named, tasks=tasks)]
    if "fractions" in given:
        parts.append(_piece("study-fractions", heads=constant_share_words(study.fractions)))
    if study.probe_input != "all":
        parts.append(_piece("study-floor"))
    if "methods" in given:
        methods = study.methods
        parts.append(_piece("study-methods", methods=and_list(methods), rankings=plural(len(methods), "ranking")))
    if "modes" in given:
        parts.append(_piece("study-modes", modes=and_list(study.modes)))
    if "seeds" in given:
        parts.append(_seeds(study.seeds))
    if "epochs" in given:
        parts.append(count(int(study.epochs), "epoch"))
    if "lr" in given:
        parts.append(_piece("study-lr", lr=lr_words(study.lr)))
    if "max_train_examples" in given:
        parts.append(_size(study.max_train_examples))
    if "max_eval_examples" in given:
        parts.append(_dev_words(study.max_eval_examples))
    if study.selection == "heldout":  # held out as the study's effective settings say (the probe section's, else)
        settings = study_settings(grid, study)
        held = settings["heldout_examples"]
        share = f"{held:,} examples" if held else f"{settings['heldout_fraction']:.0%}"
        parts.append(_piece("study-heldout", share=share))
    words, name = study_words(study.name), code(study.name)
    return _piece("study", words=words, name=name, chapter=study.chapter, parts=join(parts, "; "))


def _models(models: list[str]) -> Markdown:
    encoders = count(len(models), "encoder")
    if all(m in EMBEDDED for m in models):
        every = "both" if len(models) == 2 else "all"
        lead = _piece("models-embedded", encoders=encoders, all=every) if len(models) > 1 else None
        lead = lead or _piece("models-embedded-one", encoders=encoders)
    else:
        lead = _piece("models-hub", encoders=encoders)
    words = [_piece(f"model-{m}") if m in EMBEDDED else _piece("model-other", model=model(m)) for m in models]
    return _piece("models", lead=lead, bullets=join((_piece("model-bullet", words=w) for w in words), "\n"))


def _tasks(tasks: list[str]) -> Markdown:
    """The rows of the tasks table."""
    rows = []
    for t in tasks:
        spec = get_task(t)
        labels = _TASK_KINDS[spec.kind]
        rows.append(
            _piece("task-row", task=spec.display, labels=labels, metric=spec.metric_display, source=spec.source)
        )
    return join(rows, "\n")


def _per_model(grid: GridConfig) -> Markdown:
    """The sentences on models whose probes differ (``probe.per_model``), each with the studies that check it."""
    names = set(size_studies(grid))
    sized = [study for study in grid.studies if study.name in names]
    out = []
    for name in grid.probe.per_model:
        checks = Markdown(and_list(code(st.name) for st in sized if name in (st.models or grid.models)))
        check = _piece("per-model-check", studies=checks) if checks else Markdown("")
        protocol = _protocol(study_settings(grid, None, name))
        out.append(_piece("per-model", model=model(name), protocol=protocol, check=check))
    return join(out)


def setup_page(config: dict | GridConfig) -> str:
    """``book/setup.md`` for a grid config (a dict of :func:`~papa.pipeline.plan.load_config`, or typed)."""
    grid = grid_model(config)
    probe, rank = grid.probe, grid.rank
    seeds, single = probe.seeds, probe.single_seed_fractions
    if single:
        seed_text = _piece("seeds-single", seeds=_seeds(seeds), fractions=and_list(fraction_words(f) for f in single))
    else:
        seed_text = _piece("seeds-every", seeds=_seeds(seeds))
    gates = Markdown("")
    if "gates" in rank.methods:
        epochs, lr = count(int(rank.epochs), "epoch"), lr_words(rank.lr)
        gates = _piece("gates", epochs=epochs, lr=lr, examples=f"{int(rank.max_train_examples):,}")
    lr_select = Markdown("")
    if probe.lr == "select":
        choice = grid.lr_selection
        lr_select = _piece("lr-select", lrs=and_list(lr_words(v) for v in choice.lrs), seeds=_seeds(choice.seeds))
    studies = join((_study(s, grid) for s in grid.studies), "\n")
    return _piece(
        config_file=code(f"configs/{grid.name}.yaml"),
        models=_models(grid.models),
        tasks=_tasks(grid.tasks),
        max_length=grid.max_length,
        layout=_piece("layout-papa" if grid.relayout else "layout-end"),
        estimate_examples=f"{int(grid.estimate.max_examples):,}",
        methods=and_list(rank.methods),
        gates=gates,
        protocol=_protocol(study_settings(grid)),
        seeds=seed_text,
        dev=_dev_words(probe.max_eval_examples),
        heads=constant_share_words(probe.fractions),
        modes=and_list(probe.modes),
        selection=_piece("selection-final" if probe.selection == "final" else "selection-heldout"),
        lr_select=lr_select,
        per_model=_per_model(grid),
        studies=studies or _piece("no-studies"),
        differences=_differences(grid),
    )


#: A size at or above this many examples is "the full set" (configs/paper.yaml writes 1,000,000).
FULL_SET = 100_000


def _differences(grid: GridConfig) -> Markdown:
    """What this grid does otherwise than the paper, one bullet each, only those that hold for this config."""
    probe, rank, models = grid.probe, grid.rank, grid.models
    bullets = []
    small = lambda size: size is not None and int(size) < FULL_SET
    if all(m in EMBEDDED for m in models):
        encoders = count(len(models), "sentence-embedding model")
        bullets.append(_piece("differ-models", n_encoders=encoders, n_models=count(len(models), "model")))
    if small(probe.max_train_examples):
        bullets.append(_piece("differ-sizes"))
    gate_size, epochs, lr = rank.max_train_examples, int(rank.epochs), rank.lr
    short = epochs < PAPER_EPOCHS or float(lr) != PAPER_LR or small(gate_size)
    if "gates" in rank.methods and short:
        examples = "all" if gate_size is None else f"{int(gate_size):,}"
        bullets.append(_piece("differ-gates", epochs=count(epochs, "epoch"), lr=lr_words(lr), examples=examples))
    if "cached" in probe.modes:
        bullets.append(_piece("differ-execution"))
    if len(probe.seeds) > 1:
        bullets.append(_piece("differ-seeds"))
    bullets.append(_piece("differ-token-types"))
    return join(bullets, "\n")
