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
from ..data.batches import collate, make_batches, target_tokens
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
    all_true_anywhere,
    barrier,
    init_distributed,
    set_threads,
    shutdown,
)
from .ema import WeightAverage
from .fit_at_end import calibrate_model_file
from .memory import CPU_MAX_TOKENS, free_cuda_memory, probe_gpu_batch, resolve_max_tokens, split_after_oom, split_rows
from .precision import autocast, resolve_precision
from .reporting import Reporter
from .repulsive import repulse_heads
from .schedule import learning_rate
from .start import check_compatible, finished_reason, load_parent, start_checkpoint
from .state import TrainState
from .stopping import Preempted, StopRequest
from .update import accumulate, gathered_rng, gradient_norm, restore_rng, rng_states, set_rng_states
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
        self.optimizer = _optimizer(self.model, recipe)
        self.ema = WeightAverage(self.model, self.config.ema_decay) if self.config.ema_decay else None
        self.parent: dict[str, Any] | None = None  # the model a fine-tuning run started from (train.init_from)
        schedule = learning_rate(self.config, recipe.model.d_model)
        # The optimizer's base lr is 1.0, so the schedule's value is the learning rate of update s + 1.
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: schedule(s + 1))
        self.precision = resolve_precision(self.config.precision, info.device)
        if self.config.packed:
            kernel = packed_attention_kernel(info.device, self.precision)
            log(f"train.packed: sentences laid end to end, attention through {kernel}")
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.precision == "fp16")
        self.state = TrainState()
        self.report = Reporter(self.folder, self.config.tensorboard, info, log)
        self._last_save_time = time.monotonic()
        self.network: torch.nn.Module = self.model
        self.last_lr = 0.0
        self.max_tokens = recipe.train.max_tokens if isinstance(recipe.train.max_tokens, int) else CPU_MAX_TOKENS
        self.split = 1  # each batch runs as this many accumulation steps (raised after a CUDA OOM)
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
        start = start_checkpoint(self.folder, resume, start_from, self.info.device)
        if start is None and self.config.init_from:
            self.parent = load_parent(Path(self.config.init_from), self.folder, self.recipe, self.data, self.model, self.log)
            if self.ema is not None:
                self.ema = WeightAverage(self.model, self.config.ema_decay)  # averages from the parent's weights
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
            self.config, self.state.max_tokens, self.info.device, self.log, self._probe_batch_size
        )
        if self.info.distributed:
            self.network = DistributedDataParallel(
                self.model, device_ids=[self.info.local_rank] if self.info.device.type == "cuda" else None
            )
        if self.config.compile:
            compile_layers(self.model)
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
        info = self.info
        reseed = self.config.seed + 1000 * info.rank + self.state.step
        restore_rng(payload["rng"], info.rank, info.world_size, info.device, reseed)
        self.report.resumed_at(self.state.step, self.state.validation_due)
        self.log(f"resuming from {path} (update {self.state.step:,}, epoch {self.state.epoch})")

    # ----------------------------------------------------------------- the loop

    def run(self) -> TrainState:
        """Train until a stop rule fires; write the final checkpoint and the model file (a preemption
        signal writes the checkpoint only: ``train/stopping.py``)."""
        self.report.start(self.model, self.recipe, self.data.train.pair_lengths, self.precision)
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
        self.split = split_after_oom(self.split, self.info.distributed, self.state.step + 1, self.max_tokens)
        self.log(
            f"out of GPU memory at update {self.state.step + 1:,}: each batch now runs as {self.split} "
            "accumulation steps (same gradients, less memory)"
        )
        self.report.write({"step": self.state.step, "oom_split": self.split})

    def _try_update(self, group: list[np.ndarray]) -> dict[str, float]:
        """Forward/backward over this process's share of ``group``, then one optimizer step."""
        info = self.info
        total_tokens = sum(target_tokens(self.data.train, b) for b in group)
        pieces = [
            indices[part] for indices in group[info.rank :: info.world_size] for part in split_rows(len(indices), self.split)
        ]
        rng = rng_states(info.device)
        try:
            # Forward and backward passes change nothing but the gradients and the random state, both
            # put back here when a preemption drops them; the optimizer step below always completes.
            with self.stop.interruptible(enabled=not info.distributed):
                sums = self._accumulate(pieces, total_tokens)
        except Preempted:
            self.optimizer.zero_grad(set_to_none=True)
            set_rng_states(rng, info.device)
            raise
        self.scaler.unscale_(self.optimizer)
        if self.recipe.model.repulsive:
            repulse_heads(self.model, self.recipe.model.repulsive)
        sums["grad_norm"] = gradient_norm(self.model, self.config.clip_norm)  # before clipping
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
        batches = (collate(self.data.train, indices).to(self.info.device) for indices in pieces)
        return accumulate(
            self.network, batches, len(pieces), total_tokens, self.info.world_size, self.config.label_smoothing,
            self.scaler, self._autocast, self.config.guided_alignment,
        )  # fmt: skip

    def _probe_loss(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
        """The loss of one of the memory probe's batches, whose tokens are all real (no padding)."""
        smoothing = self.config.label_smoothing
        return self.model(src, tgt_in, tgt_out, smoothing, tgt_out.numel(), None, 0.0, None, src.numel())[0]

    def _probe_batch_size(self) -> int:
        """``train.max_tokens: auto`` on a GPU: the largest batch whose update fits, the same on every process."""
        longest = min(int(self.data.train.pair_lengths.max()), self.recipe.model.max_positions)
        return probe_gpu_batch(
            self.model,
            self.optimizer,
            (self.data.src_size, self.data.tgt_size),
            longest,
            self._probe_loss,
            self._autocast,
            self.info,
            self.log,
        )

    def _autocast(self) -> contextlib.AbstractContextManager:
        return autocast(self.precision, self.info.device)

    # ----------------------------------------------------------------- after each update

    def _after_update(self, bar: Any) -> str | None:
        config, state = self.config, self.state
        if state.step % RELEASE_MEMORY_EVERY == 0:
            release_freed_memory()
        if state.step % config.log_every == 0:
            self.report.update(bar, self.state, self.last_lr, self.scaler)
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

    def _validate_and_track(self) -> bool:
        """Validate on rank 0, track the best checkpoint; return True when patience ran out."""
        if self.data.valid is None or (self.data.valid_refs is None and not self.data.directions):
            return False
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
            self.report.validation(self.state.step, result, self.recipe.model.max_positions)
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
                {
                    "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict(),
                    "scaler": self.scaler.state_dict(),
                    "train_state": self.state.state_dict(),
                    "rng": rng,
                    **({"ema": self.ema.state_dict()} if self.ema else {}),
                },
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
        ema = self.ema.model_state_dict() if self.ema is not None else None
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


def compile_layers(model: Transformer) -> None:
    """``train.compile``: regional compilation, each encoder and decoder layer compiled in place (the
    state dict keeps its names). Layers of one kind share their compiled code, so the compile costs two
    layers' worth, not the model's; shapes are symbolic from the start, so batches of every length bucket
    run the same code where compiling the whole model recompiled for each new batch shape. What compiling
    gains is fused element-wise work (dropout, residual sums, normalisation, activation) between the
    matrix products; the products and attention run the same kernels either way."""
    for layer in [*model.encoder_layers, *model.decoder_layers]:
        layer.compile(dynamic=True)
