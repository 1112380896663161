"""Regenerate the thin notebooks in notebooks/ (outputs empty). Run: python tools/make_notebooks.py"""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent.parent / "notebooks"
SETUP = "import papa\nfrom papa.notebook import parameters\n\nparams = parameters(globals())  # an unknown or mistyped parameter is an error\npapa.figures.enable_offline_renderer()"


def notebook(title: str, intro: str, params: str, cells: list) -> nbformat.NotebookNode:
    nb = new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    nb.cells = [new_markdown_cell(f"# {title}\n\n{intro}"), new_code_cell(params.strip(), metadata={"tags": ["parameters"]}),
                new_code_cell(SETUP)]
    for cell in cells:
        nb.cells.append(new_markdown_cell(cell[3:].strip()) if cell.startswith("md:") else new_code_cell(cell.strip()))
    for number, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{number}"
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
max_train_examples: int = 64  # training examples (seeded subset)
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
            "        probe_input=probe_input, device=device, inputs=inputs,\n    )\n    papa.save_result(out.format(seed=seed), results[seed])",
            "md: Final score per seed, and the majority-class floor:",
            "import pandas as pd\n\npd.DataFrame(\n    {seed: {\"score\": r[\"score\"], \"majority floor\": r[\"floors\"][\"majority\"][\"main\"], \"seconds\": r[\"timings\"][\"total\"]} for seed, r in results.items()}\n).T.round(4)",
            "md: Score and training loss after every epoch (first seed):",
            "pd.DataFrame(results[seeds[0]][\"epochs\"]).set_index(\"epoch\").round(4)",
        ],
    ),
    "04_results.ipynb": notebook(
        "Results",
        "{glue:text}`n_runs` probing runs of the `{glue:text}`config_name`` grid feed this chapter.",
        '''
config_name: str = "smoke"  # the grid whose runs are aggregated (configs/<name>.yaml)
runs_dir: str = "book/runs/smoke"  # its runs folder, relative to the repository root
''',
        ["data = papa.book.load_book_data(config_name, runs_dir)\ndata.glue_all()"],
    ),
    "05_controls.ipynb": notebook(
        "Controls",
        "Floors, seeds, convergence and sensitivity.",
        '''
config_name: str = "smoke"  # the grid whose runs are aggregated (configs/<name>.yaml)
runs_dir: str = "book/runs/smoke"  # its runs folder, relative to the repository root
''',
        ["data = papa.book.load_book_data(config_name, runs_dir)"],
    ),
}

if __name__ == "__main__":
    for name, nb in NOTEBOOKS.items():
        nbformat.write(nb, HERE / name)
        print("wrote", name)
