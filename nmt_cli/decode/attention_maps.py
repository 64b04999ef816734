"""What the attention heads look at: their weights for one translation, and word alignments from them.

The translation (source and output pieces) runs once more through the model with teacher forcing;
hooks on every attention module record its inputs, from which its ``attention_map``
recomputes the weights the module applied (the fast path never materialises them). Used by
``nmt attention`` (the paper's Figures 3-5) and ``nmt translate --alignments`` (cross-attention of one
layer, heads averaged, turned into Pharaoh ``i-j`` word pairs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..data.vocab import BOS_ID, EOS_ID
from ..errors import NmtError
from ..model.attention import Attention, CrossAttention, SelfAttention
from ..model.transformer import Transformer


@dataclass
class AttentionMaps:
    """Per layer, (heads, queries, keys) weights; the source and output include their EOS."""

    encoder: list[Tensor]  # (H, S, S)
    decoder: list[Tensor]  # (H, T, T): output position j attends to positions <= j (j = 0 is BOS)
    cross: list[Tensor]  # (H, T, S): the source positions that output position j attends to


@torch.inference_mode()
def attention_maps(model: Transformer, source: list[int], output: list[int]) -> AttentionMaps:
    """The attention weights of every layer and head for translating ``source`` into ``output`` (ids, no EOS)."""
    modules = [m for m in model.modules() if isinstance(m, (SelfAttention, CrossAttention))]
    recorded = _record(model, source, output, modules)
    return AttentionMaps(
        [recorded[layer.self_attn].float().cpu() for layer in model.encoder_layers],
        [recorded[layer.self_attn].float().cpu() for layer in model.decoder_layers],
        [recorded[layer.cross_attn].float().cpu() for layer in model.decoder_layers],
    )


@torch.inference_mode()
def cross_attention(model: Transformer, source: list[int], output: list[int], layer: int) -> Tensor:
    """One decoder layer's cross-attention weights (heads, T, S) for ``source`` -> ``output``: what
    ``--alignments`` needs, without recomputing the other layers' weights."""
    module = model.decoder_layers[layer].cross_attn
    return _record(model, source, output, [module])[module].float().cpu()


def _record(model: Transformer, source: list[int], output: list[int], modules: list[Attention]) -> dict[Attention, Tensor]:
    """The weights each of ``modules`` applies when the model reads ``source`` and ``output`` (teacher forcing)."""
    device = next(model.parameters()).device
    src = torch.tensor([source + [EOS_ID]], device=device)
    tgt_in = torch.tensor([[BOS_ID] + output], device=device)
    recorded: dict[Attention, Tensor] = {}

    def record(module: Attention, args: tuple[Tensor, ...], kwargs: dict[str, Any], _output: Tensor) -> None:
        x, mask = args[0], kwargs.get("mask")
        if isinstance(module, CrossAttention):
            recorded[module] = module.attention_map(x, args[1], mask)[0]
        else:
            recorded[module] = module.attention_map(x, mask, kwargs.get("causal", False))[0]

    hooks = [m.register_forward_hook(record, with_kwargs=True) for m in modules]
    try:
        memory, src_mask = model.encode(src)
        model.decode(tgt_in, memory, src_mask)
    finally:
        for hook in hooks:
            hook.remove()
    return recorded


def word_starts(pieces: list[str]) -> list[int]:
    """The word index of each SentencePiece piece (a piece starting with '▁' starts a word)."""
    index, words = -1, []
    for piece in pieces:
        if piece.startswith("\u2581") or index < 0:
            index += 1
        words.append(index)
    return words


def word_alignment(cross: Tensor, source_pieces: list[str], output_pieces: list[str]) -> list[tuple[int, int]]:
    """Pharaoh (source word, output word) pairs: each output word linked to the source word it attends
    to most. ``cross`` is (heads, T, S) of one layer; EOS and BOS rows and columns are left out."""
    weights = cross.mean(dim=0)[: len(output_pieces), : len(source_pieces)]  # (output pieces, source pieces)
    src_words, out_words = word_starts(source_pieces), word_starts(output_pieces)
    if not src_words or not out_words:
        return []
    n_src, n_out = src_words[-1] + 1, out_words[-1] + 1
    by_source = torch.zeros(len(output_pieces), n_src).index_add_(1, torch.tensor(src_words), weights)
    by_words = torch.zeros(n_out, n_src).index_add_(0, torch.tensor(out_words), by_source)  # summed over pieces
    return [(int(by_words[j].argmax()), j) for j in range(n_out)]


def alignment_layer(model: Transformer, layer: int | None) -> int:
    """The decoder layer whose cross-attention aligns: ``layer`` (negative counts from the end), or by
    default the penultimate one, which aligns best in Garg et al. (2019)."""
    depth = len(model.decoder)
    if layer is None:
        return max(depth - 2, 0)
    if not -depth <= layer < depth:
        raise NmtError(f"--alignment-layer {layer}: the decoder has {depth} layers (0 to {depth - 1}, or -1 to -{depth})")
    return layer % depth


def pharaoh(pairs: list[tuple[int, int]]) -> str:
    return " ".join(f"{i}-{j}" for i, j in pairs)


__all__ = [
    "AttentionMaps",
    "attention_maps",
    "cross_attention",
    "word_alignment",
    "word_starts",
    "alignment_layer",
    "pharaoh",
]
