"""How to load the tasks of the registry (:data:`papa.core.tasks.TASKS`: columns, label column, main metric).

:func:`load_task_split` returns a :class:`datasets.Dataset` with the hub's columns and label ids, from the Hugging Face
hub or a local folder (``data_dir``, else ``PAPA_DATA_DIR``) of ``TASK/SPLIT.jsonl`` plus ``TASK/labels.json``,
validated line by line so that an error names its file and line. Nothing is cached on disk.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import datasets

from papa.core.errors import DataError, PapaError
from papa.core.tasks import TaskSpec, get_task

DATA_DIR_ENV = "PAPA_DATA_DIR"
_LAYOUT_HINT = (
    f"Set {DATA_DIR_ENV} (or pass data_dir) to a folder laid out as TASK/SPLIT.jsonl with TASK/labels.json, "
    "e.g. sst2/validation.jsonl and sst2/labels.json."
)


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path | None:
    """The local data folder: ``data_dir``, else ``$PAPA_DATA_DIR``, else ``None`` (use the hub)."""
    if data_dir is not None and str(data_dir) != "":
        return Path(data_dir).expanduser()
    env = os.environ.get(DATA_DIR_ENV, "").strip()
    return Path(env).expanduser() if env else None


def load_task_split(task: str | TaskSpec, split: str, data_dir: str | os.PathLike | None = None) -> datasets.Dataset:
    """One split of a task: its text and label columns only, ``ClassLabel`` ids as on the hub; read from
    ``data_dir``, else ``$PAPA_DATA_DIR``, else the Hugging Face hub."""
    spec = get_task(task)
    root = resolve_data_dir(data_dir)
    if root is not None:
        return _load_local(spec, split, root)
    return _load_hub(spec, split)


def label_names(task: str | TaskSpec, dataset: datasets.Dataset) -> list[str]:
    """The label names of ``dataset``'s label column, in id order."""
    spec = get_task(task)
    feature = dataset.features.get(spec.label_column)
    if feature is None:
        raise DataError(
            f"The dataset has no column {spec.label_column!r} for task {spec.name}",
            "Load it with papa.probing.data.load_task_split.",
        )
    if spec.is_token_task:
        feature = getattr(feature, "feature", None)
    if not isinstance(feature, datasets.ClassLabel):
        raise DataError(
            f"The column {spec.label_column!r} is not a ClassLabel column",
            "Load the data with papa.probing.data.load_task_split, which casts it.",
        )
    return list(feature.names)


def subset(dataset: datasets.Dataset, n: int | None, seed: int) -> tuple[datasets.Dataset, list[int]]:
    """``(subset, indices)``: ``n`` examples drawn by ``seed``, in their original order (``n`` None or too large: all).
    The same ``(len(dataset), n, seed)`` always picks the same indices."""
    total = len(dataset)
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise PapaError(
            f"The subset size must be a positive integer or None, not {n!r}",
            "Pass a number of examples such as 500, or None for all.",
        )
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise PapaError(f"The subset seed must be an integer, not {seed!r}", "Pass an integer seed such as 0.")
    if n is None or n >= total:
        indices = list(range(total))
    else:
        indices = sorted(random.Random(seed).sample(range(total), n))
    return dataset.select(indices), indices


# --- hub ---------------------------------------------------------------------------------------
def _load_hub(spec: TaskSpec, split: str) -> datasets.Dataset:
    hub_split = spec.hub_split(split)
    try:
        if spec.hub_config is None:
            ds = datasets.load_dataset(spec.hub_path, split=hub_split)
        else:
            ds = datasets.load_dataset(spec.hub_path, spec.hub_config, split=hub_split)
    except Exception as err:  # offline, missing split, script-based repo, network: all the same advice
        detail = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
        raise DataError(
            f"Cannot load split {hub_split!r} of {spec.hub_path}"
            + (f" ({spec.hub_config})" if spec.hub_config else "")
            + f" from the Hugging Face hub: {type(err).__name__}"
            + (f": {detail}" if detail else ""),
            _LAYOUT_HINT,
        ) from None
    missing = [c for c in spec.columns if c not in ds.column_names]
    if missing:
        raise DataError(f"The hub dataset {spec.hub_path} lacks the columns {missing}", _LAYOUT_HINT)
    return ds.select_columns(list(spec.columns))


# --- local folder ------------------------------------------------------------------------------
def _load_local(spec: TaskSpec, split: str, root: Path) -> datasets.Dataset:
    if not root.is_dir():
        raise DataError(f"The data folder {root} does not exist", _LAYOUT_HINT)
    folder = root / spec.local_folder
    if not folder.is_dir():
        raise DataError(f"The task folder {folder} for task {spec.name} does not exist", _LAYOUT_HINT)
    names = _read_label_names(spec, folder / "labels.json")
    path = folder / f"{split}.jsonl"
    if not path.is_file():
        found = sorted(p.stem for p in folder.glob("*.jsonl"))
        raise DataError(
            f"The split file {path} does not exist (splits found: {', '.join(found) or 'none'})",
            "Choose an existing split, or add the file. " + _LAYOUT_HINT,
        )
    columns = _read_jsonl(spec, path, len(names))
    label_feature: Any = datasets.ClassLabel(names=names)
    if spec.is_token_task:
        features = datasets.Features(
            {"tokens": datasets.Sequence(datasets.Value("string")), spec.label_column: datasets.Sequence(label_feature)}
        )
    else:
        features = datasets.Features(
            {**{c: datasets.Value("string") for c in spec.text_columns}, spec.label_column: label_feature}
        )
    return datasets.Dataset.from_dict(columns, features=features)


