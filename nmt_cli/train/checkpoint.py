"""Checkpoint files: self-describing, typed, written atomically, loaded with ``weights_only=True``.

Every file holds the model weights, the resolved recipe, the SentencePiece model(s), the
format and toolkit versions and its kind: ``training`` checkpoints (``checkpoints/step_*.pt``)
add the optimizer, schedule, data position, RNG states and the identity of the prepared
data; ``weights`` files (``model.pt``, ``best.pt``, averages) hold the model only, and are
never taken for a training checkpoint. Averaging streams: one checkpoint in memory at a time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..config import Recipe, TrainConfig, recipe_to_dict
from ..errors import CheckpointError
from ..utils.run_folder import BEST_FILE, CHECKPOINT_DIR, MODEL_FILE, RunFolder
from ..utils.torchfile import load, save

__all__ = [
    "MODEL_FILE",
    "BEST_FILE",
    "CHECKPOINT_DIR",
    "load",
    "save",
    "TrainingCheckpoint",
    "load_training",
    "average_checkpoints",
    "average_state_dicts",
    "select_checkpoints",
    "data_identity",
    "vocab_digest",
    "weights_payload",
    "training_payload",
    "write_model_file",
]

TRAINING_KEYS = ("optimizer", "scaler", "train_state", "rng")


def step_checkpoints(run_dir: Path) -> list[Path]:
    """The step checkpoints of a run, oldest first."""
    return RunFolder(run_dir).step_checkpoints()


def step_path(run_dir: Path, step: int) -> Path:
    return RunFolder(run_dir).step_path(step)


@dataclass(frozen=True)
class TrainingCheckpoint:
    """A training checkpoint, checked to hold everything resuming needs."""

    path: Path
    payload: dict[str, Any]

    @property
    def model_section(self) -> dict[str, Any]:
        return self.payload["recipe"].get("model", {})

    @property
    def step(self) -> int:
        return int(self.payload["train_state"].get("step", 0))

    @property
    def vocab(self) -> dict[str, bytes]:
        return self.payload.get("vocab") or {}

    @property
    def data(self) -> dict[str, Any] | None:
        """The prepared training data's identity (absent in checkpoints of nmt before 0.2)."""
        return self.payload.get("data")


def load_training(path: Path, map_location: str | torch.device = "cpu") -> TrainingCheckpoint:
    """Load a checkpoint to resume from; a weights-only file is refused with a one-line error."""
    payload = load(path, map_location=map_location)
    if payload["kind"] != "training":
        raise CheckpointError(
            f"{path}: holds model weights only (as written by `nmt average` or for translation), "
            "not a training checkpoint; resume from a checkpoints/step_*.pt file"
        )
    missing = [key for key in TRAINING_KEYS if not isinstance(payload.get(key), dict)]
    if missing:
        raise CheckpointError(
            f"{path}: training checkpoint without {', '.join(missing)}; it is damaged or "
            "not written by nmt train; resume from another checkpoint"
        )
    return TrainingCheckpoint(Path(path), payload)


def vocab_digest(blob: bytes) -> str:
    """Short SHA-256 of a SentencePiece model, as error messages show it."""
    return hashlib.sha256(blob).hexdigest()[:12]


def data_identity(meta: Mapping[str, Any]) -> dict[str, Any]:
    """What makes prepared training data the same: input files, cleaning result, vocabulary, encoding."""
    if meta.get("pairs"):  # multilingual: every direction's training split
        trains = [meta["splits"][f"train.{pair}"] for pair in meta["pairs"]]
    else:
        trains = [meta["splits"]["train"]]
    files = [path for train in trains for pair in train.get("files", []) for path in pair]
    inputs = {Path(p).name: meta.get("inputs_sha256", {}).get(p, "") for p in files}
    identity = {
        "train_inputs_sha256": hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:12],
        "train_pairs": _summed(train.get("sentences") for train in trains),
        "train_target_tokens": _summed(train.get("tgt_tokens") for train in trains),
        "vocab_sizes": [meta["vocab"]["src_size"], meta["vocab"]["tgt_size"]],
    }
    if meta.get("pairs"):
        identity["pairs"] = list(meta["pairs"])
    return identity


def _summed(counts: Any) -> int | None:
    """A sum of counts (None where a count is missing, as in data an older version prepared)."""
    counts = list(counts)
    return None if any(c is None for c in counts) else sum(counts)


# --------------------------------------------------------------------------- averaging


