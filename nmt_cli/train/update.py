"""The arithmetic of one update, apart from the loop that schedules it: forward and backward over a process's
batches with the gradients adding up, the gradient norm, and the random states an abandoned update puts back."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any, cast

import torch
from torch.nn.parallel import DistributedDataParallel

from ..data.batches import Batch
from .distributed import DistInfo, gather_objects


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
                alignment_weight, batch.previous, batch.source_tokens,
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
