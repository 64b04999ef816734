"""One update, apart from the loop that schedules it (:class:`Updater`): forward and backward over a process's
batches with the gradients adding up, the gradient norm, the optimizer and its schedule, and the random states an
abandoned update puts back."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, cast

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from ..config import Recipe
from ..data.batches import Batch, ParallelData, collate, target_tokens
from ..data.context import context_word_dropout
from ..model.transformer import Transformer
from .distributed import DistInfo, gather_objects
from .ema import WeightAverage
from .memory import free_cuda_memory, probe_gpu_batch, split_after_oom, split_rows
from .precision import autocast
from .repulsive import repulse_heads
from .schedule import Budget, learning_rate
from .stopping import Preempted, StopRequest


def accumulate(
    network: torch.nn.Module,
    batches: Iterable[Batch],
    count: int,
    total_tokens: int,
    world_size: int,
    label_smoothing: float,
    scaler: torch.amp.GradScaler,
    autocast: Callable[[], contextlib.AbstractContextManager],
    alignment_weight: float = 0.0,
) -> dict[str, Any]:
    """Forward and backward over ``count`` batches of one update; the loss is normalised by the whole
    update's ``total_tokens`` (every process's), so the gradients add up to the update's. With
    ``alignment_weight``, batches that carry word links add the guided-alignment loss."""
    sums: dict[str, Any] = {"loss": 0.0, "nll": 0.0, "tokens": 0, "src_tokens": 0, "slots": 0}
    for i, batch in enumerate(batches):
        sync = i == count - 1 or not isinstance(network, DistributedDataParallel)
        with (
            contextlib.nullcontext() if sync else cast(DistributedDataParallel, network).no_sync(),
            autocast(),
        ):
            # The token count comes from the host: counting on the device would wait for the GPU.
            loss, nll, n = network(
                batch.src, batch.tgt_in, batch.tgt_out, label_smoothing, batch.target_tokens, batch.alignment,
                alignment_weight, batch.blocks, batch.source_tokens,
            )  # fmt: skip
            # DDP averages gradients over processes; scaling by W makes that a sum.
            scaled = loss * (world_size / total_tokens)
        scaler.scale(scaled).backward()
        # Summed on the device and read only when a log line is written: each read waits for the
        # GPU, and while the host waits it cannot queue the next update's kernels.
        sums["loss"] += loss.detach()
        sums["nll"] += nll.detach()
        sums["tokens"] += n
        sums["src_tokens"] += batch.source_tokens
        sums["slots"] += batch.src.numel() + batch.tgt_out.numel()  # real tokens and padding, both sides
    return sums


def rng_states(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The random states an update draws its dropout masks from (CPU, and the GPU's when training there)."""
    return torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None


def set_rng_states(states: tuple[torch.Tensor, torch.Tensor | None], device: torch.device) -> None:
    torch.set_rng_state(states[0])
    if states[1] is not None:
        torch.cuda.set_rng_state(states[1], device)


def gathered_rng(info: DistInfo) -> dict[str, list[Any]]:
    """Every process's random states, for a checkpoint (each process must call it: it is a collective)."""
    cuda = gather_objects(torch.cuda.get_rng_state(), info) if info.device.type == "cuda" else []
    return {"torch": gather_objects(torch.get_rng_state(), info), "cuda": cuda}


def restore_rng(saved: dict[str, list[torch.Tensor]], rank: int, world_size: int, device: torch.device, reseed: int) -> None:
    """Each process's random states from a checkpoint's (``saved["torch"]``, ``saved["cuda"]``: one per process
    of the run that wrote it). With another number of processes they cannot be matched up: the CPU state of
    process 0 then, and a fresh seed ``reseed`` per process (the run stays reproducible, not identical)."""
    same_world = len(saved["torch"]) == world_size
    # The checkpoint was mapped onto the training device; RNG states must be CPU byte tensors.
    torch.set_rng_state((saved["torch"][rank] if same_world else saved["torch"][0]).cpu())
    if device.type == "cuda" and saved.get("cuda") and same_world:
        torch.cuda.set_rng_state(saved["cuda"][rank].cpu())
    if not same_world:
        torch.manual_seed(reseed)


