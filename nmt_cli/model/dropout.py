"""Dropout, with a cheaper random mask on the CPU.

On the CPU, ``F.dropout`` draws its mask with ``bernoulli_`` into a float tensor, divides it and
multiplies: the random draw alone was a tenth of an fp32 training update of m30k-small on the CPU
(docs/choices.md). Here the
mask is cut from 64-bit random words, 16 bits per element: an element is kept where its 16-bit value
is at least ``round(p * 65536)`` levels above the bottom, and the kept ones are scaled by
``65536 / kept levels``, so the output's expectation is exactly the input. The drop rate differs from
``p`` by at most 1/131072. The mask is saved for the backward pass as bool (1 byte an element, not 4).
The random words come from PyTorch's default generator, so seeding, the saved RNG state of an exact
resume and activation checkpointing's replay work as they do for ``F.dropout``. Other devices keep
``F.dropout``: CUDA fuses it into one kernel.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LEVELS = 1 << 16  # distinct values of one 16-bit piece of a random word
WORD_PIECES = 4  # 16-bit pieces in a 64-bit word


def apply_dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest to keep the expectation."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0 or not x.is_floating_point():
        return F.dropout(x, p, training=True)
    return _CpuDropout.apply(x, p)  # type: ignore[no-untyped-call]


def keep_mask(shape: torch.Size, p: float) -> tuple[Tensor, float]:
    """A bool mask of ``shape`` keeping each element with probability 1 - p (to 1/65536), and the
    scale that makes the kept elements' expectation exact."""
    dropped_levels = round(p * LEVELS)
    count = shape.numel()
    # random_(int64 min, None) draws all 64 bits; random_() alone leaves the top bit 0, which would
    # bias one piece in four.
    words = torch.empty((count + WORD_PIECES - 1) // WORD_PIECES, dtype=torch.int64).random_(-(2**63), None)
    pieces = words.view(torch.int16)[:count].view(shape)  # uniform over [-32768, 32767]
    keep = pieces >= dropped_levels - LEVELS // 2
    return keep, LEVELS / (LEVELS - dropped_levels)


class _CpuDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, p: float) -> Tensor:
        keep, scale = keep_mask(x.shape, p)
        ctx.save_for_backward(keep)
        ctx.scale = scale
        return _keep_and_scale(x, keep, scale)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        (keep,) = ctx.saved_tensors
        return _keep_and_scale(grad, keep, ctx.scale), None


def _keep_and_scale(x: Tensor, keep: Tensor, scale: float) -> Tensor:
    # where() reads the bool mask as is; x.mul(keep) would first copy it to x's dtype (docs/choices.md).
    return torch.where(keep, x, torch.zeros((), dtype=x.dtype)).mul_(scale)


class Dropout(nn.Module):
    """``nn.Dropout`` through :func:`apply_dropout`."""

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return apply_dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
