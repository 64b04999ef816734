"""``nmt train``: the training loop.

One update consumes ``world_size * update_freq`` consecutive batches of the epoch's
deterministic batch list; process ``r`` takes batches ``r, r + W, ...`` of them. The loss
is normalised by the target tokens of the whole update (known from stored lengths, so no
communication is needed), which makes W processes with batch B equal to one process
accumulating W batches. Checkpoints carry everything needed to resume exactly.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from ..config import Recipe, dump_recipe
from ..data.batches import make_batches
from ..data.mixing import epoch_pool
from ..data.vocab import PAD_ID
from ..errors import NmtError, TrainingStopped
from ..model.packing import packed_attention_kernel
from ..model.transformer import Transformer, build_model
from ..utils.allocator import keep_freed_memory, release_freed_memory
from ..utils.cpu import check_parallelism
from ..utils.run_folder import RunFolder
from . import checkpoint
from .checkpoint import TrainingCheckpoint
from .dataset import load_dataset
from .distributed import (
    DistInfo,
    agree_on_stop,
    all_true_anywhere,
    barrier,
    init_distributed,
    set_threads,
    shutdown,
)
from .fit_at_end import calibrate_model_file
from .memory import CPU_MAX_TOKENS, resolve_max_tokens
from .precision import resolve_precision
from .reporting import Reporter, describe_validation_time
from .start import check_compatible, finished_reason, load_parent, parent_moments, start_checkpoint
from .state import TrainState
from .stopping import Preempted, StopRequest
from .update import Updater, gathered_rng, restore_rng
from .validate import validate

Log = Callable[[str], None]

# Updates between two releases of the C heap's free memory (utils/allocator.py): often enough that the heap
# does not grow with the run, rarely enough that re-faulting one update's pages costs little.
RELEASE_MEMORY_EVERY = 50


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
        self.model.packed = self.config.packed
        _prefer_memory_efficient_attention(info.device)
        self.parent: dict[str, Any] | None = None  # the model a fine-tuning run started from (train.init_from)
        self.precision = resolve_precision(self.config.precision, info.device)
        if self.config.packed:
            kernel = packed_attention_kernel(info.device, self.precision)
            log(f"train.packed: sentences laid end to end, attention through {kernel}")
        self.state = TrainState()
        self.report = Reporter(self.folder, self.config.tensorboard, info, log)
        self._last_save_time = time.monotonic()
        self.max_tokens = recipe.train.max_tokens if isinstance(recipe.train.max_tokens, int) else CPU_MAX_TOKENS
        self.stop = StopRequest()  # signals, installed while run() trains (train/stopping.py)
        self.updates = Updater(
            self.model, recipe, info, self.data.train, self.precision, self.stop, log, self._out_of_memory
        )
        self.stopped_by: str | None = None  # the signal that ended training, if one did
        self.preempted = False  # every process agreed to stop for a preemption signal: save and leave
        self._saved_step = -1  # the update of the newest checkpoint on disk (the same on every process)
        self._validated_step = -1  # the update the last finished validation saw
        self._last_validation_seconds = 0.0  # how long the last validation took (none yet: 0)

    # ----------------------------------------------------------------- set-up

    def prepare_run_dir(self, resume: bool | None, start_from: str | None = None) -> str | None:
        """Create the run folder, or resume from a checkpoint of it; every check comes before any write.

        Returns why the run is already finished (then nothing was trained or changed), or None.
        """
        start = start_checkpoint(self.folder, resume, start_from, self.info.device)
        if start is None and self.config.init_from:
            self.parent = load_parent(Path(self.config.init_from), self.folder, self.recipe, self.data, self.model, self.log)
            self.updates.restart_average()  # averages from the parent's weights
            if self.config.init_optimizer:
                self.updates.start_moments(parent_moments(Path(self.config.init_from), self.model, self.log))
        if start is not None:
            check_compatible(start, self.recipe, self.data)
            finished = finished_reason(self.config, start.payload["train_state"])
            if finished and not start.payload["train_state"].get("validation_due"):
                if self.info.is_main and not self.folder.model_file.is_file():
                    self._restore(start)  # killed before the model file was written: write it now
                    self._write_model_file()
                return f"{finished} at update {start.step:,}"
        if self.info.is_main:
            spm_models = {side: self.data.vocab_blobs[side] for side in ("src", "tgt")}
            for leftover in self.folder.write_inputs(dump_recipe(self.recipe), spm_models):
                self.log(f"removed {leftover}, left behind by a killed process")
        barrier(self.info)
        if start is not None:
            self._restore(start)
        self.max_tokens = self.state.max_tokens = resolve_max_tokens(
            self.config, self.state.max_tokens, self.info.device, self.log, self.updates.probe_batch_size
        )
        self.updates.max_tokens = self.max_tokens
        if self.info.distributed:
            self.updates.network = DistributedDataParallel(
                self.model, device_ids=[self.info.local_rank] if self.info.device.type == "cuda" else None
            )
        if self.config.compile:
            compile_layers(self.model)
        return None

    def _restore(self, start: TrainingCheckpoint) -> None:
        payload, path = start.payload, start.path
        self.model.load_state_dict(payload["model"])
        self.updates.load_state_dict(payload)
        self.state.load_state_dict(payload["train_state"])
        self._saved_step = self.state.step
        self.parent = payload.get("parent")
        info = self.info
        reseed = self.config.seed + 1000 * info.rank + self.state.step
        restore_rng(payload["rng"], info.rank, info.world_size, info.device, reseed)
        self.report.resumed_at(self.state.step, self.state.validation_due)
        self.log(f"resuming from {path} (update {self.state.step:,}, epoch {self.state.epoch})")

    # ----------------------------------------------------------------- the loop

    def run(self) -> TrainState:
        """Train until a stop rule fires; write the final checkpoint and the model file (a preemption
        signal writes the checkpoint only: ``train/stopping.py``)."""
        train = self.data.train
        self.report.start(
            self.model, self.recipe, train.pair_lengths, self.precision, len(train) if train.chains is not None else None
        )
        self.model.train()
        with self.stop, self.report.progress(self.config.max_steps, self.state.step) as bar:
            reason = None
            if self.state.validation_due:  # the validation a preemption interrupted runs first
                reason = self._pending_validation()
            while reason is None:
                reason = self._train_epoch(bar)
            self._finish(reason)
        return self.state

    def _pending_validation(self) -> str | None:
        if self._validate_and_track():
            return f"no improvement in {self.config.patience} validations (early stopping)"
        return self._stop_reason()

    def _train_epoch(self, bar: Any) -> str | None:
        """Updates over the rest of this epoch's batches; returns why training stops, or None for the next epoch."""
        info, config = self.info, self.config
        started = time.monotonic() - self.state.elapsed
        window = self.report.window
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
                sums = self.updates.run(batches[first : first + per_update], self.state.step, self.state.elapsed)
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
                reason = self._after_update(bar)
            if reason is not None:
                return reason
        self.state.epoch += 1
        self.state.epoch_batches_done = 0
        if config.max_epochs and self.state.epoch > config.max_epochs:
            return f"reached {config.max_epochs} epochs"
        return None

    def _epoch_batches(self) -> list[np.ndarray]:
        train = self.data.train
        pool = None
        if train.directions is not None:  # a multilingual epoch: each direction's share drawn by temperature
            pool = epoch_pool(train.directions, self.recipe.data.temperature, self.config.seed, self.state.epoch)
        return make_batches(
            train.pair_lengths,
            self.max_tokens,
            self.recipe.model.max_positions,
            self.config.seed,
            self.state.epoch,
            pool,
        )

    def _out_of_memory(self, split: int) -> None:
        self.log(
            f"out of GPU memory at update {self.state.step + 1:,}: each batch now runs as {split} "
            "accumulation steps (same gradients, less memory)"
        )
        self.report.write({"step": self.state.step, "oom_split": split})

    # ----------------------------------------------------------------- after each update

    def _after_update(self, bar: Any) -> str | None:
        config, state = self.config, self.state
        if state.step % RELEASE_MEMORY_EVERY == 0:
            release_freed_memory()
        if state.step % config.log_every == 0:
            self.report.update(bar, self.state, self.updates.last_lr, self.updates.scaler)
        if config.validate_every and state.step % config.validate_every == 0 and self._validation_fits():
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
        signalled, state.elapsed = agree_on_stop(stop.signal is not None, state.elapsed, self.info)
        time_up = bool(config.max_seconds) and state.elapsed >= config.max_seconds
        if signalled or time_up:
            if signalled:
                self.preempted = all_true_anywhere(stop.preempted, self.info)
                self.stopped_by = stop.signal or ("SIGTERM" if self.preempted else "SIGINT")
                return f"stopped by {stop.signal or 'another process'}"
            return f"reached max_time {config.max_time}"
        if config.max_steps and state.step >= config.max_steps:
            return f"reached {config.max_steps:,} updates"
        return None

    def _validation_fits(self) -> bool:
        """Whether a scheduled validation keeps the time spent validating within ``train.valid_share`` of the
        run's time, judged by the last validation's length (rank 0 decides; every process gets its answer)."""
        share, state = self.config.valid_share, self.state
        if not share or not self._last_validation_seconds:
            return True
        cost = self._last_validation_seconds
        over = self.info.is_main and state.validation_seconds + cost > share * (state.elapsed + cost)
        if not all_true_anywhere(over, self.info):
            return True
        if not state.validations_put_off:
            self.log(
                f"validation at update {state.step:,} put off: validations took {state.validation_seconds:.0f} s of "
                f"{state.elapsed:.0f} s, more would pass train.valid_share {share:g} (later ones are put off alike)"
            )
        state.validations_put_off += 1
        return False

    def _validate_and_track(self) -> bool:
        """Validate on rank 0, track the best checkpoint; return True when patience ran out. The time it takes
        counts in the run's elapsed time on every process (a time budget is spent by it too)."""
        if self.data.valid is None or (self.data.valid_refs is None and not self.data.directions):
            return False
        began = time.monotonic()
        try:
            return self._validate_on_main()
        finally:
            took = time.monotonic() - began
            self.state.elapsed += took  # so the budget check right after sees it: no update (and validation) after
            self.state.validation_seconds += took
            self._last_validation_seconds = took

    def _validate_on_main(self) -> bool:
        assert self.data.valid is not None  # checked by the caller
        began = time.monotonic()
        stop = False
        self._validated_step = self.state.step  # on every process: the final validation is not repeated
        if self.info.is_main:
            try:
                with self.stop.interruptible():  # the other processes wait in the collective below
                    result = validate(
                        self.model,
                        self.data.valid,
                        self.data.valid_refs,
                        self.data.vocabs,
                        self.recipe,
                        self.info.device,
                        self.data.directions,
                    )
            except Preempted:
                self.state.validation_due = True  # saved with the checkpoint; resuming runs it first
                self.log(f"validation at update {self.state.step:,} abandoned at {self.stop.signal}; it runs on resuming")
                return all_true_anywhere(False, self.info)
            self.state.validation_due = False
            release_freed_memory()  # the search's buffers, shaped unlike training's
            self.report.validation(self.state.step, result, self.recipe.model.max_positions, time.monotonic() - began)
            score = result.bleu if result.bleu is not None else -result.loss
            improved, stop = self.state.track_validation(score, self.config.patience)
            if improved:
                checkpoint.save(self.folder.best_file, self._model_payload(), kind="weights")
        return all_true_anywhere(stop, self.info)

    # ----------------------------------------------------------------- files

    def _model_payload(self) -> dict[str, Any]:
        return checkpoint.weights_payload(
            self.model.state_dict(), self.recipe, self.parent, self.data.vocab_blobs, self.state.step
        )

    def _save(self) -> None:
        """Write a full training checkpoint (rank 0), keeping the last K."""
        rng = gathered_rng(self.info)
        self._last_save_time = time.monotonic()
        if self.info.is_main:
            payload = checkpoint.training_payload(
                self._model_payload(),
                {**self.updates.state_dict(), "train_state": self.state.state_dict(), "rng": rng},
                self.info.world_size,
                self.data.identity,
            )
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
            if self.state.validation_seconds:
                self.log(describe_validation_time(self.state))
            if not self.preempted:
                self._write_model_file_unless_preempted()
            self.report.close()
        barrier(self.info)

    def _write_model_file_unless_preempted(self) -> None:
        try:
            with self.stop.interruptible():
                self._write_model_file()
        except Preempted:
            self.stopped_by = self.stop.signal
            self.log(f"{self.folder.model_file} not written ({self.stop.signal}); the next `nmt train` writes it")

    def _write_model_file(self) -> None:
        ema = self.updates.ema.model_state_dict() if self.updates.ema is not None else None
        target = checkpoint.write_model_file(self.folder, self.config, self._model_payload(), ema, self.log)
        if self.config.calibrate:
            try:
                calibrate_model_file(target, self.recipe, self.info.device, self.log)
            except Preempted:  # the model file is whole; only its calibration is missing
                self.stopped_by = self.stop.signal
                self.log(f"calibration abandoned at {self.stop.signal}: {target} has none (nmt calibrate fits one)")


