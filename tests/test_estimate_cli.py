"""The core issue's acceptance check: `papa estimate` on the real SST-2 data, plain padding, equals an
independent computation of the official formula on the same 64 sentences (max abs diff ≤ 1e-5)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer

from papa.cli import main
from papa.core.models import resolve_model_path

pytestmark = pytest.mark.data


def test_estimate_cli_matches_official_formula(data_dir, tmp_path):
    out = tmp_path / "c.safetensors"
    assert (
        main(
            [
                "estimate",
                "--model",
                "minilm-l6",
                "--task",
                "sst2",
                "--max-examples",
                "64",
                "--no-relayout",
                "--quiet",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    constants = load_file(out)["constants"]

    sentences = [json.loads(line)["sentence"] for line in (data_dir / "sst2" / "train.jsonl").open()][:64]
    folder = resolve_model_path("minilm-l6")[0]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()
    enc = tokenizer(sentences, padding="max_length", truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        attentions = torch.stack(
            model(**enc, output_attentions=True).attentions, dim=1
        ).double()  # [N, layers, heads, L, L]
    m = enc["attention_mask"].double()
    pattern = m[:, :, None] * m[:, None, :]  # [N, L, L]
    sums = (attentions * pattern[:, None, None]).sum(0)
    reference = torch.nan_to_num(sums / pattern.sum(0)).float()  # avgs = nan_to_num(sums / pattern sums)
    assert constants.shape == (6, 12, 64, 64)
    assert (constants - reference).abs().max() <= 1e-5
