"""Reading grid YAML strictly (:func:`read_yaml`: a repeated key is an error, with both line numbers; aliases may
expand to at most :data:`MAX_NODES` nodes, so that a "billion laughs" document is refused before it is built) and
wording the first pydantic error of :func:`validate` as one :class:`PapaError`: ``<where>: <path> <problem>.
<hint>``, the path as in the YAML (``studies[2].lr``) or the flag (``--max-length``). A value quoted in an error is
cut to :data:`MAX_QUOTED` characters (:func:`quoted`).
"""

from __future__ import annotations

import reprlib
from pathlib import Path
from typing import Any, TypeVar, get_args

import yaml
from pydantic import BaseModel, ValidationError

from papa.core.errors import PapaError
from papa.core.fields import MODES, ConfigValueError

M = TypeVar("M", bound=BaseModel)
SCHEMA_HINT = "See configs/grid.schema.json (`papa grid schema`) for every key and its type."
#: The most nodes a config may expand to, its aliases expanded (the book's config has a few hundred).
MAX_NODES = 100_000
#: The most characters of a value quoted in an error message.
MAX_QUOTED = 200
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict, _REPR.maxset = 3, 6, 6, 6, 6
_REPR.maxstring = _REPR.maxother = MAX_QUOTED


def quoted(value: Any) -> str:
    """``repr(value)``, cut to :data:`MAX_QUOTED` characters (never building the whole repr of a huge value)."""
    text = _REPR.repr(value)
    return text if len(text) <= MAX_QUOTED else text[: MAX_QUOTED - 3] + "..."


#: The hint for a bad value, by the key's name.
FIELD_HINTS = {
    "epochs": "Use a whole number of epochs >= 1 (the paper: 15).",
    "lr": "Use a positive learning rate such as 2.0e-5.",
    "max_length": "Use an input length L from 8 to 512 (the paper: 64).",
    "max_examples": "Use a count >= 1.",
    "max_train_examples": "Use a count >= 1, or null for the whole training split.",
    "max_eval_examples": "Use a count >= 1, or null for the whole evaluation split.",
    "batch_size": "Use a whole number >= 1.",
    "seeds": "Write seeds as whole numbers, e.g. [42, 43, 44].",
    "seed": "Write the seed as a whole number, e.g. 42.",
    "data_seed": "Write the seed as a whole number >= 0.",
    "k": "Use a whole number of heads >= 0.",
    "heldout_fraction": "Use a share strictly between 0 and 1, e.g. 0.1.",
    "fractions": "Write fractions as 0, 1/2, 7/8, 15/16 or 1.",
    "single_seed_fractions": "Write fractions as 0, 1/2, 7/8, 15/16 or 1.",
    "models": "Use minilm-l6, minilm-l3, mpnet-base, a local model folder or a hub id.",
    "relayout": "Write true or false.",
    "attention_free": "Write true or false.",
    "device": "Use auto, cpu, cuda, cuda:N or mps.",
    "name": "Use a-z, 0-9, - and _ (it names folders and run ids).",
}
_LABELS = {
    "tasks": "task",
    "task": "task",
    "methods": "ranking method",
    "method": "ranking method",
    "modes": "mode",
    "mode": "mode",
}
_LABELS |= {"selection": "epoch selection", "probe_input": "probe_input", "chapter": "chapter"}
_KINDS = {
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be text",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
}
_BOUNDS = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}


class _DuplicateKey(Exception):
    def __init__(self, key: Any, first: int, second: int):
        self.key, self.first, self.second = key, first, second


