"""Regenerate the thin notebooks in notebooks/ (outputs empty). Run: python tools/make_notebooks.py"""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent.parent / "notebooks"
SETUP = "import papa\nfrom papa.notebook import parameters\n\nparams = parameters(globals())  # an unknown or mistyped parameter is an error\npapa.figures.enable_offline_renderer()"


def notebook(title: str, intro: str, params: str, cells: list, chapter: bool = False) -> nbformat.NotebookNode:
    """A notebook: title, parameters cell, set-up cell, then ``cells`` ("md: ..." for markdown).

    ``chapter`` notebooks are book chapters: their code is hidden in the book (``remove-input``).
    """
    nb = new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    nb.cells = [new_markdown_cell(f"# {title}\n\n{intro}"), new_code_cell(params.strip(), metadata={"tags": ["parameters"]}),
                new_code_cell(SETUP)]
    for cell in cells:
        nb.cells.append(new_markdown_cell(cell[3:].strip()) if cell.startswith("md:") else new_code_cell(cell.strip()))
    for number, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{number}"
        if chapter and cell.cell_type == "code":
            tags = cell.metadata.setdefault("tags", [])
            tags.append("remove-cell" if "parameters" in tags or number == 2 else "remove-input")
    return nb


NOTEBOOKS = {
    "01_estimate_constants.ipynb": notebook(
        "Estimate constant attention matrices",
        "Averages every head's attention over a task's training split at a fixed length $L$: "
        "$C_{l,h,i,j}$ is the mean of $A_{l,h,i,j}$ over the examples in which positions $i$ and $j$ are both real tokens.",
        '''
model: str = "minilm-l6"  # encoder: embedded name (minilm-l6), local folder or hub id
task: str = "sst2"  # task: cola, sst2, mrpc, mnli, ner or pos
max_examples: int = 128  # average over the first N training examples
max_length: int = 64  # fixed input length L
relayout: bool = True  # PAPA layout: segment 2 at L/2, final [SEP] at L-1
device: str = "auto"  # auto (GPU when present), cpu or cuda
out: str = "book/runs/scratch/constants.safetensors"  # output file, relative to the repository root
''',
        [
            "constant_set = papa.estimate_task_constants(\n    model, task, max_examples=max_examples, max_length=max_length, relayout=relayout, device=device\n)",
            "papa.save_constants(out, constant_set)\n{k: v for k, v in constant_set.meta.items() if k != 'path'}",
            "md: A few of the constant matrices: the first heads of the first and the last layer.",
            "last = constant_set.constants.shape[0] - 1\npapa.figures.fig_constants(constant_set.constants, picks=[(0, 0), (0, 1), (last, 0), (last, 1)])",
        ],
    ),
    "02_rank_heads.ipynb": notebook(
        "Rank the heads",
        "Orders every head of the model: the first heads of the ranking become constant first. "
        "`gates` is the paper's method (a learned mix of each head's attention and its constant); "
        "`deviation` ranks by how far each head's attention strays from its constant (training-free); `random` is a control.",
        '''
model: str = "minilm-l6"  # encoder: embedded name, local folder or hub id
task: str = "sst2"  # task: cola, sst2, mrpc, mnli, ner or pos
method: str = "deviation"  # ranking method: gates, deviation or random
constants: str = "book/runs/scratch/constants.safetensors"  # constants file from the estimate notebook
epochs: int = 1  # gates: training epochs
lr: float = 2e-05  # gates: learning rate of the gates and the probe
max_train_examples: int = 64  # gates: training examples
max_eval_examples: int = 64  # gates: evaluation examples
seed: int = 42  # random seed
data_seed: int = 0  # seed of the training subset
device: str = "auto"  # auto (GPU when present), cpu or cuda
out: str = "book/runs/scratch/ranking.json"  # output file, relative to the repository root
''',
        [
            "ranking, meta = papa.compute_ranking(\n    method, model, task, constants or None, seed=seed, epochs=epochs, lr=lr, max_train_examples=max_train_examples,\n"
            "    max_eval_examples=max_eval_examples, data_seed=data_seed, device=device,\n)",
            "papa.save_ranking(out, ranking, meta)\nprint(f\"first heads made constant: {[list(h) for h in ranking[:8]]}\")",
            "md: Where the ranking puts each head (darker: made constant earlier).",
            "papa.figures.fig_head_ranking(ranking, num_layers=1 + max(l for l, _ in ranking), num_heads=1 + max(h for _, h in ranking), k_values=[])",
        ],
    ),
    "03_probe.ipynb": notebook(
        "Probing runs",
        "Makes the first $k$ heads of a ranking constant, freezes the encoder and trains the probe on top "
        "(the official freeze-extract pooler), evaluating on the validation split after every epoch. "
        "One result file per probe seed; the seeds share the encoder's features.",
        '''
model: str = "minilm-l6"  # encoder: embedded name, local folder or hub id
task: str = "sst2"  # task: cola, sst2, mrpc, mnli, ner or pos
k: int = 0  # number of constant heads
constants: str = ""  # constants file (needed when k > 0)
ranking: str = ""  # ranking file (needed when 0 < k < all heads)
mode: str = "cached"  # cached (features once, eval mode) or faithful (live encoder, train mode)
seeds: list = [42]  # probe seeds, one run and one result file each
epochs: int = 2  # training epochs (the paper: 15)
lr: float = 2e-05  # learning rate (the paper: 2e-5)
probe_input: str = "all"  # all hidden states, or embeddings only (the attention-free floor)
selection: str = "final"  # reported epoch: final (the paper) or heldout (best on held-out training examples)
heldout_fraction: float = 0.1  # with selection heldout: the share of the training subset held out
max_train_examples: int | None = 64  # training examples (seeded subset; None: the whole training split)
max_eval_examples: int = 64  # evaluation examples (seeded subset)
data_seed: int = 0  # seed of the subsets, shared by all probe seeds
max_length: int = 64  # fixed input length L
relayout: bool = True  # PAPA layout
device: str = "auto"  # auto (GPU when present), cpu or cuda
out: str = "book/runs/scratch/result_s{seed}.json"  # result file per seed ({seed} is filled in)
''',
        [
            "lm = papa.load_model(model, papa.pick_device(device))\ninputs = papa.prepare_inputs(\n    lm, task, max_length, relayout, max_train_examples, max_eval_examples, data_seed\n)",
            "results = {}\nfor seed in seeds:\n    results[seed] = papa.run_probe(\n        lm, task, constants or None, ranking or None, k, mode=mode, seed=seed, epochs=epochs, lr=lr,\n"
            "        probe_input=probe_input, selection=selection, heldout_fraction=heldout_fraction, device=device, inputs=inputs,\n    )\n    papa.save_result(out.format(seed=seed), results[seed])",
            "md: Final score per seed, and the majority-class floor:",
            "import pandas as pd\n\npd.DataFrame(\n    {seed: {\"score\": r[\"score\"], \"epoch\": r[\"selected_epoch\"], \"majority floor\": r[\"floors\"][\"majority\"][\"main\"], \"seconds\": r[\"timings\"][\"total\"]} for seed, r in results.items()}\n).T.round(4)",
            "md: Score and training loss after every epoch (first seed):",
            "pd.DataFrame(results[seeds[0]][\"epochs\"]).set_index(\"epoch\").round(4)",
        ],
    ),
    "04_results.ipynb": notebook(
        "Results",
        "How much does the probe lose as heads become constant? This chapter aggregates the "
        "{glue:text}`n_runs` probing runs of the main part of the {glue:text}`config_name` grid "
        "(models: {glue:text}`models`; tasks: {glue:text}`tasks`). Every number below is computed from those runs "
        "when this notebook is executed.",
        """
grid_config: str = "configs/smoke.yaml"  # the grid config whose runs this chapter aggregates
""",
        [
            "import pandas as pd\n\npd.set_option(\"display.max_colwidth\", None)  # claims and notes are read in full\n"
            "data = papa.book.load_book_data(grid_config)\nnumbers = papa.book.headline_numbers(data)\npapa.book.glue_numbers(numbers)",
            "md: ## Score as heads become constant\n\n"
            "{numref}`fig-score-vs-heads` is the analogue of the paper's Figure 2: the probe's score against the number of "
            "heads that remain input-dependent, for each ranking, with the floors every score must be read against.\n\n"
            "```{glue:figure} fig-score-vs-heads\n:name: fig-score-vs-heads\n\n"
            "Mean score over probe seeds (band: min–max) against the number of input-dependent heads; the rightmost "
            "point is the unpatched encoder (k = 0), the leftmost has every head constant. Dashed: the majority-class "
            "floor and the attention-free floor (the same probe on the embedding layer alone). Click a ranking in the "
            "legend to highlight it.\n```",
            "from myst_nb import glue\n\nglue(\"fig-score-vs-heads\", papa.figures.fig_score_vs_dynamic_heads(data.summary, data.floors), display=False)",
            "md: With half of the heads constant ({glue:text}`ranking` ranking) the mean relative drop over the informative "
            "tasks ({glue:text}`informative_tasks`) is {glue:text}`drop_half_mean`; with every head constant it is "
            "{glue:text}`drop_all_mean` (largest: {glue:text}`drop_all_max`). Tasks whose k = 0 probe is not clearly "
            "above its floors carry no information about attention and are left out of these averages: "
            "{glue:text}`uninformative_tasks`.",
            "md: ## Baseline score against the drop\n\n"
            "```{glue:figure} fig-baseline-vs-drop\n:name: fig-baseline-vs-drop\n\n"
            "The analogue of the paper's Figure 4: each model's k = 0 score on each task against its relative drop with "
            "every head constant. The paper found that better models lose more: within a task, points further right "
            "should sit higher.\n```",
            "glue(\"fig-baseline-vs-drop\", papa.figures.fig_baseline_vs_drop(data.summary), display=False)",
            "md: ## Every score\n\nMean ± standard deviation over probe seeds, per task, ranking and number of constant heads "
            "k (columns). A cell without ± comes from a single seed.",
            "papa.results.score_table(data.summary)",
            "md: Floors, baseline and the informativeness of each task (a task is informative when its k = 0 score "
            "exceeds both floors by more than twice the seed spread, and at least 0.01):",
            "papa.book.floors_display(data.floors)",
            "md: Relative drop $(s_0 - s_k)/s_0$ as in the paper, next to the retained gain $(s_k - f)/(s_0 - f)$ over "
            "the higher floor $f$ — the share of what attention-bearing layers add over the floor that survives:",
            "papa.book.retained_gains(data.summary, data.floors).set_index([\"task\", \"ranking\", \"k\"]).round(3)",
            "md: ## The paper's claims\n\nEach claim checked on our runs, with the rule used (see `papa.results.claims_table`). "
            "Half the heads constant: **{glue:text}`claim1_verdict`**. All heads constant: **{glue:text}`claim2_verdict`**. "
            "Better models lose more: **{glue:text}`claim3_verdict`**.",
            "papa.results.claims_table(data.summary, data.floors, ranking=numbers[\"ranking\"]).set_index(\"claim\")",
            "md: ## Which heads become constant first\n\n"
            "How many of the first half of each ranking's heads sit in each layer:",
            "papa.book.layer_table(data)",
            "md: ```{glue:figure} fig-ranking\n:name: fig-ranking\n\n"
            "Rank of every head (layer × head) in the first task's rankings; darker heads become constant earlier.\n```",
            "first = sorted(data.rankings)[0]\nranking = data.rankings[first]\nglue(\"fig-ranking\", papa.figures.fig_head_ranking(\n"
            "    ranking, 1 + max(l for l, _ in ranking), 1 + max(h for _, h in ranking), k_values=sorted(set(data.main[\"k\"])),\n), display=False)",
            "constants_file = sorted(papa.grid.ROOT.glob(f\"book/runs/{data.config['name']}/artifacts/constants/*.safetensors\"))[0]\n"
            "constant_set = papa.load_constants(constants_file)\nlast = constant_set.constants.shape[0] - 1\n"
            "glue(\"fig-constants\", papa.figures.fig_constants(constant_set.constants, picks=[(0, 0), (0, 1), (last, 0), (last, 1)]), display=False)\n"
            "glue(\"constants_task\", constant_set.meta[\"task\"], display=False)\nglue(\"constants_examples\", constant_set.meta[\"num_examples\"], display=False)",
            "md: Does the paper's ranking beat the training-free one at equal k? A difference counts only when it "
            "exceeds the seed spread:",
            "papa.book.ordering_comparison(data).round(3)",
            "md: ## What these numbers can and cannot show\n\n"
            "- {glue:text}`n_models` small models ({glue:text}`models`), distilled and sentence-tuned, where the paper "
            "used six pretrained-only encoders (BERT, RoBERTa, DeBERTa, base and large): \"better models lose more\" "
            "rests here on one comparison per task between two closely related models, so it is a weak test.\n"
            "- Subsets of each task (see the setup chapter) and short gate training: rankings are noisier than the paper's.\n"
            "- Features are cached in eval mode (no dropout in the frozen encoder), unlike the official code; the "
            "controls chapter measures what that changes.\n"
            "- MNLI is evaluated on a 1k sample of its *training* distribution, not the official dev sets.\n"
            "- A drop inside the seed spread is not a drop: see the controls chapter for floors, seeds and convergence.\n"
            "- The main grid's probes see at most {glue:text}`probe_train_examples` training examples per task (see the "
            "setup chapter). The relative drop with every head constant at each size a task was run at (*: within the "
            "seed spread): {glue:text}`drop_by_size`; see the controls chapter.",
        ],
        chapter=True,
    ),
    "05_controls.ipynb": notebook(
        "Controls",
        "Does \"no drop\" mean that attention does not matter, or that the probe extracts little from any layer? "
        "This chapter reads the results against what no attention at all achieves, with the seed noise, the probe's "
        "convergence, its sensitivity to training, and the cached execution mode.",
        """
grid_config: str = "configs/smoke.yaml"  # the grid config whose runs this chapter aggregates
""",
        [
            "from myst_nb import glue\n\ndata = papa.book.load_book_data(grid_config)\nrising = papa.book.still_rising(data.epochs)\n"
            "glue(\"n_rising\", int(rising[\"rising\"].sum()) if len(rising) else 0, display=False)\n"
            "glue(\"n_checked\", int(len(rising)), display=False)",
            "md: ## Floors\n\nFor each task: the majority-class score, the attention-free probe (embedding layer only) and the "
            "k = 0 probe, each over probe seeds.",
            "papa.book.floors_display(data.floors)",
            "md: ## Convergence\n\n```{glue:figure} fig-convergence\n:name: fig-convergence\n\n"
            "Dev score after every epoch for the runs with no and with all heads constant (mean over seeds, band min–max).\n```\n\n"
            "{glue:text}`n_rising` of {glue:text}`n_checked` runs are still rising over their last epochs (mean of the last "
            "three epochs above the three before by more than 0.002):",
            "glue(\"fig-convergence\", papa.figures.fig_convergence(data.epochs), display=False)\nrising[rising[\"rising\"]].round(4) if len(rising) else rising",
            "md: ## Sensitivity to the probe's training\n\nDoes the size of the PAPA drop depend on how well the probe is "
            "trained? Each row compares the main grid's probe setting (in the default grid the paper's: lr 2e-5, 15 epochs, "
            "the final epoch, on the main grid's training subset) with one sensitivity study on the same task, at no and at all heads constant: a larger learning rate; "
            "a better-trained probe (larger lr, more epochs, the reported epoch chosen on 10% of the *training* subset held "
            "out, never on the dev set); more training data. *drop* is the relative drop (score₀ − score_all) / score₀; "
            "*change real* says whether a score moved by more than the seed spread.",
            "papa.book.sensitivity_table(data).round(4)",
            "md: ## Sensitivity to the training-set size\n\n```{glue:figure} fig-train-size\n:name: fig-train-size\n\n"
            "Score with no and with all heads constant against the number of training examples the probe saw, at the "
            "main grid's probe setting (learning rate, epochs, epoch selection: see the setup chapter); mean over seeds, "
            "band min–max, log scale. The vertical gap between the two lines is the absolute drop with every head "
            "constant. Diamonds: the attention-free floor (embedding layer only), at the sizes where it ran.\n```\n\n"
            "Relative drop with every head constant, by training size (*: the drop is within the seed spread), with the "
            "retained gain $(s_{all} - f)/(s_0 - f)$ over the higher floor $f$ (majority class or attention-free) where "
            "the attention-free probe ran at the same size: {glue:text}`drop_by_size`. At a size without that floor the "
            "table cannot say how much of the k = 0 score needs attention at all.",
            "sizes = papa.book.train_size_study(data)\nglue(\"drop_by_size\", papa.book.train_size_sentence(sizes), display=False)\n"
            "glue(\"fig-train-size\", papa.figures.fig_score_vs_train_size(sizes) if len(sizes) else \"no task was run at more than one training size\", display=False)\n"
            "sizes.round(4)",
            "md: ## Cached vs. faithful execution\n\n`cached` runs the frozen encoder once in eval mode; `faithful` recomputes it "
            "in train mode (dropout on) for every batch, as the official Trainer-based code. Same task, sizes and seeds:",
            "pair = [s[\"name\"] for s in data.config.get(\"studies\", []) if s.get(\"modes\") == [\"faithful\"]]\n"
            "twin = [s[\"name\"] for s in data.config.get(\"studies\", []) if s.get(\"modes\") == [\"cached\"] and s.get(\"epochs\") == next((x.get(\"epochs\") for x in data.config[\"studies\"] if x[\"name\"] in pair), None)]\n"
            "papa.book.compare(data.studies[twin[0]], data.studies[pair[0]], \"cached\", \"faithful\").round(4) if pair and twin and len(data.studies[pair[0]]) else \"no faithful study in this grid\"",
            "md: A difference is *real* only when it exceeds the larger of the two seed ranges (max − min over seeds).",
        ],
        chapter=True,
    ),
}

if __name__ == "__main__":
    for name, nb in NOTEBOOKS.items():
        nbformat.write(nb, HERE / name)
        print("wrote", name)
