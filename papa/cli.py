"""The ``papa`` command line: ``estimate``, ``rank``, ``probe``, ``grid`` (``run``, ``verify``, ``schema``) and ``book``.

Every mistake ends in one line ``papa: error: <problem>. <what to do>`` and exit status 2; no
traceback is printed for user errors. Outputs are written atomically, so a failed or killed
command leaves no half-written file.
"""

from __future__ import annotations

import argparse
import sys
import types
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

from papa.core.errors import PapaError
from papa.core.schema import DEFAULT_BATCH_SIZE, EstimateParams, ProbeParams, RankParams


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


def _base_type(annotation: Any) -> type:
    """int, float or str: what a flag's text is converted to (the schema checks the rest)."""
    if get_origin(annotation) is Annotated:
        return _base_type(get_args(annotation)[0])
    if annotation in (int, float):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType):
        return next((kind for kind in map(_base_type, get_args(annotation)) if kind in (int, float)), str)
    return str


def _converter(annotation: Any, optional: bool):
    """Text → the field's type; text that does not convert is passed on as is, so that the schema
    names the flag in its error (``--epochs must be a whole number, got 'abc'``)."""
    kind = _base_type(annotation)

    def convert(text: str):
        if optional and text.strip().lower() in ("none", "null", "all"):
            return None
        try:
            return kind(text)
        except ValueError:
            return text

    convert.__name__ = kind.__name__
    return convert


def _schema_flags(parser: argparse.ArgumentParser, params: type[BaseModel], skip: tuple[str, ...] = ()) -> None:
    """One flag per field of ``params`` (``max_train_examples`` → ``--max-train-examples``), with its
    default, requiredness and help from the schema; a bool gets ``--name/--no-name``."""
    for name, field in params.model_fields.items():
        if name in skip:
            continue
        flag = "--" + name.replace("_", "-")
        default = None if field.is_required() else field.default
        help_text = field.description + ("" if field.is_required() else f" (default: {default})")
        if field.annotation is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=help_text)
        elif name == "device":
            parser.add_argument(flag, type=_device, default=default, help=help_text)
        else:
            optional = type(None) in get_args(field.annotation)
            parser.add_argument(flag, type=_converter(field.annotation, optional), default=default, required=field.is_required(), help=help_text)


def _checked(params: type[BaseModel], args, **values) -> BaseModel:
    """The parsed flags validated by the schema; a bad value is one :class:`PapaError` naming its flag."""
    from pydantic import ValidationError

    from papa.core.config_files import as_papa_error

    data = {name: getattr(args, name) for name in params.model_fields if hasattr(args, name)} | values
    try:
        return params.model_validate(data)
    except ValidationError as err:
        error = as_papa_error(err, data, params, "", style="cli")
        raise PapaError(str(error.problem).replace("--seeds", "--seed").replace("--k ", "--constant-heads "), error.hint) from None


def _data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", default=None, help="task data folder (default: $PAPA_DATA_DIR, else the hub)")


def cmd_estimate(args) -> int:
    _checked(EstimateParams, args)
    from papa.core.constants import save_constants
    from papa.probing.encoding import estimate_task_constants

    constant_set = estimate_task_constants(
        args.model,
        args.task,
        args.split,
        args.max_examples,
        args.max_length,
        args.relayout,
        args.batch_size,
        args.data_dir,
        args.device,
        progress=not args.quiet,
    )
    save_constants(args.out, constant_set)
    print(f"wrote {args.out}: constants {list(constant_set.constants.shape)} from {constant_set.meta['num_examples']} examples in {constant_set.meta['seconds']:.1f} s")
    return 0


def cmd_rank(args) -> int:
    _checked(RankParams, args)
    from papa.core.heads import save_ranking
    from papa.probing.ranking import compute_ranking

    ranking, meta = compute_ranking(
        args.method,
        args.model,
        args.task,
        args.constants or None,
        seed=args.seed,
        epochs=args.epochs,
        lr=args.lr,
        max_train_examples=args.max_train_examples,
        max_eval_examples=args.max_eval_examples,
        data_seed=args.data_seed,
        data_dir=args.data_dir,
        device=args.device,
    )
    save_ranking(args.out, ranking, meta)
    print(f"wrote {args.out}: {len(ranking)} heads ranked by {args.method}; first {[list(h) for h in ranking[:3]]}")
    return 0


