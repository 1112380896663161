"""Provenance of a run (papa.core.provenance): the git commit of a clean repository, ``-dirty`` when the library's
files changed (and only then), ``unknown`` without a repository or without git, and the device in words."""

from __future__ import annotations

import platform
import subprocess

import pytest
import torch

from papa.core.provenance import device_description, git_commit, package_versions, provenance


@pytest.fixture
def git(tmp_path, monkeypatch):
    """``git(*args)`` in a fresh repository under ``tmp_path`` (no user or system config; never the enclosing
    repository); returns the repository's folder as ``git.root``."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", "/dev/null")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    root = tmp_path / "repo"
    root.mkdir()

    def run(*args: str) -> str:
        identity = ["-c", "user.name=Test", "-c", "user.email=test@example.org", "-c", "commit.gpgsign=false"]
        done = subprocess.run(["git", *identity, *args], cwd=root, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    run("init", "-q")
    (root / "papa").mkdir()
    (root / "papa" / "core.py").write_text("x = 1\n")
    (root / "README.md").write_text("# a project\n")
    run("add", "-A")
    run("commit", "-q", "-m", "first")
    run.root = root
    return run


def test_a_clean_repository_gives_its_head_commit(git):
    full = git("log", "-1", "--format=%H")
    assert len(full) == 40
    assert git_commit(git.root) == full[:12]


def test_a_changed_library_file_marks_the_commit_dirty(git):
    head = git("log", "-1", "--format=%H")[:12]
    (git.root / "papa" / "core.py").write_text("x = 2\n")
    assert git_commit(git.root) == f"{head}-dirty"
    git("checkout", "--", "papa/core.py")
    assert git_commit(git.root) == head
    (git.root / "papa" / "new_module.py").write_text("y = 1\n")  # an untracked library file counts too
    assert git_commit(git.root) == f"{head}-dirty"


def test_changes_outside_the_library_leave_the_commit_clean(git):
    head = git("log", "-1", "--format=%H")[:12]
    (git.root / "README.md").write_text("# another text\n")
    (git.root / "notes.txt").write_text("scratch\n")
    assert git_commit(git.root) == head


def test_a_new_commit_is_a_new_commit(git):
    first = git_commit(git.root)
    (git.root / "papa" / "core.py").write_text("x = 3\n")
    git("commit", "-q", "-am", "second")
    second = git_commit(git.root)
    assert second != first and second == git("log", "-1", "--format=%H")[:12] and not second.endswith("-dirty")


def test_no_repository_gives_unknown(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    folder = tmp_path / "plain"
    folder.mkdir()
    assert git_commit(folder) == "unknown"


def test_no_git_gives_unknown(git, monkeypatch):
    monkeypatch.setenv("PATH", str(git.root / "no-bin-here"))  # git cannot be found
    assert git_commit(git.root) == "unknown"


def test_a_git_that_hangs_gives_unknown(git, monkeypatch):
    def hang(*args, **kwargs):
        raise subprocess.TimeoutExpired(args[0], kwargs.get("timeout", 5))

    monkeypatch.setattr(subprocess, "run", hang)
    assert git_commit(git.root) == "unknown"


def test_the_device_in_words(monkeypatch):
    torch.set_num_threads(3)  # the autouse fixture restores the thread count
    assert device_description("cpu") == f"cpu:{platform.machine()}x3"
    assert device_description(torch.device("cpu")) == f"cpu:{platform.machine()}x3"
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA Test GPU")
    assert device_description("cuda:0") == "cuda:NVIDIA Test GPU"


def test_a_run_records_its_provenance():
    from papa.core.version import __version__

    torch.set_num_threads(1)
    record = provenance("cpu", seed=7, seconds=1.23456)
    assert record["papa_version"] == __version__ and record["python"] == platform.python_version()
    assert (record["seed"], record["seconds"], record["device"]) == (7, 1.235, f"cpu:{platform.machine()}x1")
    assert record["git_commit"] == git_commit()
    assert record["packages"]["torch"] in (torch.__version__, torch.__version__.split("+")[0])
    versions = package_versions(("torch", "papa-tests-no-such-package"))
    assert versions == {"torch": record["packages"]["torch"], "papa-tests-no-such-package": "absent"}
    assert provenance()["seconds"] is None and provenance()["seed"] is None


def test_a_run_records_the_vector_kernels_it_ran_with():
    """The kernels torch picks on this CPU, and the lower ones ``ATEN_CPU_CAPABILITY`` forces (``papa grid verify
    --kernels avx2``), in a fresh process: torch reads the variable once, at import."""
    import os
    import sys

    assert provenance()["cpu_kernels"] == torch.backends.cpu.get_cpu_capability() != ""
    script = "from papa.core.provenance import provenance; print(provenance()['cpu_kernels'])"
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
    forced = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert forced.stdout.strip() == "DEFAULT"
