"""Run ``nmt ARGS...`` with a real signal sent to itself at a chosen moment (tests/cli/test_long_jobs.py).

``NMT_SIGNAL_AT`` picks the moment, so that a test hits it every time instead of by luck:
- ``validation``: SIGTERM as the first validation starts;
- ``update:K``: SIGTERM as update K's forward and backward passes start;
- ``save:K``: SIGTERM as update K's passes start, then SIGTERM and SIGUSR1 again as the
  checkpoint is being written;
- ``model_file``: SIGTERM as the model file (the average) starts being written;
- ``commit:K``: SIGTERM as ``nmt translate -o`` is about to record its K-th block of lines.
The signal goes through the kernel to this process like any other (``os.kill``); nothing else changes.
"""

from __future__ import annotations

import functools
import os
import signal
import sys

from nmt_cli import cli
from nmt_cli.train import checkpoint, loop, update
from nmt_cli.utils import resumable_output


def _signal_first(func, *signals: int, at_call: int = 1):
    calls = 0

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        nonlocal calls
        calls += 1
        if calls == at_call:
            for sig in signals:
                os.kill(os.getpid(), sig)
        return func(*args, **kwargs)

    return wrapper


def main() -> None:
    moment = os.environ.get("NMT_SIGNAL_AT", "")
    name, _, number = moment.partition(":")
    if name == "validation":
        loop.validate = _signal_first(loop.validate, signal.SIGTERM)
    elif name in ("update", "save"):
        update.accumulate = _signal_first(update.accumulate, signal.SIGTERM, at_call=int(number))
    if name == "save":
        checkpoint.save = _signal_first(checkpoint.save, signal.SIGTERM, signal.SIGUSR1)
    if name == "model_file":
        loop.Trainer._write_model_file = _signal_first(loop.Trainer._write_model_file, signal.SIGTERM)
    if name == "commit":
        output = resumable_output.ResumableOutput
        output.commit = _signal_first(output.commit, signal.SIGTERM, at_call=int(number))
    sys.argv = ["nmt", *sys.argv[1:]]
    cli.main()


if __name__ == "__main__":
    main()
