"""Bad inputs through every public surface: one line that names the problem and says what to do.

A table of mistakes a user can make, fed through the CLI (in-process with ``papa.cli.main`` and, for
a few, as a real ``papa`` subprocess), the grid config loader, library calls and the notebooks'
strict parameters. For each case: a non-zero exit (CLI) or a typed :class:`PapaError`, a message
holding a specific "what is wrong" and a specific "what to do" substring, no traceback, and nothing
left in the output folder (no result, no half-written temporary file).

Everything is synthetic and tiny: task folders and constants files are written to ``tmp_path``;
models are the embedded ``minilm-l6`` (offline, ~1 s) or random-init configs of a few KB.
Cases marked ``xfail(strict=True)`` are known gaps: they fail loudly once fixed, so the mark can go.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import pytest
import torch
import yaml
from tiny import averaged

from papa.cli import main
from papa.core import io as papa_io
from papa.core.constants import ConstantSet, load_constants, save_constants
from papa.core.errors import (
    ConstantsMismatchError,
    CorruptFileError,
    DataError,
    PapaError,
    ResourceBudgetError,
    UnsupportedArchitectureError,
)

LAYERS, HEADS, POSITIONS = 6, 12, 512  # minilm-l6
TOTAL = LAYERS * HEADS
ROOT = Path(__file__).resolve().parent.parent

# --- fixtures: everything synthetic, built once per module ------------------------------------------------------------


@pytest.fixture(autouse=True)
def _quiet_machine(monkeypatch, tmp_path, inputs):
    """One thread, offline, a private feature cache, and the synthetic data as the default data folder."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_EVALUATE_OFFLINE"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("PAPA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PAPA_DATA_DIR", str(inputs / "data" / "good"))
    monkeypatch.delenv("PAPA_MEMORY_BUDGET_GB", raising=False)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def out(tmp_path) -> Path:
    """The output folder of a case: it must still be empty afterwards."""
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


def _sst2(root: Path, labels=("neg", "pos"), splits=None) -> Path:
    rows = [{"sentence": "a fine film", "label": 1}, {"sentence": "a dull film", "label": 0}]
    splits = {"train": rows, "validation": rows} if splits is None else splits
    folder = root / "sst2"
    folder.mkdir(parents=True)
    if labels is not None:
        (folder / "labels.json").write_text(json.dumps({"label": list(labels)}), encoding="utf-8")
    for split, lines in splits.items():
        text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
        (folder / f"{split}.jsonl").write_text(text, encoding="utf-8")
    return root


