"""Saving and loading nmt's torch files safely: atomic writes, ``weights_only=True`` loads.

Any damage to a file (truncation, corruption, a foreign pickle) becomes a one-line
:class:`CheckpointError` naming the file.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from .. import __version__
from ..errors import CheckpointError
from .files import atomic_path

FORMAT_VERSION = 1
MODEL_FILE = "model.pt"


def save(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` plus format/version fields to ``path`` atomically."""
    payload = {"format_version": FORMAT_VERSION, "nmt_version": __version__, **payload}
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)


def load(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint safely; any damage becomes a one-line :class:`CheckpointError`."""
    path = Path(path)
    if path.is_dir():
        path = path / MODEL_FILE
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found; name a model folder or a .pt file "
                              "written by `nmt train` or `nmt average`")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, OSError, ValueError) as err:
        raise CheckpointError(f"{path}: truncated or corrupt checkpoint ({type(err).__name__}); "
                              "use another checkpoint or re-create it") from None
    if not isinstance(payload, dict) or "model" not in payload or "recipe" not in payload:
        raise CheckpointError(f"{path}: not an nmt checkpoint (no model weights and recipe inside)")
    if payload.get("format_version", 0) > FORMAT_VERSION:
        raise CheckpointError(f"{path}: written by a newer nmt (format {payload['format_version']}); "
                              "upgrade nmt to read it")
    return payload


