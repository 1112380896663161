"""A run's kernel options (papa.pipeline.kernels): no transport warning on the terminal, the same outputs, and a
cell's error still fails the run with its message. Each case runs papermill in a child process, whose stderr is the
terminal's."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import nbformat

WARNING = "Kernel is running over TCP without encryption"


def _execute(tmp_path, code: str, options: str) -> subprocess.CompletedProcess:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(code)]
    nbformat.write(nb, tmp_path / "in.ipynb")
    script = textwrap.dedent(
        f"""
        import papermill
        from papa.pipeline.kernels import papermill_options
        papermill.execute_notebook({str(tmp_path / "in.ipynb")!r}, {str(tmp_path / "out.ipynb")!r}, **{options})
        """
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def test_a_run_prints_no_transport_warning_and_keeps_its_output(tmp_path):
    done = _execute(tmp_path, "print(6 * 7)", "papermill_options()")
    assert done.returncode == 0, done.stderr
    assert WARNING not in done.stderr and WARNING not in done.stdout
    out = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    assert out.cells[0].outputs[0]["text"] == "42\n"
    # papermill's own default (TCP) is what printed the warning: the test can tell the two apart
    tcp = _execute(tmp_path, "print(1)", "dict(kernel_name='python3', progress_bar=False, log_output=False)")
    assert tcp.returncode == 0 and WARNING in tcp.stderr


def test_a_cell_error_still_fails_the_run_with_its_message(tmp_path):
    done = _execute(tmp_path, "raise ValueError('the probe broke')", "papermill_options()")
    assert done.returncode != 0
    assert "PapermillExecutionError" in done.stderr and "the probe broke" in done.stderr


def test_a_kernel_that_dies_still_fails_the_run_visibly(tmp_path):
    """The kernel logs CRITICAL only (no transport warning, no shutdown interrupt): a dead kernel is papermill's
    error."""
    done = _execute(tmp_path, "import os; os._exit(3)", "papermill_options()")
    assert done.returncode != 0
    assert "DeadKernelError" in done.stderr or "Kernel died" in done.stderr, done.stderr[-2000:]