def _constant_set(fingerprint: str, length: int = 64, relayout: bool = True, layers: int = LAYERS) -> ConstantSet:
    g = torch.Generator().manual_seed(0)
    counts = torch.ones(length, length, dtype=torch.float64)
    return ConstantSet(
        averaged(torch.rand(layers, HEADS, length, length, generator=g), counts),
        counts,
        torch.rand(layers, HEADS, generator=g),
        {"model": "minilm-l6", "fingerprint": fingerprint, "task": "sst2", "relayout": relayout},
    )


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """Every bad (and good) input file the cases read, under one folder that is never an output."""
    from papa.core.heads import all_heads, save_ranking
    from papa.core.models import resolve_model_path, weights_fingerprint

    root = tmp_path_factory.mktemp("inputs")
    good_row = {"sentence": "a fine film", "label": 1}
    data = root / "data"
    _sst2(data / "good")
    _sst2(data / "missing_split", splits={"train": [good_row]})
    _sst2(data / "malformed", splits={"train": [good_row, '{"sentence": "cut off", "lab'], "validation": [good_row]})
    _sst2(data / "bad_label", splits={"train": [good_row], "validation": [good_row, {"sentence": "odd", "label": 5}]})
    _sst2(data / "empty_split", splits={"train": [], "validation": [good_row]})
    _sst2(data / "no_labels", labels=None)
    _sst2(data / "no_column", splits={"train": [{"text": "a fine film", "label": 1}], "validation": [good_row]})
    conll = data / "ragged_tags" / "conll2003"
    conll.mkdir(parents=True)
    (conll / "labels.json").write_text(json.dumps({"ner_tags": ["O", "B-X"], "pos_tags": ["N"]}), encoding="utf-8")
    (conll / "validation.jsonl").write_text(
        json.dumps({"tokens": ["two", "words"], "ner_tags": [0], "pos_tags": [0, 0]}) + "\n", encoding="utf-8"
    )

    fingerprint = weights_fingerprint(resolve_model_path("minilm-l6")[0])
    consts = root / "constants"
    save_constants(consts / "good.safetensors", _constant_set(fingerprint))
    save_constants(consts / "other_model.safetensors", _constant_set("0123456789abcdef"))
    save_constants(consts / "other_length.safetensors", _constant_set(fingerprint, length=32))
    save_constants(consts / "other_layout.safetensors", _constant_set(fingerprint, relayout=False))
    save_constants(consts / "other_depth.safetensors", _constant_set(fingerprint, layers=4))
    good = (consts / "good.safetensors").read_bytes()
    (consts / "truncated.safetensors").write_bytes(good[: len(good) // 2])
    (consts / "flipped.safetensors").write_bytes(good[:-1] + bytes([good[-1] ^ 0xFF]))
    from safetensors.torch import save_file

    save_file({"weight": torch.zeros(2)}, str(consts / "foreign.safetensors"))

    ranks = root / "rankings"
    ranks.mkdir()
    heads = [list(h) for h in all_heads(LAYERS, HEADS)]
    (ranks / "empty.json").write_text("[]", encoding="utf-8")
    (ranks / "duplicate.json").write_text(json.dumps([heads[0]] + heads[:-1]), encoding="utf-8")
    (ranks / "missing.json").write_text(json.dumps(heads[:-1]), encoding="utf-8")
    (ranks / "out_of_range.json").write_text(json.dumps(heads[:-1] + [[LAYERS, 0]]), encoding="utf-8")
    (ranks / "not_pairs.json").write_text(json.dumps([[0]] + heads[1:]), encoding="utf-8")
    (ranks / "not_ints.json").write_text(json.dumps([["a", "b"]] + heads[1:]), encoding="utf-8")
    save_ranking(ranks / "edited.json", [tuple(h) for h in heads], {"method": "random"})
    edited = json.loads((ranks / "edited.json").read_text(encoding="utf-8"))
    edited["ranking"][0], edited["ranking"][1] = edited["ranking"][1], edited["ranking"][0]
    (ranks / "edited.json").write_text(json.dumps(edited), encoding="utf-8")

    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    GPT2Model(GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=50, n_positions=16)).save_pretrained(root / "gpt2")
    (root / "no_config").mkdir()
    return root


# --- the CLI ----------------------------------------------------------------------------------------------------------

DATA = ["--data-dir", "{inputs}/data/good", "--max-train-examples", "2", "--max-eval-examples", "2", "--epochs", "1"]
PROBE = ["probe", "--task", "sst2", "--out", "{out}/result.json"]
K_ALL = ["--constant-heads", "all", "--constants"]
RANKED = ["--constant-heads", "3", "--constants", "{inputs}/constants/good.safetensors", "--ranking"]


def _data(name: str) -> list[str]:
    return ["--data-dir", f"{{inputs}}/data/{name}", "--max-train-examples", "2", "--epochs", "1"]


#: (argv, what is wrong, what to do). ``{out}`` is the (empty) output folder, ``{inputs}`` the fixtures.
CLI_CASES = [
    # names
    pytest.param(
        ["estimate", "--task", "qqp", "--out", "{out}/c.safetensors"],
        "Unknown task 'qqp' at --task",
        "Use one of cola, sst2",
        id="unknown-task",
    ),
    pytest.param(
        ["rank", "--task", "sst2", "--method", "magic", "--out", "{out}/r.json"],
        "Unknown ranking method 'magic'",
        "Use one of gates, deviation, random",
        id="unknown-method",
    ),
    pytest.param(
        PROBE + ["--model", "./no/such/model"] + DATA,
        "--model: Unknown model './no/such/model'",
        "Use minilm-l6, minilm-l3, mpnet-base, a local model folder",
        id="unknown-model",
    ),
    pytest.param(
        PROBE + ["--model", "papa-tests/no-such-model"] + DATA,
        "is not in the local Hugging Face cache and HF_HUB_OFFLINE is set",
        "Use the embedded model `minilm-l6`",
        id="hub-id-offline",
    ),
    pytest.param(
        PROBE + ["--model", "{inputs}/gpt2"] + DATA,
        "Architecture 'gpt2' is not supported",
        "Supported model types: bert",
        id="unsupported-architecture",
    ),
    pytest.param(
        PROBE + ["--model", "{inputs}/no_config"] + DATA,
        "has no config.json",
        "written by save_pretrained",
        id="model-folder-without-config",
    ),
    pytest.param(
        PROBE + ["--mode", "fast"] + DATA, "Unknown mode 'fast'", "Use one of cached, faithful", id="unknown-mode"
    ),
    pytest.param(
        PROBE + ["--probe-input", "pixels"] + DATA,
        "Unknown probe_input 'pixels'",
        "Use one of all, embeddings",
        id="unknown-probe-input",
    ),
    pytest.param(
        PROBE + ["--lr", "-1"] + DATA, "--lr must be > 0, got -1.0", "Use a positive learning rate", id="negative-lr"
    ),
    pytest.param(PROBE + ["--device", "gpu9"] + DATA, "'gpu9' is not a device", "use cpu, cuda", id="unknown-device"),
    pytest.param(PROBE + ["--device", "cuda:99"] + DATA, "'cuda:99'", "use --device cpu", id="absent-device"),
    pytest.param(
        ["estimate", "--task", "sst2", "--max-examples", "0", "--out", "{out}/c.safetensors"],
        "--max-examples must be >= 1, got 0",
        "Use a count >= 1",
        id="max-examples-zero",
    ),
    # head counts
    pytest.param(
        PROBE + ["--constant-heads=-3"] + DATA,
        "Head count -3 is outside [0, 72]",
        "This model has 72 heads",
        id="k-negative",
    ),
    pytest.param(
        PROBE + ["--constant-heads", "73", "--constants", "{inputs}/constants/good.safetensors"] + DATA,
        "Head count 73 is outside [0, 72]",
        "This model has 72 heads",
        id="k-above-head-count",
    ),
    pytest.param(
        PROBE + ["--constant-heads", "1.5", "--constants", "{inputs}/constants/good.safetensors"] + DATA,
        "Head fraction 1.5 is outside [0, 1]",
        "Fractions run from 0 (none) to 1 (all)",
        id="fraction-above-one",
    ),
    pytest.param(
        PROBE + ["--constant-heads=-1/8"] + DATA,
        "Head fraction -0.125 is outside [0, 1]",
        "Fractions run from 0",
        id="fraction-negative",
    ),
    pytest.param(
        PROBE + ["--constant-heads", "lots"] + DATA,
        "Cannot read 'lots' as a head count or fraction",
        "Use e.g. 36, 0.5, 7/8 or all",
        id="k-not-a-number",
    ),
    pytest.param(
        PROBE + ["--constant-heads", "3"] + DATA,
        "3 constant heads need a constants file",
        "Pass --constants",
        id="k-without-constants",
    ),
    pytest.param(
        PROBE + ["--constant-heads", "3", "--constants", "{inputs}/constants/good.safetensors"] + DATA,
        "3 constant heads need a head ranking",
        "Pass --ranking",
        id="k-without-ranking",
    ),
    pytest.param(
        ["rank", "--task", "sst2", "--method", "gates", "--out", "{out}/r.json"],
        "The gates ranking needs a constants file",
        "Pass --constants",
        id="gates-without-constants",
    ),
    # rankings
    pytest.param(
        PROBE + RANKED + ["{inputs}/rankings/empty.json"] + DATA,
        "The ranking misses 72 heads",
        "compute it with `papa rank`",
        id="ranking-empty",
    ),
    pytest.param(
        PROBE + RANKED + ["{inputs}/rankings/duplicate.json"] + DATA,
        "Head set lists [[0, 0]] more than once",
        "List each head once",
        id="ranking-duplicate-head",
    ),
    pytest.param(
        PROBE + RANKED + ["{inputs}/rankings/missing.json"] + DATA,
        "The ranking misses 1 heads (first: [5, 11])",
        "lists all 72 heads once",
        id="ranking-missing-head",
    ),
    pytest.param(
        PROBE + RANKED + ["{inputs}/rankings/out_of_range.json"] + DATA,
        "Head [6, 0] is out of range for 6 layers x 12 heads",
        "count from 0",
        id="ranking-head-out-of-range",
    ),
    pytest.param(
        PROBE + RANKED + ["{inputs}/rankings/edited.json"] + DATA,
        "fails its checksum",
        "recompute it with `papa rank` (papa replaces the file)",
        id="ranking-edited",
    ),
    pytest.param(
        PROBE + RANKED + ["{inputs}/rankings/nowhere.json"] + DATA,
        "does not exist",
        "Check the path",
        id="ranking-missing-file",
    ),
    pytest.param(
        PROBE + RANKED + ["{inputs}/rankings/not_pairs.json"] + DATA,
        "is not a [layer, head] pair",
        "Write heads as [layer, head]",
        id="ranking-not-pairs",
    ),
    pytest.param(
        PROBE + RANKED + ["{inputs}/rankings/not_ints.json"] + DATA,
        "[layer, head]",
        "integer",
        id="ranking-not-integers",
    ),
    # lengths
    pytest.param(
        ["estimate", "--task", "sst2", "--max-length", "0", "--out", "{out}/c.safetensors"],
        "--max-length must be >= 8, got 0",
        "Use an input length L from 8 to 512",
        id="max-length-zero",
    ),
    pytest.param(
        ["estimate", "--task", "sst2", "--max-length", "1024", "--out", "{out}/c.safetensors"],
        "--max-length must be <= 512, got 1024",
        "Use an input length L from 8 to 512",
        id="max-length-above-positions",
    ),
    pytest.param(
        ["estimate", "--task", "sst2", "--max-length", "63", "--out", "{out}/c.safetensors"],
        "max_length must be even for the PAPA layout, got 63",
        "The paper uses 64",
        id="max-length-odd",
    ),
    # constants files
    pytest.param(
        PROBE + K_ALL + ["{inputs}/constants/other_model.safetensors"] + DATA,
        "were estimated for another model (model weights: file has 0123456789abcdef",
        "Estimate constants for this setting with `papa estimate`",
        id="constants-other-model",
    ),
    pytest.param(
        PROBE + K_ALL + ["{inputs}/constants/other_length.safetensors"] + DATA,
        "another max length (length L: file has 32, this run needs 64)",
        "with `papa estimate`",
        id="constants-other-length",
    ),
    pytest.param(
        PROBE + K_ALL + ["{inputs}/constants/other_layout.safetensors"] + DATA,
        "another layout setting (relayout: file has False, this run needs True)",
        "with `papa estimate`",
        id="constants-other-relayout",
    ),
    pytest.param(
        PROBE + K_ALL + ["{inputs}/constants/other_depth.safetensors"] + DATA,
        "a model of another depth (layers: file has 4, this run needs 6)",
        "with `papa estimate`",
        id="constants-other-depth",
    ),
    pytest.param(
        PROBE + K_ALL + ["{inputs}/constants/truncated.safetensors"] + DATA,
        "is not a readable safetensors file (truncated or corrupt)",
        "Estimate it again with `papa estimate`",
        id="constants-truncated",
    ),
    pytest.param(
        PROBE + K_ALL + ["{inputs}/constants/flipped.safetensors"] + DATA,
        "fails its checksum (a changed or corrupted byte)",
        "Estimate it again",
        id="constants-flipped-byte",
    ),
    pytest.param(
        PROBE + K_ALL + ["{inputs}/constants/foreign.safetensors"] + DATA,
        "is not a papa constants file",
        "Estimate it again",
        id="constants-foreign-file",
    ),
    pytest.param(
        PROBE + K_ALL + ["{inputs}/constants/nowhere.safetensors"] + DATA,
        "nowhere.safetensors does not exist",
        "Create it with `papa estimate`",
        id="constants-missing-file",
    ),
    pytest.param(
        [
            "rank",
            "--task",
            "sst2",
            "--method",
            "deviation",
            "--constants",
            "{inputs}/constants/other_model.safetensors",
            "--out",
            "{out}/r.json",
        ],
        "were estimated for another model",
        "with `papa estimate`",
        id="rank-constants-other-model",
    ),
    # task data
    pytest.param(
        PROBE + ["--data-dir", "{inputs}/data/absent"],
        "The data folder",
        "Set PAPA_DATA_DIR (or pass data_dir)",
        id="data-folder-absent",
    ),
    pytest.param(
        PROBE + _data("missing_split"),
        "validation.jsonl does not exist (splits found: train)",
        "Choose an existing split, or add the file",
        id="data-missing-split",
    ),
    pytest.param(
        PROBE + _data("malformed"),
        "Malformed JSON in train.jsonl line 2",
        "each line must be one JSON object",
        id="data-malformed-line",
    ),
    pytest.param(
        PROBE + _data("bad_label"),
        "validation.jsonl line 2",
        "Use label ids 0..1, in the order of labels.json",
        id="data-label-outside-set",
    ),
    pytest.param(
        PROBE + _data("empty_split"),
        "train.jsonl is empty",
        "Fill it with one JSON object per line",
        id="data-empty-split",
    ),
    pytest.param(
        PROBE + _data("no_labels"),
        "labels.json does not exist",
        "Add it: a JSON object mapping 'label'",
        id="data-no-label-file",
    ),
    pytest.param(
        PROBE + _data("no_column"), "has no column 'sentence'", "Add the column to every line", id="data-missing-column"
    ),
    # outputs and grids
    pytest.param(
        ["rank", "--task", "sst2", "--method", "random", "--out", "{out}"],
        "Cannot write",
        "Check the output path",
        id="out-is-a-folder",
    ),
    pytest.param(
        ["grid", "run", "{inputs}/no_such_grid.yaml"],
        "no_such_grid.yaml does not exist",
        "Use one of configs/*.yaml",
        id="grid-config-missing",
    ),
]


def _fill(argv: list[str], **paths) -> list[str]:
    return [arg.format(**{k: str(v) for k, v in paths.items()}) for arg in argv]


def _run_main(argv: list[str], capsys) -> tuple[int, str]:
    try:
        status = main(argv)
    except SystemExit as exit_:  # argparse's own errors
        status = exit_.code
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def _assert_clean(message: str, problem: str, hint: str) -> None:
    assert "Traceback" not in message, message
    assert problem in message, f"{problem!r} not in {message!r}"
    assert hint in message, f"{hint!r} not in {message!r}"


def _assert_empty(folder: Path) -> None:
    assert sorted(p.name for p in folder.iterdir()) == [], "the failed command left files behind"


@pytest.mark.parametrize(("argv", "problem", "hint"), CLI_CASES)
def test_cli_bad_input(argv, problem, hint, inputs, out, tmp_path, capsys):
    status, message = _run_main(_fill(argv, out=out, inputs=inputs), capsys)
    assert status not in (0, None), message
    _assert_clean(message, problem, hint)
    if status == 2 and "usage:" not in hint:
        assert message.strip().startswith("papa: error:") or "error: argument" in message, message
    _assert_empty(out)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.safetensors"))


# --- write failures: read-only folder, full disk ---------------------------------------------------------------------


def _failing(err: int):
    def fail(*args, **kwargs):
        raise OSError(err, os.strerror(err))

    return fail


def _proxy(module, **overrides):
    """A stand-in for ``module`` inside papa.core.io only (the real module stays untouched for everyone else)."""
    proxy = types.SimpleNamespace(**{name: getattr(module, name) for name in dir(module) if not name.startswith("__")})
    for name, value in overrides.items():
        setattr(proxy, name, value)
    return proxy


WRITE_FAILURES = [
    pytest.param(
        "os",
        "replace",
        errno.EROFS,
        "the folder is not writable",
        "Choose a writable output folder",
        id="read-only-at-rename",
    ),
    pytest.param(
        "tempfile",
        "mkstemp",
        errno.EROFS,
        "the folder is not writable",
        "Choose a writable output folder",
        id="read-only-at-create",
    ),
    pytest.param(
        "tempfile",
        "mkstemp",
        errno.EACCES,
        "the folder is not writable",
        "Choose a writable output folder",
        id="permission-denied",
    ),
    pytest.param(
        "os",
        "fsync",
        errno.ENOSPC,
        "No space left to write",
        "Free disk space or choose another output folder",
        id="disk-full-at-flush",
    ),
    pytest.param(
        "tempfile", "mkstemp", errno.ENOSPC, "No space left to write", "Free disk space", id="disk-full-at-create"
    ),
]


@pytest.mark.parametrize(("module", "function", "err", "problem", "hint"), WRITE_FAILURES)
def test_cli_write_failure(module, function, err, problem, hint, out, monkeypatch, capsys):
    real = {"os": os, "tempfile": tempfile}[module]
    monkeypatch.setattr(papa_io, module, _proxy(real, **{function: _failing(err)}))
    status, message = _run_main(["rank", "--task", "sst2", "--method", "random", "--out", str(out / "r.json")], capsys)
    assert status == 2, message
    _assert_clean(message, problem, hint)
    _assert_empty(out)  # neither the target nor a temporary file


@pytest.mark.parametrize(("module", "function", "err", "problem", "hint"), WRITE_FAILURES[:1] + WRITE_FAILURES[3:4])
def test_library_write_failure(module, function, err, problem, hint, out, monkeypatch):
    real = {"os": os, "tempfile": tempfile}[module]
    monkeypatch.setattr(papa_io, module, _proxy(real, **{function: _failing(err)}))
    with pytest.raises(PapaError) as info:
        save_constants(out / "c.safetensors", _constant_set("x", length=8))
    _assert_clean(str(info.value), problem, hint)
    _assert_empty(out)


# --- a real subprocess: no traceback reaches the terminal -----------------------------------------------------------


def _papa_command() -> list[str]:
    script = Path(sys.executable).with_name("papa")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "papa.cli"]


