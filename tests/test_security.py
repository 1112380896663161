"""papa never runs a model folder's code, never unpickles, and never advises deleting a file it did not write."""

from __future__ import annotations

import json
import pickle

import pytest
import torch
from tiny import TINY_BERT, tiny_tokenizer
from transformers import BertConfig, BertModel

from papa.core import models
from papa.core.errors import PapaError
from papa.core.heads import load_ranking
from papa.core.io import read_json_verified
from papa.core.models import check_model_folder, load_model

CUSTOM_CODE_HINT = (
    "Use a model whose architecture transformers ships (bert, roberta, "
    "deberta, ...); papa loads every model with trust_remote_code=False."
)


def _evil_folder(folder, marker, config=None):
    """A model folder whose config asks for its own code, and whose code writes ``marker`` when run."""
    folder.mkdir()
    config = config or {
        "model_type": "evil",
        "auto_map": {"AutoConfig": "evil.EvilConfig", "AutoModel": "evil.EvilModel"},
        "architectures": ["EvilModel"],
    }
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    return folder


def _transformers_must_not_be_asked(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("transformers was asked to load the folder")

    for name in ("AutoConfig", "AutoModel", "AutoTokenizer"):
        monkeypatch.setattr(getattr(models, name), "from_pretrained", refuse)


def test_custom_code_folder_is_refused_before_transformers(tmp_path, monkeypatch):
    marker = tmp_path / "marker"
    folder = _evil_folder(tmp_path / "evil", marker)
    _transformers_must_not_be_asked(monkeypatch)
    with pytest.raises(PapaError) as err:
        load_model(str(folder))
    assert str(err.value) == (
        f"The model {folder} needs custom code (model_type 'evil' is "
        "unknown to transformers and its config.json has an auto_map), "
        f"and papa never runs code shipped with a model. {CUSTOM_CODE_HINT}"
    )
    assert not marker.exists()


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ({"model_type": "bert", "auto_map": {"AutoModel": "evil.EvilModel"}}, "its config.json has an auto_map"),
        ({"model_type": "evil"}, "model_type 'evil' is unknown to transformers"),
        ({"architectures": ["EvilModel"]}, "its config.json names no model_type"),
    ],
)
def test_each_sign_of_custom_code_is_refused(tmp_path, monkeypatch, config, reason):
    marker = tmp_path / "marker"
    folder = _evil_folder(tmp_path / "evil", marker, config)
    _transformers_must_not_be_asked(monkeypatch)
    with pytest.raises(PapaError) as err:
        load_model(str(folder))
    assert (
        str(err.value) == f"The model {folder} needs custom code ({reason}), and papa "
        f"never runs code shipped with a model. {CUSTOM_CODE_HINT}"
    )
    assert not marker.exists()


def test_custom_tokenizer_code_is_refused(tmp_path):
    folder = tmp_path / "model"
    BertModel(BertConfig(**TINY_BERT)).save_pretrained(folder)
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"auto_map": {"AutoTokenizer": ["evil.EvilTokenizer", None]}})
    )
    with pytest.raises(PapaError) as err:
        check_model_folder(folder, "mine")
    assert (
        str(err.value)
        == "The model mine needs custom code (its tokenizer_config.json has an auto_map), and papa never runs code "
        f"shipped with a model. {CUSTOM_CODE_HINT}"
    )


