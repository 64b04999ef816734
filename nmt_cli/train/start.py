"""Where a run starts: a new run, a resumed one (after checking that its model, vocabulary and prepared data
are the ones the checkpoint was trained with), or a fine-tuning run from a parent model (``train.init_from``).
Every check here comes before anything is written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..config import Recipe, TrainConfig, recipe_to_dict
from ..data.vocab import is_extension
from ..errors import CheckpointError, NmtError
from ..utils.files import sha256_file
from ..utils.run_folder import RunFolder
from . import checkpoint
from .checkpoint import TrainingCheckpoint, load_training, vocab_digest
from .dataset import Dataset

Log = Callable[[str], None]

# Model keys a fine-tuning run may change: they shape training, not the weights.
# model keys a fine-tuning run may change: none of them changes the weights' shapes or meaning. Document context
# is among them: the standard way to a context model is a sentence-level model fine-tuned with context (Zhang et
# al. 2018), and both ways of reading context use the sentence-level model's weights as they are (concatenation
# reads longer rows; recurrence attends to more keys with the same projections).
FINE_TUNABLE_MODEL_KEYS = frozenset(
    {"dropout", "attention_dropout", "activation_dropout", "concat", "concat_target", "recurrence"}
)
VOCABULARY_ROWS = ("src_embed.weight", "tgt_embed.weight", "output.weight")  # grown by vocab.extend


def start_checkpoint(
    folder: RunFolder, resume: bool | None, start_from: str | None, device: torch.device
) -> TrainingCheckpoint | None:
    """The checkpoint to resume from (``--resume-from``, else the newest), or None for a new run."""
    existing = folder.step_checkpoints()
    if start_from is not None:
        if resume is False:
            raise NmtError("--resume-from and --no-resume contradict each other; drop one")
        return load_training(folder.find_checkpoint(start_from), device)
    if existing and resume is False:
        raise NmtError(
            f"{folder.path}: already holds checkpoints; resume (the default), delete the folder, "
            "or set train.dir to a new folder"
        )
    if resume and not existing:
        raise NmtError(f"{folder.path}: no checkpoint to resume from; run without --resume to start")
    if not existing:
        return None
    try:
        return load_training(existing[-1], device)
    except CheckpointError as err:
        raise CheckpointError(
            f"{err} — it is the newest checkpoint of {folder.path}; " + _previous_good(existing[:-1])
        ) from None


def _previous_good(older: list[Path]) -> str:
    """How to resume when the newest checkpoint is damaged: name the newest readable one before it."""
    for path in reversed(older):
        try:
            load_training(path)
        except CheckpointError:
            continue
        return f"resume from the previous good one with --resume-from {int(path.stem.split('_')[1])} ({path})"
    return "no earlier readable checkpoint is kept: delete the damaged file and train anew"


def check_compatible(start: TrainingCheckpoint, recipe: Recipe, data: Dataset) -> None:
    """Refuse to resume with another model section, vocabulary or prepared data: name what differs."""
    differs = model_difference(start.model_section, recipe)
    if differs:
        key, stored, now = differs
        raise CheckpointError(
            f"{start.path}: model.{key} is {stored!r} in the run but {now!r} in the recipe; "
            f"resume with the run's value (--set model.{key}={stored}) or use a new train.dir"
        )
    for side in ("src", "tgt"):
        stored, now = start.vocab.get(side, b""), data.vocab_blobs[side]
        if stored != now:
            raise CheckpointError(
                f"{start.path}: the run was trained with another {side} vocabulary (SentencePiece model sha256 "
                f"{vocab_digest(stored)}) than {recipe.data_dir} holds ({vocab_digest(now)}); its token ids "
                "would mean other pieces. Prepare with the run's vocabulary, or use a new train.dir"
            )
    stored_data = start.data or {}
    for key, now in data.identity.items():
        if key in stored_data and stored_data[key] != now:
            raise CheckpointError(
                f"{start.path}: the prepared training data changed since this run started ({key}: "
                f"{stored_data[key]!r} then, {now!r} in {recipe.data_dir}); the saved data position would "
                "be wrong. Re-prepare the run's data, or use a new train.dir"
            )


def model_difference(
    stored: dict[str, Any], recipe: Recipe, ignore: frozenset[str] = frozenset()
) -> tuple[str, Any, Any] | None:
    """The first model key (key, stored value, recipe value) whose values differ; keys a stored recipe
    lacks (added to nmt after it was written) count as their defaults."""
    ours = recipe_to_dict(recipe)["model"]
    defaults = recipe_to_dict(Recipe())["model"]
    for key in sorted((set(ours) | set(stored)) - ignore):
        then, now = stored.get(key, defaults.get(key)), ours.get(key)
        if then != now:
            return key, then, now
    return None


def finished_reason(config: TrainConfig, state: dict[str, Any]) -> str | None:
    """Which stop rule a checkpoint's state already met (a finished run is not trained further)."""
    if config.max_steps and state.get("step", 0) >= config.max_steps:
        return f"train.max_steps {config.max_steps:,} reached"
    if config.max_epochs and state.get("epoch", 1) > config.max_epochs:
        return f"train.max_epochs {config.max_epochs} reached"
    if config.max_seconds and state.get("elapsed", 0.0) >= config.max_seconds:
        return f"train.max_time {config.max_time} used"
    if config.patience and state.get("bad_validations", 0) >= config.patience:
        return f"stopped early (train.patience {config.patience})"
    return None