SUBPROCESS_CASES = [
    pytest.param(
        ["estimate", "--task", "qqp", "--out", "{out}/c.safetensors"],
        "Unknown task 'qqp'",
        "Use one of",
        id="unknown-task",
    ),
    pytest.param(
        ["probe", "--task", "sst2", "--model", "papa-tests/no-such-model", "--out", "{out}/r.json"],
        "HF_HUB_OFFLINE is set",
        "Use the embedded model",
        id="hub-id-offline",
    ),
    pytest.param(
        PROBE + K_ALL + ["{inputs}/constants/flipped.safetensors"] + DATA,
        "fails its checksum",
        "Estimate it again",
        id="constants-flipped-byte",
    ),
]


@pytest.mark.parametrize(("argv", "problem", "hint"), SUBPROCESS_CASES)
def test_subprocess_bad_input(argv, problem, hint, inputs, out, tmp_path):
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_EVALUATE_OFFLINE="1",
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        PAPA_CACHE_DIR=str(tmp_path / "cache"),
        PAPA_DATA_DIR=str(inputs / "data" / "good"),
    )
    proc = subprocess.run(
        _papa_command() + _fill(argv, out=out, inputs=inputs),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    _assert_clean(proc.stderr, problem, hint)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("papa: error:")]
    assert len(errors) == 1, proc.stderr
    _assert_empty(out)


