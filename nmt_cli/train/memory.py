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

from collections.abc import Callable

import torch

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


__all__ = ["CPU_MAX_TOKENS", "MAX_SPLIT", "largest_fitting", "with_headroom", "split_rows", "free_cuda_memory"]