def _prefer_memory_efficient_attention(device: torch.device) -> None:
    """On a GPU, leave cuDNN's attention kernel out of PyTorch's choice.

    Padding masks rule out the flash kernel; PyTorch then picks cuDNN's, which was slower than the
    memory-efficient kernel for a Transformer's updates (``benchmarks/bench_gpu.py profile``; docs/choices.md).
    """
    if device.type == "cuda":
        torch.backends.cuda.enable_cudnn_sdp(False)


def train(recipe: Recipe, resume: bool | None = None, log: Log = print, start_from: str | None = None) -> Path:
    """Train ``recipe`` (alone or as one process of a torchrun group); return the run folder.

    ``start_from`` (``--resume-from``) names the checkpoint to resume from: a step number or a file.
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


def compile_layers(model: Transformer) -> None:
    """``train.compile``: regional compilation, each encoder and decoder layer compiled in place (the
    state dict keeps its names). Layers of one kind share their compiled code, so the compile costs two
    layers' worth, not the model's; shapes are symbolic from the start, so batches of every length bucket
    run the same code where compiling the whole model recompiled for each new batch shape. What compiling
    gains is fused element-wise work (dropout, residual sums, normalisation, activation) between the
    matrix products; the products and attention run the same kernels either way."""
    for layer in [*model.encoder_layers, *model.decoder_layers]:
        layer.compile(dynamic=True)