# --- the grid config loader -------------------------------------------------------------------------------------------

SMOKE = {
    "name": "bad",
    "models": ["minilm-l6"],
    "tasks": ["sst2"],
    "max_length": 32,
    "rank": {"methods": ["deviation"]},
    "probe": {"fractions": [0, "1/2", 1], "seeds": [42], "modes": ["cached"]},
}


def _with(path: str, value):
    config = json.loads(json.dumps(SMOKE))
    *parents, last = path.split(".")
    node = config
    for part in parents:
        node = node[part]
    node[last] = value
    return config


CONFIG_CASES = [
    pytest.param(
        _with("repeats", 3),
        "Config bad.yaml: Unknown config key repeats",
        "Allowed at the top level: data_seed",
        id="unknown-top-key",
    ),
    pytest.param(
        _with("probe.folds", 3),
        "Config bad.yaml: Unknown config key probe.folds",
        "Allowed here: dev_every_epoch, epochs",
        id="unknown-section-key",
    ),
    pytest.param(
        _with("studies", [{"name": "s", "colour": "red"}]),
        "Config bad.yaml: Unknown config key studies[0].colour",
        "Allowed here: chapter",
        id="unknown-study-key",
    ),
    pytest.param(
        _with("models", ["no such model!"]),
        "Config bad.yaml: models[0]: Unknown model 'no such model!'",
        "Use minilm-l6, minilm-l3, mpnet-base, a local model folder or a hub id",
        id="unknown-model",
    ),
    pytest.param(
        _with("tasks", ["qqp"]),
        "Config bad.yaml: Unknown task 'qqp' at tasks[0]",
        "Use one of cola, sst2",
        id="unknown-task",
    ),
    pytest.param(
        _with("rank.methods", ["oracle"]),
        "rank.methods[0]: Unknown ranking method 'oracle'",
        "Use one of gates, deviation, random",
        id="unknown-method",
    ),
    pytest.param(
        _with("probe.modes", ["fast"]),
        "Unknown mode 'fast' at probe.modes[0]",
        "Use one of cached, faithful",
        id="unknown-mode",
    ),
    pytest.param(
        _with("probe.fractions", [0, "9/8"]),
        "probe.fractions[1]: head fraction '9/8' is outside [0, 1]",
        "Fractions run from 0",
        id="fraction-above-one",
    ),
    pytest.param(
        _with("probe.fractions", [-0.5, 1]),
        "probe.fractions[0]: head fraction -0.5 is outside [0, 1]",
        "Fractions run from 0",
        id="fraction-negative",
    ),
    pytest.param(
        _with("probe.fractions", ["half", 1]),
        "probe.fractions[0]: head fraction 'half' is not a number",
        "Write fractions as 0, 1/2",
        id="fraction-text",
    ),
    pytest.param(
        {k: v for k, v in SMOKE.items() if k != "probe"},
        "Config bad.yaml: the key probe is missing",
        "Add it",
        id="missing-key",
    ),
    pytest.param(["models", "tasks"], "the file must be a mapping", "See configs/default.yaml", id="not-a-mapping"),
    pytest.param(
        "models: [minilm-l6\ntasks: sst2\n", "Config bad.yaml: not valid YAML", "Fix the YAML syntax", id="invalid-yaml"
    ),
    pytest.param(
        _with("probe.fractions", 0.5),
        "probe.fractions must be a list, got 0.5",
        "Write fractions as 0, 1/2",
        id="fractions-not-a-list",
    ),
    pytest.param(_with("models", [3]), "models[0] must be text, got 3", "Use minilm-l6", id="model-not-a-string"),
    pytest.param(_with("tasks", "sst2"), "tasks must be a list, got 'sst2'", "grid.schema.json", id="tasks-not-a-list"),
    pytest.param(
        _with("max_length", "long"),
        "max_length must be a whole number, got 'long'",
        "from 8 to 512",
        id="max-length-not-a-number",
    ),
    pytest.param(
        _with("probe.seeds", [1.5]),
        "probe.seeds[0] must be a whole number, got 1.5",
        "whole numbers",
        id="seeds-not-integers",
    ),
    pytest.param(
        _with("probe.max_eval_examples", 0),
        "probe.max_eval_examples must be >= 1, got 0",
        "null for the whole evaluation split",
        id="zero-is-not-all",
    ),
    pytest.param(
        "name: bad\nmodels: [minilm-l6]\nname: other\n",
        "the key 'name' appears twice in one mapping (lines 1 and 3)",
        "Keep one of them",
        id="duplicate-key",
    ),
]


