"""The setup chapter (``book/setup.md``) from a grid config: the template ``book/templates/setup.md`` filled with
values computed here (no size typed by hand, no config syntax, every name from the config escaped)."""

from __future__ import annotations

from fractions import Fraction
from functools import partial

from papa.analysis.figure_kit import metric_name, task_name
from papa.book.studies import size_studies
from papa.book.table_format import and_list, count, fraction_words, lr_text, plural
from papa.book.templates import Markdown, code, fill, join, model, pieces
from papa.core.fields import DEFAULT_TRAIN_EXAMPLES, PAPER_EPOCHS, PAPER_LR
from papa.pipeline.executed import study_words

_piece = partial(fill, "setup")
#: The models the book describes (a piece ``model-<name>`` of the template each); another model is named by its id.
EMBEDDED = {name.removeprefix("model-") for name in pieces("setup") if name.startswith("model-")} - {"other"}

_TASK_KINDS = {"sequence": "one label per sentence or pair", "token": "one label per word"}
_SOURCES = {"cola": "GLUE", "sst2": "GLUE", "mrpc": "GLUE", "mnli": "GLUE", "ner": "CoNLL-2003", "pos": "CoNLL-2003"}


def lr_words(value) -> str:
    """A learning rate as people write it: ``2e-05`` → ``2e-5``, ``0.01`` → ``0.01``
    (:func:`papa.book.table_format.lr_text`); ``select`` in words."""
    if value == "select":
        return "the one chosen for its model and task"
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
    """How a probe trains and what it reports, from one set of probe settings."""
    epochs = count(int(settings.get("epochs", PAPER_EPOCHS)), "epoch")
    if settings.get("pool_examples"):
        keys = ("max_train_examples", "heldout_examples", "pool_examples")
        train, heldout, pool = (f"{int(settings[key]):,}" for key in keys)
        data = _piece("data-pool", train=train, heldout=heldout, pool=pool)
    else:
        data = _piece("data-subset", size=_size(settings.get("max_train_examples", DEFAULT_TRAIN_EXAMPLES)))
    if settings.get("patience"):
        length = _piece("length-patience", patience=count(int(settings["patience"]), "epoch"), epochs=epochs)
    else:
        length = _piece("length-fixed", epochs=epochs)
    lr = settings.get("lr", PAPER_LR)
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


def _study(study: dict, config: dict) -> Markdown:
    """One further study as a sentence: what it is, where it is read, and what it runs."""
    models = study.get("models", config["models"])
    tasks = [task_name(t) for t in study.get("tasks", config["tasks"])]
    named = Markdown(and_list(model(m) for m in models))
    parts = [_piece("study-models", models=named, tasks=and_list(tasks))]
    if "fractions" in study:
        parts.append(_piece("study-fractions", heads=constant_share_words(study["fractions"])))
    if study.get("probe_input", "all") != "all":
        parts.append(_piece("study-floor"))
    if "methods" in study:
        methods = study["methods"]
        parts.append(_piece("study-methods", methods=and_list(methods), rankings=plural(len(methods), "ranking")))
    if "modes" in study:
        parts.append(_piece("study-modes", modes=and_list(study["modes"])))
    if "seeds" in study:
        parts.append(_seeds(study["seeds"]))
    if "epochs" in study:
        parts.append(count(int(study["epochs"]), "epoch"))
    if "lr" in study:
        parts.append(_piece("study-lr", lr=lr_words(study["lr"])))
    if "max_train_examples" in study:
        parts.append(_size(study["max_train_examples"]))
    if "max_eval_examples" in study:
        parts.append(_dev_words(study["max_eval_examples"]))
    if study.get("selection") == "heldout":
        parts.append(_piece("study-heldout", share=f"{float(study.get('heldout_fraction', 0.1)):.0%}"))
    chapter = study.get("chapter", "controls")
    name = study["name"]
    return _piece("study", words=study_words(name), name=code(name), chapter=chapter, parts=join(parts, "; "))


def _models(config: dict) -> Markdown:
    models = config["models"]
    encoders = count(len(models), "encoder")
    if all(m in EMBEDDED for m in models):
        every = "both" if len(models) == 2 else "all"
        lead = _piece("models-embedded", encoders=encoders, all=every) if len(models) > 1 else None
        lead = lead or _piece("models-embedded-one", encoders=encoders)
    else:
        lead = _piece("models-hub", encoders=encoders)
    words = [_piece(f"model-{m}") if m in EMBEDDED else _piece("model-other", model=model(m)) for m in models]
    return _piece("models", lead=lead, bullets=join((_piece("model-bullet", words=w) for w in words), "\n"))


