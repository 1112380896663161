"""``papa study MODEL``, a model report: the config it writes, the budget's cuts in their stated order, the refusals up
front, the "Your models" part of the sidebar, the documentation, and a tiny study end to end on a BERT and an MPNet
folder."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import uuid
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoTokenizer, BertConfig, BertModel, GPT2Config, GPT2Model, MPNetConfig, MPNetModel

from papa.book import report_site as RS
from papa.cli import main
from papa.core.errors import PapaError
from papa.pipeline import report as R
from papa.pipeline import report_config as S
from papa.pipeline.plan import ROOT

SUPPORTED = "bert, deberta, deberta-v2, distilbert, electra, mpnet, roberta, xlm-roberta"


def _tokenizer_folder(kind: str) -> str:
    from papa.core.models import EMBEDDED_MODELS

    return str(EMBEDDED_MODELS["mpnet-base" if kind == "mpnet" else "minilm-l6"]())


def _save(model, folder: Path, kind: str = "bert") -> Path:
    model.save_pretrained(folder)
    if kind != "gpt2":
        AutoTokenizer.from_pretrained(_tokenizer_folder(kind)).save_pretrained(folder)
    return folder


def tiny_bert(folder: Path) -> Path:
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=64,
    )
    return _save(BertModel(config), folder)


def tiny_mpnet(folder: Path) -> Path:
    torch.manual_seed(0)
    config = MPNetConfig(
        vocab_size=30527,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=80,
    )
    return _save(MPNetModel(config), folder, "mpnet")


def tiny_gpt2(folder: Path) -> Path:
    return _save(
        GPT2Model(
            GPT2Config(vocab_size=100, bos_token_id=0, eos_token_id=0, n_embd=32, n_layer=2, n_head=4, n_positions=64)
        ),
        folder,
        "gpt2",
    )


# -- budgets and cuts -------------------------------------------------------------------------------------
def test_budgets_parse_and_bad_ones_are_refused():
    assert [S.parse_budget(t) for t in ("30m", "2h", "1h30m", "90s", "1.5h")] == [1800, 7200, 5400, 90, 5400]
    for text in ("", "15", "abc", "15 minutes"):
        with pytest.raises(
            PapaError, match=re.escape(f"--budget {text!r} is not a duration. Write it as 90s, 15m, 2h or 1h30m.")
        ):
            S.parse_budget(text)


PROTOCOL = {
    "max_length": 64,
    "probe": {
        "fractions": [0, "1/2", "7/8", "15/16", 1],
        "seeds": [42, 43, 44],
        "lr": "select",
        "epochs": 20,
        "patience": 3,
        "selection": "heldout",
        "pool_examples": 2600,
        "max_train_examples": 2000,
        "heldout_examples": 200,
        "max_eval_examples": {"ner": 1000, "pos": 1000},
        "dev_every_epoch": False,
    },
}


def _hand_estimate(config: dict) -> float:
    """A hand-made estimate: training examples × seeds × fractions, plus the dev examples."""
    probe = config["probe"]
    dev = probe["max_eval_examples"] if isinstance(probe["max_eval_examples"], int) else 1000
    return (probe["max_train_examples"] + dev) * len(probe["seeds"]) * len(probe["fractions"])


def test_the_cuts_come_in_their_stated_order_fewer_seeds_last():
    config = S.report_config("minilm-l6", ["sst2", "mrpc"], "order", PROTOCOL)
    assert [c.what for c in S.cut_steps(config)] == [
        "training pool 2,600 → 1,300, training draw per seed 2,000 → 1,000, held-out draw per seed 200 → 100",
        "training pool 1,300 → 650, training draw per seed 1,000 → 500, held-out draw per seed 100 → 50",
        "training pool 650 → 325, training draw per seed 500 → 250, held-out draw per seed 50 → 25",
        "dev split capped at 500 examples per task",
        "dev split capped at 250 examples per task",
        "head fraction 15/16 dropped",
        "head fraction 7/8 dropped",
        "head fraction 1/2 dropped",
        "probe seeds 3 → 2 (42, 43)",
        "probe seeds 2 → 1 (42)",
    ]
    assert S.fit_budget(config, None, _hand_estimate).cuts == []  # no budget: the protocol at full size
    fitted = S.fit_budget(
        config, 4000, _hand_estimate
    )  # (250 + 250) × 3 seeds × 2 fractions = 3000 is the first to fit
    assert fitted.cuts == [c.what for c in S.cut_steps(config)][:8] and fitted.seconds == 3000
    assert (
        fitted.config["probe"] | {"max_eval_examples": 250, "fractions": [0, 1], "seeds": [42, 43, 44]}
        == fitted.config["probe"]
    )
    assert (fitted.config["probe"]["pool_examples"], fitted.config["probe"]["heldout_examples"]) == (325, 25)
    assert config["probe"]["max_train_examples"] == 2000  # the config given is never changed
    assert S.fit_budget(config, 1000, _hand_estimate).config["probe"]["seeds"] == [42]


def test_a_budget_too_small_for_one_seed_at_k0_and_all_heads_is_refused_naming_the_cuts():
    config = S.report_config("minilm-l6", ["sst2"], "small", PROTOCOL)
    with pytest.raises(PapaError) as refused:
        S.fit_budget(config, 60, _hand_estimate)
    assert str(refused.value) == (
        "A budget of 1m00s is too small for this model report: even one seed at k = 0 and all heads takes about 16m40s "
        "by the estimate, after every cut "
        "(training pool 2,600 → 1,300, training draw per seed 2,000 → 1,000, held-out draw per seed 200 → 100; "
        "training pool 1,300 → 650, training draw per seed 1,000 → 500, held-out draw per seed 100 → 50; "
        "training pool 650 → 325, training draw per seed 500 → 250, held-out draw per seed 50 → 25; "
        "dev split capped at 500 examples per task; dev split capped "
        "at 250 examples per task; head fraction 15/16 dropped; "
        "head fraction 7/8 dropped; head fraction 1/2 dropped; probe seeds 3 → 2 (42, 43); probe seeds 2 → 1 (42)). "
        "Give a budget of at least 16m40s (--budget 17m), or study fewer tasks (--tasks)."
    )


# -- the config -------------------------------------------------------------------------------------------
def test_the_config_written_for_a_hand_made_case(tmp_path):
    folder = tiny_bert(tmp_path / "My Encoder")
    config = S.report_config(str(folder), ["mrpc", "ner"], S.default_name(str(folder)), PROTOCOL, device="cpu")
    assert config == {
        "name": "study-my-encoder",
        "description": f"papa study of {folder}: the book's protocol on mrpc, ner",
        "models": [str(folder.resolve())],
        "tasks": ["mrpc", "ner"],
        "max_length": 64,
        "probe": PROTOCOL["probe"] | {"max_eval_examples": {"ner": 1000}},  # only the studied tasks' dev sizes
        "device": "cpu",
        "studies": [],
    }
    text = S.config_text(S.Fitted(config, ["head fraction 15/16 dropped"], 754.0), 900)
    assert text.splitlines()[:5] == [
        "# yaml-language-server: $schema=grid.schema.json",
        "# Written by `papa study`: the book's protocol (configs/default.yaml) on one model.",
        "# Budget: 15m00s; estimate 12m34s on 2 CPU cores.",
        "# Cut to fit the budget: head fraction 15/16 dropped",
        "name: study-my-encoder",
    ]
    assert yaml.safe_load(text) == config


def test_the_book_protocol_is_default_yaml_s_protocol_sections():
    protocol = S.book_protocol()
    book = yaml.safe_load((ROOT / "configs" / "default.yaml").read_text(encoding="utf-8"))
    assert sorted(protocol) == sorted(S.PROTOCOL_KEYS)
    assert all(protocol[key] == book[key] for key in S.PROTOCOL_KEYS if key != "probe") and protocol["probe"] == {
        k: v for k, v in book["probe"].items() if k != "per_model"
    }
    assert "studies" not in protocol and "models" not in protocol


# -- refusals ---------------------------------------------------------------------------------------------
def test_a_gpt2_folder_is_refused_naming_the_reason(tmp_path, capsys):
    folder = tiny_gpt2(tmp_path / "gpt2")
    capsys.readouterr()  # what saving the folder printed
    assert main(["study", str(folder), "--tasks", "sst2", "--dry-run"]) == 2
    assert capsys.readouterr().err == (
        f"papa: error: Cannot study {folder}: 'gpt2' is a decoder-only architecture (causal attention: each token "
        "attends only to the tokens before it), "
        "and PAPA's constant matrices average the attention of a bidirectional encoder. Study an encoder of a "
        f"supported architecture ({SUPPORTED}).\n"
    )


def test_a_bert_set_up_as_a_decoder_is_refused(tmp_path):
    folder = tiny_bert(tmp_path / "decoder")
    config = json.loads((folder / "config.json").read_text()) | {"is_decoder": True}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        PapaError, match=re.escape(f"Cannot study {folder}: its config sets is_decoder: true (causal attention")
    ):
        S.check_model(str(folder))


def test_an_architecture_without_an_adapter_is_refused(tmp_path):
    from transformers import AlbertConfig, AlbertModel

    folder = tmp_path / "albert"
    AlbertModel(
        AlbertConfig(
            vocab_size=100,
            embedding_size=16,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=37,
        )
    ).save_pretrained(folder)
    with pytest.raises(PapaError) as refused:
        S.check_model(str(folder))
    assert str(refused.value) == (
        f"Cannot study {folder}: papa has no adapter for its "
        "architecture 'albert', so it cannot make its heads constant. "
        f"Study a model of a supported architecture ({SUPPORTED}), or add a row to papa.core.architectures.ADAPTERS."
    )


def test_custom_code_and_an_offline_hub_id_are_refused(tmp_path, monkeypatch):
    folder = tiny_bert(tmp_path / "custom")
    (folder / "config.json").write_text(
        json.dumps(json.loads((folder / "config.json").read_text()) | {"auto_map": {"AutoModel": "modeling.Mine"}})
    )
    with pytest.raises(
        PapaError,
        match=re.escape(
            f"The model {folder} needs custom code (its config.json has "
            "an auto_map), and papa never runs code shipped with a model"
        ),
    ):
        S.check_model(str(folder))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        PapaError,
        match=re.escape(
            "Model 'someone/not-cached-encoder' is not in the local Hugging Face cache and HF_HUB_OFFLINE is set"
        ),
    ):
        S.check_model("someone/not-cached-encoder")


def test_supported_folders_pass_the_checks(tmp_path):
    assert S.check_model(str(tiny_bert(tmp_path / "bert"))) == S.CheckedModel(
        str(tmp_path / "bert"), "local", "bert", 8
    )
    assert S.check_model(str(tiny_mpnet(tmp_path / "mpnet"))).model_type == "mpnet"
    assert S.check_model("minilm-l6").heads == 72


def test_a_dry_run_prints_the_config_and_the_estimate_and_writes_nothing(tmp_path):
    folder = tiny_bert(tmp_path / "dry")
    before = sorted(p.name for p in (ROOT / "configs").iterdir())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert (
            main(["study", str(folder), "--tasks", "sst2,mrpc", "--budget", "2h", "--name", "dry-test", "--dry-run"])
            == 0
        )
    text = out.getvalue()
    assert text.startswith(f"study study-dry-test: {folder} (bert, 8 heads) on sst2, mrpc\n  estimate ")
    assert "would write configs/study-dry-test.yaml:\n# yaml-language-server" in text
    assert yaml.safe_load(text.split("would write configs/study-dry-test.yaml:\n", 1)[1])["models"] == [
        str(folder.resolve())
    ]
    assert (
        sorted(p.name for p in (ROOT / "configs").iterdir()) == before
        and not (ROOT / "book" / "runs" / "study-dry-test").exists()
    )


def test_unknown_tasks_are_refused():
    assert S.parse_tasks(None) == ["cola", "sst2", "mrpc", "mnli", "ner", "pos"] and S.parse_tasks("MRPC, sst2") == [
        "mrpc",
        "sst2",
    ]
    with pytest.raises(
        PapaError,
        match=re.escape(
            "--tasks: unknown task(s) qnli. Use a comma list of cola, "
            "sst2, mrpc, mnli, ner, pos (e.g. --tasks sst2,mrpc)."
        ),
    ):
        S.parse_tasks("sst2,qnli")


# -- the sidebar and the documentation ----------------------------------------------------------------------
def test_the_your_models_part_is_listed_only_when_studies_exist(tmp_path):
    toc = (
        "format: jb-book\nroot: book/index\nparts:\n  - caption: Findings\n    chapters:\n      - file: x\n  - "
        "caption: Appendix\n    chapters:\n      - file: book/appendix\n"
    )
    (tmp_path / "_toc.yml").write_text(toc)
    assert RS.report_chapters(tmp_path) == [] and RS.reports_part(toc, tmp_path) == toc
    (tmp_path / "book" / "studies").mkdir(parents=True)
    for name in ("study-b", "study-a"):
        (tmp_path / "book" / "studies" / f"{name}.ipynb").write_text("{}")
    assert RS.report_chapters(tmp_path) == ["book/studies/study-a", "book/studies/study-b"]
    part = (
        "  - caption: Your models\n    chapters:\n      - file: "
        "book/studies/study-a\n      - file: book/studies/study-b\n"
    )
    once = RS.reports_part(toc, tmp_path)
    assert once == toc.replace("  - caption: Appendix", part + "  - caption: Appendix")
    assert RS.reports_part(once, tmp_path).count("Your models") == 1  # once only


def test_the_documentation_shows_the_command_and_it_works_on_a_local_folder(tmp_path):
    readme, rerun = ((ROOT / name).read_text(encoding="utf-8") for name in ("README.md", "book/rerun.md"))
    for text in (readme, rerun):
        assert "Study your own model" in text and "papa study" in text
    assert "papa study MODEL" in readme.split("## Command line", 1)[1].split("##", 1)[0]  # in the command list
    documented = re.search(r"papa study (\S+) --tasks (\S+) --budget (\S+)", rerun)
    assert documented, "book/rerun.md shows a `papa study FOLDER --tasks ... --budget ...` command"
    folder = tiny_bert(tmp_path / "my-encoder")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert (
            main(["study", str(folder), "--tasks", documented.group(2), "--budget", documented.group(3), "--dry-run"])
            == 0
        )
    assert "would write configs/study-my-encoder.yaml" in out.getvalue()


# -- end to end ---------------------------------------------------------------------------------------------
def _probe_records(runs: Path) -> dict[int, dict]:
    """The probe records of one grid's runs folder (one seed, one ranking), by their number of constant heads."""
    records = [json.loads(path.read_text()) for path in sorted((runs / "artifacts" / "results").glob("probe__*.json"))]
    return {len(record["heads"]): record for record in records}