@pytest.mark.parametrize(("config", "problem", "hint"), CONFIG_CASES)
def test_config_bad_input(config, problem, hint, tmp_path):
    from papa.pipeline.plan import load_config

    path = tmp_path / "bad.yaml"
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config), encoding="utf-8")
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(PapaError) as info:
        load_config(path)
    _assert_clean(str(info.value), problem, hint)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_config_cli_bad_input(tmp_path, capsys):
    """The same validation reaches the CLI as one line, before anything runs."""
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_with("tasks", ["qqp"])), encoding="utf-8")
    status, message = _run_main(["grid", "run", str(path), "--dry-run"], capsys)
    assert status == 2
    _assert_clean(message, "papa: error: Config bad.yaml: Unknown task 'qqp' at tasks[0]", "Use one of cola")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


# --- notebook parameters ----------------------------------------------------------------------------------------------


def _namespace(**values) -> dict:
    """What a notebook kernel holds after papermill injected its parameters."""
    import papa

    namespace = {
        "__annotations__": {
            "task": str,
            "k": int,
            "lr": float,
            "seeds": list,
            "relayout": bool,
            "ranking": "str | None",
        },
        "task": "sst2",
        "k": 0,
        "lr": 2e-5,
        "seeds": [42],
        "relayout": True,
        "ranking": None,
        "papa": papa,
        "In": [],
        "Out": {},
        "get_ipython": print,
        "_": None,
    }
    namespace.update(values)
    return namespace


