"""The README is a public contract: its library example runs, and every ``papa`` command it shows parses."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from papa.cli import build_parser

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def _commands() -> list[list[str]]:
    """Each ``papa ...`` line of the README's bash blocks, comments dropped, placeholders filled in and
    alternatives (``a|b``) as their first choice."""
    commands = []
    for block in _blocks("bash"):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if not line.startswith("papa "):
                continue
            line = (
                line.replace("[--as-is]", "--as-is")
                .replace("CONFIG", "configs/smoke.yaml")
                .replace("random-<seed>", "random-1")
                .replace("gates-<seed>", "gates-43")
            )
            words = [word.split("|")[0] for word in shlex.split(line)[1:]]
            commands.append(words)
    return commands


def test_the_readme_shows_the_commands_of_every_subcommand():
    shown = {words[0] if words[0] not in ("grid", "book") else " ".join(words[:2]) for words in _commands()}
    assert shown == {"estimate", "rank", "probe", "grid run", "grid schema", "study", "book build"}


@pytest.mark.parametrize("words", _commands(), ids=lambda words: " ".join(words[:3]))
def test_every_readme_command_parses(words):
    from papa import cli

    handlers = {
        "estimate": cli.cmd_estimate,
        "rank": cli.cmd_rank,
        "probe": cli.cmd_probe,
        "grid run": cli.cmd_grid,
        "grid schema": cli.cmd_grid_schema,
        "study": cli.cmd_study,
        "book build": cli.cmd_book,
    }
    name = words[0] if words[0] not in ("grid", "book") else " ".join(words[:2])
    args = build_parser().parse_args(words)
    assert args.command == words[0] and args.func is handlers[name]
    for option, value in zip(words, words[1:]):  # every option the README gives arrives with its value
        if option.startswith("--") and not value.startswith("--"):
            parsed = getattr(args, option[2:].replace("-", "_"))
            shown = [str(parsed), *map(str, parsed if isinstance(parsed, list) else [])]
            assert value in shown, (option, value, parsed)


@pytest.mark.data
def test_the_readme_library_example_runs(tmp_path, monkeypatch):
    """The five lines, as written (the task data from PAPA_DATA_DIR): 36 constant heads, an ordinary forward."""
    monkeypatch.setenv("PAPA_CACHE_DIR", str(tmp_path / "cache"))
    (code,) = _blocks("python")
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the README's own example
    papa = namespace["papa"]
    assert tuple(namespace["constants"].shape) == (6, 12, 64, 64)
    assert len(papa.constant_heads_of(namespace["lm"].model)) == 36
    assert tuple(namespace["hidden"].shape) == (1, 64, 384)


def test_every_library_call_the_readme_names_exists():
    import papa

    names = set(re.findall(r"`papa\.([A-Za-z_]+)[(`]", README))
    assert {"run_probe", "run_probes", "ProbeSettings", "DataSettings"} <= names
    assert all(callable(getattr(papa, name)) for name in sorted(names))