class _TooLarge(Exception):
    def __init__(self, line: int):
        self.line = line


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses a key repeated in one mapping, and a document whose aliases expand beyond
    :data:`MAX_NODES` nodes (checked on the composed node graph, before any Python object is built)."""

    def get_single_node(self):  # noqa: ANN201 - PyYAML's signature
        node = super().get_single_node()
        if node is not None:
            _expanded_size(node, {})
        return node


def _expanded_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """The nodes under ``node`` with every alias expanded (a shared node counts each time it is used), computed once
    per distinct node; :class:`_TooLarge` as soon as it passes :data:`MAX_NODES`."""
    if id(node) in sizes:
        return sizes[id(node)]
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(child, sizes) for child in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_expanded_size(k, sizes) + _expanded_size(v, sizes) for k, v in node.value)
    if size > MAX_NODES:
        raise _TooLarge(node.start_mark.line + 1)
    sizes[id(node)] = size
    return size


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            first = seen.setdefault(key, key_node.start_mark.line + 1)
        except TypeError:  # an unhashable key: construct_mapping reports it
            continue
        if first != key_node.start_mark.line + 1:
            raise _DuplicateKey(key, first, key_node.start_mark.line + 1)
    return loader.construct_mapping(node, deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_yaml(path: str | Path) -> Any:
    """The YAML document in ``path``; a missing file, bad syntax or a repeated key is a :class:`PapaError`."""
    path = Path(path)
    if not path.is_file():
        raise PapaError(f"Config {path} does not exist", "Use one of configs/*.yaml.")
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except _TooLarge as big:
        raise PapaError(
            f"Config {path.name}: its aliases expand to more than {MAX_NODES:,} values (from line {big.line})",
            "Write the values out, or use fewer nested aliases (*name): a config is a few hundred values.",
        ) from None
    except _DuplicateKey as dup:
        raise PapaError(
            f"Config {path.name}: the key {quoted(dup.key)} appears twice in one mapping "
            f"(lines {dup.first} and {dup.second})",
            "Keep one of them: YAML would silently use the last.",
        ) from None
    except yaml.YAMLError as err:
        raise PapaError(
            f"Config {path.name}: not valid YAML ({str(err).splitlines()[0][:MAX_QUOTED]})", "Fix the YAML syntax."
        ) from None
    except UnicodeDecodeError:
        raise PapaError(f"Config {path.name}: not UTF-8 text", "Save it as UTF-8.") from None


def _path(loc: tuple, data: Any, style: str) -> tuple[str, list[str | int]]:
    """``loc`` as in the YAML (``studies[2].lr``) or a flag (``--max-length``); pydantic's own tags (``int``,
    ``function-after[...]``) are dropped by walking ``data`` alongside."""
    keys: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(part, int) and isinstance(node, list) and 0 <= part < len(node):
            keys.append(part)
            node = node[part]
        elif isinstance(part, str) and isinstance(node, dict):
            keys.append(part)
            node = node.get(part)
        elif isinstance(part, str) and node is None and not keys:
            keys.append(part)
    if style in ("cli", "notebook"):
        named = [k for k in keys if isinstance(k, str)]
        if not named:
            return "", keys
        return ("--" + named[0].replace("_", "-")) if style == "cli" else named[0], keys
    text = ""
    for key in keys:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else key)
    return text, keys


def _allowed(model: type[BaseModel], keys: list[str | int]) -> list[str]:
    """The keys allowed in the mapping at ``keys`` (for an unknown key's hint)."""
    for key in keys:
        if isinstance(key, int):
            continue
        field = model.model_fields.get(key)
        found = _find_model(field.annotation) if field is not None else None
        if found is None:
            break
        model = found
    return sorted(model.model_fields)


def _find_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _find_model(arg)
        if found is not None:
            return found
    return None


def as_papa_error(
    err: ValidationError, data: Any, model: type[BaseModel], where: str, style: str = "yaml"
) -> PapaError:
    """The first error of ``err`` as one :class:`PapaError`: ``<where>: <path> <problem>. <hint>``."""
    errors = err.errors()
    first = errors[0]
    kind, given, ctx = first["type"], first.get("input"), first.get("ctx") or {}
    cause = ctx.get("error")
    loc = tuple(first["loc"]) + (cause.at if isinstance(cause, ConfigValueError) else ())
    path, keys = _path(loc, data, style)
    path = _cut(path)
    field = next((k for k in reversed(keys) if isinstance(k, str)), "")
    hint = FIELD_HINTS.get(field, SCHEMA_HINT)
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    prefix = f"{where}: " if where else ""
    if kind == "extra_forbidden":
        parent = keys[:-1]
        problem, hint = (
            f"Unknown config key {path}",
            f"Allowed {'here' if parent else 'at the top level'}: {', '.join(_allowed(model, parent))}.",
        )
    elif kind == "missing":
        problem, hint = f"the key {path} is missing", "Add it. " + SCHEMA_HINT
    elif kind == "literal_error":
        label = _LABELS.get(field, field)
        choices = ", ".join(repr(c).strip("'") for c in _literal_choices(model, keys)) or ctx.get("expected", "")
        problem, hint = f"Unknown {label} {quoted(given)} at {path}", f"Use one of {choices}."
        if field in ("modes", "mode") and not choices:
            hint = f"Use one of {', '.join(MODES)}."
    elif isinstance(cause, ConfigValueError):
        problem, hint = f"{path}: {_cut(cause.message)}", cause.hint or hint
    elif kind in _BOUNDS:
        bound = next(iter(ctx.values()))
        problem = f"{path} must be {_BOUNDS[kind]} {bound}, got {quoted(given)}"
    elif kind == "too_short":
        problem = f"{path} must not be empty"
    elif kind in _KINDS:
        problem = f"{path} {_KINDS[kind]}, got {quoted(given)}"
    else:
        problem = f"{path}: {_cut(first['msg'])} (got {quoted(given)})"
    return PapaError(f"{prefix}{problem}{more}", hint)


def _cut(text: str, width: int = 2 * MAX_QUOTED) -> str:
    """A message that may quote a value, cut to ``width`` characters."""
    return text if len(text) <= width else text[: width - 3] + "..."


def _literal_choices(model: type[BaseModel], keys: list[str | int]) -> tuple:
    """The allowed names of the Literal field at ``keys``."""
    field = None
    for key in keys:
        if isinstance(key, int):
            continue
        field = model.model_fields.get(key)
        if field is None:
            return ()
        nested = _find_model(field.annotation)
        if nested is not None:
            model = nested
    return _literals(field.annotation) if field is not None else ()


def _literals(annotation: Any) -> tuple:
    args = get_args(annotation)
    if (
        args
        and all(isinstance(a, str) for a in args)
        and getattr(annotation, "__origin__", None) is not None
        and "Literal" in repr(annotation)
    ):
        return args
    for arg in args:
        found = _literals(arg)
        if found:
            return found
    return ()


def validate(model: type[M], data: Any, where: str, style: str = "yaml") -> M:
    """``data`` validated as ``model``, or one :class:`PapaError` (see :func:`as_papa_error`)."""
    if style == "yaml" and not isinstance(data, dict):
        raise PapaError(
            f"{where}: the file must be a mapping of keys to values, got {type(data).__name__}",
            "See configs/default.yaml for the layout.",
        )
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise as_papa_error(err, data, model, where, style) from None