NOTEBOOK_CASES = [
    pytest.param(
        {"tsak": "cola"},
        "Unknown notebook parameter(s): tsak",
        "This notebook declares: task, k",
        id="unknown-parameter",
    ),
    pytest.param(
        {"k": "36"}, "Notebook parameter k='36' is not of type", "Pass a value of the declared type", id="k-as-text"
    ),
    pytest.param(
        {"k": True}, "Notebook parameter k=True is not of type", "Pass a value of the declared type", id="k-as-bool"
    ),
    pytest.param({"seeds": 42}, "Notebook parameter seeds=42 is not of type", "declared type", id="seeds-not-a-list"),
    pytest.param({"lr": "fast"}, "Notebook parameter lr='fast' is not of type", "declared type", id="lr-as-text"),
    pytest.param(
        {"task": None}, "Notebook parameter task=None is not of type", "declared type", id="required-text-is-none"
    ),
]


@pytest.mark.parametrize(("values", "problem", "hint"), NOTEBOOK_CASES)
def test_notebook_bad_parameter(values, problem, hint):
    from papa.pipeline.notebook import parameters

    assert parameters(_namespace())["k"] == 0  # the clean namespace passes
    with pytest.raises(PapaError) as info:
        parameters(_namespace(**values))
    _assert_clean(str(info.value), problem, hint)


# --- library calls --------------------------------------------------------------------------------------------------


