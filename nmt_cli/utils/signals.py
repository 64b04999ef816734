"""Signals that end a command: Ctrl-C, and the ones a cluster sends before it kills a job.

SLURM sends SIGTERM (or the signal chosen with ``--signal``, often SIGUSR1) and kills the job about
30 seconds later; torchrun forwards SIGTERM to its workers and does the same. Python's default for
both (and for SIGHUP, when the terminal goes away) is to die on the spot, without running a single
``finally`` block: temporary files stay behind, locks are not released. :func:`signals_unwind` makes
them unwind the stack like Ctrl-C does instead, so every command cleans up and exits
``128 + signal number`` (143 for SIGTERM, as a shell reports). ``nmt train`` replaces this for its
loop with a stop request of its own (``train/stopping.py``), because there a signal must end in a
checkpoint, not in an exception.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

# The signals that mean "stop soon, the job is being taken away" (SIGUSR1 is absent on Windows)...
PREEMPTION_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGUSR1") if hasattr(signal, name)
)
# ... and those that end a command the same way: these, and SIGHUP (the terminal went away).
STOP_SIGNALS: tuple[signal.Signals, ...] = PREEMPTION_SIGNALS + ((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ())


class Interrupted(BaseException):
    """A preemption signal ended the command. A BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` swallows it on its way to ``cli.py``."""

    def __init__(self, signum: int) -> None:
        self.signal_name = signal.Signals(signum).name
        self.exit_code = 128 + signum
        super().__init__(f"stopped by {self.signal_name}")


def _raise_interrupted(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def signals_unwind() -> Iterator[None]:
    """While inside, SIGTERM, SIGUSR1 and SIGHUP raise :class:`Interrupted` in the main thread (elsewhere,
    where Python allows no handlers, nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise_interrupted) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """While inside, a stop signal is only noted; on leaving, the handler that was in place before gets it. For code
    that an exception raised at any point would leave half-built: a progress bar interrupted inside
    ``tqdm.__init__`` printed a traceback from its ``__del__`` at exit (its ``pos`` never set). (Handlers, not
    signal masks: a mask holds one thread, and the process's other threads would take the signal.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: caught.append(signum)) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if caught:
            signal.raise_signal(caught[0])
