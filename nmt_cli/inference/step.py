"""One new token per row through the decoder: the incremental step that every search runs.

Beam search, sampling, continuous batching and CUDA graphs all decode through
:class:`IncrementalDecoder`: :meth:`~IncrementalDecoder.start` computes each layer's encoder keys and
values once per batch, and every step embeds one token per row, runs it through the layers (extending
each layer's self-attention cache, ``caches.py``) and returns the last hidden states or the logits.

The arithmetic is the model's own (``model/layers.py``, ``model/attention.py``): the same weights, the
same residual functions, the same :func:`~..model.attention.attention` and relative position terms.
It is written as one flat function over operands read once per batch into plain lists, because a step
at batch 1 or a small beam does little arithmetic per operation: on a CPU its time is the products'
memory traffic plus a cost per call, and through the layers' modules a step makes about 50
``nn.Module`` calls and 100 parameter look-ups besides its tensor operations (the measurements:
docs/choices.md). Where the CPU kernels pack weights (``cpu_linear.py``) a block's residual sum and the
feed-forward's ReLU run inside its products. No dropout: a step is inference.

Tests check the step against the model's full-sequence :meth:`~..model.transformer.Transformer.decode`
for every position kind, residual arrangement, activation and kernel choice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor, nn

from ..model.attention import RelativeTerms, as_rows, attention, grouped_queries, key_count, step_heads
from ..model.layers import (
    Arrangement,
    DecoderLayer,
    Normalisation,
    Residual,
    residual_input,
    residual_output,
    residual_sum_output,
)
from ..model.recurrence import Past
from ..model.transformer import Transformer
from .caches import (
    DecoderState,
    GrowingKeysValues,
    JoinableKeysValues,
    KeysValues,
    LayerCache,
    MemoryKeysValues,
    PastKeysValues,
)
from .cpu_linear import InferenceLinear

Product = Callable[[Tensor], Tensor]
ProductAdd = Callable[[Tensor, Tensor], Tensor]  # (h, x) -> x + the product of h
PositionTerms = Callable[[Tensor, int], tuple[Tensor, RelativeTerms | None, Tensor | None]]


@dataclass(frozen=True)
class ResidualOperands:
    """One residual block's arrangement and its LayerNorm (post, pre) or ReZero alpha, read once."""

    arrangement: Arrangement
    norm: Normalisation | None
    alpha: Tensor | None

    @classmethod
    def of(cls, residual: Residual) -> ResidualOperands:
        return cls(residual.arrangement, residual.normalisation(), residual.alpha)

    def sublayer_input(self, x: Tensor) -> Tensor:
        return residual_input(x, self.arrangement, self.norm)

    def output(self, x: Tensor, out: Tensor) -> Tensor:
        """The block's output (no dropout: inference)."""
        return residual_output(x, out, self.arrangement, self.norm, self.alpha)

    def output_of_product(self, x: Tensor, h: Tensor, product: Product, product_add: ProductAdd) -> Tensor:
        """The block's output when the sub-layer ends in ``product`` of ``h``: the product and the
        residual sum in one call (``product_add``) where the arrangement adds them plainly."""
        if self.arrangement == "rezero":
            return self.output(x, product(h))
        return residual_sum_output(product_add(h, x), self.arrangement, self.norm)


@dataclass(frozen=True)
class LayerOperands:
    """One decoder layer's products (plain functions: no module call) and residual blocks."""

    qkv: Product
    self_out: Product
    self_out_add: ProductAdd
    cross_q: Product
    cross_out: Product
    cross_out_add: ProductAdd
    ffn_in_activated: Product  # the activation of the first product
    ffn_out: Product
    ffn_out_add: ProductAdd
    self_block: ResidualOperands
    cross_block: ResidualOperands
    ffn_block: ResidualOperands
    positions: PositionTerms | None  # relative positions' terms (SelfAttention.position_terms), else None

    @classmethod
    def of(cls, layer: DecoderLayer) -> LayerOperands:
        return cls(
            _product(layer.self_attn.qkv),
            _product(layer.self_attn.out),
            _product_add(layer.self_attn.out),
            _product(layer.cross_attn.q),
            _product(layer.cross_attn.out),
            _product_add(layer.cross_attn.out),
            _product_activated(layer.ffn.w1, layer.ffn.activation),
            _product(layer.ffn.w2),
            _product_add(layer.ffn.w2),
            ResidualOperands.of(layer.res_self),
            ResidualOperands.of(layer.res_cross),
            ResidualOperands.of(layer.res_ffn),
            _position_terms(layer),
        )


def _position_terms(layer: DecoderLayer) -> PositionTerms | None:
    attention = layer.self_attn
    return attention.position_terms if attention.relative is not None or attention.xl is not None else None


def _product(linear: nn.Linear) -> Product:
    """The layer's product without the module call: an :class:`.cpu_linear.InferenceLinear`'s own
    function over plain tensors, else the bound ``forward``."""
    return linear.product() if isinstance(linear, InferenceLinear) else linear.forward


def _product_add(linear: nn.Linear) -> ProductAdd:
    """(h, x) -> x + the layer's product of h: one oneDNN call where :class:`.cpu_linear.InferenceLinear`
    can fuse them, else the product then the sum."""
    if isinstance(linear, InferenceLinear):
        return linear.product_add()
    product = linear.forward
    return lambda h, x: x + product(h)


def _product_activated(linear: nn.Linear, activation: Product) -> Product:
    """The activation of the layer's product: ReLU fused into an
    :class:`.cpu_linear.InferenceLinear`'s product where it can be, else applied after it."""
    if isinstance(linear, InferenceLinear) and activation is F.relu:
        return linear.product_relu()
    product = _product(linear)
    return lambda h: activation(product(h))