def _output_text(notebook: dict, source: str) -> str:
    """The outputs of the code cell whose source holds ``source``, as text (tags dropped, spaces collapsed)."""
    cell = next(c for c in notebook["cells"] if c["cell_type"] == "code" and source in "".join(c["source"]))
    shown = [
        "".join(o.get("data", {}).get("text/html") or o.get("data", {}).get("text/plain") or o.get("text", ""))
        for o in cell["outputs"]
    ]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", " ".join(shown)).replace("&nbsp;", " "))


@pytest.mark.data
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["bert", "mpnet"])
def test_a_tiny_study_runs_and_writes_its_chapter(tmp_path, kind):
    """A tiny random BERT (the smoke grid's protocol: compared with the smoke grid's minilm-l6) and a tiny MPNet
    (another max_length: not compared, and the chapter says why) run end to end: config, grid, chapter, sidebar."""
    folder = (tiny_bert if kind == "bert" else tiny_mpnet)(tmp_path / f"tiny {kind}")
    protocol = S.book_protocol("configs/smoke.yaml")
    if kind == "mpnet":
        protocol["max_length"] = 24
    name = f"test-{kind}-{uuid.uuid4().hex[:8]}"
    written = [S.config_path(name), ROOT / "book" / "runs" / f"study-{name}", R.chapter_path(f"study-{name}")]
    settings = R.ReportSettings(
        str(folder), ("sst2",), name=name, device="cpu", book_config="configs/smoke.yaml", protocol=protocol
    )
    out = io.StringIO()
    try:
        assert R.run_report(settings, out=out) == 0, out.getvalue()
        assert (
            yaml.safe_load(S.config_path(name).read_text())["probe"]
            == yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())["probe"]
        )
        assert (ROOT / "book" / "runs" / f"study-{name}" / "results.ipynb").is_file()
        chapter = R.chapter_path(f"study-{name}").read_text(encoding="utf-8")
        assert "Traceback" not in chapter
        notebook = json.loads(chapter)
        # The numbers the chapter shows, computed here from the run records: each converged probe's score (one seed)
        # and its paired difference to k = 0 (for accuracy on the same dev examples, the difference of the scores).
        records = _probe_records(ROOT / "book" / "runs" / f"study-{name}")
        assert sorted(records) == [0, 4, 8]  # the smoke grid's none, half and all of the tiny models' 2 x 4 heads
        main_table = _output_text(notebook, "IT.main_table_display")
        for k, record in records.items():
            if record["convergence"]["converged"]:
                assert f"{record['score']:.3f}" in main_table, (k, main_table)
            if k and record["convergence"]["converged"] and records[0]["convergence"]["converged"]:
                difference = f"{record['score'] - records[0]['score']:+.3f}".replace("+0.000", "0.000").replace(
                    "-0.000", "0.000"
                )
                assert difference in main_table, (k, difference, main_table)
        beside = _output_text(notebook, "SC.comparison_display")
        if kind == "bert":  # the smoke book's minilm-l6 stands beside it, with its own k = 0 score
            assert "Beside it stand the book's minilm-l6, whose protocol is this model's." in chapter
            book_k0 = _probe_records(ROOT / "book" / "runs" / "smoke")[0]
            assert "minilm-l6" in beside and f"{book_k0['score']:.3f}" in beside, beside
        else:
            assert (
                "max_length 24 here, 32 in the book" in chapter
                and "No model of the book ran under this model's protocol" in chapter
            )
            assert "minilm-l6" not in beside
        again = io.StringIO()  # resumable: the same command runs nothing again
        assert R.run_report(settings, out=again) == 0
        assert not re.search(r"^  runs (estimate|rank|select_lr|probe)__", again.getvalue(), re.M), (
            again.getvalue()
        )  # only the chapters, if papa's code moved
    finally:
        for path in written:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


def test_a_study_config_of_another_model_is_never_overwritten(tmp_path):
    from papa.core.errors import PapaError

    path = tmp_path / "study-model.yaml"
    path.write_text("name: study-model\nmodels: [/somewhere/a/model]\n", encoding="utf-8")
    S.check_same_model(path, "/somewhere/a/model")  # the same model: rerun, resume
    S.check_same_model(tmp_path / "absent.yaml", "/somewhere/b/model")  # nothing there yet
    with pytest.raises(PapaError) as err:
        S.check_same_model(path, "/somewhere/b/model")
    assert str(err.value) == (
        "study-model.yaml is the model report of /somewhere/a/model, not of "
        "/somewhere/b/model. Give this report its own name with --name, "
        "or remove that config (and its runs folder) to study this model under that name."
    )