def _tiny_bert():
    from transformers import AutoModel, BertConfig

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=20,
        max_position_embeddings=32,
    )
    return AutoModel.from_config(config, attn_implementation="sdpa").eval()


def _extract_with_tiny_budget(inputs, monkeypatch):
    """Above the memory budget features stream to disk: refused when PAPA_CACHE_DIR lacks the room."""
    from papa.probing import features
    from papa.probing.extraction import extract_features

    monkeypatch.setenv("PAPA_MEMORY_BUDGET_GB", "1e-9")
    monkeypatch.setenv("PAPA_CACHE_DIR", str(inputs / "cache"))
    monkeypatch.setattr(features.shutil, "disk_usage", lambda folder: types.SimpleNamespace(free=0))
    ids = torch.randint(5, 50, (4, 8))
    encoded = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.zeros(4, dtype=torch.long)}
    extract_features(_tiny_bert(), encoded, token_task=False)


def _check_budget(inputs, monkeypatch):
    from papa.probing.features import check_budget, feature_bytes

    monkeypatch.setenv("PAPA_MEMORY_BUDGET_GB", "0.5")
    check_budget(feature_bytes(10_000, 13, 64, 768, token_task=False), "Caching encoder features")


def _bad_budget_setting(inputs, monkeypatch):
    from papa.probing.features import check_budget

    monkeypatch.setenv("PAPA_MEMORY_BUDGET_GB", "lots")
    check_budget(1, "Caching encoder features")


def _compatible(**wanted):
    def call(inputs, monkeypatch):
        load_constants(inputs / "constants" / "good.safetensors").check_compatible(**wanted)

    return call


def _load_split(folder: str, task: str = "sst2", split: str = "train"):
    def call(inputs, monkeypatch):
        from papa.probing.data import load_task_split

        load_task_split(task, split, inputs / "data" / folder)

    return call


def _call(function: str, *args, **kwargs):
    def call(inputs, monkeypatch):
        module, name = function.rsplit(".", 1)
        import importlib

        getattr(importlib.import_module(module), name)(*args, **kwargs)

    return call


def _load_ranking(name: str):
    def call(inputs, monkeypatch):
        from papa.core.heads import load_ranking

        load_ranking(inputs / "rankings" / name, LAYERS, HEADS)

    return call


def _load_gpt2(inputs, monkeypatch):
    from papa.core.models import load_model

    load_model(str(inputs / "gpt2"))


def _estimate_on_gpt2(inputs, monkeypatch):
    from transformers import AutoModel

    from papa.core.constants import estimate_constants

    model = AutoModel.from_pretrained(inputs / "gpt2")
    estimate_constants(model, {"input_ids": torch.zeros(1, 4, dtype=torch.long), "attention_mask": torch.ones(1, 4)})


