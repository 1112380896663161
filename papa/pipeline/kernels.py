"""The kernel every run's notebook executes in.

papermill starts each kernel over TCP by default, and the kernel then logs "Kernel is running over TCP without
encryption ..." to the terminal, once per run, between the runner's progress lines. :class:`IpcKernelManager` starts
it on IPC sockets instead (files in Jupyter's runtime folder, removed when the kernel stops): the same kernel and
the same outputs, without that line; an error a cell raises still fails the run with its message."""

from __future__ import annotations

from jupyter_client.manager import AsyncKernelManager
from traitlets import default


class IpcKernelManager(AsyncKernelManager):
    """papermill's kernel manager on the IPC transport (POSIX sockets)."""

    @default("transport")
    def _default_transport(self) -> str:
        return "ipc"


def papermill_options() -> dict:
    """The options of ``papermill.execute_notebook`` for one run: the ``python3`` kernel on IPC, no progress bar,
    no echo of the cells' output (the runner prints one line per run)."""
    return {
        "kernel_name": "python3",
        "kernel_manager_class": f"{__name__}.IpcKernelManager",
        "progress_bar": False,
        "log_output": False,
        "report_mode": False,
    }