class IncrementalDecoder:
    """A model's decoder, one new token per row per step.

    Made per batch, so it reads the parameters the model holds then. Rows n*G .. n*G+G-1 belong to
    sentence n (beam search: G hypotheses per sentence, sharing the sentence's encoder keys/values).
    """

    def __init__(self, model: Transformer) -> None:
        self.model = model
        self.layers = [LayerOperands.of(layer) for layer in model.decoder_layers]
        self.n_heads = model.config.n_heads

    def start(
        self, memory: Tensor, src_mask: Tensor, joinable: bool = False, past: list[Past] | None = None
    ) -> DecoderState:
        """The state before the first step: each layer's encoder keys/values, one row per sentence;
        ``joinable`` caches for a batch that rows join between steps (``decode/continuous.py``); ``past``, per
        layer, the previous sentences' self-attention keys/values (``model.recurrence``)."""

        def self_attention(n: int) -> KeysValues:
            if past is not None:
                return PastKeysValues(past=past[n])
            return JoinableKeysValues() if joinable else GrowingKeysValues()

        caches = [
            LayerCache(self_attention(n), MemoryKeysValues(*layer.cross_attn.memory_keys_values(memory)))
            for n, layer in enumerate(self.model.decoder_layers)
        ]
        return DecoderState(src_mask, caches)

    def logits(self, tokens: Tensor, state: DecoderState) -> Tensor:
        """Logits (N, V) of the next token after ``tokens`` (N,), the previous outputs. Logits, not
        log-probabilities: the search normalises them block by block with its masking."""
        return self.model.logits(self.hidden(tokens, state))

    def hidden(self, tokens: Tensor, state: DecoderState) -> Tensor:
        """:meth:`logits` up to the output projection: the decoder's last hidden states (N, D)."""
        if state.row_steps is None:
            x = self._embed(tokens, state.step)
        else:  # rows at different steps
            x = self._embed(tokens, state.row_steps)
            state.row_steps = state.row_steps + 1
        state.step += 1
        return self._layers(x, state.cross_attention_mask(), state.caches)

    def logits_at(self, tokens: Tensor, position: Tensor, src_mask: Tensor, caches: list[LayerCache]) -> Tensor:
        """:meth:`logits` with fixed shapes and no host reads, so a CUDA graph can record it.

        ``position`` is the step as a one-element device tensor; each layer's self-attention cache is a
        :class:`.caches.StaticKeysValues` (``decode/static_steps.py``). Absolute positions only: the
        relative terms of a query at ``position`` would need its value on the host.
        """
        if self.model.positions is None:
            raise ValueError("a fixed-shape step needs absolute positions (relative ones use logits)")
        return self.model.logits(self._layers(self._embed(tokens, position), src_mask, caches))

    def _embed(self, tokens: Tensor, position: int | Tensor) -> Tensor:
        """Embeddings (N, D) of one token per row at ``position``: one step for all rows, or a device
        tensor, (1,) for all rows or (N,) one per row."""
        model = self.model
        x = model.tgt_embed(tokens) * model.embed_scale  # (N, D)
        if model.positions is None:  # relative positions live in the attention
            return x
        rows = model.positions(1, position) if isinstance(position, int) else model.positions.at(position)
        return x + (rows if rows.dtype == x.dtype else rows.to(x.dtype))

    def _layers(self, x: Tensor, src_mask: Tensor | None, caches: list[LayerCache]) -> Tensor:
        """The last hidden states (N, D) of the new positions from their embeddings ``x`` (N, D)."""
        heads = self.n_heads
        for layer, cache in zip(self.layers, caches):
            block = layer.self_block
            q, k, v = step_heads(layer.qkv(block.sublayer_input(x)), heads)
            context = _self_attention(q, k, v, cache.self_attention, layer.positions)
            x = block.output_of_product(x, as_rows(context), layer.self_out, layer.self_out_add)

            block = layer.cross_block
            q = layer.cross_q(block.sublayer_input(x))  # (N, D)
            context = _cross_attention(q, cache.cross_attention, src_mask, heads)  # (N, D)
            x = block.output_of_product(x, context, layer.cross_out, layer.cross_out_add)

            block = layer.ffn_block
            hidden = layer.ffn_in_activated(block.sublayer_input(x))  # (N, d_ff)
            x = block.output_of_product(x, hidden, layer.ffn_out, layer.ffn_out_add)
        return self.model.decoder_norm(x)  # (N, D)


def _self_attention(q: Tensor, k: Tensor, v: Tensor, cache: KeysValues, positions: PositionTerms | None) -> Tensor:
    """The new queries over every column so far, after adding this step's keys/values."""
    keys, values, visible = cache.extend(k, v)  # visible None unless rows joined late
    past = cache.past if isinstance(cache, PastKeysValues) else None  # model.recurrence: the sentences' past
    if positions is None:
        return attention(q, keys, values, visible) if past is None else past.step_attention(q, keys, values, None)
    q, relative, bias = positions(q, key_count(keys) + (past.width if past is not None else 0))
    if past is not None:  # (recurrence runs on XL's positions: no Shaw terms)
        return past.step_attention(q, keys, values, bias)
    return attention(q, keys, values, visible, relative=relative, bias=bias)


def _cross_attention(q: Tensor, memory: MemoryKeysValues, src_mask: Tensor | None, heads: int) -> Tensor:
    """Queries (N, D) over their sentence's encoder keys/values: (N, D). A sentence's G hypotheses (N = B x G
    rows) are G query positions over one copy of its keys/values."""
    q = grouped_queries(q, memory.keys.size(0), heads)
    return as_rows(attention(q, memory.keys, memory.values, src_mask))


__all__ = ["IncrementalDecoder"]