#: The longest JSONL record read, in characters: a task example is a sentence or two (CoNLL's longest sentence is
#: about 1,000 characters); a longer record is a broken file, and tokenising it would exhaust memory.
MAX_RECORD_CHARS = 100_000


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json`` object hook: a key given twice is an error, not a silent last-wins (``{"label": 1, "label": 0}``)."""
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(key)
        obj[key] = value
    return obj


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _read_label_names(spec: TaskSpec, path: Path) -> list[str]:
    if not path.is_file():
        raise DataError(
            f"The label file {path} does not exist",
            f"Add it: a JSON object mapping {spec.label_column!r} to the label names in id order. " + _LAYOUT_HINT,
        )
    try:
        obj = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=_refuse_duplicate_keys)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(f"The label file {path} is not valid JSON ({err})", "Fix or replace it.") from None
    except _DuplicateKey as err:
        raise DataError(f"The label file {path} gives the key {err.key!r} twice", "Keep one value per key.") from None
    names = obj.get(spec.label_column) if isinstance(obj, dict) else obj
    if not isinstance(names, list) or not names or not all(isinstance(x, str) for x in names):
        raise DataError(
            f"The label file {path} has no non-empty list of names under {spec.label_column!r}",
            f'Write it as {{"{spec.label_column}": ["name0", "name1", ...]}} in id order.',
        )
    if len(set(names)) != len(names):
        raise DataError(
            f"The label file {path} repeats a name under {spec.label_column!r}", "Give each label id a distinct name."
        )
    return list(names)


def _read_jsonl(spec: TaskSpec, path: Path, num_labels: int) -> dict[str, list]:
    columns: dict[str, list] = {c: [] for c in spec.columns}
    try:
        handle = path.open("r", encoding="utf-8")
    except OSError as err:
        raise DataError(f"Cannot read {path}: {err.strerror}", "Check the file's permissions.") from None
    with handle:
        try:
            for lineno, line in enumerate(iter(lambda: handle.readline(MAX_RECORD_CHARS + 1), ""), start=1):
                if len(line) > MAX_RECORD_CHARS and not line.endswith("\n"):
                    raise DataError(
                        f"{path.name} line {lineno} ({path}) is longer than {MAX_RECORD_CHARS:,} characters",
                        "Each line must be one example (a sentence or a sentence pair); fix or remove the line.",
                    )
                if not line.strip():
                    continue
                _parse_line(spec, path, lineno, line, num_labels, columns)
        except UnicodeDecodeError:
            raise DataError(f"{path} is not UTF-8 text", "Save it as UTF-8 JSON lines.") from None
    if not columns[spec.label_column]:
        raise DataError(f"The split file {path} is empty", "Fill it with one JSON object per line.")
    return columns


def _parse_line(spec: TaskSpec, path: Path, lineno: int, line: str, num_labels: int, columns: dict[str, list]) -> None:
    where = f"{path.name} line {lineno} ({path})"
    try:
        obj = json.loads(line, object_pairs_hook=_refuse_duplicate_keys)
    except json.JSONDecodeError as err:
        raise DataError(
            f"Malformed JSON in {where}: {err.msg} at column {err.colno}",
            "Fix the line: each line must be one JSON object.",
        ) from None
    except _DuplicateKey as err:
        raise DataError(f"{where} gives the key {err.key!r} twice", "Keep one value per key on each line.") from None
    if not isinstance(obj, dict):
        raise DataError(f"{where} is not a JSON object", "Each line must be one JSON object.")
    for column in spec.columns:
        if column not in obj:
            raise DataError(
                f"{where} has no column {column!r} (task {spec.name} needs {list(spec.columns)})",
                "Add the column to every line.",
            )
    label_hint = f"Use label ids 0..{num_labels - 1}, in the order of labels.json."
    if spec.is_token_task:
        tokens, tags = obj["tokens"], obj[spec.label_column]
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise DataError(f"{where}: 'tokens' must be a list of strings", "Fix the line.")
        if not isinstance(tags, list) or not all(_is_int(t) for t in tags):
            raise DataError(f"{where}: {spec.label_column!r} must be a list of integer ids", label_hint)
        if len(tags) != len(tokens):
            raise DataError(
                f"{where}: {len(tokens)} tokens but {len(tags)} {spec.label_column}", "Give exactly one tag per token."
            )
        bad = [t for t in tags if not 0 <= t < num_labels]
        if bad:
            raise DataError(f"{where}: tag id {bad[0]} is outside the label set of {num_labels} names", label_hint)
        columns["tokens"].append(tokens)
        columns[spec.label_column].append(tags)
        return
    for column in spec.text_columns:
        if not isinstance(obj[column], str):
            raise DataError(f"{where}: column {column!r} must be a string", "Fix the line.")
        columns[column].append(obj[column])
    label = obj[spec.label_column]
    if not _is_int(label) or not 0 <= label < num_labels:
        raise DataError(f"{where}: label {label!r} is outside the label set of {num_labels} names", label_hint)
    columns[spec.label_column].append(label)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
