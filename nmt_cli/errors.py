"""The one error hierarchy of nmt.

The library raises these with messages written for users: they name the file, line or
recipe key and say how to fix it. ``cli.py`` turns them into a one-line red message and a
non-zero exit code; nothing else in the package prints tracebacks for user mistakes.
"""

from __future__ import annotations


class NmtError(Exception):
    """Base class: a problem the user can fix. ``str(err)`` is the whole message."""

    exit_code = 1


class RecipeError(NmtError):
    """A recipe (YAML) or a ``--set`` override is invalid."""

    exit_code = 2


class DataError(NmtError):
    """An input corpus or a prepared dataset is missing, malformed or inconsistent."""


class CheckpointError(NmtError):
    """A checkpoint or model folder is missing, truncated, corrupt or incompatible."""


class DownloadError(NmtError):
    """A download failed or its checksum did not match."""


class TrainingStopped(NmtError):
    """Training stopped on SIGINT/SIGTERM after writing a checkpoint: exit 130/143 like an interrupted
    Unix tool, so ``nmt train ... && nmt translate ...`` does not go on with an unfinished model."""

    def __init__(self, signal_name: str, exit_code: int, message: str) -> None:
        super().__init__(message)
        self.signal_name = signal_name
        self.exit_code = exit_code
