"""Guided alignment (Garg et al. 2019, "Jointly Learning to Align and Translate with Transformer Models"): one
cross-attention head is trained to follow statistical word alignments, so the alignments read from it link
words to their translations rather than to wherever raw attention looks.

As in the paper and fairseq's ``transformer_align``: the first head of the penultimate decoder layer, and a
cross-entropy between its attention over the source and the reference links of each target position (spread
evenly over a position's links), summed over positions like the translation loss and added with a weight.
"""

from __future__ import annotations

import torch
from torch import Tensor

GUIDED_HEAD = 0


def guided_layer(decoder_layers: int) -> int:
    """The decoder layer whose cross-attention aligns: the penultimate one (the paper's best), or the only one."""
    return max(decoder_layers - 2, 0)


def alignment_loss(weights: Tensor, alignment: Tensor) -> Tensor:
    """Summed cross-entropy of the guided head's weights (B, T, S) against the links ``alignment`` (L, 3):
    (row, target position, source position). Each target position's reference distribution spreads evenly
    over its links; positions without links add nothing."""
    if alignment.numel() == 0:
        return weights.new_zeros(())
    row, target, source = alignment.unbind(1)
    position = row * weights.size(1) + target
    links_per_position = torch.bincount(position, minlength=weights.size(0) * weights.size(1))[position]
    probabilities = weights[row, target, source].clamp_min(1e-9)
    return -(probabilities.log() / links_per_position).sum()