class _WritesMarker:
    """Unpickling this object creates a file: what a malicious pytorch_model.bin can do."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_pickled_weights_are_refused_never_unpickled(tmp_path, monkeypatch):
    marker = tmp_path / "marker"
    folder = tmp_path / "pickled"
    folder.mkdir()
    BertConfig(**TINY_BERT).save_pretrained(folder)
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(_WritesMarker(marker)))
    _transformers_must_not_be_asked(monkeypatch)
    with pytest.raises(PapaError) as err:
        load_model(str(folder))
    assert str(err.value) == (
        f"The model {folder} has only pickled weights (pytorch_model.bin), "
        "and papa never unpickles (it could run code). "
        "Convert the weights to safetensors where you trust them: load the model and call "
        "model.save_pretrained(folder) (which writes model.safetensors)."
    )
    assert not marker.exists()


def test_every_from_pretrained_gets_trust_remote_code_false(tmp_path, monkeypatch):
    folder = tmp_path / "model"
    torch.manual_seed(0)
    BertModel(BertConfig(**TINY_BERT)).save_pretrained(folder)

    tiny_tokenizer().save_pretrained(folder)
    seen = {}
    for name in ("AutoConfig", "AutoModel", "AutoTokenizer"):
        cls = getattr(models, name)
        real = cls.from_pretrained

        def record(*args, _real=real, _name=name, **kwargs):
            seen[_name] = kwargs.get("trust_remote_code", "missing")
            return _real(*args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", record)
    lm = load_model(str(folder))
    assert seen == {"AutoConfig": False, "AutoModel": False, "AutoTokenizer": False}
    assert lm.source == "local" and lm.num_layers == TINY_BERT["num_hidden_layers"]


def test_folder_without_weights(tmp_path):
    BertConfig(**TINY_BERT).save_pretrained(tmp_path)
    with pytest.raises(PapaError) as err:
        check_model_folder(tmp_path, "bare")
    assert (
        str(err.value) == "The model bare has no weights (no *.safetensors file). Point --model at a folder written by "
        "save_pretrained."
    )


# -- files papa did not write --------------------------------------------------------------------
FOREIGN_RANKING_HINT = (
    "Check the path: pass a ranking written by papa (recompute it with "
    "`papa rank`). Do not delete this file: nothing shows papa wrote it."
)


def test_a_system_file_as_ranking_is_not_a_papa_file(tmp_path):
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n")
    with pytest.raises(PapaError) as err:
        load_ranking(passwd, 6, 12)
    assert str(err.value) == f"{passwd} is not a papa ranking file (not valid JSON). {FOREIGN_RANKING_HINT}"
    assert "delete it" not in str(err.value).replace("Do not delete this file", "")
    assert passwd.read_text().startswith("root:x:0:0")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("[1, 2", "{path} is not a papa ranking file (not valid JSON)"),
        ('{"heads": []}', "{path} is not a papa ranking file (it holds no 'ranking')"),
        ('"just a string"', "{path} is not a papa ranking file (not a JSON object)"),
    ],
)
def test_foreign_json_as_ranking(tmp_path, content, problem):
    path = tmp_path / "other.json"
    path.write_text(content)
    with pytest.raises(PapaError) as err:
        load_ranking(path, 6, 12)
    assert str(err.value) == problem.format(path=path) + ". " + FOREIGN_RANKING_HINT


def test_edited_papa_file_hint_does_not_say_delete(tmp_path):
    from papa.core.io import atomic_write_json

    path = atomic_write_json(tmp_path / "r.json", {"ranking": [[0, 0]]})
    path.write_text(path.read_text().replace("[\n      0,\n      0\n    ]", "[\n      0,\n      1\n    ]"))
    with pytest.raises(PapaError) as err:
        read_json_verified(path, "ranking", "recompute it with `papa rank`")
    assert (
        str(err.value)
        == f"The ranking {path} fails its checksum. It was edited or corrupted after papa wrote it: recompute it with "
        "`papa rank` (papa replaces the file)."
    )


def test_checksum_can_be_required(tmp_path):
    path = tmp_path / "m.json"
    path.write_text('{"runs": {}}')
    assert read_json_verified(path, "manifest") == {"runs": {}}
    with pytest.raises(PapaError) as err:
        read_json_verified(path, "manifest", require_checksum=True)
    assert str(err.value) == (
        f"{path} is not a papa manifest file (no sha256 checksum). "
        "Check the path: pass a manifest written by papa (write it again "
        "with papa). Do not delete this file: nothing shows papa wrote it."
    )


def test_trust_remote_code_false_is_a_second_wall(tmp_path, monkeypatch):
    """Were the folder check bypassed (a hub config not yet cached), transformers still refuses to run the code."""
    marker = tmp_path / "marker"
    folder = _evil_folder(tmp_path / "evil", marker)
    monkeypatch.setattr(models, "check_model_folder", lambda *args, **kwargs: None)
    monkeypatch.setattr(models, "check_model_fits", lambda *args, **kwargs: None)
    with pytest.raises(PapaError) as err:
        load_model(str(folder))
    assert str(err.value) == (
        f"The model {folder} needs custom code (transformers cannot read its config without it), and papa never runs "
        f"code shipped with a model. {CUSTOM_CODE_HINT}"
    )
    assert not marker.exists()


def test_a_cached_hub_config_with_custom_code_is_refused(tmp_path, monkeypatch):
    marker = tmp_path / "marker"
    folder = _evil_folder(tmp_path / "evil", marker)
    monkeypatch.setattr(models, "resolve_model_path", lambda name: (name, "hub"))
    monkeypatch.setattr(models, "_hub_cached_config", lambda repo_id: folder / "config.json")
    _transformers_must_not_be_asked(monkeypatch)
    with pytest.raises(PapaError) as err:
        load_model("someone/evil-model")
    assert str(err.value) == (
        "The model someone/evil-model needs custom code (model_type 'evil' is unknown to transformers and its "
        "config.json has an auto_map), "
        f"and papa never runs code shipped with a model. {CUSTOM_CODE_HINT}"
    )
    assert not marker.exists()
