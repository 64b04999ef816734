"""The decoder's layers for one new token per row at inference, written as one flat function.

A decoder step at batch 1 or a small beam does little arithmetic per operation, so on a CPU its
time is the products' memory traffic plus a cost per call: through the layers' own modules
(``DecoderLayer`` -> ``Residual`` -> ``SelfAttention`` -> ``nn.Linear`` ...) each step makes about 50
``nn.Module`` calls and 100 parameter look-ups besides its tensor operations. Here the same
arithmetic reads its operands from plain lists made once per batch: on an AMD EPYC (Zen 3, 2 threads)
the small Multi30k model's step went from 2.2 to 1.5 ms at one row (``docs/benchmarks.md``). Where
the CPU kernels pack weights for oneDNN, a block's residual sum and the feed-forward's ReLU run inside
its products (three calls fewer per layer): with translation workers each call also hands Python's
lock over, and fewer calls made beam 4 at batch 1 about 1.1x faster (small model, same outputs).

It covers what :meth:`.transformer.Transformer.decode_step` covers for models with absolute
positions (sinusoidal or learned) in eval mode: every residual arrangement, ReLU and GELU, growing
and static (CUDA-graph) caches, beams sharing their sentence's encoder keys/values, rows that joined
a running batch. Models with relative positions (Shaw's, Transformer-XL's), which need per-step
position terms, and models in training mode step through the modules. Tests check both paths give
the same logits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import attention, attention_at_inference
from .cache import LayerCache, StaticKeysValues
from .cpu_inference import InferenceLinear
from .layers import (
    Arrangement,
    DecoderLayer,
    Normalisation,
    Residual,
    residual_input,
    residual_output,
    residual_sum_output,
)

Product = Callable[[Tensor], Tensor]
ProductAdd = Callable[[Tensor, Tensor], Tensor]  # (h, x) -> x + the product of h


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
        )


def _product(linear: nn.Linear) -> Product:
    """The layer's product without the module call: an :class:`.cpu_inference.InferenceLinear`'s own
    function over plain tensors, else the bound ``forward``."""
    return linear.product() if isinstance(linear, InferenceLinear) else linear.forward


def _product_add(linear: nn.Linear) -> ProductAdd:
    """(h, x) -> x + the layer's product of h: one oneDNN call where :class:`.cpu_inference.InferenceLinear`
    can fuse them, else the product then the sum."""
    if isinstance(linear, InferenceLinear):
        return linear.product_add()
    product = linear.forward
    return lambda h, x: x + product(h)


def _product_activated(linear: nn.Linear, activation: Product) -> Product:
    """The activation of the layer's product: ReLU fused into an
    :class:`.cpu_inference.InferenceLinear`'s product where it can be, else applied after it."""
    if isinstance(linear, InferenceLinear) and activation is F.relu:
        return linear.product_relu()
    product = _product(linear)
    return lambda h: activation(product(h))


class FlatDecoderStep:
    """The decoder layers of :meth:`.transformer.Transformer.decode_step`: hidden states (N, D) of the
    new tokens from their embeddings (N, D), each layer's cache extended by one column.

    Made per batch (:meth:`.transformer.Transformer.start_decoding`), so it reads the parameters the
    model holds then.
    """

    def __init__(self, layers: list[DecoderLayer], n_heads: int) -> None:
        self.layers = [LayerOperands.of(layer) for layer in layers]
        self.n_heads = n_heads

    def __call__(self, x: Tensor, src_mask: Tensor | None, caches: list[LayerCache]) -> Tensor:
        n, d_model = x.shape
        heads, d_k = self.n_heads, d_model // self.n_heads
        cross = CrossAttentionPlan.of(x, src_mask, caches[0], heads) if caches else None
        for layer, cache in zip(self.layers, caches):
            block = layer.self_block
            q, k, v = layer.qkv(block.sublayer_input(x)).view(n, 3, heads, 1, d_k).unbind(1)  # each (N, H, 1, d_k)
            context = _self_attention(q, k, v, cache)
            x = block.output_of_product(x, context.reshape(n, d_model), layer.self_out, layer.self_out_add)

            block = layer.cross_block
            q = layer.cross_q(block.sublayer_input(x))
            assert cross is not None
            context = cross.attend(q, cache)
            x = block.output_of_product(x, context, layer.cross_out, layer.cross_out_add)

            block = layer.ffn_block
            hidden = layer.ffn_in_activated(block.sublayer_input(x))
            x = block.output_of_product(x, hidden, layer.ffn_out, layer.ffn_out_add)
        return x


def _self_attention(q: Tensor, k: Tensor, v: Tensor, cache: LayerCache) -> Tensor:
    """The new queries (N, H, 1, d_k) over every column so far, after adding this step's keys/values."""
    kept = cache.self_attention
    if isinstance(kept, StaticKeysValues):  # fixed slots, written at the step's position
        kept.keys.index_copy_(2, kept.position, k)
        kept.values.index_copy_(2, kept.position, v)
        return attention(q, kept.keys, kept.values, kept.visible)
    keys, values = kept.append(k, v)
    return attention(q, keys, values, kept.visible)  # visible: None unless rows joined at different steps


# On the CPU, a beam's hypotheses (several queries per sentence) attend to their sentence's encoder
# keys written out from this many (sentence, head) blocks on, rather than through PyTorch's flash
# kernel, which is built for long sequences: with many short blocks written out was about 3x faster,
# at one sentence the kernel is, with one query per sentence (greedy) they are level (docs/choices.md).
WRITTEN_OUT_MIN_BLOCKS = 16


@dataclass(frozen=True)
class CrossAttentionPlan:
    """How one step's cross-attention runs, decided once per step: a sentence's G hypotheses (N = B x G
    rows) are G query positions over one copy of its encoder keys/values (B, H, S, d_k)."""

    sentences: int
    heads: int
    src_mask: Tensor | None
    hidden: Tensor | None  # ~src_mask where written out and padded, else None
    written_out: bool

    @classmethod
    def of(cls, x: Tensor, src_mask: Tensor | None, cache: LayerCache, heads: int) -> CrossAttentionPlan:
        sentences = cache.cross_attention.keys.size(0)
        written_out = (
            x.device.type == "cpu"
            and x.dtype == torch.float32
            and x.size(0) > sentences
            and sentences * heads >= WRITTEN_OUT_MIN_BLOCKS
        )
        hidden = ~src_mask if written_out and src_mask is not None else None
        return cls(sentences, heads, src_mask, hidden, written_out)

    def attend(self, q: Tensor, cache: LayerCache) -> Tensor:
        """Queries (N, D) over their sentence's encoder keys/values: (N, D)."""
        memory = cache.cross_attention
        n, d_model = q.shape
        q = q.view(self.sentences, n // self.sentences, self.heads, d_model // self.heads).transpose(1, 2)
        if self.written_out:
            context = attention_at_inference(q, memory.keys, memory.values, self.hidden)  # (B, H, G, d_k)
        else:
            context = attention(q, memory.keys, memory.values, self.src_mask)
        return context.transpose(1, 2).reshape(n, d_model)


__all__ = ["FlatDecoderStep"]
