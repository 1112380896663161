"""The ``papa`` command line: ``estimate``, ``rank``, ``probe``, ``grid`` (``run``, ``verify``, ``schema``), ``study``
and ``book``.

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
from papa.core.fields import DEFAULT_BATCH_SIZE
from papa.core.schema import EstimateParams, ProbeParams, RankParams


def _at_least(minimum, bound: str = "", kind: type = int):
    """Text → a ``kind`` (int or float) of at least ``minimum`` (``bound``: how the error words the limit)."""

    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if not value >= minimum:  # NaN included
            shown = value if kind is int else text
            raise argparse.ArgumentTypeError(f"must be {bound or f'at least {minimum}'}, got {shown}")
        return value

    return convert


def _device(text: str) -> str:
    """A torch device this machine has (``cpu``, ``cuda``, ``cuda:1``, ...) or ``auto``."""
    if text.strip().lower() in ("", "auto"):
        return "auto"
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a device; use cpu, cuda, cuda:N, mps or auto") from None
    problem = None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            problem = "CUDA is not available on this machine; use --device cpu or auto"
        elif device.index is not None and device.index >= count:
            problem = f"this machine has {count} CUDA device(s); use --device cpu, auto or cuda:0 .. cuda:{count - 1}"
    if device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        problem = "MPS is not available on this machine; use --device cpu or auto"
    if problem:
        raise argparse.ArgumentTypeError(f"{text!r}: {problem}")
    return text


def _scheduler(text: str) -> str:
    """``sequential``, ``local:N``, ``tcp://HOST:PORT`` or ``slurm[:JOBS]`` (:func:`.clusters.parse_scheduler`)."""
    from papa.pipeline.clusters import parse_scheduler

    try:
        parse_scheduler(text)
    except PapaError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text.strip()


def _check_writable(out: str) -> None:
    """Fail before any work when ``out`` cannot be written (its nearest existing folder is not writable)."""
    import tempfile
    from pathlib import Path

    folder = Path(out).expanduser().resolve().parent
    while not folder.exists():
        folder = folder.parent
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError:
        hint = "Choose a writable output folder."
        raise PapaError(f"Cannot write {out}: the folder {folder} is not writable", hint) from None


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

    return convert


def _schema_flags(parser: argparse.ArgumentParser, params: type[BaseModel], skip: tuple[str, ...] = ()) -> None:
    """One flag per field of ``params`` (``max_train_examples`` → ``--max-train-examples``), with its
    default, requiredness and help from the schema (a bool gets ``--name/--no-name``), then ``--data-dir``."""
    for name, field in params.model_fields.items():
        if name in skip:
            continue
        flag, required = "--" + name.replace("_", "-"), field.is_required()
        default = None if required else field.default
        options = {"default": default, "help": field.description + ("" if required else f" (default: {default})")}
        if field.annotation is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, **options)
        elif name == "device":
            parser.add_argument(flag, type=_device, **options)
        else:
            convert = _converter(field.annotation, type(None) in get_args(field.annotation))
            parser.add_argument(flag, type=convert, required=required, **options)
    parser.add_argument("--data-dir", default=None, help="task data folder (default: $PAPA_DATA_DIR, else the hub)")


def _checked(params: type[BaseModel], args, **values) -> BaseModel:
    """The parsed flags validated by the schema; a bad value is one :class:`PapaError` naming its flag."""
    from pydantic import ValidationError

    from papa.core.config_files import as_papa_error

    data = {name: getattr(args, name) for name in params.model_fields if hasattr(args, name)} | values
    try:
        return params.model_validate(data)
    except ValidationError as err:
        error = as_papa_error(err, data, params, "", style="cli")
        problem = str(error.problem).replace("--seeds", "--seed").replace("--k ", "--constant-heads ")
        raise PapaError(problem, error.hint) from None


def _pick(args, names: str) -> dict:
    """``{name: args.name}`` for the space-separated ``names``."""
    return {name: getattr(args, name) for name in names.split()}


def cmd_estimate(args) -> int:
    _checked(EstimateParams, args)
    from papa.core.constants import save_constants
    from papa.probing.encoding import estimate_task_constants

    names = "model task split max_examples max_length relayout batch_size data_dir device"
    constant_set = estimate_task_constants(**_pick(args, names), progress=not args.quiet)
    save_constants(args.out, constant_set)
    shape, meta = list(constant_set.constants.shape), constant_set.meta
    print(f"wrote {args.out}: constants {shape} from {meta['num_examples']} examples in {meta['seconds']:.1f} s")
    return 0


