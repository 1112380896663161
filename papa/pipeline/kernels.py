"""How every run's notebook is executed: the options of ``papermill.execute_notebook``.

Each run starts a kernel, and the kernel logs "Kernel is running over TCP without encryption ..." at WARNING to the
terminal, once per run, between the runner's progress lines. The kernel here logs from ERROR up
(``--IPKernelApp.log_level=ERROR``): that line goes, the kernel's own errors still reach the terminal, and an error a
cell raises still fails the run with its message (papermill reads it from the notebook, not from the log)."""

from __future__ import annotations

#: The kernel's own log threshold.
KERNEL_LOG_LEVEL = "ERROR"


def papermill_options() -> dict:
    """The options of ``papermill.execute_notebook`` for one run: the ``python3`` kernel logging from
    :data:`KERNEL_LOG_LEVEL` up, no progress bar, no echo of the cells' output (the runner prints one line per run)."""
    return {
        "kernel_name": "python3",
        "extra_arguments": [f"--IPKernelApp.log_level={KERNEL_LOG_LEVEL}"],
        "progress_bar": False,
        "log_output": False,
        "report_mode": False,
    }
