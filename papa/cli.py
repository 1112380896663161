"""The ``papa`` command line: ``estimate``, ``rank``, ``probe``, ``grid`` and ``book``.

Every mistake ends in one line ``papa: error: <problem>. <what to do>`` and exit status 2; no
traceback is printed for user errors. Outputs are written atomically, so a failed or killed
command leaves no half-written file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from papa.core.errors import PapaError


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _device(text: str) -> str:
    """A torch device this machine has (``cpu``, ``cuda``, ``cuda:1``, ...) or ``auto``."""
    if text.strip().lower() in ("", "auto"):
        return "auto"
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a device; use cpu, cuda, cuda:N, mps or auto") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise argparse.ArgumentTypeError(f"{text!r}: CUDA is not available on this machine; use --device cpu or auto")
        if device.index is not None and device.index >= count:
            raise argparse.ArgumentTypeError(f"{text!r}: this machine has {count} CUDA device(s); use --device cpu, auto or cuda:0 .. cuda:{count - 1}")
    if device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise argparse.ArgumentTypeError(f"{text!r}: MPS is not available on this machine; use --device cpu or auto")
    return text


def _check_writable(out: str) -> None:
    """Fail before any work when ``out`` cannot be written (its nearest existing folder is not writable)."""
    import tempfile
    from pathlib import Path

    folder = Path(out).expanduser().resolve().parent
    while not folder.exists():
        folder = folder.parent
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError:
        raise PapaError(f"Cannot write {out}: the folder {folder} is not writable", "Choose a writable output folder.") from None


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="minilm-l6", help="embedded name (minilm-l6), local folder or hub id")
    parser.add_argument("--task", required=True, help="cola, sst2, mrpc, mnli, ner or pos")
    parser.add_argument("--data-dir", default=None, help="task data folder (default: $PAPA_DATA_DIR, else the hub)")
    parser.add_argument("--device", type=_device, default=None, help="cpu, cuda, cuda:N or auto (default: cuda when available)")


def cmd_estimate(args) -> int:
    from papa.core.constants import save_constants
    from papa.probing.experiment import estimate_task_constants

    constant_set = estimate_task_constants(
        args.model,
        args.task,
        args.split,
        args.max_examples,
        args.max_length,
        not args.no_relayout,
        args.batch_size,
        args.data_dir,
        args.device,
        progress=not args.quiet,
    )
    save_constants(args.out, constant_set)
    print(f"wrote {args.out}: constants {list(constant_set.constants.shape)} from {constant_set.meta['num_examples']} examples in {constant_set.meta['seconds']:.1f} s")
    return 0


def cmd_rank(args) -> int:
    from papa.core.heads import save_ranking
    from papa.probing.ranking import compute_ranking

    ranking, meta = compute_ranking(
        args.method,
        args.model,
        args.task,
        args.constants,
        seed=args.seed,
        epochs=args.epochs,
        max_train_examples=args.max_train_examples,
        max_eval_examples=args.max_eval_examples,
        data_dir=args.data_dir,
        device=args.device,
    )
    save_ranking(args.out, ranking, meta)
    print(f"wrote {args.out}: {len(ranking)} heads ranked by {args.method}; first {[list(h) for h in ranking[:3]]}")
    return 0


def cmd_probe(args) -> int:
    from papa.core.io import atomic_write_json
    from papa.probing.experiment import run_probe

    result = run_probe(
        args.model,
        args.task,
        args.constants,
        args.ranking,
        args.constant_heads,
        mode=args.mode,
        seed=args.seed,
        epochs=args.epochs,
        lr=args.lr,
        probe_input=args.probe_input,
        selection=args.selection,
        heldout_fraction=args.heldout_fraction,
        max_train_examples=args.max_train_examples,
        max_eval_examples=args.max_eval_examples,
        data_dir=args.data_dir,
        device=args.device,
    )
    atomic_write_json(args.out, result)
    print(f"wrote {args.out}: {result['task']} {result['metric']} = {result['score']:.4f} (k={result['config']['constant_heads']}, {result['timings']['total']:.1f} s)")
    return 0


def cmd_grid(args) -> int:
    from papa.pipeline.runner import run_grid

    return run_grid(args.config, only=args.only, dry_run=args.dry_run)


def cmd_book(args) -> int:
    from papa.book import build_book

    return build_book(args.config, as_is=args.as_is, strict=args.strict)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="papa", description="Probing how much pretrained encoders need attention (PAPA).")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("estimate", help="estimate constant attention matrices over a task's training split")
    _common(p)
    p.add_argument("--split", default="train")
    p.add_argument("--max-examples", type=_positive_int, default=None, help="use the first N examples")
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--no-relayout", action="store_true", help="plain padding instead of the PAPA layout")
    p.add_argument("--batch-size", type=_positive_int, default=64)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--out", required=True, help="output .safetensors file")
    p.set_defaults(func=cmd_estimate)

    p = sub.add_parser("rank", help="rank heads (which become constant first)")
    _common(p)
    p.add_argument("--constants", default=None)
    p.add_argument("--method", required=True, help="gates, deviation or random")
    p.add_argument("--epochs", type=_positive_int, default=15)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--max-train-examples", type=_positive_int, default=1000)
    p.add_argument("--max-eval-examples", type=_positive_int, default=None)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_rank)

    p = sub.add_parser("probe", help="train and score one probe with k constant heads")
    _common(p)
    p.add_argument("--constants", default=None)
    p.add_argument("--ranking", default=None)
    p.add_argument("--constant-heads", default="0", help="a count (36), a fraction (0.5, 7/8) or 'all'")
    p.add_argument("--mode", default="cached", help="cached or faithful")
    p.add_argument("--epochs", type=_positive_int, default=15)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--probe-input", default="all", help="all (every layer) or embeddings (attention-free floor)")
    p.add_argument("--selection", default="final", help="reported epoch: final (the paper) or heldout (best on held-out training examples)")
    p.add_argument("--heldout-fraction", type=float, default=0.1, help="with --selection heldout: share of the training subset held out")
    p.add_argument("--max-train-examples", type=_positive_int, default=1000)
    p.add_argument("--max-eval-examples", type=_positive_int, default=None)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_probe)

    p = sub.add_parser("grid", help="run a grid config with papermill")
    p.add_argument("action", choices=["run"])
    p.add_argument("config")
    p.add_argument("--only", default=None, help="run only the runs whose id contains this text")
    p.add_argument("--dry-run", action="store_true", help="print what would run")
    p.set_defaults(func=cmd_grid)

    p = sub.add_parser("book", help="bring the book's runs up to date and build the site")
    p.add_argument("action", choices=["build"])
    p.add_argument("--config", default="configs/default.yaml")
    p.add_argument("--as-is", action="store_true", help="render committed runs as they are, marking stale ones")
    p.add_argument("--strict", action="store_true", help="fail on any warning or broken reference (-W -n --keep-going)")
    p.set_defaults(func=cmd_book)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        if getattr(args, "out", None):
            _check_writable(args.out)
        return int(args.func(args) or 0)
    except PapaError as err:
        print(f"papa: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("papa: interrupted; finished outputs are kept", file=sys.stderr)
        return 130
    finally:
        if getattr(args, "verbose", False):
            print(json.dumps({"seconds": round(time.perf_counter() - started, 3)}))


if __name__ == "__main__":
    sys.exit(main())