def _tasks(config: dict) -> Markdown:
    """The rows of the tasks table."""
    from papa.probing.data import TASKS

    rows = []
    for t in config["tasks"]:
        spec = TASKS[t]
        metric = "entity-level micro F1" if spec.main_metric == "f1" else metric_name(spec.main_metric)
        labels, source = _TASK_KINDS[spec.kind], _SOURCES.get(t, "")
        rows.append(_piece("task-row", task=task_name(t), labels=labels, metric=metric, source=source))
    return join(rows, "\n")


def _per_model(config: dict) -> Markdown:
    """The sentences on models whose probes differ (``probe.per_model``), each with the studies that check it."""
    probe, overrides = config["probe"], config["probe"].get("per_model") or {}
    sized = set(size_studies(config))
    out = []
    for name, settings in overrides.items():
        studies = [st for st in config.get("studies", []) if st["name"] in sized]
        checks = Markdown(and_list(code(st["name"]) for st in studies if name in st.get("models", config["models"])))
        check = _piece("per-model-check", studies=checks) if checks else Markdown("")
        protocol = _protocol({**probe, **settings})
        out.append(_piece("per-model", model=model(name), protocol=protocol, check=check))
    return join(out)


def setup_page(config: dict) -> str:
    """``book/setup.md`` for a grid config."""
    probe, rank, est = config["probe"], config["rank"], config["estimate"]
    seeds, single = probe.get("seeds", [42]), probe.get("single_seed_fractions") or []
    if single:
        seed_text = _piece("seeds-single", seeds=_seeds(seeds), fractions=and_list(fraction_words(f) for f in single))
    else:
        seed_text = _piece("seeds-every", seeds=_seeds(seeds))
    methods = rank.get("methods", ["gates"])
    gates = Markdown("")
    if "gates" in methods:
        examples = f"{int(rank.get('max_train_examples', DEFAULT_TRAIN_EXAMPLES)):,}"
        epochs, lr = count(int(rank.get("epochs", PAPER_EPOCHS)), "epoch"), lr_words(rank.get("lr", PAPER_LR))
        gates = _piece("gates", epochs=epochs, lr=lr, examples=examples)
    choice = config.get("lr_selection", {})
    lr_select = Markdown("")
    if probe.get("lr") == "select":
        lrs = and_list(lr_words(v) for v in choice.get("lrs", []))
        lr_select = _piece("lr-select", lrs=lrs, seeds=_seeds(choice.get("seeds", [42])))
    studies = join((_study(s, config) for s in config.get("studies", [])), "\n")
    return _piece(
        config_file=code(f"configs/{config['name']}.yaml"),
        models=_models(config),
        tasks=_tasks(config),
        max_length=config.get("max_length", 64),
        layout=_piece("layout-papa" if config.get("relayout", True) else "layout-end"),
        estimate_examples=f"{int(est.get('max_examples', 2000)):,}",
        methods=and_list(methods),
        gates=gates,
        protocol=_protocol(probe),
        seeds=seed_text,
        dev=_dev_words(probe.get("max_eval_examples")),
        heads=constant_share_words(probe.get("fractions", [0, 1])),
        modes=and_list(probe.get("modes", ["cached"])),
        selection=_piece("selection-final" if probe.get("selection", "final") == "final" else "selection-heldout"),
        lr_select=lr_select,
        per_model=_per_model(config),
        studies=studies or _piece("no-studies"),
        differences=_differences(config),
    )


#: A size at or above this many examples is "the full set" (configs/paper.yaml writes 1,000,000).
FULL_SET = 100_000


def _differences(config: dict) -> Markdown:
    """What this grid does otherwise than the paper, one bullet each, only those that hold for this config."""
    probe, rank, models = config.get("probe", {}), config.get("rank", {}), config["models"]
    bullets = []
    small = lambda size: size is not None and int(size) < FULL_SET
    if all(m in EMBEDDED for m in models):
        encoders = count(len(models), "sentence-embedding model")
        bullets.append(_piece("differ-models", n_encoders=encoders, n_models=count(len(models), "model")))
    if small(probe.get("max_train_examples", DEFAULT_TRAIN_EXAMPLES)):
        bullets.append(_piece("differ-sizes"))
    gate_size, epochs = rank.get("max_train_examples", DEFAULT_TRAIN_EXAMPLES), int(rank.get("epochs", PAPER_EPOCHS))
    lr = rank.get("lr", PAPER_LR)
    short = epochs < PAPER_EPOCHS or float(lr) != PAPER_LR or small(gate_size)
    if "gates" in rank.get("methods", ["gates"]) and short:
        examples = "all" if gate_size is None else f"{int(gate_size):,}"
        bullets.append(_piece("differ-gates", epochs=count(epochs, "epoch"), lr=lr_words(lr), examples=examples))
    if "cached" in probe.get("modes", ["cached"]):
        bullets.append(_piece("differ-execution"))
    if len(probe.get("seeds", [42])) > 1:
        bullets.append(_piece("differ-seeds"))
    bullets.append(_piece("differ-token-types"))
    return join(bullets, "\n")
