"""A task's inputs for probing: :class:`TaskInputs`, its train and eval splits loaded, subset (seeded) and encoded
once by :func:`prepare_inputs` for every seed and k of a run; :func:`score_predictions` / :func:`make_evaluator`
(metrics and the per-example dev record of flat predictions) and :func:`floors` (the majority-class floor). A probe's
own training examples within them: :func:`split_heldout` (fit and held out, from all) or :func:`draw_from_pool` (a
seed's draw from the pool).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from papa.core.errors import PapaError
from papa.core.layout import IGNORE_INDEX, check_max_length
from papa.core.models import LoadedModel
from papa.core.tasks import TaskSpec, get_task
from papa.probing.data import label_names, load_task_split, subset
from papa.probing.encoding import encode_split
from papa.probing.metrics import compute_task_metrics, majority_baseline
from papa.probing.probe import predict


@dataclass
class TaskInputs:
    """A task's encoded train and eval subsets (``[N, L]`` tensors; ``labels`` ``[N]`` or ``[N, L]``) and indices."""

    spec: TaskSpec
    label_names: list[str]
    train: dict[str, torch.Tensor]
    eval: dict[str, torch.Tensor]
    train_indices: list[int]
    eval_indices: list[int]
    max_length: int
    relayout: bool

    def data_record(self) -> dict:
        digest = lambda xs: hashlib.sha256(",".join(map(str, xs)).encode()).hexdigest()[:16]
        return {
            "train_examples": len(self.train_indices),
            "eval_examples": len(self.eval_indices),
            "train_indices_sha": digest(self.train_indices),
            "eval_indices_sha": digest(self.eval_indices),
        }


def prepare_inputs(
    lm: LoadedModel,
    task: str,
    max_length: int = 64,
    relayout: bool = True,
    max_train_examples: int | None = None,
    max_eval_examples: int | None = None,
    data_seed: int = 0,
    data_dir: str | None = None,
) -> TaskInputs:
    """Load, subset (seeded, the same for every probe seed) and encode a task's train and eval splits."""
    spec = get_task(task)
    check_max_length(max_length, getattr(lm.model.config, "max_position_embeddings", None))
    for name, value in (("max_train_examples", max_train_examples), ("max_eval_examples", max_eval_examples)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise PapaError(f"{name} must be a positive integer or null, got {value!r}", "Use e.g. 1000.")
    train_ds, train_idx = subset(load_task_split(spec, "train", data_dir), max_train_examples, data_seed)
    eval_ds, eval_idx = subset(load_task_split(spec, spec.eval_split, data_dir), max_eval_examples, data_seed)
    return TaskInputs(
        spec,
        label_names(spec, train_ds),
        encode_split(lm, spec, train_ds, max_length, relayout),
        encode_split(lm, spec, eval_ds, max_length, relayout),
        list(train_idx),
        list(eval_idx),
        max_length,
        relayout,
    )


def split_heldout(num_examples: int, fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded split of ``range(num_examples)`` into (fit ``[N - M]``, held out ``[M]``), each sorted."""
    if not 0 < fraction < 1:
        raise PapaError(f"heldout_fraction must be in (0, 1), got {fraction!r}", "Use e.g. 0.1.")
    held = max(1, int(round(fraction * num_examples)))
    if held >= num_examples:
        raise PapaError(
            f"Holding out {held} of {num_examples} training examples leaves none to train on",
            "Use more training examples or a smaller heldout_fraction.",
        )
    order = torch.randperm(num_examples, generator=torch.Generator().manual_seed(seed))
    return order[held:].sort().values, order[:held].sort().values


def draw_from_pool(
    pool_size: int, fit_examples: int, heldout_examples: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """A seed's own examples from a pool of ``pool_size``: disjoint, sorted ``(fit [fit_examples], held out
    [heldout_examples])`` pool indices, drawn by ``torch.randperm(pool_size)`` seeded with ``seed``."""
    if fit_examples < 1 or heldout_examples < 1:
        raise PapaError(
            f"A seed needs at least one training and one held-out example, got {fit_examples} and {heldout_examples}",
            "Raise max_train_examples / heldout_examples.",
        )
    if fit_examples + heldout_examples > pool_size:
        raise PapaError(
            f"The pool holds {pool_size} training examples, "
            f"fewer than the {fit_examples} + {heldout_examples} a seed draws",
            "Raise pool_examples (or lower max_train_examples / heldout_examples); "
            "for a small split use the whole split as the pool.",
        )
    order = torch.randperm(pool_size, generator=torch.Generator().manual_seed(seed))
    return order[:fit_examples].sort().values, order[fit_examples : fit_examples + heldout_examples].sort().values


def _token_lists(flat: torch.Tensor, encoded: dict[str, torch.Tensor]) -> list[list[int]]:
    counts = (encoded["labels"] != IGNORE_INDEX).sum(1).tolist()
    return [chunk.tolist() for chunk in torch.split(flat, counts)]


def score_predictions(
    inputs: TaskInputs, preds: torch.Tensor, labels: torch.Tensor, encoded: dict[str, torch.Tensor] | None = None
) -> tuple[dict, dict]:
    """``(metrics, dev record)`` of flat predictions and labels (``[N]``, or ``[T]`` labelled tokens of ``encoded``,
    default the eval split); the record: ``predictions``, ``labels``, ``lengths`` (token tasks), ``label_names``."""
    encoded = inputs.eval if encoded is None else encoded
    record = {"predictions": preds.tolist(), "labels": labels.tolist(), "label_names": list(inputs.label_names)}
    if inputs.spec.is_token_task:
        record["lengths"] = (encoded["labels"] != IGNORE_INDEX).sum(1).tolist()
        preds_, labels_ = _token_lists(preds, encoded), _token_lists(labels, encoded)
    else:
        preds_, labels_ = record["predictions"], record["labels"]
    return compute_task_metrics(inputs.spec, preds_, labels_, inputs.label_names), record


def make_evaluator(inputs: TaskInputs, source, encoded: dict[str, torch.Tensor] | None = None):
    """A function ``probe → metrics`` on ``source`` (``encoded``: its examples, to regroup token predictions)."""

    def evaluate(probe) -> dict:
        return score_predictions(inputs, *predict(probe, source), encoded)[0]

    return evaluate


def floors(inputs: TaskInputs) -> dict:
    """The majority-class floor (metrics of always predicting the most frequent training label)."""
    train, evals = inputs.train["labels"], inputs.eval["labels"]
    if inputs.spec.is_token_task:
        train_lists = _token_lists(train[train != IGNORE_INDEX], inputs.train)
        eval_lists = _token_lists(evals[evals != IGNORE_INDEX], inputs.eval)
        return majority_baseline(inputs.spec, train_lists, eval_lists, inputs.label_names)
    return majority_baseline(inputs.spec, train.tolist(), evals.tolist(), inputs.label_names)
