"""How a signal stops training: Ctrl-C finishes the run, a preemption signal saves and leaves.

- **Ctrl-C (SIGINT)**: the update in progress finishes, then training ends as if a stop rule had
  fired: a final validation, a checkpoint, the model file (averaged if the recipe asks); exit 130.
  A second Ctrl-C stops at once (every file is written atomically, so nothing is half-written).
- **SIGTERM or SIGUSR1 (preemption)**: a cluster is taking the job away and kills it about 30 s later
  (SLURM, torchrun). SIGHUP (the terminal went away) is taken the same way. Training writes a checkpoint
  of the last finished update and exits 128 + the signal's number (143 for SIGTERM): no validation, no
  averaging. Work that can be dropped and redone after resuming (an update's forward and backward passes
  in a single process, a validation, the model file) runs inside :meth:`StopRequest.interruptible` and
  is abandoned at the signal instead of at its end: a signal that arrives during a long validation would
  otherwise be honoured only after it (and after the kill). Further preemption signals are ignored: the
  save must finish.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from ..utils.signals import STOP_SIGNALS


class Preempted(BaseException):
    """Raised inside :meth:`StopRequest.interruptible` when a preemption signal arrives: the work there
    is dropped. A BaseException, so that no ``except Exception`` on the way catches it."""


class StopRequest:
    """Turns SIGINT, SIGTERM and SIGUSR1 into a flag the loop reads after every update."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self._interruptible = 0
        self._previous: dict[int, Any] = {}

    @property
    def preempted(self) -> bool:
        """A preemption signal arrived: save and leave."""
        return self.signal is not None and self.signal != "SIGINT"

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():  # elsewhere Python allows no handlers
            for sig in (signal.SIGINT, *STOP_SIGNALS):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if signum == signal.SIGINT:
            if self.signal is not None:  # a second Ctrl-C, or Ctrl-C while leaving: stop at once
                raise KeyboardInterrupt
            self.signal = name
            return
        if self.preempted:
            return  # a later preemption signal: the save under way must finish
        self.signal = name  # the first one (it also hurries along a stop that Ctrl-C asked for)
        if self._interruptible:
            raise Preempted

    @contextlib.contextmanager
    def interruptible(self, enabled: bool = True) -> Iterator[None]:
        """Work inside may be abandoned: a preemption signal (before or during it) raises :class:`Preempted`."""
        if not enabled:
            yield
            return
        if self.preempted:
            raise Preempted
        self._interruptible += 1
        try:
            yield
        finally:
            self._interruptible -= 1
