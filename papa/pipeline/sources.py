"""What a run's notebook executes, fingerprinted so that only real code changes count.

:func:`module_fingerprint` hashes a papa module's syntax tree without docstrings (comments and layout never reach
it). :func:`papa_modules` follows a notebook's code cells through a static import graph (imports, function-local
ones included, and attribute uses of ``papa/__init__.py``'s lazy names) over papa's modules.
:func:`notebook_fingerprints` gives a notebook's *code* fingerprint (a change re-executes the run) and its
*display* fingerprint (a change alone refreshes the executed notebook's text).
"""

from __future__ import annotations

import ast
import json
from functools import lru_cache
from pathlib import Path

from papa.core.names import short_hash

#: The ``papa`` package folder whose modules are fingerprinted.
PACKAGE = Path(__file__).resolve().parents[1]
#: Modules that load papa files *by path* rather than by import (``evaluate.load(path)`` of the metric
#: scripts): reaching the module reaches every ``.py`` file below the folder named here.
LOADED_BY_PATH = {"papa.probing.metrics": "probing/metrics"}


def read_module_source(path: Path) -> str:
    """The text of a module file (a hook: tests replace it to simulate edits)."""
    return path.read_text(encoding="utf-8")


def _is_magic(line: str) -> bool:
    """An IPython ``%`` or ``!`` line: not Python (left blank in the code that is parsed)."""
    return line.lstrip().startswith(("%", "!"))


def _python(source: str) -> str:
    return "\n".join("" if _is_magic(line) else line for line in source.splitlines())


def _is_string(s: ast.stmt) -> bool:
    return isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    """Remove every bare string statement (docstrings and ``#:``-less attribute docs): they never run."""
    for node in ast.walk(tree):
        if isinstance(getattr(node, "body", None), list):
            node.body = [s for s in node.body if not _is_string(s)]
    return tree


def normalised_code(source: str) -> str:
    """``ast.dump`` of ``source`` without docstrings (IPython ``%``/``!`` lines are kept as text); the
    stripped text itself when it does not parse."""
    magics = [line.strip() for line in source.splitlines() if _is_magic(line)]
    try:
        dumped = ast.dump(_strip_docstrings(ast.parse(_python(source))))
    except SyntaxError:
        return source.strip()
    return json.dumps([magics, dumped]) if magics else dumped


def module_file(name: str) -> Path | None:
    """The file of papa module ``name`` (``papa.core.io`` → ``papa/core/io.py``), or None."""
    parts = name.split(".")
    if parts[0] != "papa":
        return None
    base = PACKAGE.joinpath(*parts[1:])
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if len(parts) > 1 and base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return None


@lru_cache(maxsize=512)
def _parsed(text: str) -> tuple[ast.Module, str]:
    return ast.parse(text), short_hash(ast.dump(_strip_docstrings(ast.parse(text))), 16)


def _module(name: str) -> tuple[ast.Module, str] | None:
    path = module_file(name)
    return None if path is None else _parsed(read_module_source(path))


def module_fingerprint(name: str) -> str:
    """16 hex digits over a module's normalised source (comments, docstrings and layout ignored)."""
    found = _module(name)
    return found[1] if found else "absent"


def _lazy_names(tree: ast.Module) -> dict[str, str]:
    """A package's lazy attributes (name → module): its ``_LAZY_MODULES`` and ``_LAZY_NAMES`` dicts and the
    ``import_module("m")`` branches of its ``__getattr__``."""
    lazy: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id in ("_LAZY_MODULES", "_LAZY_NAMES") for t in targets):
                for key, value in zip(node.value.keys, node.value.values):
                    if isinstance(key, ast.Constant) and isinstance(value, ast.Constant):
                        lazy[str(key.value)] = str(value.value)
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            for branch in ast.walk(node):
                test = branch.test if isinstance(branch, ast.If) else None
                if isinstance(test, ast.Compare) and isinstance(test.comparators[0], ast.Constant):
                    for call in ast.walk(ast.Module(body=branch.body, type_ignores=[])):
                        if _import_module_literal(call):
                            lazy[str(test.comparators[0].value)] = _import_module_literal(call)
    return lazy


def _import_module_literal(node: ast.AST) -> str | None:
    """``m`` of a call ``import_module("m")`` (or ``importlib.import_module("m")``), else None."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
        return None
    func, name = node.func, node.args[0].value
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return name if called == "import_module" and isinstance(name, str) else None


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def imported_modules(tree: ast.Module, current: str) -> set[str]:
    """papa modules that ``tree`` (module ``current``, or a notebook) imports or reaches by attribute."""
    found: set[str] = set()
    bound: dict[str, str] = {}  # local name → papa module it is bound to
    path = module_file(current)
    current_package = current if path and path.name == "__init__.py" else current.rpartition(".")[0]
    skip = {id(n) for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"}
    nodes = [n for top in tree.body if id(top) not in skip for n in ast.walk(top)]
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.update(_with_parents(alias.name))
                top = alias.name.split(".")[0]
                bound[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = current_package.split(".")[: len(current_package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found.update(_with_parents(base))
            for alias in node.names:
                found.add(f"{base}.{alias.name}")
                bound[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif literal := _import_module_literal(node):
            found.update(_with_parents(literal))
    for node in nodes:  # papa.figures.x, papa.book.y, papa.compute_ranking, R.summarise ...
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
            found.add(f"{bound[node.value.id]}.{node.attr}")
    return {m for m in found if m.startswith("papa")}


def _resolve(name: str) -> str | None:
    """``name`` as a module, or the module a package's lazy attribute names (``papa.figures``)."""
    if module_file(name):
        return name
    parent, _, attr = name.rpartition(".")
    if parent and module_file(parent):
        target = _lazy_names(_module(parent)[0]).get(attr)
        if target and module_file(target):
            return target
    return None


def _by_path(name: str) -> list[str]:
    folder = LOADED_BY_PATH.get(name)
    if folder is None:
        return []
    files = [p for p in (PACKAGE / folder).rglob("*.py") if p.name != "__init__.py"]
    return sorted("papa." + ".".join(p.relative_to(PACKAGE).with_suffix("").parts) for p in files)


def papa_modules(tree: ast.Module) -> dict[str, str]:
    """``{module: fingerprint}`` of every papa module the code in ``tree`` executes, transitively."""
    todo = sorted(imported_modules(tree, "__notebook__"))
    seen: dict[str, str] = {}
    while todo:
        name = _resolve(todo.pop())
        if name is None or name in seen:
            continue
        module_tree, seen[name] = _module(name)
        todo.extend(parent for parent in _with_parents(name) if parent not in seen)
        todo.extend(sorted(imported_modules(module_tree, name)))
        todo.extend(_by_path(name))
    return dict(sorted(seen.items()))


def notebook_code_tree(nb) -> ast.Module:
    """All code cells of a notebook as one syntax tree (cells that do not parse are left out)."""
    body: list[ast.stmt] = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            try:
                body.extend(ast.parse(_python(cell.source)).body)
            except SyntaxError:
                continue
    return ast.Module(body=body, type_ignores=[])


def notebook_fingerprints(nb) -> tuple[str, str]:
    """``(code, display)`` fingerprints of a source notebook (code cells normalised; every cell as written)."""
    tags = lambda cell: cell.get("metadata", {}).get("tags", [])
    code = [[normalised_code(c.source), "parameters" in tags(c)] for c in nb.cells if c.cell_type == "code"]
    display = [[c.cell_type, c.source, tags(c)] for c in nb.cells]
    return short_hash(json.dumps(code), 16), short_hash(json.dumps(display), 16)