def cmd_rank(args) -> int:
    _checked(RankParams, args)
    from papa.core.heads import save_ranking
    from papa.probing.ranking import WarmStart, combine_draws, compute_ranking

    names = "seed epochs lr max_train_examples max_eval_examples data_seed data_dir device"
    if args.draws:  # the gate draws' mean λ, nothing trained
        ranking, meta = combine_draws(args.draws)
    else:
        warm = WarmStart(args.warm_epochs, args.warm_lr, args.warm_examples)
        heads = (args.method, args.model, args.task, args.constants or None)
        ranking, meta = compute_ranking(*heads, **_pick(args, names), warm=warm)
    save_ranking(args.out, ranking, meta)
    print(f"wrote {args.out}: {len(ranking)} heads ranked by {args.method}; first {[list(h) for h in ranking[:3]]}")
    return 0


def cmd_probe(args) -> int:
    _checked(ProbeParams, args, seeds=[args.seed])
    from papa.core.io import atomic_write_json
    from papa.core.models import load_model, pick_device
    from papa.probing.experiment import run_probe
    from papa.probing.params import ProbeSettings

    model = args.model
    if args.lr_file:  # the lr chosen at k = 0 for this model and task replaces --lr (as in notebooks/03_probe.md)
        from papa.probing.protocol import load_lr_choice

        model = load_model(args.model, pick_device(args.device))
        args.lr = load_lr_choice(args.lr_file, model.name, args.task)
    out = args.out.replace("{seed}", str(args.seed))
    names = (
        "mode replacement epochs lr probe_input selection heldout_fraction max_length relayout max_train_examples"
        " max_eval_examples data_seed data_dir patience pool_examples heldout_examples dev_every_epoch"
        " eval_chunk_examples"
    )
    settings = ProbeSettings().with_options(**_pick(args, names))
    heads = (args.constants or None, args.ranking or None, args.constant_heads)
    result = run_probe(model, args.task, *heads, settings, seed=args.seed, device=args.device)
    atomic_write_json(out, result)
    k, seconds = result["config"]["constant_heads"], result["timings"]["total"]
    print(f"wrote {out}: {result['task']} {result['metric']} = {result['score']:.4f} (k={k}, {seconds:.1f} s)")
    return 0


def cmd_grid(args) -> int:
    from papa.pipeline.runner import run_grid

    options = _pick(args, "replace scheduler gpus_per_run threads_per_run prune")
    return run_grid(args.config, only=args.only, dry_run=args.dry_run, **options)


def cmd_grid_verify(args) -> int:
    from papa.pipeline.verify import verify_grid

    return verify_grid(args.config, pattern=args.runs, **_pick(args, "sample device tolerance kernels"))


def cmd_grid_schema(args) -> int:
    import json

    from papa.core.grid_schema import GridConfig
    from papa.core.io import atomic_write_text

    text = json.dumps(GridConfig.model_json_schema(), indent=2) + "\n"
    if args.out:
        atomic_write_text(args.out, text)
        print(f"wrote {args.out}: the JSON Schema of grid configs")
    else:
        sys.stdout.write(text)
    return 0


def cmd_study(args) -> int:
    """``papa study MODEL``: a model report, the book's protocol on one model (:func:`papa.pipeline.report.run_report`);
    with ``--site``, its chapter built alone (:func:`papa.book.report_site.build_site`)."""
    from papa.pipeline.report import ReportSettings, run_report
    from papa.pipeline.report_config import PREFIX, default_name, parse_budget, parse_tasks

    budget = parse_budget(args.budget) if args.budget else None
    what = _pick(args, "model name device dry_run scheduler gpus_per_run threads_per_run")
    settings = ReportSettings(tasks=tuple(parse_tasks(args.tasks)), budget=budget, **what)
    status = run_report(settings)
    if status == 0 and args.site and not args.dry_run:
        from papa.book.report_site import build_site

        print(f"site: {build_site(PREFIX + (args.name or default_name(args.model)))}")
    return status


def cmd_book(args) -> int:
    from papa.book.build import build_book

    return build_book(args.config, as_is=args.as_is, strict=args.strict, replace_pages=args.replace_pages)


def _scale_out_flags(parser: argparse.ArgumentParser) -> None:
    schedulers = "sequential (default), local:N, tcp://HOST:PORT or slurm[:JOBS]"
    parser.add_argument("--scheduler", type=_scheduler, default="sequential", help=schedulers)
    gpus = "GPUs each run needs (a Dask worker resource)"
    parser.add_argument("--gpus-per-run", type=_at_least(0), default=0, help=gpus)
    parser.add_argument("--threads-per-run", type=_at_least(1), default=None, help="torch threads per run")


def _flag(parser, name: str, help: str) -> None:
    """An on/off flag (``store_true``)."""
    parser.add_argument(name, action="store_true", help=help)