def load_parent(
    path: Path, folder: RunFolder, recipe: Recipe, data: Dataset, model: torch.nn.Module, log: Log
) -> dict[str, Any]:
    """``train.init_from``: load a trained model's weights into this new run, after checking that the
    architecture and the vocabulary match. Reads the parent only; returns what the run records of it."""
    source = path
    if path.is_dir():
        if path.resolve() == folder.path.resolve():
            raise NmtError(f"train.init_from names this run's own folder {path}; set train.dir to a new folder")
        parent = RunFolder(path)
        found = [parent.model_file] if parent.model_file.is_file() else parent.step_checkpoints()[-1:]
        if not found:
            raise NmtError(f"train.init_from: {path} holds no model.pt and no checkpoint; name a trained run")
        source = found[0]
    payload = checkpoint.load(source)
    differs = model_difference(payload["recipe"].get("model", {}), recipe, ignore=FINE_TUNABLE_MODEL_KEYS)
    if differs:
        key, then, now = differs
        raise CheckpointError(
            f"train.init_from {source}: model.{key} is {then!r} there but {now!r} in the "
            f"recipe; fine-tuning keeps the architecture (--set model.{key}={then})"
        )
    extended = False
    for side in ("src", "tgt"):
        theirs, ours = (payload.get("vocab") or {}).get(side), data.vocab_blobs[side]
        if theirs == ours:
            continue
        if isinstance(theirs, bytes) and is_extension(theirs, ours):
            extended = True  # vocab.extend: the parent's pieces keep their ids, new ones follow
            continue
        raise CheckpointError(
            f"train.init_from {source}: {recipe.data_dir} was prepared with another {side} vocabulary "
            f"than the model's, so token ids would mean other pieces; prepare it with vocab.from: {path}"
        )
    weights = _grown(payload["model"], model, log) if extended else payload["model"]
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        raise CheckpointError(
            f"train.init_from {source}: weights do not fit the model ({str(err).strip().splitlines()[0]})"
        ) from None
    step = (payload.get("train_state") or {}).get("step")
    log(
        f"fine-tuning from {source}"
        + (f" (update {step:,} of its run)" if step else "")
        + ": its weights, "
        + ("its Adam moments (below)" if recipe.train.init_optimizer else "a fresh optimizer")
        + " and a fresh learning-rate schedule"
    )
    return {"path": str(source.resolve()), "sha256": sha256_file(source), "step": step}


def parent_moments(path: Path, model: torch.nn.Module, log: Log) -> dict[int, Any]:
    """``train.init_optimizer``: the optimizer state of ``train.init_from``'s newest training checkpoint (a run
    folder's, or the file named), after checking that it holds a moment of the right shape for each of the model's
    parameters, in order; a one-line error naming the file otherwise."""
    if path.is_dir():
        found = RunFolder(path).step_checkpoints()[-1:]
        if not found:
            raise NmtError(
                f"train.init_optimizer: {path} holds no training checkpoint (checkpoints/step_*.pt) to take Adam's "
                "moments from; name a run folder that has one, or drop train.init_optimizer"
            )
        path = found[0]
    payload = checkpoint.load(path)
    state = payload.get("optimizer") if payload.get("kind") == "training" else None
    if not isinstance(state, dict) or not isinstance(state.get("state"), dict):
        raise NmtError(
            f"train.init_optimizer: {path} holds model weights only, no optimizer state; name a training checkpoint "
            "(checkpoints/step_*.pt) or its run folder"
        )
    moments = state["state"]
    parameters = list(model.parameters())
    for index, parameter in enumerate(parameters):
        kept = moments.get(index)
        shapes = [tuple(kept[k].shape) for k in ("exp_avg", "exp_avg_sq")] if isinstance(kept, dict) else []
        if len(moments) != len(parameters) or any(shape != tuple(parameter.shape) for shape in shapes) or not shapes:
            raise NmtError(
                f"train.init_optimizer: the optimizer state in {path} is not of this model's parameters "
                f"({len(moments)} moments for {len(parameters)} parameters, or other shapes); drop train.init_optimizer"
            )
    step = (payload.get("train_state") or {}).get("step")
    log(f"Adam's moments from {path}" + (f" (update {step:,})" if step else ""))
    return moments


def _grown(weights: dict[str, torch.Tensor], model: torch.nn.Module, log: Log) -> dict[str, torch.Tensor]:
    """The parent's weights with embedding and output rows added for an extended vocabulary: old rows
    exactly as trained, new rows as this model initialised them."""
    fresh = model.state_dict()
    grown = dict(weights)
    for key in VOCABULARY_ROWS:
        old, new = weights.get(key), fresh.get(key)
        if old is not None and new is not None and old.size(0) < new.size(0) and old.shape[1:] == new.shape[1:]:
            rows = new.detach().clone()
            rows[: old.size(0)] = old
            grown[key] = rows
            log(f"{key}: {old.size(0):,} rows from the parent, {new.size(0) - old.size(0):,} new")
    return grown