def select_checkpoints(inputs: Sequence[Path], last: int = 0) -> list[Path]:
    """Files to average: the named files, or the last ``last`` step checkpoints of a run folder."""
    if len(inputs) == 1 and Path(inputs[0]).is_dir():
        found = step_checkpoints(Path(inputs[0]))
        if not found:
            raise CheckpointError(f"{inputs[0]}: no step checkpoints in {CHECKPOINT_DIR}/ to average")
        n = last or len(found)
        if n > len(found):
            raise CheckpointError(
                f"{inputs[0]}: --last {n} asked for, but only {len(found)} step checkpoints are kept; lower --last"
            )
        return found[-n:]
    if last:
        raise CheckpointError("--last goes with a single run folder; name checkpoint files without it")
    seen: dict[tuple[int, int], Path] = {}  # (device, inode): one file under two names or links counts once
    for path in map(Path, inputs):
        if not path.is_file():
            raise CheckpointError(f"{path}: checkpoint not found")
        stat = path.stat()
        if (stat.st_dev, stat.st_ino) in seen:
            raise CheckpointError(
                f"{path}: given twice (the same file as {seen[stat.st_dev, stat.st_ino]}); it would count double "
                "in the average. Name each checkpoint once"
            )
        seen[stat.st_dev, stat.st_ino] = path
    return list(seen.values())


class _RunningMean:
    """Float64 running sum of parameter dicts: memory for one sum, whatever the number of inputs.

    Names that hold one tensor in the first dict (tied weights: the embeddings and the output
    projection) are summed once and come back as one tensor, so the saved average stores them once as
    the trained model did (the base model's three tied 32,000 x 512 matrices written three times made
    its averaged file 375 MB instead of 244 MB), and the model loads them as the one weight they are.
    """

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.dtypes: dict[str, torch.dtype] = {}
        self.tied: dict[str, str] = {}  # name -> the earlier name holding the same tensor
        self.names: list[str] = []
        self.first_name = ""
        self.count = 0

    def add(self, state: Mapping[str, torch.Tensor], name: str) -> None:
        if self.count == 0:
            self.first_name = name
            self.names = list(state)
            self.tied = _tied_names(state)
            self.dtypes = {key: tensor.dtype for key, tensor in state.items()}
            self.sums = {
                key: tensor.to(torch.float64, copy=True) if tensor.is_floating_point() else tensor.clone()
                for key, tensor in state.items()
                if key not in self.tied
            }
        else:
            self._check_same_architecture(state, name)
            for key, total in self.sums.items():
                if total.is_floating_point():
                    total += state[key].to(torch.float64)
        self.count += 1

    def _check_same_architecture(self, state: Mapping[str, torch.Tensor], name: str) -> None:
        if state.keys() != set(self.names):
            differ = sorted(set(self.names) ^ set(state))[:3]
            raise CheckpointError(
                f"{name}: different architecture from {self.first_name} "
                f"(parameters {', '.join(differ)} differ); average only checkpoints of one run"
            )
        for key, tensor in state.items():
            expected = self.sums[self.tied.get(key, key)].shape
            if tensor.shape != expected:
                raise CheckpointError(
                    f"{name}: different architecture from {self.first_name} ({key} has shape "
                    f"{tuple(tensor.shape)}, not {tuple(expected)})"
                )

    def mean(self) -> dict[str, torch.Tensor]:
        if self.count == 0:
            raise CheckpointError("no checkpoints to average")
        means = {
            key: (total / self.count).to(self.dtypes[key]) if total.is_floating_point() else total
            for key, total in self.sums.items()
        }
        return {key: means[self.tied.get(key, key)] for key in self.names}


def _tied_names(state: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """Each name whose tensor is the same view of the same memory as an earlier name's, mapped to that
    earlier name (a state dict lists a tied weight under every module that holds it)."""
    first_with: dict[tuple[object, ...], str] = {}
    tied = {}
    for key, tensor in state.items():
        if tensor.numel() == 0:
            continue  # empty tensors share no memory, whatever their data pointers say
        view = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tensor.shape, tensor.stride(), tensor.dtype)
        if view in first_with:
            tied[key] = first_with[view]
        else:
            first_with[view] = key
    return tied


def average_state_dicts(states: Sequence[Mapping[str, torch.Tensor]], names: Sequence[str] = ()) -> dict[str, torch.Tensor]:
    """Element-wise mean of parameter dicts, accumulated in float64, returned in the input dtypes.

    Raises :class:`CheckpointError` when the dicts do not hold the same names and shapes.
    """
    names = list(names) or [f"checkpoint {i + 1}" for i in range(len(states))]
    mean = _RunningMean()
    for name, state in zip(names, states):
        mean.add(state, name)
    return mean.mean()