def cmd_probe(args) -> int:
    _checked(ProbeParams, args, seeds=[args.seed])
    from papa.core.io import atomic_write_json
    from papa.core.models import load_model, pick_device
    from papa.probing.experiment import run_probe

    model = args.model
    if args.lr_file:  # the lr chosen at k = 0 for this model and task replaces --lr (as in notebooks/03_probe.md)
        from papa.probing.protocol import load_lr_choice

        model = load_model(args.model, pick_device(args.device))
        args.lr = load_lr_choice(args.lr_file, model.name, args.task)
    out = args.out.replace("{seed}", str(args.seed))
    result = run_probe(
        model,
        args.task,
        args.constants or None,
        args.ranking or None,
        args.constant_heads,
        mode=args.mode,
        replacement=args.replacement,
        seed=args.seed,
        epochs=args.epochs,
        lr=args.lr,
        probe_input=args.probe_input,
        selection=args.selection,
        heldout_fraction=args.heldout_fraction,
        max_length=args.max_length,
        relayout=args.relayout,
        max_train_examples=args.max_train_examples,
        max_eval_examples=args.max_eval_examples,
        data_seed=args.data_seed,
        data_dir=args.data_dir,
        device=args.device,
        patience=args.patience,
        pool_examples=args.pool_examples,
        heldout_examples=args.heldout_examples,
        dev_every_epoch=args.dev_every_epoch,
        eval_chunk_examples=args.eval_chunk_examples,
    )
    atomic_write_json(out, result)
    print(f"wrote {out}: {result['task']} {result['metric']} = {result['score']:.4f} (k={result['config']['constant_heads']}, {result['timings']['total']:.1f} s)")
    return 0


def _scheduler(text: str) -> str:
    """``sequential``, ``local:N``, ``tcp://HOST:PORT`` or ``slurm[:JOBS]`` (:func:`papa.pipeline.clusters.parse_scheduler`)."""
    from papa.pipeline.clusters import parse_scheduler

    try:
        parse_scheduler(text)
    except PapaError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text.strip()


def _count(minimum: int):
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    convert.__name__ = "integer"
    return convert


#: The grid flags beyond --only and --dry-run, with their defaults (``run_grid``'s keyword arguments).
GRID_OPTIONS = {"replace": False, "scheduler": "sequential", "gpus_per_run": 0, "threads_per_run": None, "prune": False}


def cmd_grid(args) -> int:
    from papa.pipeline.plan import expand, load_config
    from papa.pipeline.runner import run_grid

    config = load_config(args.config)
    unsized = expand(config).unsized
    for model, why in unsized.items():
        print(f"cannot size {model}: {why}; its probe runs are not planned", file=sys.stderr)
    if unsized and not args.dry_run:
        raise PapaError(
            f"Cannot count the heads of {', '.join(unsized)} offline", "Download the model once with the hub reachable (or use a local folder), or plan with --dry-run."
        )
    options = {name: getattr(args, name) for name in GRID_OPTIONS}
    return run_grid(args.config, only=args.only, dry_run=args.dry_run, **options)


def cmd_grid_verify(args) -> int:
    from papa.pipeline.verify import verify_grid

    return verify_grid(args.config, pattern=args.runs, sample=args.sample, device=args.device, tolerance=args.tolerance)


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def cmd_grid_schema(args) -> int:
    import json

    from papa.core.io import atomic_write_text
    from papa.core.schema import GridConfig

    text = json.dumps(GridConfig.model_json_schema(), indent=2) + "\n"
    if args.out:
        atomic_write_text(args.out, text)
        print(f"wrote {args.out}: the JSON Schema of grid configs")
    else:
        sys.stdout.write(text)
    return 0


def cmd_study(args) -> int:
    """``papa study MODEL``: the book's protocol on one model (:func:`papa.book.study_site.run_study`)."""
    from papa.book.study_site import parse_tasks, run_study
    from papa.pipeline.study import parse_budget

    budget = parse_budget(args.budget) if args.budget else None
    options = {name: getattr(args, name) for name in ("scheduler", "gpus_per_run", "threads_per_run")}
    return run_study(args.model, parse_tasks(args.tasks), budget, args.name, args.device, args.dry_run, args.site, **options)


def cmd_book(args) -> int:
    from papa.book.build import build_book

    return build_book(args.config, as_is=args.as_is, strict=args.strict)


