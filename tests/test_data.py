"""Task table, local loading with validation, hub fallback, subsets; all on synthetic fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from papa.core.errors import DataError, PapaError
from papa.core.tasks import TASKS, get_task
from papa.probing import data as papa_data
from papa.probing.data import label_names, load_task_split, subset

SST_NAMES = ["bad", "good"]
PAIR_NAMES = ["yes", "maybe", "no"]
NER_NAMES = ["O", "B-ANIMAL", "I-ANIMAL"]
POS_NAMES = ["DET", "NOUN", "VERB"]


def _write(root: Path, folder: str, labels: dict | list | None, splits: dict[str, list]) -> Path:
    """A fixture folder ``root/folder`` with labels.json and ``SPLIT.jsonl`` files.

    Rows that are dicts are written as JSON; strings are written verbatim (for malformed lines).
    """
    path = root / folder
    path.mkdir(parents=True, exist_ok=True)
    if labels is not None:
        (path / "labels.json").write_text(json.dumps(labels), encoding="utf-8")
    for split, rows in splits.items():
        lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
        (path / f"{split}.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


SST_ROWS = [
    {"sentence": "the cat sat", "label": 1, "idx": 0},
    {"sentence": "a dog ran off", "label": 0, "idx": 1},
    {"sentence": "birds sing loudly", "label": 1, "idx": 2},
]
PAIR_ROWS = [
    {"premise": "the cat sat", "hypothesis": "a cat sat", "label": 0, "idx": 0},
    {"premise": "the dog ran", "hypothesis": "nothing moved", "label": 2, "idx": 1},
]
CONLL_ROWS = [
    {
        "id": "0",
        "tokens": ["the", "big", "cat", "sat"],
        "pos_tags": [0, 1, 1, 2],
        "chunk_tags": [0, 0, 0, 0],
        "ner_tags": [0, 1, 2, 0],
    },
    {"id": "1", "tokens": ["dogs", "run"], "pos_tags": [1, 2], "chunk_tags": [0, 0], "ner_tags": [1, 0]},
]
CONLL_LABELS = {"pos_tags": POS_NAMES, "chunk_tags": ["O"], "ner_tags": NER_NAMES}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    _write(tmp_path, "sst2", {"label": SST_NAMES}, {"train": SST_ROWS, "validation": SST_ROWS[:2]})
    _write(tmp_path, "mnli", {"label": PAIR_NAMES}, {"validation": PAIR_ROWS})
    _write(tmp_path, "conll2003", CONLL_LABELS, {"validation": CONLL_ROWS})
    return tmp_path


# --- task table --------------------------------------------------------------------------------


def test_task_table():
    assert set(TASKS) == {"cola", "sst2", "mrpc", "mnli", "ner", "pos"}
    assert get_task("mrpc").text_columns == ("sentence1", "sentence2")
    assert get_task("mrpc").main_metric == "combined"
    assert get_task("cola").main_metric == "matthews_correlation"
    assert get_task("ner").label_column == "ner_tags" and get_task("ner").kind == "token"
    assert get_task("pos").label_column == "pos_tags" and get_task("pos").main_metric == "accuracy"
    assert get_task("mnli").hub_split("validation") == "validation_matched"
    assert get_task("sst2").hub_split("train") == "train"
    assert all(spec.eval_split == "validation" for spec in TASKS.values())
    assert get_task(" SST2 ") is TASKS["sst2"]
    assert get_task(TASKS["pos"]) is TASKS["pos"]


def test_unknown_task():
    with pytest.raises(PapaError, match="Unknown task 'qqp'.*cola, sst2, mrpc, mnli, ner, pos"):
        get_task("qqp")


# --- loading -----------------------------------------------------------------------------------


def test_load_sequence_task(root):
    ds = load_task_split("sst2", "train", data_dir=root)
    assert isinstance(ds, datasets.Dataset)
    assert ds.column_names == ["sentence", "label"]  # idx dropped
    assert ds.features["label"] == datasets.ClassLabel(names=SST_NAMES)
    assert ds["label"] == [1, 0, 1]
    assert ds["sentence"][0] == "the cat sat"
    assert label_names("sst2", ds) == SST_NAMES


def test_load_pair_task(root):
    ds = load_task_split("mnli", "validation", data_dir=str(root))
    assert ds.column_names == ["premise", "hypothesis", "label"]
    assert label_names("mnli", ds) == PAIR_NAMES
    assert ds["label"] == [0, 2]


@pytest.mark.parametrize("task, column, names", [("ner", "ner_tags", NER_NAMES), ("pos", "pos_tags", POS_NAMES)])
def test_load_token_task(root, task, column, names):
    ds = load_task_split(task, "validation", data_dir=root)
    assert ds.column_names == ["tokens", column]
    feature = ds.features[column]
    assert isinstance(feature.feature, datasets.ClassLabel)
    assert feature.feature.names == names
    assert label_names(task, ds) == names
    assert ds["tokens"][1] == ["dogs", "run"]
    assert ds[column][0] == [row for row in CONLL_ROWS[0][column]]


def test_data_dir_from_environment(root, monkeypatch):
    monkeypatch.setenv("PAPA_DATA_DIR", str(root))
    assert len(load_task_split("sst2", "validation")) == 2


def test_argument_beats_environment(root, tmp_path, monkeypatch):
    monkeypatch.setenv("PAPA_DATA_DIR", str(tmp_path / "nowhere"))
    assert len(load_task_split("sst2", "validation", data_dir=root)) == 2


def test_blank_lines_are_skipped(tmp_path):
    _write(tmp_path, "sst2", {"label": SST_NAMES}, {"train": [SST_ROWS[0], "", "   ", SST_ROWS[1]]})
    assert len(load_task_split("sst2", "train", tmp_path)) == 2


def test_plain_list_labels_json(tmp_path):
    _write(tmp_path, "cola", ["no", "yes"], {"train": [{"sentence": "the cat sat", "label": 1}]})
    assert label_names("cola", load_task_split("cola", "train", tmp_path)) == ["no", "yes"]


def test_label_names_needs_classlabel():
    ds = datasets.Dataset.from_dict({"sentence": ["a"], "label": [0]})
    with pytest.raises(DataError, match="not a ClassLabel"):
        label_names("sst2", ds)


# --- errors --------------------------------------------------------------------------------------


def test_missing_data_dir(tmp_path):
    with pytest.raises(DataError, match="does not exist.*PAPA_DATA_DIR.*TASK/SPLIT.jsonl"):
        load_task_split("sst2", "train", tmp_path / "absent")


def test_missing_task_folder(root):
    with pytest.raises(DataError, match=r"cola.*does not exist.*PAPA_DATA_DIR.*TASK/SPLIT\.jsonl"):
        load_task_split("cola", "train", root)


def test_missing_split(root):
    with pytest.raises(DataError) as err:
        load_task_split("sst2", "test", root)
    message = str(err.value)
    assert "test.jsonl" in message and "splits found: train, validation" in message
    assert "PAPA_DATA_DIR" in message and "TASK/SPLIT.jsonl" in message


def test_missing_labels_json(tmp_path):
    _write(tmp_path, "sst2", None, {"train": SST_ROWS})
    with pytest.raises(DataError, match=r"labels\.json does not exist.*PAPA_DATA_DIR"):
        load_task_split("sst2", "train", tmp_path)


def test_labels_json_without_the_column(tmp_path):
    _write(tmp_path, "conll2003", {"pos_tags": POS_NAMES}, {"validation": CONLL_ROWS})
    with pytest.raises(DataError, match="ner_tags"):
        load_task_split("ner", "validation", tmp_path)


def test_malformed_line(tmp_path):
    _write(tmp_path, "sst2", {"label": SST_NAMES}, {"train": [SST_ROWS[0], SST_ROWS[1], '{"sentence": "x", ']})
    with pytest.raises(DataError, match=r"Malformed JSON in train\.jsonl line 3"):
        load_task_split("sst2", "train", tmp_path)


def test_line_not_an_object(tmp_path):
    _write(tmp_path, "sst2", {"label": SST_NAMES}, {"train": ["[1, 2]"]})
    with pytest.raises(DataError, match=r"train\.jsonl line 1 .*not a JSON object"):
        load_task_split("sst2", "train", tmp_path)


def test_missing_column(tmp_path):
    rows = [PAIR_ROWS[0], {"premise": "the cat sat", "label": 0}]
    _write(tmp_path, "mnli", {"label": PAIR_NAMES}, {"validation": rows})
    with pytest.raises(DataError, match=r"validation\.jsonl line 2 .*no column 'hypothesis'"):
        load_task_split("mnli", "validation", tmp_path)


@pytest.mark.parametrize("bad", [2, -1, "good", 1.0, True, None])
def test_label_out_of_range(tmp_path, bad):
    _write(tmp_path, "sst2", {"label": SST_NAMES}, {"train": [SST_ROWS[0], {"sentence": "the cat sat", "label": bad}]})
    with pytest.raises(DataError, match=r"train\.jsonl line 2.*outside the label set of 2 names"):
        load_task_split("sst2", "train", tmp_path)


def test_tag_out_of_range(tmp_path):
    rows = [{"tokens": ["the", "cat"], "ner_tags": [0, 9]}]
    _write(tmp_path, "conll2003", CONLL_LABELS, {"validation": rows})
    with pytest.raises(DataError, match=r"validation\.jsonl line 1.*tag id 9 is outside"):
        load_task_split("ner", "validation", tmp_path)


def test_tags_and_tokens_differ_in_length(tmp_path):
    rows = [{"tokens": ["the", "cat"], "pos_tags": [0]}]
    _write(tmp_path, "conll2003", CONLL_LABELS, {"validation": rows})
    with pytest.raises(DataError, match="2 tokens but 1 pos_tags"):
        load_task_split("pos", "validation", tmp_path)


def test_text_must_be_a_string(tmp_path):
    _write(tmp_path, "sst2", {"label": SST_NAMES}, {"train": [{"sentence": ["the", "cat"], "label": 0}]})
    with pytest.raises(DataError, match="must be a string"):
        load_task_split("sst2", "train", tmp_path)


def test_empty_split(tmp_path):
    _write(tmp_path, "sst2", {"label": SST_NAMES}, {"validation": []})
    with pytest.raises(DataError, match=r"validation\.jsonl is empty"):
        load_task_split("sst2", "validation", tmp_path)


def test_hub_failure_points_to_data_dir(monkeypatch):
    monkeypatch.delenv("PAPA_DATA_DIR", raising=False)

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hub")

    monkeypatch.setattr(papa_data.datasets, "load_dataset", offline)
    with pytest.raises(DataError, match="hub.*ConnectionError.*PAPA_DATA_DIR.*TASK/SPLIT.jsonl"):
        load_task_split("sst2", "validation")


def test_hub_split_alias_and_columns(monkeypatch):
    monkeypatch.delenv("PAPA_DATA_DIR", raising=False)
    calls = []

    def fake(path, config=None, split=None):
        calls.append((path, config, split))
        return datasets.Dataset.from_dict({"premise": ["p"], "hypothesis": ["h"], "label": [0], "idx": [0]})

    monkeypatch.setattr(papa_data.datasets, "load_dataset", fake)
    ds = load_task_split("mnli", "validation")
    assert calls == [("nyu-mll/glue", "mnli", "validation_matched")]
    assert ds.column_names == ["premise", "hypothesis", "label"]


# --- subsets -----------------------------------------------------------------------------------


def test_subset_is_deterministic_and_sorted():
    ds = datasets.Dataset.from_dict({"x": list(range(100))})
    small, indices = subset(ds, 10, seed=3)
    again, indices_again = subset(ds, 10, seed=3)
    assert indices == indices_again == sorted(indices)
    assert len(set(indices)) == 10
    assert small["x"] == again["x"] == indices
    assert subset(ds, 10, seed=4)[1] != indices


def test_subset_all():
    ds = datasets.Dataset.from_dict({"x": list(range(5))})
    for n in (None, 5, 50):
        whole, indices = subset(ds, n, seed=0)
        assert indices == [0, 1, 2, 3, 4] and whole["x"] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("n", [0, -3, 2.5, True])
def test_subset_bad_size(n):
    with pytest.raises(PapaError, match="positive integer"):
        subset(datasets.Dataset.from_dict({"x": [1, 2]}), n, seed=0)


# --- the real data -------------------------------------------------------------------------------

REAL_SIZES = {"cola": 1043, "sst2": 872, "mrpc": 408, "mnli": 1000, "ner": 3250, "pos": 3250}


@pytest.mark.data
def test_real_validation_splits(data_dir):
    for task, size in REAL_SIZES.items():
        spec = get_task(task)
        ds = load_task_split(spec, "validation", data_dir=data_dir)
        assert len(ds) == size, task
        assert ds.column_names == list(spec.columns), task
        labels = json.loads((data_dir / spec.local_folder / "labels.json").read_text(encoding="utf-8"))
        assert label_names(spec, ds) == labels[spec.label_column], task


def test_a_key_given_twice_in_a_record_is_refused(tmp_path):
    """``{"label": 1, "label": 0}`` once trained on the last value silently."""
    _write(
        tmp_path,
        "sst2",
        {"label": SST_NAMES},
        {"train": [SST_ROWS[0], '{"sentence": "the cat sat", "label": 1, "label": 0}']},
    )
    with pytest.raises(DataError, match=r"train\.jsonl line 2 .* gives the key 'label' twice"):
        load_task_split("sst2", "train", tmp_path)


def test_a_key_given_twice_in_labels_json_is_refused(tmp_path):
    """Two ``label`` lists once turned SST-2 into a 3-class task."""
    folder = _write(tmp_path, "sst2", None, {"train": SST_ROWS})
    (folder / "labels.json").write_text('{"label": ["bad", "good"], "label": ["a", "b", "c"]}', encoding="utf-8")
    with pytest.raises(DataError, match=r"labels\.json gives the key 'label' twice"):
        load_task_split("sst2", "train", tmp_path)


def test_a_record_longer_than_the_bound_is_refused_without_reading_it_whole(tmp_path, monkeypatch):
    """A 100 MB record once took tokenisation past 12.5 GB: a record is read up to the bound, then
    refused."""
    monkeypatch.setattr(papa_data, "MAX_RECORD_CHARS", 50)
    long = json.dumps({"sentence": "word " * 20, "label": 1})  # 125 characters
    _write(tmp_path, "sst2", {"label": SST_NAMES}, {"train": [SST_ROWS[0], long]})
    with pytest.raises(DataError, match=r"train\.jsonl line 2 .* is longer than 50 characters"):
        load_task_split("sst2", "train", tmp_path)
    fits = json.dumps({"sentence": "a b", "label": 1})  # 30 characters, then the newline
    _write(tmp_path, "sst2", {"label": SST_NAMES}, {"train": [fits, fits]})
    assert load_task_split("sst2", "train", tmp_path)["label"] == [1, 1]