def average_checkpoints(paths: Sequence[Path], output: Path) -> dict[str, Any]:
    """Average the model weights of ``paths`` into a weights file at ``output``.

    One input is mapped at a time and only its weights are read (never the optimizer state), so
    memory stays that of one model plus a float64 sum however many checkpoints are averaged.
    The result's ``step`` is the newest input's.
    """
    mean, first, steps = _RunningMean(), None, []
    for path in paths:
        payload = load(path, mmap=True)
        if first is None:
            first = {"recipe": payload["recipe"], "vocab": payload.get("vocab"), "path": path}
        elif payload["recipe"].get("model") != first["recipe"].get("model"):
            raise CheckpointError(
                f"{path}: different model settings from {first['path']}; average only checkpoints of one architecture"
            )
        else:
            _check_same_vocabulary(payload.get("vocab") or {}, first["vocab"] or {}, path, first["path"])
        mean.add(payload["model"], str(path))
        steps.append(_step_of(payload))
        del payload  # unmaps the file
    if first is None:
        raise CheckpointError("no checkpoints to average")
    known = [s for s in steps if s is not None]
    result = {
        "model": mean.mean(),
        "recipe": first["recipe"],
        "vocab": first["vocab"],
        "averaged_from": [str(p) for p in paths],
        "step": max(known) if known else None,
    }
    save(output, result, kind="weights")
    return result


def _check_same_vocabulary(vocab: Mapping[str, Any], first: Mapping[str, Any], path: Path, first_path: Path) -> None:
    """Averaged rows must mean the same pieces: the ensemble path refuses other vocabularies, and so does this."""
    for side in ("src", "tgt"):
        if vocab.get(side) != first.get(side):
            ours = vocab_digest(vocab[side]) if isinstance(vocab.get(side), bytes) else "none"
            theirs = vocab_digest(first[side]) if isinstance(first.get(side), bytes) else "none"
            raise CheckpointError(
                f"{path}: its {side} vocabulary (SentencePiece model sha256 {ours}) is not the one of {first_path} "
                f"({theirs}): the same row would mean other pieces. Average only checkpoints of one vocabulary"
            )


def _step_of(payload: Mapping[str, Any]) -> int | None:
    state = payload.get("train_state")
    step = state.get("step") if isinstance(state, dict) else payload.get("step")
    return int(step) if isinstance(step, int) else None


def weights_payload(
    weights: Mapping[str, torch.Tensor], recipe: Recipe, parent: dict[str, Any] | None, vocab: dict[str, bytes], step: int
) -> dict[str, Any]:
    """What every model file holds: the weights, the resolved recipe, the fine-tuning parent (if any), the
    SentencePiece models and the update it was taken at."""
    return {"model": weights, "recipe": recipe_to_dict(recipe), "parent": parent, "vocab": vocab, "step": step}


def training_payload(
    weights: dict[str, Any], state: dict[str, Any], world_size: int, data: dict[str, Any]
) -> dict[str, Any]:
    """A training checkpoint: ``weights_payload`` plus the optimizer, schedule, scaler, train state, random
    states (and moving average) in ``state``, the group size and the prepared data's identity."""
    missing = [key for key in TRAINING_KEYS if key not in state]
    if missing:
        raise ValueError(f"a training checkpoint needs {missing}")
    return {**weights, **state, "world_size": world_size, "data": data}


def write_model_file(
    folder: RunFolder,
    config: TrainConfig,
    weights: dict[str, Any],
    ema: Mapping[str, torch.Tensor] | None,
    log: Callable[[str], None],
) -> Path:
    """The run's ``model.pt``: the last ``train.average_last`` checkpoints averaged, or ``weights``; and the
    moving average's file when there is one. Returns the model file's path."""
    if ema is not None:
        save(folder.ema_file, {**weights, "model": ema}, kind="weights")
        log(f"moving average of the weights (decay {config.ema_decay}) written to {folder.ema_file}")
    target = folder.model_file
    found = folder.step_checkpoints()
    used = _last_stretch(folder, found[-config.average_last :], weights["step"], config.average_stretch)
    if config.average_last > 1 and len(used) > 1:
        average_checkpoints(used, target)
        log(f"averaged the last {len(used)} checkpoints into {target}")
    else:
        save(target, weights, kind="weights")
        log(f"model written to {target}")
    return target


def _last_stretch(folder: RunFolder, checkpoints: list[Path], last_step: int, stretch: float) -> list[Path]:
    """The ``checkpoints`` written in the run's last ``stretch`` of its ``last_step`` updates (all when 0): a
    short run's last five checkpoints may reach back into its warm-up."""
    if not stretch:
        return checkpoints
    first = last_step * (1.0 - stretch)
    return [path for path in checkpoints if folder.step_of(path) >= first]