def build_parser() -> argparse.ArgumentParser:
    """The parser; the flags of ``estimate``, ``rank`` and ``probe`` come from the schema's params models."""
    parser = argparse.ArgumentParser(prog="papa", description="Probing how much pretrained encoders need attention (PAPA).")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("estimate", help="estimate constant attention matrices over a task's training split")
    _schema_flags(p, EstimateParams)
    _data_dir(p)
    p.add_argument("--split", default="train")
    p.add_argument("--batch-size", type=_positive_int, default=DEFAULT_BATCH_SIZE, help=f"encoder batch size (default: {DEFAULT_BATCH_SIZE})")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_estimate)

    p = sub.add_parser("rank", help="rank heads (which become constant first)")
    _schema_flags(p, RankParams)
    _data_dir(p)
    p.set_defaults(func=cmd_rank)

    p = sub.add_parser("probe", help="train and score one probe with k constant heads")
    _schema_flags(p, ProbeParams, skip=("k", "seeds"))
    _data_dir(p)
    p.add_argument("--constant-heads", default="0", help="a count (36), a fraction (0.5, 7/8) or 'all'")
    p.add_argument("--seed", type=_converter(int, False), default=ProbeParams.model_fields["seeds"].default[0], help="probe seed")
    p.set_defaults(func=cmd_probe)

    p = sub.add_parser("grid", help="run a grid config with papermill, verify its committed runs, or write its JSON Schema")
    grid = p.add_subparsers(dest="action", required=True)
    g = grid.add_parser("run", help="bring a grid's runs up to date")
    g.add_argument("config")
    g.add_argument("--only", default=None, help="run only the runs whose id contains this text")
    g.add_argument("--dry-run", action="store_true", help="print what would run (offline: needs neither the hub nor the models)")
    g.add_argument("--replace", action="store_true", help="take over a runs folder that another config with the same name wrote")
    g.add_argument("--scheduler", type=_scheduler, default="sequential", help="sequential (default), local:N, tcp://HOST:PORT or slurm[:JOBS]")
    g.add_argument("--gpus-per-run", type=_count(0), default=0, help="GPUs each run needs (a Dask worker resource)")
    g.add_argument("--threads-per-run", type=_count(1), default=None, help="torch threads per run")
    g.add_argument("--prune", action="store_true", help="remove the executed notebooks, artefacts and stamps of runs the config no longer has (--dry-run lists them)")
    g.set_defaults(func=cmd_grid)
    g = grid.add_parser("verify", help="re-execute committed runs in a scratch folder and compare their outputs (nbval and field by field)")
    g.add_argument("config")
    chosen = g.add_mutually_exclusive_group()
    chosen.add_argument("--runs", default=None, metavar="PATTERN", help="the runs whose id matches one of these comma-separated globs (or contains the text; default: all)")
    chosen.add_argument("--sample", type=_count(1), default=None, metavar="N", help="N runs spread over kinds and models, the cheapest first")
    g.add_argument("--device", type=_device, default=None, help="re-execute on this device (default: the one each run recorded)")
    g.add_argument("--tolerance", type=_tolerance, default=0.0, help="absolute tolerance for numbers, across devices (default: 0, equal)")
    g.set_defaults(func=cmd_grid_verify)
    g = grid.add_parser("schema", help="write the JSON Schema of grid configs (for editors)")
    g.add_argument("--out", default=None, help="output file (default: standard output)")
    g.set_defaults(func=cmd_grid_schema)

    p = sub.add_parser("study", help="run the book's protocol on one model (sized to a time budget) and write its chapter")
    p.add_argument("model", help="an embedded name (minilm-l6), a local save_pretrained folder or a hub id")
    p.add_argument("--tasks", default=None, help="comma list of tasks (default: all six)")
    p.add_argument("--budget", default=None, help="time budget, e.g. 30m or 2h: sizes are cut in a stated order until the estimate fits (default: full size)")
    p.add_argument("--device", type=_device, default="auto", help="auto (default), cpu, cuda, cuda:N or mps")
    p.add_argument("--scheduler", type=_scheduler, default="sequential", help="sequential (default), local:N, tcp://HOST:PORT or slurm[:JOBS]")
    p.add_argument("--gpus-per-run", type=_count(0), default=0, help="GPUs each run needs (a Dask worker resource)")
    p.add_argument("--threads-per-run", type=_count(1), default=None, help="torch threads per run")
    p.add_argument("--name", default=None, help="the study's name: configs/study-NAME.yaml (default: from the model)")
    p.add_argument("--dry-run", action="store_true", help="print the config it would write and the estimate; write nothing")
    p.add_argument("--site", action="store_true", help="also build the chapter as a standalone site (_build/study-NAME/)")
    p.set_defaults(func=cmd_study)

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


if __name__ == "__main__":
    sys.exit(main())
