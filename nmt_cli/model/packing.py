"""Padding-free batches (``train.packed``): a batch's sentences laid end to end, attention restricted to each.

A padded batch computes every layer at every position of a (B, T) grid, padding included, and attention
over padding needs a mask, which keeps the GPU's flash-attention kernel out (it takes no mask). Packed, the
real tokens alone go through the layers as one row (1, N, D), and attention runs per sentence from the
sentences' offsets (``attention.packed_attention``): on CUDA in half precision PyTorch's variable-length
flash-attention kernel; elsewhere the same attention over the padded layout, unpacked for it and packed again,
so the arithmetic is that of the padded path (what the CPU tests compare).

Only the layers' inputs change: every other operation works token by token, so packing changes no result.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class Layout:
    """Where one side's real tokens sit in its padded (B, T) grid: their flat indices (N,), in order, each
    sentence's offset in the packed row (B + 1,), each token's position in its sentence (N,), and the mask."""

    index: Tensor
    offsets: Tensor
    positions: Tensor
    mask: Tensor

    @staticmethod
    def of(tokens: Tensor, pad_id: int, count: int) -> Layout:
        """The layout of ``tokens`` (B, T), which hold ``count`` real tokens (known on the host: finding an
        unknown number of them would wait for the GPU)."""
        mask = tokens != pad_id
        index = mask.flatten().nonzero_static(size=count).squeeze(1)
        lengths = mask.sum(dim=1, dtype=torch.int32)
        offsets = F.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))
        positions = (mask.cumsum(dim=1) - 1).flatten().index_select(0, index)
        return Layout(index, offsets, positions, mask)

    @property
    def width(self) -> int:
        """The padded grid's width: no sentence is longer (the kernel's bound on a sentence's length)."""
        return self.mask.size(1)

    def pack(self, padded: Tensor) -> Tensor:
        """(B, T, ...) -> the real tokens' rows, (N, ...)."""
        return padded.flatten(0, 1).index_select(0, self.index)

    def unpack(self, packed: Tensor) -> Tensor:
        """(N, ...) -> (B, T, ...), zeros at the padding."""
        rows, width = self.mask.shape
        flat = packed.new_zeros((rows * width, *packed.shape[1:]))
        return flat.index_copy(0, self.index, packed).view(rows, width, *packed.shape[1:])


@dataclass(frozen=True)
class Packing:
    """A packed batch's two sides: what the encoder's layers read for their self-attention (``source``) and
    the decoder's for theirs (``target``) and for their attention over the encoder output (both)."""

    source: Layout
    target: Layout


@functools.cache
def has_variable_length_kernel() -> bool:
    """Whether this PyTorch has the variable-length flash-attention kernel (``torch.nn.attention.varlen``)."""
    return importlib.util.find_spec("torch.nn.attention.varlen") is not None


def packed_attention_kernel(device: torch.device, precision: str) -> str:
    """What computes a packed batch's attention on ``device`` in ``precision``, in words (for the run's log)."""
    if device.type == "cuda" and precision in ("bf16", "fp16"):
        if has_variable_length_kernel():
            return "the variable-length flash-attention kernel"
        return f"the padded computation (PyTorch {torch.__version__} has no variable-length kernel; 2.9 on has)"
    return "the padded computation (the variable-length kernel needs CUDA and bf16 or fp16)"