def gradient_norm(model: torch.nn.Module, clip: float) -> torch.Tensor:
    """The gradients' total L2 norm before clipping (clipped to ``clip`` when set); stays on the device."""
    if clip:
        return torch.nn.utils.clip_grad_norm_(model.parameters(), clip).detach()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return torch.zeros(())
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))


class Updater:
    """One optimizer update of a run, as the loop asks for it: forward and backward over this process's share of
    the update's batches, the gradient norm and clipping, the optimizer, the learning-rate schedule, fp16's loss
    scaler and the moving average of the weights; after a CUDA OOM, the same update again with each batch split
    finer. What it holds is saved with every checkpoint (:meth:`state_dict`)."""

    def __init__(
        self,
        model: Transformer,
        recipe: Recipe,
        info: DistInfo,
        train: ParallelData,
        precision: str,
        stop: StopRequest,
        log: Callable[[str], None],
        out_of_memory: Callable[[int], None],
    ) -> None:
        """``out_of_memory`` is told each new split after a CUDA OOM."""
        self.model, self.recipe, self.info, self.train, self.precision = model, recipe, info, train, precision
        self.config = recipe.train
        self.stop, self.log, self.out_of_memory = stop, log, out_of_memory
        self.network: torch.nn.Module = model  # DistributedDataParallel around it in a torchrun group
        self.optimizer = _optimizer(model, recipe)
        self.schedule = learning_rate(self.config, recipe.model.d_model)
        self.budget = Budget.of(self.config)
        self.scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
        self.ema = WeightAverage(model, self.config.ema_decay) if self.config.ema_decay else None
        self.ema_restarted = False  # train.average_stretch: the moving average began again at the last stretch
        self.max_tokens = 0  # the batches' size, for the OOM message
        self.split = 1  # each batch runs as this many accumulation steps (raised after a CUDA OOM)
        self.last_lr = 0.0  # the rate the last update used

    def restart_average(self) -> None:
        """The moving average starts again from the model's weights (a fine-tuning parent's, resumed ones)."""
        if self.ema is not None:
            self.ema = WeightAverage(self.model, self.config.ema_decay)

    def _dropped(self, batch: Batch) -> Batch:
        """``train.context_dropout``: the batch with tokens of its sentences being translated dropped, drawn on
        the host before it moves (``data/context.py::context_word_dropout``)."""
        if not self.config.context_dropout:
            return batch
        brk = self.train.context.src_break if self.train.context is not None else None
        blocks = batch.blocks[0] if batch.blocks is not None else None
        return replace(batch, src=context_word_dropout(batch.src, self.config.context_dropout, brk, blocks))

    def state_dict(self) -> dict[str, Any]:
        return {
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            **({"ema": self.ema.state_dict(), "ema_first_update": self.ema.first_update} if self.ema else {}),
            "ema_restarted": self.ema_restarted,
        }

    def start_moments(self, moments: dict[int, Any]) -> None:
        """Start from another run's Adam state (``train.init_optimizer``), checked to fit this model's parameters;
        the optimizer's own settings stay this run's."""
        own = self.optimizer.state_dict()
        self.optimizer.load_state_dict({"state": moments, "param_groups": own["param_groups"]})

    def load_state_dict(self, payload: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(payload["optimizer"])
        # (the learning rate is a function of the train state; older checkpoints' "scheduler" is not needed)
        self.scaler.load_state_dict(payload["scaler"])
        self.ema_restarted = bool(payload.get("ema_restarted", False))
        if self.ema is not None:
            if payload.get("ema"):
                self.ema.load_state_dict(payload["ema"])
                self.ema.first_update = int(payload.get("ema_first_update", 0))
            else:
                self.restart_average()
                self.log("train.ema_decay is new to this run: the moving average starts from the resumed weights")

    def run(self, group: list[np.ndarray], step: int, seconds: float) -> dict[str, Any]:
        """Update ``step + 1`` over ``group``, ``seconds`` into the run; after a CUDA OOM, again with each batch
        split finer."""
        spent = self.budget.spent_at(step + 1, seconds)
        self.last_lr = self.schedule(step + 1, spent)
        for group_of_parameters in self.optimizer.param_groups:
            group_of_parameters["lr"] = self.last_lr
        self._start_last_stretch(step, spent)
        while True:
            try:
                return self._try(group, step)
            except torch.cuda.OutOfMemoryError:
                pass  # recover outside the handler, so the traceback's frames free their tensors
            self.optimizer.zero_grad(set_to_none=True)
            free_cuda_memory(self.info.device)
            self.split = split_after_oom(self.split, self.info.distributed, step + 1, self.max_tokens)
            self.out_of_memory(self.split)

    def _try(self, group: list[np.ndarray], step: int) -> dict[str, Any]:
        """Forward/backward over this process's share of ``group``, then one optimizer step."""
        info = self.info
        total_tokens = sum(target_tokens(self.train, b) for b in group)
        pieces = [
            indices[part] for indices in group[info.rank :: info.world_size] for part in split_rows(len(indices), self.split)
        ]
        rng = rng_states(info.device)
        try:
            # Forward and backward passes change nothing but the gradients and the random state, both
            # put back here when a preemption drops them; the optimizer step below always completes.
            with self.stop.interruptible(enabled=not info.distributed):
                batches = (self._dropped(collate(self.train, indices)).to(info.device) for indices in pieces)
                sums = accumulate(
                    self.network, batches, len(pieces), total_tokens, info.world_size, self.config.label_smoothing,
                    self.scaler, self.autocast, self.config.guided_alignment,
                )  # fmt: skip
        except Preempted:
            self.optimizer.zero_grad(set_to_none=True)
            set_rng_states(rng, info.device)
            raise
        self.scaler.unscale_(self.optimizer)
        if self.recipe.model.repulsive:
            repulse_heads(self.model, self.recipe.model.repulsive)
        sums["grad_norm"] = gradient_norm(self.model, self.config.clip_norm)  # before clipping
        scale = self.scaler.get_scale() if self.scaler.is_enabled() else 1.0
        self.scaler.step(self.optimizer)  # skipped by the scaler when fp16 gradients overflowed
        self.scaler.update()
        skipped = self.scaler.is_enabled() and self.scaler.get_scale() < scale
        if not skipped and self.ema is not None:  # (a skipped update does not count, for the schedule neither)
            self.ema.update(step)
        self.optimizer.zero_grad(set_to_none=True)
        return {**sums, "skipped": skipped}

    def _start_last_stretch(self, step: int, spent: float) -> None:
        """``train.average_stretch``: the moving average starts again from the weights where the budget's last
        stretch starts, so that it averages the end of the run, not weights from the warm-up."""
        stretch = self.config.average_stretch
        if self.ema is None or not stretch or self.ema_restarted or spent < 1.0 - stretch:
            return
        self.ema = WeightAverage(self.model, self.config.ema_decay, first_update=step)
        self.ema_restarted = True
        self.log(f"update {step + 1:,}: the last {stretch:.0%} of the budget; the moving average starts here")

    def autocast(self) -> contextlib.AbstractContextManager:
        return autocast(self.precision, self.info.device)

    def probe_batch_size(self) -> int:
        """``train.max_tokens: auto`` on a GPU: the largest batch whose update fits, the same on every process."""
        longest = min(int(self.train.pair_lengths.max()), self.recipe.model.max_positions)
        sizes = (self.model.src_vocab, self.model.tgt_vocab)
        return probe_gpu_batch(
            self.model, self.optimizer, sizes, longest, self._probe_loss, self.autocast, self.info, self.log
        )

    def _probe_loss(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
        """The loss of one of the memory probe's batches, whose tokens are all real (no padding)."""
        smoothing = self.config.label_smoothing
        return self.model(src, tgt_in, tgt_out, smoothing, tgt_out.numel(), None, 0.0, None, src.numel())[0]


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
