"""``torch.distributed`` set-up: read torchrun's environment, pick the backend and device.

nmt never launches processes of its own making: ``nmt train --nproc N`` runs
``python -m torch.distributed.run`` (torchrun), which also handles multi-node rendezvous.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from ..config import TrainConfig
from ..utils.process import die_with_parent
from ..utils.signals import PREEMPTION_SIGNALS


@dataclass(frozen=True)
class DistInfo:
    """This process's place in the run."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    process_group: bool = False  # joined a torch.distributed group (torchrun), even of one process

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.process_group


def init_distributed(config: TrainConfig) -> DistInfo:
    """Join the process group torchrun describes (NCCL on CUDA, gloo on CPU), or run alone.

    Under torchrun the group is joined even by a single process (``nmt train --gpus 1``), so
    one GPU runs the same NCCL and DistributedDataParallel path as eight.
    """
    launched = "WORLD_SIZE" in os.environ
    if launched:
        die_with_parent(os.getppid())  # a killed torchrun takes its workers along, not leaving orphans training
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    use_cuda = config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if (world > 1 or launched) and not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timedelta(minutes=config.dist_timeout_minutes))
    return DistInfo(rank, world, local_rank, local_world, device, dist.is_initialized())


def set_threads(config: TrainConfig, info: DistInfo) -> int:
    """Intra-op threads: the recipe's number, else the cores shared among local processes."""
    threads = config.threads or max(1, (os.cpu_count() or 1) // info.local_world_size)
    torch.set_num_threads(threads)
    return threads


def all_true_anywhere(flag: bool, info: DistInfo) -> bool:
    """True on every process if ``flag`` is true on any (used to stop all ranks together)."""
    if not info.distributed:
        return flag
    tensor = torch.tensor([1.0 if flag else 0.0], device=info.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item() > 0)


def agree_on_stop(flag: bool, seconds: float, info: DistInfo) -> tuple[bool, float]:
    """(``flag`` is true on any process, the most ``seconds`` of any process), the same on every process, in one
    collective: whether to stop and how much of a time budget is spent (the learning rate follows it, so every
    process must see the same figure)."""
    if not info.distributed:
        return flag, seconds
    tensor = torch.tensor([1.0 if flag else 0.0, seconds], device=info.device, dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor[0].item() > 0), float(tensor[1].item())


def gather_objects(obj: object, info: DistInfo) -> list[object]:
    """``obj`` from every rank, in rank order (one element when not distributed)."""
    if not info.distributed:
        return [obj]
    gathered: list[object] = [None] * info.world_size
    dist.all_gather_object(gathered, obj)
    return gathered


def barrier(info: DistInfo) -> None:
    if info.distributed:
        dist.barrier()


def shutdown(info: DistInfo) -> None:
    if info.distributed and dist.is_initialized():
        dist.destroy_process_group()


def launch(nproc: int, train_args: list[str]) -> int:
    """Run ``nmt train`` in ``nproc`` local processes through torchrun; return its exit code.

    torchrun passes SIGTERM on to its workers, which save and exit (``train/stopping.py``); it would die
    of SIGUSR1 and take its workers along unsaved, so this process passes both on to torchrun as SIGTERM
    and waits for it (then exits 128 + the signal it received).
    Ctrl-C reaches every process of the terminal's group by itself: this one ignores it and waits
    while the workers finish their last update and write the model.
    """
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "nmt_cli",
        "train",
        *train_args,
    ]
    child = subprocess.Popen(command)
    received: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        child.send_signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, forward) for sig in PREEMPTION_SIGNALS}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 + received[0] if received else code
