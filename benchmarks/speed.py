"""Issue 25's speed comparisons, for :mod:`benchmarks.run`:

5. compact vs padded encoder passes (:mod:`papa.core.compact`) over the same PAPA-layout examples: examples/s and
   the largest difference of the features at real positions;
6. one epoch of probe training on cached features (float32 copy, fused AdamW) against one plain read of the same
   feature tensors (a sum over them): the probe's distance from the memory floor.
"""

from __future__ import annotations

import time

import torch

from papa.core.layout import encode_sequences
from papa.probing.data import get_task, load_task_split
from papa.probing.extraction import extract_features
from papa.probing.features import Features
from papa.probing.probe import CachedSource, ProbeConfig, build_probe, train_probe

L = 64


def papa_layout_inputs(lm, task: str, n: int, synthetic: bool) -> dict[str, torch.Tensor]:
    """``n`` examples of ``task`` with the PAPA layout at L = 64 (``synthetic``: random single sentences of 4-30
    words, laid out by the model's tokenizer when it has one, else random ids with the layout's mask)."""
    if not synthetic:
        spec = get_task(task)
        data = load_task_split(spec, "train")
        data = data.select(range(min(n, len(data))))
        columns = [data[c] for c in spec.text_columns]
        encoded = encode_sequences(lm.tokenizer, columns[0], columns[1] if len(columns) > 1 else None, L, True)
        encoded["labels"] = torch.tensor(data[spec.label_column], dtype=torch.long)
        return encoded
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(4, L // 2, (n,), generator=g)
    mask = (torch.arange(L)[None] < lengths[:, None]).long()
    mask[:, L - 1] = 1
    ids = torch.randint(1000, lm.model.config.vocab_size, (n, L), generator=g) * mask
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.randint(0, 2, (n,), generator=g)}


def bench_compact(lm, device: torch.device, compare, row, n: int, synthetic: bool) -> list[dict]:
    rows = []
    for task in ("sst2",) if synthetic else ("sst2", "mrpc"):
        encoded = papa_layout_inputs(lm, task, n, synthetic)
        real = float(encoded["attention_mask"].float().mean())

        def padded(encoded=encoded) -> Features:
            return extract_features(lm.model, encoded, False, 64, device, compact=False)

        def compact(encoded=encoded) -> Features:
            return extract_features(lm.model, encoded, False, 64, device)

        result = compare(f"compact-{task}", padded, compact, repeats=2)
        a, b = result["a_out"], result["b_out"]
        where = a.mask[:, None, :, None].expand_as(a.states)
        diff = float((a.states.float() - b.states.float())[where].abs().max())
        ratio, goal = result["a_s"] / result["b_s"], 1.5 if real <= 0.4 else 0.9
        rows.append(
            row(
                f"Encoder features, {lm.name}, {'random single sentences' if synthetic else task.upper()} ({n} "
                f"examples, L={L}, {real:.0%} of slots real)",
                "padded (all L slots)",
                "compact (real slots)",
                f"{n / result['a_s']:.1f} ex/s",
                f"{n / result['b_s']:.1f} ex/s",
                f"{ratio:.2f}x",
                f"≥ {goal}x (≥ 1.5x where ≤ 40% of slots are real), features within float16 rounding",
                ratio >= goal and diff <= 1e-2,
                max_abs_diff_fp16=diff,
            )
        )
    return rows


def bench_probe_epoch(lm, device: torch.device, compare, row, n: int, synthetic: bool) -> list[dict]:
    encoded = papa_layout_inputs(lm, "sst2", n, synthetic)
    features = extract_features(lm.model, encoded, False, 64, device)
    source = CachedSource(features, "all", device, float32=True)
    states = source.features.states
    config = ProbeConfig(lr=2e-4, epochs=1, seed=42)
    model_config = lm.model.config

    def read() -> float:
        return float(states.sum())

    def epoch() -> float:
        probe = build_probe(False, model_config.num_hidden_layers + 1, L, model_config.hidden_size, 2, config).to(
            device
        )
        started = time.perf_counter()
        train_probe(probe, source, None, config)
        return time.perf_counter() - started

    result = compare("probe-epoch", read, epoch, repeats=3)
    gigabytes = states.numel() * states.element_size() / 1e9
    ratio = result["b_s"] / result["a_s"]
    return [
        row(
            f"Probe training, {lm.name}, SST-2 features ({n} examples, "
            f"{gigabytes:.2f} GB float32, batch 16, fused AdamW)",
            "one plain read of the features",
            "one training epoch",
            f"{result['a_s']:.3f} s",
            f"{result['b_s']:.3f} s",
            f"{ratio:.1f}x the read",
            "≤ 2x the read",
            ratio <= 2,
        )
    ]
