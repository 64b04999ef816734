"""Encoder and decoder layers: sub-layers wrapped in a residual arrangement.

``post`` is the paper's ``LayerNorm(x + Dropout(F(x)))``; ``pre`` is ``x + Dropout(F(LayerNorm(x)))``
(the stack then ends in a final LayerNorm); ``rezero`` is ``x + alpha * Dropout(F(x))`` with
``alpha`` initialised to 0 (Bachlechner et al. 2020); ``none`` (used by T-Fixup) is
``x + Dropout(F(x))`` with no normalisation at all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig
from .attention import CrossAttention, KeyValuePair, SelfAttention
from .dropout import Dropout, apply_dropout
from .packing import Layout, Packing
from .recurrence import Past, SentenceBlocks

Arrangement = Literal["post", "pre", "rezero", "none"]


Normalisation = tuple[Tensor, Tensor, float]  # a LayerNorm's weight, bias and eps


def residual_input(x: Tensor, arrangement: Arrangement, norm: Normalisation | None) -> Tensor:
    """What the sub-layer reads: LayerNorm(x) in the pre-norm arrangement, else x."""
    return _layer_norm(x, norm) if arrangement == "pre" else x


def residual_output(
    x: Tensor, out: Tensor, arrangement: Arrangement, norm: Normalisation | None, alpha: Tensor | None
) -> Tensor:
    """The block's output from its input ``x`` and the sub-layer's output ``out`` (after dropout)."""
    if arrangement == "post":
        return _layer_norm(x + out, norm)
    if arrangement == "rezero":
        assert alpha is not None
        return x + alpha * out
    return x + out  # pre, none


def residual_sum_output(total: Tensor, arrangement: Arrangement, norm: Normalisation | None) -> Tensor:
    """:func:`residual_output` from ``x + out`` already summed, for the arrangements that add them
    plainly (post: LayerNorm of the sum; pre, none: the sum itself; not ReZero)."""
    assert arrangement != "rezero"
    return _layer_norm(total, norm) if arrangement == "post" else total


def _layer_norm(x: Tensor, norm: Normalisation | None) -> Tensor:
    assert norm is not None
    weight, bias, eps = norm
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)


class Residual(nn.Module):
    """One residual connection around a sub-layer, in the chosen arrangement."""

    def __init__(self, d_model: int, dropout: float, arrangement: Arrangement) -> None:
        super().__init__()
        self.arrangement = arrangement
        self.dropout = Dropout(dropout)
        self.norm = nn.LayerNorm(d_model) if arrangement in ("post", "pre") else None
        self.alpha = nn.Parameter(torch.zeros(1)) if arrangement == "rezero" else None

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        norm = self.normalisation()
        out = self._drop(sublayer(residual_input(x, self.arrangement, norm)))
        return residual_output(x, out, self.arrangement, norm, self.alpha)

    def normalisation(self) -> Normalisation | None:
        """The LayerNorm's operands (post, pre), or None."""
        return None if self.norm is None else (self.norm.weight, self.norm.bias, self.norm.eps)

    def _drop(self, x: Tensor) -> Tensor:
        # At inference Dropout is skipped rather than called as a no-op: a decoder step would make 3 such
        # calls per layer, and on a CPU at batch 1 a step's cost is mostly per-call overhead.
        return self.dropout(x) if self.training else x


# The feed-forward activations a recipe names (model.activation).
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}


class FeedForward(nn.Module):
    """FFN(x) = W2 act(W1 x + b1) + b2 (section 3.3), ReLU as in the paper, GELU or swish."""

    def __init__(self, d_model: int, d_ff: int, activation: str, dropout: float) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff)
        self.w2 = nn.Linear(d_ff, d_model)
        self.activation = ACTIVATIONS[activation]
        self.dropout = dropout

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.activation(self.w1(x))  # (B, T, d_ff)
        hidden = apply_dropout(hidden, self.dropout, self.training)
        return self.w2(hidden)


class LayerOutput(NamedTuple):
    """What a layer returns: its output, what its self-attention computed of this input (the next sentence's
    past under recurrence), and where asked, one cross-attention head's weights (B, T, S) (guided alignment)."""

    hidden: Tensor
    keys_values: KeyValuePair
    alignment: Tensor | None = None


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each in a residual block."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = SelfAttention(config)
        self.ffn = FeedForward(config.d_model, config.d_ff, config.activation, config.activation_dropout)
        self.res_attn = Residual(config.d_model, config.dropout, config.arrangement)
        self.res_ffn = Residual(config.d_model, config.dropout, config.arrangement)

    def forward(self, x: Tensor, src_mask: Tensor | Layout, past: Past | SentenceBlocks | None = None) -> LayerOutput:
        """``past``: the previous sentences' keys/values this layer attends to as well (recurrence.py). A packed
        batch (packing.py) gives its source's layout as the mask."""
        seen: list[KeyValuePair] = []
        x = self.res_attn(x, lambda h: _kept(self.self_attn(h, mask=src_mask, past=past), seen))
        return LayerOutput(self.res_ffn(x, self.ffn), seen[0])


class DecoderLayer(nn.Module):
    """Causal self-attention, attention over the encoder output, feed-forward."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = SelfAttention(config)
        self.cross_attn = CrossAttention(config)
        self.ffn = FeedForward(config.d_model, config.d_ff, config.activation, config.activation_dropout)
        self.res_self = Residual(config.d_model, config.dropout, config.arrangement)
        self.res_cross = Residual(config.d_model, config.dropout, config.arrangement)
        self.res_ffn = Residual(config.d_model, config.dropout, config.arrangement)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Tensor | Packing,
        past: Past | SentenceBlocks | None = None,
        align_head: int | None = None,
    ) -> LayerOutput:
        """``x`` (B, T, D) the embedded shifted target, ``memory`` (B, S, D) the encoder output; ``past`` the
        previous target sentences' self-attention keys/values (recurrence.py); ``align_head``: also return that
        cross-attention head's weights (guided alignment). A packed batch (packing.py) gives its
        :class:`Packing` as the mask: its target's layout then bounds the self-attention too."""
        own = src_mask.target if isinstance(src_mask, Packing) else None
        seen: list[KeyValuePair] = []
        weights: list[Tensor] = []

        def cross(h: Tensor) -> Tensor:
            if align_head is not None:
                assert isinstance(src_mask, Tensor)  # train.packed refuses guided alignment
                weights.append(self.cross_attn.head_weights(h, memory, src_mask, align_head))
            return self.cross_attn(h, memory, mask=src_mask)

        x = self.res_self(x, lambda h: _kept(self.self_attn(h, mask=own, causal=True, past=past), seen))
        x = self.res_cross(x, cross)
        return LayerOutput(self.res_ffn(x, self.ffn), seen[0], weights[0] if weights else None)


def _kept(result: tuple[Tensor, KeyValuePair], seen: list[KeyValuePair]) -> Tensor:
    """Self-attention's output, its keys/values set aside for the layer to return."""
    seen.append(result[1])
    return result[0]
