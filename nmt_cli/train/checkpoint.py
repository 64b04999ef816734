"""Checkpoint files: self-describing, written atomically, loaded with ``weights_only=True``.

A checkpoint holds the model weights, the resolved recipe, the SentencePiece model(s) and
the format and toolkit versions, so that any single file can translate. Training
checkpoints add the optimizer, schedule, data position and RNG states. Averaging is two
pure functions, :func:`select_checkpoints` and :func:`average_state_dicts`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..errors import CheckpointError
from ..utils.torchfile import MODEL_FILE, load, save

__all__ = ["MODEL_FILE", "load", "save", "average_checkpoints", "average_state_dicts", "select_checkpoints"]

STEP_PATTERN = re.compile(r"^step_(\d+)\.pt$")
BEST_FILE = "best.pt"
CHECKPOINT_DIR = "checkpoints"


def step_checkpoints(run_dir: Path) -> list[Path]:
    """The step checkpoints of a run, oldest first."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := STEP_PATTERN.match(p.name))]
    return [p for _, p in sorted(found)]


def step_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / f"step_{step:08d}.pt"


def prune(run_dir: Path, keep_last: int) -> None:
    """Delete all but the newest ``keep_last`` step checkpoints (0 keeps everything)."""
    if keep_last <= 0:
        return
    for old in step_checkpoints(run_dir)[:-keep_last]:
        old.unlink(missing_ok=True)


def select_checkpoints(inputs: Sequence[Path], last: int = 0) -> list[Path]:
    """Files to average: the named files, or the last ``last`` step checkpoints of a run folder."""
    if len(inputs) == 1 and Path(inputs[0]).is_dir():
        found = step_checkpoints(Path(inputs[0]))
        if not found:
            raise CheckpointError(f"{inputs[0]}: no step checkpoints in {CHECKPOINT_DIR}/ to average")
        n = last or len(found)
        if n > len(found):
            raise CheckpointError(f"{inputs[0]}: --last {n} asked for, but only {len(found)} "
                                  "step checkpoints are kept; lower --last")
        return found[-n:]
    if last:
        raise CheckpointError("--last goes with a single run folder; name checkpoint files without it")
    for path in inputs:
        if not Path(path).is_file():
            raise CheckpointError(f"{path}: checkpoint not found")
    return [Path(p) for p in inputs]


def average_state_dicts(states: Sequence[dict[str, torch.Tensor]], names: Sequence[str] = ()) -> dict[str, torch.Tensor]:
    """Element-wise mean of parameter dicts, accumulated in float64, returned in the input dtypes.

    Raises :class:`CheckpointError` when the dicts do not hold the same names and shapes.
    """
    if not states:
        raise CheckpointError("no checkpoints to average")
    names = list(names) or [f"checkpoint {i + 1}" for i in range(len(states))]
    reference = states[0]
    for name, state in zip(names[1:], states[1:]):
        if state.keys() != reference.keys():
            missing = sorted(set(reference) ^ set(state))[:3]
            raise CheckpointError(f"{name}: different architecture from {names[0]} "
                                  f"(parameters {', '.join(missing)} differ); average only checkpoints of one run")
        for key, tensor in state.items():
            if tensor.shape != reference[key].shape:
                raise CheckpointError(f"{name}: different architecture from {names[0]} ({key} has shape "
                                      f"{tuple(tensor.shape)}, not {tuple(reference[key].shape)})")
    averaged = {}
    for key, tensor in reference.items():
        if not tensor.is_floating_point():
            averaged[key] = tensor.clone()
            continue
        total = torch.zeros_like(tensor, dtype=torch.float64)
        for state in states:
            total += state[key].to(torch.float64)
        averaged[key] = (total / len(states)).to(tensor.dtype)
    return averaged


def average_checkpoints(paths: Sequence[Path], output: Path) -> dict[str, Any]:
    """Average the model weights of ``paths`` into a translation-ready file at ``output``."""
    payloads = [load(p) for p in paths]
    first = payloads[0]
    for path, payload in zip(paths[1:], payloads[1:]):
        if payload["recipe"].get("model") != first["recipe"].get("model"):
            raise CheckpointError(f"{path}: different model settings from {paths[0]}; "
                                  "average only checkpoints of one architecture")
    weights = average_state_dicts([p["model"] for p in payloads], [str(p) for p in paths])
    result = {"model": weights, "recipe": first["recipe"], "vocab": first["vocab"],
              "averaged_from": [str(p) for p in paths], "step": first.get("train_state", {}).get("step")}
    save(output, result)
    return result
