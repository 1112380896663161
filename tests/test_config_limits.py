"""Config errors of bounded size: a YAML alias bomb is refused before it is built, and a value quoted in an
error is cut to a few hundred characters."""

from __future__ import annotations

import re
import resource
import time

import pytest

from papa.cli import main
from papa.core.config_files import MAX_NODES, MAX_QUOTED, quoted, read_yaml
from papa.core.errors import PapaError
from papa.pipeline.plan import ROOT

DEFAULT = (ROOT / "configs" / "default.yaml").read_text(encoding="utf-8")


def _nested_aliases(levels: int) -> str:
    """A flow list defining ``&a0`` (ten numbers) and ``&a1`` .. ``&a{levels-1}``, each ten aliases of the one
    before: ``levels`` = 9 expands to 10^10 values."""
    items = ["&a0 [" + ", ".join(["0.5"] * 10) + "]"]
    items += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "[" + ", ".join(items) + "]"


def _default_with(pattern: str, replacement: str) -> str:
    text, count = re.subn(pattern, replacement, DEFAULT, count=1, flags=re.M)
    assert count == 1
    return text


@pytest.mark.parametrize(
    ("pattern", "key", "line"),
    [(r"^  fractions:.*$", "  fractions: ", "probe.fractions"), (r"^tasks:.*$", "tasks: ", "tasks")],
    ids=["probe.fractions", "tasks"],
)
def test_nine_levels_of_aliases_are_refused_fast_in_little_memory(tmp_path, capsys, pattern, key, line):
    path = tmp_path / "bomb.yaml"
    path.write_text(_default_with(pattern, key + _nested_aliases(9)), encoding="utf-8")
    number = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if text.startswith(key))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    with pytest.raises(PapaError) as err:
        read_yaml(path)
    assert time.perf_counter() - started < 2
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000  # KiB: no expansion was built
    assert str(err.value) == (
        f"Config bomb.yaml: its aliases expand to more than {MAX_NODES:,} values (from line {number}). Write the "
        "values out, or use fewer nested aliases (*name): a config is a few hundred values."
    )
    assert main(["grid", "run", str(path), "--dry-run"]) == 2
    message = capsys.readouterr().err
    assert message == f"papa: error: {err.value}\n" and sorted(p.name for p in tmp_path.iterdir()) == ["bomb.yaml"]


def test_aliases_within_the_bound_still_load():
    text = "a: &x [1, 2, 3]\nb: *x\n"
    import yaml

    from papa.core.config_files import _UniqueKeyLoader

    assert yaml.load(text, Loader=_UniqueKeyLoader) == {"a": [1, 2, 3], "b": [1, 2, 3]}  # noqa: S506


def test_a_large_value_in_an_error_is_cut(tmp_path, capsys):
    """Four levels of aliases (10^4 values: within the bound) under probe.fractions: the error quotes a short cut."""
    path = tmp_path / "big.yaml"
    path.write_text(_default_with(r"^  fractions:.*$", "  fractions: " + _nested_aliases(4)), encoding="utf-8")
    assert main(["grid", "run", str(path), "--dry-run"]) == 2
    message = capsys.readouterr().err
    assert message.startswith("papa: error: Config big.yaml: probe.fractions") and len(message) < 1000, message


def test_an_unknown_task_of_ten_thousand_characters_is_quoted_cut(tmp_path, capsys):
    path = tmp_path / "long.yaml"
    path.write_text(_default_with(r"^tasks:.*$", "tasks: [" + "x" * 10_000 + "]"), encoding="utf-8")
    assert main(["grid", "run", str(path), "--dry-run"]) == 2
    message = capsys.readouterr().err
    assert message.startswith("papa: error: Config long.yaml: Unknown task 'xxx") and len(message) < 1000, message
    assert "..." in message


def test_quoted_cuts_without_building_the_whole_repr():
    assert quoted("short") == "'short'"
    assert len(quoted("y" * 100_000)) <= MAX_QUOTED
    shared = [list(range(10))] * 10
    for _ in range(8):  # 10^9 leaves by reference: a full repr would never finish
        shared = [shared] * 10
    started = time.perf_counter()
    assert len(quoted(shared)) <= MAX_QUOTED and time.perf_counter() - started < 1
