"""How every run's notebook is executed: the options of ``papermill.execute_notebook``. The kernel logs at CRITICAL
only, which silences its per-run TCP warning and its shutdown ``KeyboardInterrupt`` line and hides no failure (a
cell's error and a dead kernel fail the run through papermill)."""

from __future__ import annotations


def papermill_options() -> dict:
    """The options of ``papermill.execute_notebook`` for one run: quiet ``python3`` kernel, no progress, no echo."""
    return {
        "kernel_name": "python3",
        "extra_arguments": ["--IPKernelApp.log_level=CRITICAL"],
        "progress_bar": False,
        "log_output": False,
        "report_mode": False,
    }
