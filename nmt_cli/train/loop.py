"""``nmt train``: the training loop.

One update consumes ``world_size * update_freq`` consecutive batches of the epoch's
deterministic batch list; process ``r`` takes batches ``r, r + W, ...`` of them. The loss
is normalised by the target tokens of the whole update (known from stored lengths, so no
communication is needed), which makes W processes with batch B equal to one process
accumulating W batches. Checkpoints carry everything needed to resume exactly.
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from ..config import Recipe, dump_recipe, recipe_to_dict
from ..data.batches import ParallelData, collate, make_batches, target_tokens
from ..data.prepare import load_meta, text_paths
from ..data.vocab import PAD_ID, is_extension, load_vocab
from ..errors import CheckpointError, NmtError, TrainingStopped
from ..model.transformer import Transformer, build_model, count_parameters
from ..utils.allocator import keep_freed_memory
from ..utils.cpu import check_parallelism
from ..utils.files import append_line, atomic_open, sha256_file
from ..utils.run_folder import RunFolder
from . import checkpoint
from .calibration import calibrate_model_file
from .checkpoint import TrainingCheckpoint, data_identity, load_training, vocab_digest
from .distributed import (
    DistInfo,
    all_true_anywhere,
    barrier,
    gather_objects,
    init_distributed,
    set_threads,
    shutdown,
)
from .ema import WeightAverage
from .events import EventWriter
from .memory import (
    CPU_MAX_TOKENS,
    MAX_SPLIT,
    free_cuda_memory,
    largest_fitting,
    split_rows,
    with_headroom,
)
from .precision import autocast, resolve_precision
from .repulsive import repulse_heads
from .schedule import learning_rate
from .state import TrainState
from .stopping import Preempted, StopRequest
from .validate import ValidationResult, Vocabularies, validate

Log = Callable[[str], None]

# Model keys a fine-tuning run may change: they shape training, not the weights.
FINE_TUNABLE_MODEL_KEYS = frozenset({"dropout", "attention_dropout", "activation_dropout"})
VOCABULARY_ROWS = ("src_embed.weight", "tgt_embed.weight", "output.weight")  # grown by vocab.extend


@dataclass
class Dataset:
    """Everything training reads from the prepared folder."""

    train: ParallelData
    valid: ParallelData | None
    valid_refs: Path | None
    vocab_blobs: dict[str, bytes]
    src_size: int
    tgt_size: int
    vocabs: Vocabularies
    identity: dict[str, Any]  # what makes it the same prepared data (checked on resume)


def load_dataset(recipe: Recipe) -> Dataset:
    """Open the prepared dataset of ``recipe`` (memory-mapped)."""
    data_dir = recipe.data_dir
    meta = load_meta(data_dir)
    if meta["src_lang"] != recipe.data.src_lang or meta["tgt_lang"] != recipe.data.tgt_lang:
        raise NmtError(
            f"{data_dir}: prepared for {meta['src_lang']}-{meta['tgt_lang']}, but the recipe says "
            f"{recipe.data.src_lang}-{recipe.data.tgt_lang}; re-run `nmt prepare`"
        )
    vocab = meta["vocab"]
    if recipe.model.share_embeddings and not meta["vocab"]["joint"] and not _one_id_space(data_dir, vocab):
        raise NmtError(
            f"{data_dir}: has one vocabulary per side, but model.share_embeddings needs a joint one; "
            "set model.share_embeddings: false or prepare with vocab.joint: true"
        )
    dtypes = tuple(meta["splits"]["train"]["dtypes"])
    train = ParallelData.load(data_dir, "train", recipe.data.src_lang, recipe.data.tgt_lang, dtypes)
    valid = valid_refs = None
    if "valid" in meta["splits"]:
        valid = ParallelData.load(data_dir, "valid", recipe.data.src_lang, recipe.data.tgt_lang, dtypes)
        valid_refs = text_paths(data_dir, "valid", recipe)[1]
    blobs = {"src": (data_dir / vocab["src_model"]).read_bytes(), "tgt": (data_dir / vocab["tgt_model"]).read_bytes()}
    vocabs = Vocabularies(load_vocab(data_dir / vocab["src_model"]), load_vocab(data_dir / vocab["tgt_model"]))
    return Dataset(train, valid, valid_refs, blobs, vocab["src_size"], vocab["tgt_size"], vocabs, data_identity(meta))


def _one_id_space(data_dir: Path, vocab: dict[str, Any]) -> bool:
    """Separate source and target models whose ids mean the same pieces (an imported MarianMT model's, rebuilt
    over its one id space by convert/shared_ids.py) can share one embedding as a joint model does."""
    src, tgt = load_vocab(data_dir / vocab["src_model"]), load_vocab(data_dir / vocab["tgt_model"])
    size = src.GetPieceSize()
    return size == tgt.GetPieceSize() and all(src.IdToPiece(i) == tgt.IdToPiece(i) for i in range(size))


class Trainer:
    """Holds the model, optimizer, data and state of one run; ``run()`` trains until a stop rule fires."""

    def __init__(self, recipe: Recipe, info: DistInfo, log: Log) -> None:
        self.recipe, self.info, self.log = recipe, info, log
        self.config = recipe.train
        self.run_dir = recipe.run_dir
        self.folder = RunFolder(recipe.run_dir)
        self.data = load_dataset(recipe)
        torch.manual_seed(self.config.seed)
        self.model: Transformer = build_model(recipe.model, self.data.src_size, self.data.tgt_size, PAD_ID)
        self.model.to(info.device)
        self.model.activation_checkpointing = self.config.activation_checkpointing
        _prefer_memory_efficient_attention(info.device)
        self.optimizer = _optimizer(self.model, recipe)
        self.ema = WeightAverage(self.model, self.config.ema_decay) if self.config.ema_decay else None
        self.parent: dict[str, Any] | None = None  # the model a fine-tuning run started from (train.init_from)
        self.events: EventWriter | None = None  # TensorBoard, opened with the run folder
        schedule = learning_rate(self.config, recipe.model.d_model)
        # The optimizer's base lr is 1.0, so the schedule's value is the learning rate of update s + 1.
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: schedule(s + 1))
        self.precision = resolve_precision(self.config.precision, info.device)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.precision == "fp16")
        self.state = TrainState()
        self.metrics_path = self.folder.metrics_file
        self._last_save_time = time.monotonic()
        self.network: torch.nn.Module = self.model
        self.last_lr = 0.0
        self.max_tokens = recipe.train.max_tokens if isinstance(recipe.train.max_tokens, int) else CPU_MAX_TOKENS
        self.split = 1  # each batch runs as this many accumulation steps (raised after a CUDA OOM)
        self._warned_truncation = False
        self.stop = StopRequest()  # signals, installed while run() trains (train/stopping.py)
        self.stopped_by: str | None = None  # the signal that ended training, if one did
        self.preempted = False  # every process agreed to stop for a preemption signal: save and leave
        self._saved_step = -1  # the update of the newest checkpoint on disk (the same on every process)
        self._validated_step = -1  # the update the last finished validation saw

    # ----------------------------------------------------------------- set-up

    def prepare_run_dir(self, resume: bool | None, start_from: str | None = None) -> str | None:
        """Create the run folder, or resume from a checkpoint of it; every check comes before any write.

        Returns why the run is already finished (then nothing was trained or changed), or None.
        """
        start = self._start_checkpoint(resume, start_from)
        if start is None and self.config.init_from:
            self.parent = self._load_parent(Path(self.config.init_from))
        if start is not None:
            self._check_compatible(start)
            finished = self._finished_reason(start.payload["train_state"])
            if finished and not start.payload["train_state"].get("validation_due"):
                if self.info.is_main and not self.folder.model_file.is_file():
                    self._restore(start)  # killed before the model file was written: write it now
                    self._write_model_file()
                return f"{finished} at update {start.step:,}"
        if self.info.is_main:
            for leftover in self.folder.remove_stale_temps():
                self.log(f"removed {leftover}, left behind by a killed process")
            self.folder.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            with atomic_open(self.folder.recipe_file, "w", encoding="utf-8") as handle:
                handle.write(dump_recipe(self.recipe))
            for side in ("src", "tgt"):
                with atomic_open(self.folder.spm_file(side), "wb") as handle:
                    handle.write(self.data.vocab_blobs[side])
        barrier(self.info)
        if start is not None:
            self._restore(start)
        self.max_tokens = self.state.max_tokens = self._resolve_max_tokens()
        if self.info.distributed:
            self.network = DistributedDataParallel(
                self.model, device_ids=[self.info.local_rank] if self.info.device.type == "cuda" else None
            )
        if self.config.compile:
            self.network = cast(torch.nn.Module, torch.compile(self.network))
        return None

    def _start_checkpoint(self, resume: bool | None, start_from: str | None) -> TrainingCheckpoint | None:
        """The checkpoint to resume from (``--from``, else the newest), or None for a new run."""
        existing = self.folder.step_checkpoints()
        if start_from is not None:
            if resume is False:
                raise NmtError("--from and --no-resume contradict each other; drop one")
            return load_training(self.folder.find_checkpoint(start_from), self.info.device)
        if existing and resume is False:
            raise NmtError(
                f"{self.run_dir}: already holds checkpoints; resume (the default), delete the folder, "
                "or set train.dir to a new folder"
            )
        if resume and not existing:
            raise NmtError(f"{self.run_dir}: no checkpoint to resume from; run without --resume to start")
        if not existing:
            return None
        try:
            return load_training(existing[-1], self.info.device)
        except CheckpointError as err:
            raise CheckpointError(
                f"{err} — it is the newest checkpoint of {self.run_dir}; " + _previous_good(existing[:-1])
            ) from None

    def _check_compatible(self, start: TrainingCheckpoint) -> None:
        """Refuse to resume with another model section, vocabulary or prepared data: name what differs."""
        differs = _model_difference(start.model_section, self.recipe)
        if differs:
            key, stored, now = differs
            raise CheckpointError(
                f"{start.path}: model.{key} is {stored!r} in the run but {now!r} in the recipe; "
                f"resume with the run's value (--set model.{key}={stored}) or use a new train.dir"
            )
        for side in ("src", "tgt"):
            stored, now = start.vocab.get(side, b""), self.data.vocab_blobs[side]
            if stored != now:
                raise CheckpointError(
                    f"{start.path}: the run was trained with another {side} vocabulary (SentencePiece model sha256 "
                    f"{vocab_digest(stored)}) than {self.recipe.data_dir} holds ({vocab_digest(now)}); its token ids "
                    "would mean other pieces. Prepare with the run's vocabulary, or use a new train.dir"
                )
        stored_data = start.data or {}
        for key, now in self.data.identity.items():
            if key in stored_data and stored_data[key] != now:
                raise CheckpointError(
                    f"{start.path}: the prepared training data changed since this run started ({key}: "
                    f"{stored_data[key]!r} then, {now!r} in {self.recipe.data_dir}); the saved data position would "
                    "be wrong. Re-prepare the run's data, or use a new train.dir"
                )

    def _load_parent(self, path: Path) -> dict[str, Any]:
        """``train.init_from``: load a trained model's weights into this new run, after checking that the
        architecture and the vocabulary match. Reads the parent only; returns what the run records of it."""
        source = path
        if path.is_dir():
            if path.resolve() == self.folder.path.resolve():
                raise NmtError(f"train.init_from names this run's own folder {path}; set train.dir to a new folder")
            parent = RunFolder(path)
            found = [parent.model_file] if parent.model_file.is_file() else parent.step_checkpoints()[-1:]
            if not found:
                raise NmtError(f"train.init_from: {path} holds no model.pt and no checkpoint; name a trained run")
            source = found[0]
        payload = checkpoint.load(source)
        differs = _model_difference(payload["recipe"].get("model", {}), self.recipe, ignore=FINE_TUNABLE_MODEL_KEYS)
        if differs:
            key, then, now = differs
            raise CheckpointError(
                f"train.init_from {source}: model.{key} is {then!r} there but {now!r} in the "
                f"recipe; fine-tuning keeps the architecture (--set model.{key}={then})"
            )
        extended = False
        for side in ("src", "tgt"):
            theirs, ours = (payload.get("vocab") or {}).get(side), self.data.vocab_blobs[side]
            if theirs == ours:
                continue
            if isinstance(theirs, bytes) and is_extension(theirs, ours):
                extended = True  # vocab.extend: the parent's pieces keep their ids, new ones follow
                continue
            raise CheckpointError(
                f"train.init_from {source}: {self.recipe.data_dir} was prepared with another {side} vocabulary "
                f"than the model's, so token ids would mean other pieces; prepare it with vocab.from: {path}"
            )
        weights = self._grown(payload["model"]) if extended else payload["model"]
        try:
            self.model.load_state_dict(weights)
        except RuntimeError as err:
            raise CheckpointError(
                f"train.init_from {source}: weights do not fit the model ({str(err).strip().splitlines()[0]})"
            ) from None
        if self.ema is not None:
            self.ema = WeightAverage(self.model, self.config.ema_decay)  # averages from the parent's weights
        step = (payload.get("train_state") or {}).get("step")
        self.log(
            f"fine-tuning from {source}"
            + (f" (update {step:,} of its run)" if step else "")
            + ": its weights, a fresh optimizer and learning-rate schedule"
        )
        return {"path": str(source.resolve()), "sha256": sha256_file(source), "step": step}

    def _grown(self, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The parent's weights with embedding and output rows added for an extended vocabulary: old rows
        exactly as trained, new rows as this model initialised them."""
        fresh = self.model.state_dict()
        grown = dict(weights)
        for key in VOCABULARY_ROWS:
            old, new = weights.get(key), fresh.get(key)
            if old is not None and new is not None and old.size(0) < new.size(0) and old.shape[1:] == new.shape[1:]:
                rows = new.detach().clone()
                rows[: old.size(0)] = old
                grown[key] = rows
                self.log(f"{key}: {old.size(0):,} rows from the parent, {new.size(0) - old.size(0):,} new")
        return grown

    def _finished_reason(self, state: dict[str, Any]) -> str | None:
        """Which stop rule a checkpoint's state already met (a finished run is not trained further)."""
        config = self.config
        if config.max_steps and state.get("step", 0) >= config.max_steps:
            return f"train.max_steps {config.max_steps:,} reached"
        if config.max_epochs and state.get("epoch", 1) > config.max_epochs:
            return f"train.max_epochs {config.max_epochs} reached"
        if config.max_seconds and state.get("elapsed", 0.0) >= config.max_seconds:
            return f"train.max_time {config.max_time} used"
        if config.patience and state.get("bad_validations", 0) >= config.patience:
            return f"stopped early (train.patience {config.patience})"
        return None

    def _restore(self, start: TrainingCheckpoint) -> None:
        payload, path = start.payload, start.path
        self.model.load_state_dict(payload["model"])
        self.optimizer.load_state_dict(payload["optimizer"])
        self.scheduler.load_state_dict(payload["scheduler"])
        self.scaler.load_state_dict(payload["scaler"])
        self.state.load_state_dict(payload["train_state"])
        self._saved_step = self.state.step
        self.parent = payload.get("parent")
        if self.ema is not None:
            if payload.get("ema"):
                self.ema.load_state_dict(payload["ema"])
            else:
                self.ema = WeightAverage(self.model, self.config.ema_decay)  # starts from the resumed weights
                self.log("train.ema_decay is new to this run: the moving average starts from the resumed weights")
        rng = payload["rng"]
        same_world = len(rng["torch"]) == self.info.world_size
        # The checkpoint was mapped onto the training device; RNG states must be CPU byte tensors.
        torch.set_rng_state((rng["torch"][self.info.rank] if same_world else rng["torch"][0]).cpu())
        if self.info.device.type == "cuda" and rng.get("cuda") and same_world:
            torch.cuda.set_rng_state(rng["cuda"][self.info.rank].cpu())
        if not same_world:
            torch.manual_seed(self.config.seed + 1000 * self.info.rank + self.state.step)
        self.log(f"resuming from {path} (update {self.state.step:,}, epoch {self.state.epoch})")

    def _resolve_max_tokens(self) -> int:
        """The batch size: the one a resumed run used, the recipe's, or (auto) probed on the GPU."""
        stored = self.state.max_tokens  # what the run used before an interruption (0 for a new run)
        if self.config.max_tokens != "auto":
            if stored and stored != self.config.max_tokens:
                self.log(
                    f"train.max_tokens changed from {stored:,} to {self.config.max_tokens:,}: batches from here "
                    "on differ from the interrupted run's"
                )
            return int(self.config.max_tokens)
        if stored:
            return stored  # auto resolves once: a resumed run keeps its batches
        if self.info.device.type != "cuda":
            self.log(f"train.max_tokens auto: {CPU_MAX_TOKENS:,} on the CPU (auto sizes batches to GPU memory)")
            return CPU_MAX_TOKENS
        longest = min(int(self.data.train.pair_lengths.max()), self.recipe.model.max_positions)
        widths = sorted({longest, min(16, longest)})  # long sentences, and many short rows
        # Adam keeps two fp32 moments per parameter; hold their room while probing.
        reserve = torch.empty(2 * count_parameters(self.model), dtype=torch.float32, device=self.info.device)
        with torch.random.fork_rng(devices=[self.info.device]):  # the probe must not shift the run's randomness
            fitted = largest_fitting(lambda tokens: self._fits(tokens, widths))
        del reserve
        free_cuda_memory(self.info.device)
        torch.cuda.reset_peak_memory_stats(self.info.device)
        if fitted == 0:
            raise NmtError(
                f"train.max_tokens auto: not even a batch of {widths[-1]} tokens fits in GPU memory; "
                "set train.activation_checkpointing: true, precision bf16, or a smaller model"
            )
        chosen = min(cast(list[int], gather_objects(with_headroom(fitted), self.info)))  # every process uses the same size
        self.log(
            f"train.max_tokens auto: batches of {fitted:,} tokens fit in GPU memory "
            f"(sentences of {widths[-1]} and {widths[0]} tokens); training with {chosen:,}"
        )
        return chosen

    def _fits(self, tokens: int, widths: list[int]) -> bool:
        """Whether forward and backward of all-real-token batches of ``tokens`` run without OOM."""
        fits = True
        try:
            for width in widths:
                rows = max(1, tokens // width)
                ids = torch.randint(4, self.data.tgt_size, (3, rows, width), device=self.info.device)
                src = ids[0] % self.data.src_size
                with self._autocast():
                    loss, _, _ = self.model(src.clamp(min=4), ids[1], ids[2], self.config.label_smoothing)
                loss.backward()
                del ids, src, loss
        except torch.cuda.OutOfMemoryError:
            fits = False
        self.optimizer.zero_grad(set_to_none=True)
        free_cuda_memory(self.info.device)
        return fits

    # ----------------------------------------------------------------- the loop

    def run(self) -> TrainState:
        """Train until a stop rule fires; write the final checkpoint and the model file (a preemption
        signal writes the checkpoint only: ``train/stopping.py``)."""
        self._log_start()
        self.model.train()
        self._window = _Window()
        with self.stop, self._progress() as bar:
            reason = None
            if self.state.validation_due:  # the validation a preemption interrupted runs first
                reason = self._pending_validation()
            while reason is None:
                reason = self._train_epoch(bar)
            self._finish(reason)
        return self.state

    def _log_start(self) -> None:
        info, config = self.info, self.config
        if not info.is_main:
            return
        self.log(
            f"model: {count_parameters(self.model):,} parameters; {len(self.data.train):,} training pairs; "
            f"{info.world_size} process(es) x update_freq {config.update_freq}; device {info.device}"
            + (f" ({torch.distributed.get_backend()})" if info.distributed else "")
            + "; "
            f"precision {self.precision}" + (" (auto)" if config.precision == "auto" else "")
        )
        too_long = int((self.data.train.pair_lengths > self.recipe.model.max_positions).sum())
        if too_long:
            self.log(
                f"{too_long:,} training pairs longer than model.max_positions "
                f"({self.recipe.model.max_positions}) are left out; raise it or lower data.clean.max_tokens"
            )

    def _pending_validation(self) -> str | None:
        if self._validate_and_track():
            return f"no improvement in {self.config.patience} validations (early stopping)"
        return self._stop_reason()

    def _train_epoch(self, bar: Any) -> str | None:
        """Updates over the rest of this epoch's batches; returns why training stops, or None for the next epoch."""
        info, config = self.info, self.config
        started = time.monotonic() - self.state.elapsed
        window = self._window
        try:
            # A single process may drop what a preemption interrupts; processes of a group must finish
            # the update together (the others wait for this one's gradients).
            with self.stop.interruptible(enabled=not info.distributed):
                batches = self._epoch_batches()
        except Preempted:
            return self._stop_reason()
        per_update = info.world_size * config.update_freq
        n_updates = len(batches) // per_update
        if n_updates == 0:
            raise NmtError(
                f"{self.recipe.data_dir}: one epoch holds fewer than {per_update} batches; "
                "lower train.max_tokens or train.update_freq"
            )
        while self.state.epoch_batches_done // per_update < n_updates:
            first = self.state.epoch_batches_done
            clock = time.perf_counter()
            try:
                sums = self._update(batches[first : first + per_update])
            except Preempted:
                self.log(f"update {self.state.step + 1:,} abandoned at {self.stop.signal}: it runs again on resuming")
                return self._stop_reason()
            window.add({**sums, "updates": 1, "seconds": time.perf_counter() - clock})
            self.state.epoch_batches_done += per_update
            self.state.elapsed = time.monotonic() - started
            if sums["skipped"]:  # fp16 overflow: the data is consumed, the update does not count
                self.state.skipped_updates += 1
                reason = self._stop_reason()
            else:
                self.state.step += 1
                bar.update(1)
                reason = self._after_update(window, bar)
            if reason is not None:
                return reason
        self.state.epoch += 1
        self.state.epoch_batches_done = 0
        if config.max_epochs and self.state.epoch > config.max_epochs:
            return f"reached {config.max_epochs} epochs"
        return None

    def _epoch_batches(self) -> list[np.ndarray]:
        return make_batches(
            self.data.train.pair_lengths,
            self.max_tokens,
            self.recipe.model.max_positions,
            self.config.seed,
            self.state.epoch,
        )

    def _update(self, group: list[np.ndarray]) -> dict[str, float]:
        """One optimizer step over ``group``; after a CUDA OOM, again with each batch split finer."""
        while True:
            try:
                return self._try_update(group)
            except torch.cuda.OutOfMemoryError:
                pass  # recover outside the handler, so the traceback's frames free their tensors
            self._recover_from_oom()

    def _recover_from_oom(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        free_cuda_memory(self.info.device)
        if self.info.distributed or self.split >= MAX_SPLIT:
            why = (
                "the other processes are already waiting for this one's gradients"
                if self.info.distributed
                else f"even batches split {self.split} ways do not fit"
            )
            raise NmtError(
                f"out of GPU memory at update {self.state.step + 1:,} ({why}); lower train.max_tokens "
                f"(now {self.max_tokens:,}) or set train.activation_checkpointing: true"
            )
        self.split *= 2
        self.log(
            f"out of GPU memory at update {self.state.step + 1:,}: each batch now runs as {self.split} "
            "accumulation steps (same gradients, less memory)"
        )
        self._write_metrics({"step": self.state.step, "oom_split": self.split})

    def _try_update(self, group: list[np.ndarray]) -> dict[str, float]:
        """Forward/backward over this process's share of ``group``, then one optimizer step."""
        info = self.info
        total_tokens = sum(target_tokens(self.data.train, b) for b in group)
        pieces = [
            indices[part] for indices in group[info.rank :: info.world_size] for part in split_rows(len(indices), self.split)
        ]
        rng = _rng_states(info.device)
        try:
            # Forward and backward passes change nothing but the gradients and the random state, both
            # put back here when a preemption drops them; the optimizer step below always completes.
            with self.stop.interruptible(enabled=not info.distributed):
                sums = self._accumulate(pieces, total_tokens)
        except Preempted:
            self.optimizer.zero_grad(set_to_none=True)
            _set_rng_states(rng, info.device)
            raise
        self.scaler.unscale_(self.optimizer)
        if self.recipe.model.repulsive:
            repulse_heads(self.model, self.recipe.model.repulsive)
        sums["grad_norm"] = _gradient_norm(self.model, self.config.clip_norm)  # before clipping
        self.last_lr = self.optimizer.param_groups[0]["lr"]  # the rate this update used
        scale = self.scaler.get_scale() if self.scaler.is_enabled() else 1.0
        self.scaler.step(self.optimizer)  # skipped by the scaler when fp16 gradients overflowed
        self.scaler.update()
        skipped = self.scaler.is_enabled() and self.scaler.get_scale() < scale
        if not skipped:
            self.scheduler.step()  # a skipped update must not advance the learning-rate schedule
            if self.ema is not None:
                self.ema.update(self.state.step)
        self.optimizer.zero_grad(set_to_none=True)
        return {**sums, "skipped": skipped}

    def _accumulate(self, pieces: list[np.ndarray], total_tokens: int) -> dict[str, Any]:
        """Forward and backward over this process's batches of one update; the gradients add up."""
        info = self.info
        sums: dict[str, Any] = {"loss": 0.0, "nll": 0.0, "tokens": 0, "src_tokens": 0, "slots": 0}
        for i, indices in enumerate(pieces):
            batch = collate(self.data.train, indices).to(info.device)
            sync = i == len(pieces) - 1 or not isinstance(self.network, DistributedDataParallel)
            with (
                contextlib.nullcontext() if sync else cast(DistributedDataParallel, self.network).no_sync(),
                self._autocast(),
            ):
                # The token count comes from the host: counting on the device would wait for the GPU.
                loss, nll, n = self.network(
                    batch.src, batch.tgt_in, batch.tgt_out, self.config.label_smoothing, batch.target_tokens
                )
                # DDP averages gradients over processes; scaling by W makes that a sum.
                scaled = loss * (info.world_size / total_tokens)
            self.scaler.scale(scaled).backward()
            # Summed on the device and read only when a log line is written: each read waits for the
            # GPU, and while the host waits it cannot queue the next update's kernels.
            sums["loss"] += loss.detach()
            sums["nll"] += nll.detach()
            sums["tokens"] += n
            sums["src_tokens"] += batch.source_tokens
            sums["slots"] += batch.src.numel() + batch.tgt_out.numel()  # real tokens and padding, both sides
        return sums

    def _autocast(self) -> contextlib.AbstractContextManager:
        return autocast(self.precision, self.info.device)

    # ----------------------------------------------------------------- after each update

    def _after_update(self, window: _Window, bar: Any) -> str | None:
        config, state = self.config, self.state
        if state.step % config.log_every == 0:
            self._log_train(window, bar)
        if config.validate_every and state.step % config.validate_every == 0:
            if self._validate_and_track():
                return f"no improvement in {config.patience} validations (early stopping)"
        timed = config.save_minutes and time.monotonic() - self._last_save_time >= 60 * config.save_minutes
        if (config.save_every and state.step % config.save_every == 0) or timed:
            self._save()
        return self._stop_reason()

    def _stop_reason(self) -> str | None:
        """Why training stops now (a signal, the time or update budget), or None to go on. Every process
        of a group calls it after the same update and gets the same answer."""
        config, state, stop = self.config, self.state, self.stop
        time_up = bool(config.max_seconds) and state.elapsed >= config.max_seconds
        if all_true_anywhere(stop.signal is not None or time_up, self.info):
            if stop.signal is not None or not time_up:
                self.preempted = all_true_anywhere(stop.preempted, self.info)
                self.stopped_by = stop.signal or ("SIGTERM" if self.preempted else "SIGINT")
                return f"stopped by {stop.signal or 'another process'}"
            return f"reached max_time {config.max_time}"
        if config.max_steps and state.step >= config.max_steps:
            return f"reached {config.max_steps:,} updates"
        return None

    def _log_train(self, window: _Window, bar: Any) -> None:
        stats = window.flush(self.info.world_size)
        record = {
            "step": self.state.step,
            "epoch": self.state.epoch,
            **stats,
            "lr": self.last_lr,
            "elapsed": round(self.state.elapsed, 1),
        }
        if self.info.device.type == "cuda":
            record["max_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
        if self.scaler.is_enabled():
            record["loss_scale"] = self.scaler.get_scale()
            record["skipped_updates"] = self.state.skipped_updates
        bar.set_postfix(
            loss=f"{stats['loss']:.3f}",
            ppl=f"{stats['ppl']:.1f}",
            lr=f"{record['lr']:.2e}",
            tok_s=f"{stats['tgt_tokens_per_s']:.0f}",
        )
        if bar.disable and self.info.is_main:
            self.log(
                f"update {self.state.step:,} | loss {stats['loss']:.3f} | nll {stats['nll']:.3f} | "
                f"ppl {stats['ppl']:.2f} | lr {record['lr']:.2e} | gnorm {stats['grad_norm']:.2f} | "
                f"{stats['tgt_tokens_per_s']:,.0f} tgt tok/s"
            )
        self._write_metrics(record)

    def _validate_and_track(self) -> bool:
        """Validate on rank 0, track the best checkpoint; return True when patience ran out."""
        if self.data.valid is None or self.data.valid_refs is None:
            return False
        stop = False
        self._validated_step = self.state.step  # on every process: the final validation is not repeated
        if self.info.is_main:
            try:
                with self.stop.interruptible():  # the other processes wait in the collective below
                    result = validate(
                        self.model, self.data.valid, self.data.valid_refs, self.data.vocabs, self.recipe, self.info.device
                    )
            except Preempted:
                self.state.validation_due = True  # saved with the checkpoint; resuming runs it first
                self.log(f"validation at update {self.state.step:,} abandoned at {self.stop.signal}; it runs on resuming")
                return all_true_anywhere(False, self.info)
            self.state.validation_due = False
            self._write_metrics({"step": self.state.step, **result.as_dict()})
            self.log(_describe_validation(self.state.step, result))
            if result.truncated and not self._warned_truncation:
                self._warned_truncation = True
                self.log(
                    f"warning: {result.truncated:,} validation source(s) are longer than model.max_positions "
                    f"({self.recipe.model.max_positions}) and were truncated for validation BLEU; raise "
                    "model.max_positions or shorten those sentences"
                )
            score = result.bleu if result.bleu is not None else -result.loss
            if self.state.best_score is None or score > self.state.best_score:
                self.state.best_score, self.state.best_step, self.state.bad_validations = score, self.state.step, 0
                checkpoint.save(self.folder.best_file, self._model_payload(), kind="weights")
            else:
                self.state.bad_validations += 1
            stop = bool(self.config.patience) and self.state.bad_validations >= self.config.patience
        return all_true_anywhere(stop, self.info)

    # ----------------------------------------------------------------- files

    def _model_payload(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "recipe": recipe_to_dict(self.recipe),
            "parent": self.parent,
            "vocab": self.data.vocab_blobs,
            "step": self.state.step,
        }

    def _save(self) -> None:
        """Write a full training checkpoint (rank 0), keeping the last K."""
        rng = {
            "torch": gather_objects(torch.get_rng_state(), self.info),
            "cuda": gather_objects(torch.cuda.get_rng_state(), self.info) if self.info.device.type == "cuda" else [],
        }
        self._last_save_time = time.monotonic()
        if self.info.is_main:
            payload = {
                **self._model_payload(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(),
                "train_state": self.state.state_dict(),
                "rng": rng,
                "world_size": self.info.world_size,
                "data": self.data.identity,
                **({"ema": self.ema.state_dict()} if self.ema else {}),
            }
            checkpoint.save(self.folder.step_path(self.state.step), payload, kind="training")
            self.folder.prune(self.config.keep_last)
        self._saved_step = self.state.step
        barrier(self.info)

    def _finish(self, reason: str) -> None:
        """Final validation, checkpoint and model file (averaged if the recipe asks); after a preemption
        signal only the checkpoint, so that it is on disk before the job is killed."""
        if not self.preempted and self._validated_step != self.state.step:
            self._validate_and_track()  # the final weights, unless that just happened
        if not self.preempted:  # a preemption signal may have come since the loop stopped
            self.preempted = all_true_anywhere(self.stop.preempted, self.info)
            if self.preempted:
                self.stopped_by = self.stop.signal or "SIGTERM"
        if self._saved_step != self.state.step:
            self._save()
        if self.info.is_main:
            self.log(f"stopped after update {self.state.step:,}: {reason}")
            if not self.preempted:
                self._write_model_file_unless_preempted()
            if self.events is not None:
                self.events.close()
        barrier(self.info)

    def _write_model_file_unless_preempted(self) -> None:
        try:
            with self.stop.interruptible():
                self._write_model_file()
        except Preempted:
            self.stopped_by = self.stop.signal
            self.log(f"{self.folder.model_file} not written ({self.stop.signal}); the next `nmt train` writes it")

    def _write_model_file(self) -> None:
        if self.ema is not None:
            checkpoint.save(
                self.folder.ema_file, {**self._model_payload(), "model": self.ema.model_state_dict()}, kind="weights"
            )
            self.log(f"moving average of the weights (decay {self.config.ema_decay}) written to {self.folder.ema_file}")
        target = self.folder.model_file
        n = self.config.average_last
        found = self.folder.step_checkpoints()
        if n > 1 and len(found) > 1:
            used = found[-n:]
            checkpoint.average_checkpoints(used, target)
            self.log(f"averaged the last {len(used)} checkpoints into {target}")
        else:
            checkpoint.save(target, self._model_payload(), kind="weights")
            self.log(f"model written to {target}")
        if self.config.calibrate:
            try:
                calibrate_model_file(target, self.recipe, self.info.device, self.log)
            except Preempted:  # the model file is whole; only its calibration is missing
                self.stopped_by = self.stop.signal
                self.log(f"calibration abandoned at {self.stop.signal}: {target} has none (nmt calibrate fits one)")

    def _write_metrics(self, record: dict[str, Any]) -> None:
        if self.info.is_main:
            append_line(self.metrics_path, json.dumps(record))
            if self.events is None:
                self.events = EventWriter(self.folder.tensorboard_dir, self.config.tensorboard)
            self.events.write(record)

    def _progress(self) -> tqdm:
        total = self.config.max_steps or None
        return tqdm(
            total=total,
            initial=self.state.step,
            desc="train",
            unit=" updates",
            dynamic_ncols=True,
            disable=None if self.info.is_main else True,
        )


class _Window:
    """Sums over the updates since the last log line (time spent in updates only, so
    validation and checkpoint writing do not lower the reported throughput)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}

    def add(self, sums: dict[str, Any]) -> None:
        """Add one update's sums; loss and NLL may be device tensors, read only at :meth:`flush`."""
        for key, value in sums.items():
            self.sums[key] = self.sums.get(key, 0.0) + value

    def flush(self, world_size: int) -> dict[str, float]:
        self.sums = {key: float(value) for key, value in self.sums.items()}
        seconds = max(self.sums.get("seconds", 0.0), 1e-9)
        tokens = max(self.sums.get("tokens", 0.0), 1.0)
        nll = self.sums.get("nll", 0.0) / tokens
        real = tokens + self.sums.get("src_tokens", 0.0)
        stats = {
            "loss": self.sums.get("loss", 0.0) / tokens,
            "nll": nll,
            "ppl": math.exp(min(nll, 50.0)),
            "grad_norm": self.sums.get("grad_norm", 0.0) / max(self.sums.get("updates", 0.0), 1.0),
            "pad_share": 1.0 - real / max(self.sums.get("slots", 0.0), real, 1.0),
            "tgt_tokens": int(self.sums.get("tokens", 0.0)),
            # This process's tokens times the world size: ranks get batches of equal size on average.
            "tgt_tokens_per_s": world_size * tokens / seconds,
            "tgt_tokens_per_s_per_process": tokens / seconds,
            "src_tgt_tokens_per_s": world_size * (tokens + self.sums.get("src_tokens", 0.0)) / seconds,
        }
        self.sums = {}
        return stats


def _model_difference(
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


def _rng_states(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The random states an update draws its dropout masks from (CPU, and the GPU's when training there)."""
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def _set_rng_states(states: tuple[torch.Tensor, torch.Tensor | None], device: torch.device) -> None:
    torch.set_rng_state(states[0])
    if states[1] is not None:
        torch.cuda.set_rng_state(states[1], device)


def _gradient_norm(model: torch.nn.Module, clip: float) -> torch.Tensor:
    """The gradients' total L2 norm before clipping (clipped to ``clip`` when set); stays on the device."""
    if clip:
        return torch.nn.utils.clip_grad_norm_(model.parameters(), clip).detach()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return torch.zeros(())
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))


def _prefer_memory_efficient_attention(device: torch.device) -> None:
    """On a GPU, leave cuDNN's attention kernel out of PyTorch's choice.

    Padding masks rule out the flash kernel; PyTorch then picks cuDNN's, whose forward and backward
    took 9% more of the H100's time per update than the memory-efficient kernel (Transformer big,
    12,288-token batches; ``benchmarks/bench_gpu.py profile --variants plain,efficient,cudnn``).
    """
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)


def _optimizer(model: torch.nn.Module, recipe: Recipe) -> torch.optim.Optimizer:
    config = recipe.train
    cls = torch.optim.AdamW if config.weight_decay else torch.optim.Adam
    # One fused kernel over all parameters instead of several small operations per tensor.
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in model.parameters())
    return cls(
        model.parameters(),
        lr=1.0,
        betas=(config.adam_beta1, config.adam_beta2),
        eps=config.adam_eps,
        weight_decay=config.weight_decay,
        fused=fused,
    )


def _previous_good(older: list[Path]) -> str:
    """How to resume when the newest checkpoint is damaged: name the newest readable one before it."""
    for path in reversed(older):
        try:
            load_training(path)
        except CheckpointError:
            continue
        return f"resume from the previous good one with --from {int(path.stem.split('_')[1])} ({path})"
    return "no earlier readable checkpoint is kept: delete the damaged file and train anew"


def _describe_validation(step: int, result: ValidationResult) -> str:
    bleu = f" | BLEU {result.bleu:.2f}" if result.bleu is not None else ""
    heads = f" | heads alike {result.head_similarity:.2f}" if result.head_similarity is not None else ""
    return (
        f"validation at update {step:,} | loss {result.loss:.3f} | nll {result.nll:.3f} | ppl {result.ppl:.2f}{bleu}{heads}"
    )


def train(recipe: Recipe, resume: bool | None = None, log: Log = print, start_from: str | None = None) -> Path:
    """Train ``recipe`` (alone or as one process of a torchrun group); return the run folder.

    ``start_from`` (``--from``) names the checkpoint to resume from: a step number or a file.
    """
    check_parallelism(recipe.train.threads, "train.threads")  # before the lock: a crash would leave it behind
    info = init_distributed(recipe.train)
    try:
        # One `nmt train` per run folder: the main process holds its lock for the whole run.
        owner = RunFolder(recipe.run_dir).locked(log) if info.is_main else contextlib.nullcontext()
        with owner:
            set_threads(recipe.train, info)
            keep_freed_memory()  # each update's buffers reused, not faulted in anew (utils/allocator.py)
            trainer = Trainer(recipe, info, log if info.is_main else (lambda _msg: None))
            finished = trainer.prepare_run_dir(resume, start_from)
            if finished:
                log(
                    f"{recipe.run_dir}: already finished ({finished}); nothing to do. To train on, raise that "
                    "limit (e.g. --set train.max_steps=N) or use another train.dir"
                )
                return recipe.run_dir
            trainer.run()
    finally:
        shutdown(info)
    if trainer.stopped_by:
        code = 128 + signal.Signals[trainer.stopped_by].value  # 130 for SIGINT, 143 for SIGTERM
        skipped = " (validation and the model file left for later)" if trainer.preempted else ""
        raise TrainingStopped(
            trainer.stopped_by,
            code,
            f"{recipe.run_dir}: stopped by {trainer.stopped_by} after update {trainer.state.step:,} with a "
            f"checkpoint written{skipped}; run the same command to resume",
        )
    return recipe.run_dir


__all__ = ["train", "Trainer", "load_dataset"]
