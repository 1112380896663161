"""How every run's notebook is executed: the options of ``papermill.execute_notebook``.

Each run starts a kernel, and the kernel logs "Kernel is running over TCP without encryption ..." at WARNING to the
terminal, once per run, between the runner's progress lines, and at shutdown an idle kernel that jupyter_client
interrupts logs "KeyboardInterrupt caught in kernel" at ERROR. The kernel here logs CRITICAL only
(``--IPKernelApp.log_level=CRITICAL``): both lines go, and no failure is hidden, because an error a cell raises fails
the run with its message (papermill reads it from the notebook, not from the log) and a kernel that dies fails it as
papermill's ``DeadKernelError``."""

from __future__ import annotations

#: The kernel's own log threshold.
KERNEL_LOG_LEVEL = "CRITICAL"


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
