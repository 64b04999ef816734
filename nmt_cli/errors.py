"""The one error hierarchy of nmt.

The library raises these with messages written for users: they name the file, line or
recipe key and say how to fix it. ``cli.py`` turns them into a one-line red message and a
non-zero exit code; nothing else in the package prints tracebacks for user mistakes.
"""

from __future__ import annotations

import re


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


class TooLarge(NmtError):
    """An input unpacks past a limit (a compressed container, a line): the server answers 413, not 400."""


_OBJECT_REPR = re.compile(r"'?<[\w.]+ object at 0x[0-9a-fA-F]+>'?")
_UNSAFE_LOAD = "Weights only load failed"


def reason(err: BaseException, limit: int = 160) -> str:
    """A library's exception as a phrase for a user's one-line message: its first line, without Python object
    reprs (``<_io.BytesIO object at 0x...>``), cut at ``limit``. PyTorch's refusal of a pickle that a safe
    load cannot read is said plainly: its first line reads like advice to load unsafely."""
    text = str(err)
    if _UNSAFE_LOAD in text:
        unsupported = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
        what = f" ({unsupported.group(1)})" if unsupported else ""
        return f"it holds Python objects{what} that nmt does not load, since loading them could run code"
    line = _OBJECT_REPR.sub("the input", text.strip().splitlines()[0] if text.strip() else type(err).__name__)
    return line if len(line) <= limit else line[: limit - 3] + "..."
