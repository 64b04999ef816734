"""Fitting batches to GPU memory: ``train.max_tokens: auto`` and batches split after an OOM.

``auto`` follows Marian's mini-batch-fit idea: before training, run forward and backward on
worst-case batches (every position a real token, the longest sentences of the corpus, and
short ones) of growing size until the GPU runs out of memory, then bisect. The optimizer's
state is reserved during the probe, and the result keeps a margin for fragmentation. What
still runs out of memory later (a rarer batch shape, fragmentation) is split into
accumulation steps by the training loop instead of ending the run; the gradient of the split
batch equals the whole batch's, because the loss is normalised by the update's target tokens.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import cast

import torch

from ..config import TrainConfig
from ..errors import NmtError
from ..model.transformer import count_parameters
from .distributed import DistInfo, gather_objects

CPU_MAX_TOKENS = 4096  # auto on the CPU: memory is rarely the limit there, speed per update is
PROBE_START = 2048
PROBE_LIMIT = 1 << 18
PROBE_GRAIN = 512  # bisection stops when the bracket is this narrow
HEADROOM = 0.9  # use 90% of the largest batch that fitted: room for fragmentation and rarer shapes
MAX_SPLIT = 64  # a batch split this finely and still out of memory: give up with advice


def largest_fitting(
    fits: Callable[[int], bool], start: int = PROBE_START, limit: int = PROBE_LIMIT, grain: int = PROBE_GRAIN
) -> int:
    """The largest size in [start, limit] (to within ``grain``) for which ``fits(size)`` holds.

    Doubles from ``start`` until a size fails, then bisects between the last success and the
    first failure. Returns 0 when even ``start`` does not fit. Assumes ``fits`` is monotone.
    """
    if not fits(start):
        return 0
    good, bad = start, None
    while bad is None and good < limit:
        size = min(2 * good, limit)
        if fits(size):
            good = size
        else:
            bad = size
    while bad is not None and bad - good > grain:
        middle = (good + bad) // 2
        if fits(middle):
            good = middle
        else:
            bad = middle
    return good


def with_headroom(size: int) -> int:
    """The batch size to train with, given the largest that fitted (multiple of 64)."""
    return max(64, int(size * HEADROOM) // 64 * 64)


def split_rows(rows: int, pieces: int) -> list[slice]:
    """``pieces`` contiguous, non-empty slices covering ``range(rows)`` (fewer if rows < pieces)."""
    pieces = max(1, min(pieces, rows))
    bounds = [round(i * rows / pieces) for i in range(pieces + 1)]
    return [slice(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def free_cuda_memory(device: torch.device) -> None:
    """Return cached blocks to the driver after an OOM (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.empty_cache()


def split_after_oom(split: int, distributed: bool, step: int, max_tokens: int) -> int:
    """How many accumulation steps each batch runs as after a CUDA OOM at ``step``: twice ``split``. Not
    possible (a one-line error naming the fix) under DDP, whose other processes already wait for this
    one's gradients, or beyond ``MAX_SPLIT``."""
    if distributed or split >= MAX_SPLIT:
        why = (
            "the other processes are already waiting for this one's gradients"
            if distributed
            else f"even batches split {split} ways do not fit"
        )
        raise NmtError(
            f"out of GPU memory at update {step:,} ({why}); lower train.max_tokens "
            f"(now {max_tokens:,}) or set train.activation_checkpointing: true"
        )
    return split * 2


def resolve_max_tokens(
    config: TrainConfig, stored: int, device: torch.device, log: Callable[[str], None], probe: Callable[[], int]
) -> int:
    """The batch size: the one a resumed run used (``stored``, 0 for a new run), the recipe's, or (auto) what
    ``probe`` finds on the GPU."""
    if config.max_tokens != "auto":
        if stored and stored != config.max_tokens:
            log(
                f"train.max_tokens changed from {stored:,} to {config.max_tokens:,}: batches from here "
                "on differ from the interrupted run's"
            )
        return int(config.max_tokens)
    if stored:
        return stored  # auto resolves once: a resumed run keeps its batches
    if device.type != "cuda":
        log(f"train.max_tokens auto: {CPU_MAX_TOKENS:,} on the CPU (auto sizes batches to GPU memory)")
        return CPU_MAX_TOKENS
    return probe()


def probe_gpu_batch(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    vocab_sizes: tuple[int, int],
    longest: int,
    loss: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    autocast: Callable[[], contextlib.AbstractContextManager],
    info: DistInfo,
    log: Callable[[str], None],
) -> int:
    """The batch size to train with on this GPU (the module's text), the smallest any process found."""
    device = info.device
    widths = sorted({longest, min(16, longest)})  # long sentences, and many short rows

    def fits(tokens: int) -> bool:
        """Whether forward and backward of all-real-token batches of ``tokens`` run without OOM."""
        fitted = True
        try:
            for width in widths:
                rows = max(1, tokens // width)
                ids = torch.randint(4, vocab_sizes[1], (3, rows, width), device=device)
                src = ids[0] % vocab_sizes[0]
                with autocast():
                    value = loss(src.clamp(min=4), ids[1], ids[2])
                value.backward()
                del ids, src, value
        except torch.cuda.OutOfMemoryError:
            fitted = False
        optimizer.zero_grad(set_to_none=True)
        free_cuda_memory(device)
        return fitted

    # Adam keeps two fp32 moments per parameter; hold their room while probing.
    reserve = torch.empty(2 * count_parameters(model), dtype=torch.float32, device=device)
    with torch.random.fork_rng(devices=[device]):  # the probe must not shift the run's randomness
        fitted = largest_fitting(fits)
    del reserve
    free_cuda_memory(device)
    torch.cuda.reset_peak_memory_stats(device)
    if fitted == 0:
        raise NmtError(
            f"train.max_tokens auto: not even a batch of {widths[-1]} tokens fits in GPU memory; "
            "set train.activation_checkpointing: true, precision bf16, or a smaller model"
        )
    chosen = min(cast(list[int], gather_objects(with_headroom(fitted), info)))  # every process uses the same size
    log(
        f"train.max_tokens auto: batches of {fitted:,} tokens fit in GPU memory "
        f"(sentences of {widths[-1]} and {widths[0]} tokens); training with {chosen:,}"
    )
    return chosen


__all__ = [
    "CPU_MAX_TOKENS",
    "resolve_max_tokens",
    "probe_gpu_batch",
    "MAX_SPLIT",
    "largest_fitting",
    "with_headroom",
    "split_rows",
    "free_cuda_memory",
]