def build_parser() -> argparse.ArgumentParser:
    """The parser; the flags of ``estimate``, ``rank`` and ``probe`` come from the schema's params models."""
    description = "Probing how much pretrained encoders need attention (PAPA)."
    parser = argparse.ArgumentParser(prog="papa", description=description)
    sub = parser.add_subparsers(dest="command", required=True)

    def command(parent, name: str, func, help: str, params: type[BaseModel] | None = None, **skip):
        p = parent.add_parser(name, help=help)
        p.set_defaults(func=func)
        if params is not None:
            _schema_flags(p, params, **skip)
        return p

    about = "estimate constant attention matrices over a task's training split"
    p = command(sub, "estimate", cmd_estimate, about, EstimateParams)
    p.add_argument("--split", default="train")
    batch = f"encoder batch size (default: {DEFAULT_BATCH_SIZE})"
    p.add_argument("--batch-size", type=_at_least(1, "a positive integer"), default=DEFAULT_BATCH_SIZE, help=batch)
    _flag(p, "--quiet", "no progress bar")
    p = command(sub, "rank", cmd_rank, "rank heads (which become constant first)", RankParams, skip=("draws",))
    draws = "gates: ranking files of gate draws (gates-<seed>) to combine by mean λ instead of training"
    p.add_argument("--draws", nargs="+", default=[], metavar="RANKING", help=draws)
    about = "train and score one probe with k constant heads"
    p = command(sub, "probe", cmd_probe, about, ProbeParams, skip=("k", "seeds"))
    p.add_argument("--constant-heads", default="0", help="a count (36), a fraction (0.5, 7/8) or 'all'")
    seed = ProbeParams.model_fields["seeds"].default[0]
    p.add_argument("--seed", type=_converter(int, False), default=seed, help="probe seed")

    grid_help = "run a grid config with papermill, verify its committed runs, or write its JSON Schema"
    grid = sub.add_parser("grid", help=grid_help).add_subparsers(dest="action", required=True)
    g = command(grid, "run", cmd_grid, "bring a grid's runs up to date")
    g.add_argument("config")
    g.add_argument("--only", default=None, help="run only the runs whose id contains this text")
    _flag(g, "--dry-run", "print what would run (offline: needs neither the hub nor the models)")
    _flag(g, "--replace", "take over a runs folder that another config with the same name wrote")
    _scale_out_flags(g)
    prune = "remove the executed notebooks, artefacts and stamps of runs the config no longer has"
    _flag(g, "--prune", prune + " (--dry-run lists them)")

    verify = "re-execute committed runs in a scratch folder and compare their outputs (nbval and field by field)"
    g = command(grid, "verify", cmd_grid_verify, verify)
    g.add_argument("config")
    chosen = g.add_mutually_exclusive_group()
    runs = "the runs whose id matches one of these comma-separated globs (or contains the text; default: all)"
    chosen.add_argument("--runs", default=None, metavar="PATTERN", help=runs)
    sample = "N runs spread over kinds and models, the cheapest first"
    chosen.add_argument("--sample", type=_at_least(1), default=None, metavar="N", help=sample)
    g.add_argument("--device", type=_device, help="re-execute on this device (default: the one each run recorded)")
    tolerance = "absolute tolerance for numbers, across devices (default: 0, equal)"
    g.add_argument("--tolerance", type=_at_least(0, "0 or more", float), default=0.0, help=tolerance)
    kernels = "re-execute with torch's, MKL's and oneDNN's kernels of this instruction set: avx2 (what a CPU without"
    g.add_argument("--kernels", default=None, help=kernels + " AVX-512 picks; default: this CPU's own)")
    g = command(grid, "schema", cmd_grid_schema, "write the JSON Schema of grid configs (for editors)")
    g.add_argument("--out", default=None, help="output file (default: standard output)")

    about = "write a model report: the book's protocol run on one model (sized to a time budget), and its chapter"
    p = command(sub, "study", cmd_study, about)
    p.add_argument("model", help="an embedded name (minilm-l6), a local save_pretrained folder or a hub id")
    p.add_argument("--tasks", default=None, help="comma list of tasks (default: all six)")
    budget = "time budget, e.g. 30m or 2h: sizes are cut in a stated order until the estimate fits (default: full size)"
    p.add_argument("--budget", default=None, help=budget)
    p.add_argument("--device", type=_device, default="auto", help="auto (default), cpu, cuda, cuda:N or mps")
    _scale_out_flags(p)
    p.add_argument("--name", default=None, help="the report's name: configs/study-NAME.yaml (default: from the model)")
    _flag(p, "--dry-run", "print the config it would write and the estimate; write nothing")
    _flag(p, "--site", "also build the chapter as a standalone site (_build/study-NAME/)")

    p = command(sub, "book", cmd_book, "bring the book's runs up to date and build the site")
    p.add_argument("action", choices=["build"])
    p.add_argument("--config", default="configs/default.yaml")
    _flag(p, "--as-is", "render committed runs as they are, marking stale ones")
    _flag(p, "--strict", "fail on any warning or broken reference (-W -n --keep-going)")
    replace = "build another grid than default: rewrites the tracked pages (_toc.yml, book/*.md); refused without it"
    _flag(p, "--replace-pages", replace)
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