LIBRARY_CASES = [
    pytest.param(
        _extract_with_tiny_budget,
        ResourceBudgetError,
        "so they stream to disk, but PAPA_CACHE_DIR",
        "set PAPA_CACHE_DIR to a folder on a larger disk",
        id="memory-budget-extract",
    ),
    pytest.param(
        _check_budget,
        ResourceBudgetError,
        "would need 12.78 GB, above the memory budget of 0.50 GB",
        "Lower max_train_examples / max_eval_examples",
        id="memory-budget-numbers",
    ),
    pytest.param(_bad_budget_setting, PapaError, "PAPA_MEMORY_BUDGET_GB", "number", id="memory-budget-not-a-number"),
    pytest.param(
        _compatible(fingerprint="0000000000000000"),
        ConstantsMismatchError,
        "estimated for another model",
        "Estimate constants for this setting",
        id="check-compatible-fingerprint",
    ),
    pytest.param(
        _compatible(max_length=128),
        ConstantsMismatchError,
        "length L: file has 64, this run needs 128",
        "papa estimate",
        id="check-compatible-length",
    ),
    pytest.param(
        _compatible(relayout=False),
        ConstantsMismatchError,
        "relayout: file has True, this run needs False",
        "papa estimate",
        id="check-compatible-relayout",
    ),
    pytest.param(
        _compatible(num_heads=16),
        ConstantsMismatchError,
        "heads: file has 12, this run needs 16",
        "papa estimate",
        id="check-compatible-heads",
    ),
    pytest.param(
        _call("papa.core.constants.load_constants", "/nonexistent/c.safetensors"),
        PapaError,
        "does not exist",
        "Create it with `papa estimate`",
        id="load-constants-missing",
    ),
    pytest.param(
        _call("papa.core.models.pick_device", "gpu9"),
        PapaError,
        "Unknown device 'gpu9'",
        "Use cpu, cuda",
        id="pick-device-unknown",
    ),
    pytest.param(
        _call("papa.core.models.pick_device", "cuda:99"), PapaError, "'cuda:99'", "Use", id="pick-device-absent"
    ),
    pytest.param(
        _call("papa.core.heads.validate_ranking", "0,1", 1, 2),
        PapaError,
        "list of [layer, head] pairs",
        "papa rank",
        id="ranking-not-a-list",
    ),
    pytest.param(
        _call("papa.core.heads.validate_head_set", [[0, True]], 1, 2),
        PapaError,
        "pair of integers",
        "integer layer and head",
        id="head-set-boolean",
    ),
    pytest.param(
        _load_split("missing_split", split="validation"),
        DataError,
        "splits found: train",
        "Choose an existing split",
        id="load-split-missing",
    ),
    pytest.param(
        _load_split("malformed"),
        DataError,
        "Malformed JSON in train.jsonl line 2",
        "Fix the line",
        id="load-split-malformed",
    ),
    pytest.param(
        _load_split("bad_label", split="validation"),
        DataError,
        "label 5 is outside the label set of 2 names",
        "Use label ids 0..1",
        id="load-split-label-outside",
    ),
    pytest.param(_load_split("empty_split"), DataError, "is empty", "Fill it", id="load-split-empty"),
    pytest.param(
        _load_split("ragged_tags", task="ner", split="validation"),
        DataError,
        "2 tokens but 1 ner_tags",
        "Give exactly one tag per token",
        id="load-split-ragged-tags",
    ),
    pytest.param(
        _call("papa.core.tasks.get_task", "qqp"), PapaError, "Unknown task 'qqp'", "Use one of", id="get-task-unknown"
    ),
    pytest.param(
        _call("papa.core.heads.count_for", -1, 72),
        PapaError,
        "Head count -1 is outside [0, 72]",
        "72 heads",
        id="count-negative",
    ),
    pytest.param(
        _call("papa.core.heads.count_for", 1.25, 72),
        PapaError,
        "Head fraction 1.25 is outside [0, 1]",
        "Fractions run",
        id="count-fraction-above-one",
    ),
    pytest.param(
        _call("papa.core.heads.count_for", True, 72),
        PapaError,
        "True is not a head count",
        "integer count",
        id="count-bool",
    ),
    pytest.param(
        _call("papa.core.heads.validate_head_set", [[0, 1, 2]], 6, 12),
        PapaError,
        "is not a [layer, head] pair",
        "Write heads as [layer, head]",
        id="head-set-triple",
    ),
    pytest.param(
        _call("papa.core.heads.validate_head_set", [[0, 1], [0, 1]], 6, 12),
        PapaError,
        "more than once",
        "List each head once",
        id="head-set-duplicate",
    ),
    pytest.param(
        _call("papa.core.heads.first_k", [(0, 0)], 2),
        PapaError,
        "Head count 2 is outside [0, 1]",
        "covers 1 heads",
        id="first-k-too-many",
    ),
    pytest.param(_load_ranking("empty.json"), PapaError, "misses 72 heads", "papa rank", id="load-ranking-empty"),
    pytest.param(
        _call("papa.probing.ranking.compute_ranking", "sorted", "minilm-l6"),
        PapaError,
        "Unknown ranking method 'sorted'",
        "Use one of gates",
        id="compute-ranking-unknown-method",
    ),
    pytest.param(
        _call("papa.core.layout.check_max_length", 0),
        PapaError,
        "at least 4, got 0",
        "The paper uses 64",
        id="max-length-zero",
    ),
    pytest.param(
        _call("papa.core.layout.check_max_length", 1024, 512),
        PapaError,
        "exceeds the model's 512 positions",
        "Use at most 512",
        id="max-length-above-positions",
    ),
    pytest.param(
        _call("papa.probing.data.subset", [1, 2, 3], 0, 0),
        PapaError,
        "must be a positive integer or None",
        "Pass a number",
        id="subset-zero",
    ),
    pytest.param(
        _call("papa.core.models.resolve_model_path", "papa-tests/no-such-model"),
        PapaError,
        "HF_HUB_OFFLINE is set",
        "Use the embedded model",
        id="hub-id-offline",
    ),
    pytest.param(
        _load_gpt2,
        UnsupportedArchitectureError,
        "Architecture 'gpt2' is not supported",
        "Add a row to papa.core.architectures.ADAPTERS",
        id="load-unsupported-architecture",
    ),
    pytest.param(
        _estimate_on_gpt2,
        UnsupportedArchitectureError,
        "Architecture 'gpt2' is not supported",
        "Supported model types",
        id="estimate-unsupported-architecture",
    ),
    pytest.param(
        _call("papa.core.patching.load_patched", "/nonexistent/patched"),
        PapaError,
        "has no config.json",
        "save_pretrained",
        id="load-patched-missing",
    ),
]


@pytest.mark.parametrize(("call", "error", "problem", "hint"), LIBRARY_CASES)
def test_library_bad_input(call, error, problem, hint, inputs, monkeypatch, tmp_path):
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(error) as info:
        call(inputs, monkeypatch)
    assert isinstance(info.value, PapaError)
    _assert_clean(str(info.value), problem, hint)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_corrupt_constants_are_typed(inputs):
    """Truncated and flipped files are CorruptFileError, mismatches ConstantsMismatchError (both PapaError)."""
    for name in ("truncated", "flipped", "foreign"):
        with pytest.raises(CorruptFileError):
            load_constants(inputs / "constants" / f"{name}.safetensors")
    other = load_constants(inputs / "constants" / "other_model.safetensors")
    with pytest.raises(ConstantsMismatchError):
        other.check_compatible(
            fingerprint=load_constants(inputs / "constants" / "good.safetensors").meta["fingerprint"]
        )
