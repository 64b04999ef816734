"""Saving and loading nmt's torch files safely: atomic writes, ``weights_only=True`` loads.

Any damage to a file (truncation, corruption, a foreign pickle) becomes a one-line
:class:`CheckpointError` naming the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any, cast

import torch

from ..errors import CheckpointError
from ..version import __version__
from .files import NO_ROOM, WriteFailed, atomic_path, describe_os_error, write_all
from .run_folder import MODEL_FILE

FORMAT_VERSION = 1
KINDS = ("training", "weights")  # a full training checkpoint, or model weights only (model.pt, best.pt, averages)


def save(path: Path, payload: dict[str, Any], kind: str) -> None:
    """Write ``payload`` plus format, version and kind fields to ``path`` atomically."""
    if kind not in KINDS:
        raise ValueError(f"checkpoint kind {kind!r}")
    payload = {"format_version": FORMAT_VERSION, "nmt_version": __version__, **payload, "kind": kind}
    with atomic_path(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        writer = _CheckedWriter(fd)
        try:
            torch.save(payload, cast(IO[bytes], writer))
            os.fsync(fd)  # on disk before the rename makes it the checkpoint: a crash cannot leave it empty
        except (RuntimeError, OSError) as err:
            failed = writer.error or (err if isinstance(err, OSError) else None)
            if failed is not None and failed.errno in NO_ROOM:
                raise WriteFailed(describe_os_error(failed, path)) from None
            raise
        finally:
            os.close(fd)


class _CheckedWriter:
    """The file object torch.save writes to: it keeps the OSError of a failed write, which torch
    turns into a RuntimeError that no longer says the disk was full."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        try:
            write_all(self.fd, data)
        except OSError as err:
            self.error = err
            raise
        return len(data)

    def flush(self) -> None:
        pass


def load(path: Path, map_location: str | torch.device = "cpu", mmap: bool = False) -> dict[str, Any]:
    """Load a checkpoint safely; any damage becomes a one-line :class:`CheckpointError`.

    ``mmap`` maps the file instead of reading it: tensors that are never touched (the optimizer
    state of a training checkpoint, when only the weights are wanted) cost no memory.
    """
    path = Path(path)
    if path.is_dir():
        path = path / MODEL_FILE
    if not path.is_file():
        raise CheckpointError(
            f"{path}: checkpoint not found; name a model folder or a .pt file written by `nmt train` or `nmt average`"
        )
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except Exception as err:  # noqa: BLE001 - torch's legacy reader fails on arbitrary bytes in many ways (KeyError...)
        raise CheckpointError(
            f"{path}: truncated or corrupt checkpoint ({type(err).__name__}); use another checkpoint or re-create it"
        ) from None
    if not isinstance(payload, dict) or "model" not in payload or "recipe" not in payload:
        raise CheckpointError(f"{path}: not an nmt checkpoint (no model weights and recipe inside)")
    version = payload.get("format_version", 0)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(f"{path}: written by a newer nmt (format {version}); upgrade nmt to read it")
    if not isinstance(payload["model"], dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in payload["model"].items()
    ):
        raise CheckpointError(f"{path}: its model weights are not a mapping of names to tensors; not an nmt checkpoint")
    if not isinstance(payload["recipe"], dict):
        raise CheckpointError(f"{path}: its stored recipe is not a mapping; not an nmt checkpoint")
    # Files from before kinds were stored: a training checkpoint is the one with optimizer state.
    payload.setdefault("kind", "training" if "optimizer" in payload else "weights")
    if payload["kind"] not in KINDS:
        raise CheckpointError(f"{path}: unknown checkpoint kind {payload['kind']!r}; not an nmt checkpoint")
    return payload
