"""Processes: whether one is still alive, and tying a child's life to its parent's."""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def pid_alive(pid: int) -> bool:
    """Whether a process with this PID exists on this machine (a zombie counts as dead)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except OSError as err:
        return err.errno == errno.EPERM  # exists, but belongs to another user
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    """A killed process whose parent never reaped it (common in containers) still answers kill(0)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False  # no /proc (not Linux), or gone meanwhile
    return state in ("Z", "X")


def die_with_parent(parent: int) -> None:
    """Ask Linux to kill this process when ``parent`` dies, even by ``kill -9`` (no time to clean up).

    Used by prepare's encoding workers and by torchrun's training workers: without it they live on
    as orphans after their parent is killed, and an orphaned trainer keeps writing into the run folder.
    Elsewhere than Linux this does nothing.
    """
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
