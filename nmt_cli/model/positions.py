"""Absolute position information added to the embeddings (section 3.5 of the paper)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoids(positions: Tensor, d_model: int) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)) for each of
    ``positions`` (any real numbers, negative distances too), computed in float64: (len, D) float32."""
    position = positions.to(torch.float64)[:, None]
    inv_freq = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float64, device=positions.device) * (-math.log(10000.0) / d_model)
    )
    table = torch.zeros(len(positions), d_model, dtype=torch.float64, device=positions.device)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: d_model // 2])
    return table.float()


def sinusoidal_table(max_positions: int, d_model: int, flavour: str = "paper") -> Tensor:
    """The paper's table for positions 0 .. P-1: (P, D); or fairseq's (``model.sinusoids``)."""
    if flavour == "fairseq":
        return fairseq_sinusoids(max_positions, d_model)
    return sinusoids(torch.arange(max_positions), d_model)


def fairseq_sinusoids(max_positions: int, d_model: int) -> Tensor:
    """fairseq's table in nmt's interleaved layout: frequencies exp(-i*ln(10000)/(d/2-1)), so that the last is
    exactly 1/10000, and positions counted from 2 (fairseq numbers them from its padding index + 1). fairseq
    concatenates all sines then all cosines; an imported model's weights are permuted to this layout
    (``convert/layers.py``). (P, D) float32."""
    half = d_model // 2
    position = torch.arange(2, max_positions + 2, dtype=torch.float64)[:, None]
    inv_freq = torch.exp(torch.arange(half, dtype=torch.float64) * (-math.log(10000.0) / max(half - 1, 1)))
    table = torch.zeros(max_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq)
    return table.float()


class SinusoidalPositions(nn.Module):
    """The paper's fixed table; a buffer, not a parameter (and not saved in checkpoints)."""

    table: Tensor  # (P, D)

    def __init__(self, max_positions: int, d_model: int, flavour: str = "paper") -> None:
        super().__init__()
        if torch.get_default_device().type == "meta":
            # Built to check a checkpoint's shapes (decode/translator.py): a shape is all it needs, and
            # meta ``arange`` would first import torch._dynamo (1-2 s).
            table = torch.empty(max_positions, d_model)
        else:
            table = sinusoidal_table(max_positions, d_model, flavour)
        self.register_buffer("table", table, persistent=False)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        return self.table[offset : offset + length]  # (T, D)

    def at(self, positions: Tensor) -> Tensor:
        """Rows of the table at ``positions``, a device tensor (no host read: CUDA-graph safe)."""
        return self.table.index_select(0, positions)  # (len(positions), D)


class LearnedPositions(nn.Module):
    """Learned position embeddings (the paper's Table 3, row E)."""

    def __init__(self, max_positions: int, d_model: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(max_positions, d_model)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)

    def forward(self, length: int, offset: int = 0) -> Tensor:
        index = torch.arange(offset, offset + length, device=self.embedding.weight.device)
        return self.embedding(index)  # (T, D)

    def at(self, positions: Tensor) -> Tensor:
        """Embeddings at ``positions``, a device tensor (no host read: CUDA-graph safe)."""
        return self.embedding(positions)  # (len(positions), D)
