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

from ..data.batches import pad_rows
from ..data.vocab import BOS_ID, EOS_ID
from ..errors import NmtError
from ..model.attention import Attention, CrossAttention, SelfAttention
from ..model.guided import guided_layer
from ..model.transformer import Transformer
from .targets import TAG


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
    recorded = _record(model, [source], [output], modules)
    return AttentionMaps(
        [recorded[layer.self_attn][0].float().cpu() for layer in model.encoder_layers],
        [recorded[layer.self_attn][0].float().cpu() for layer in model.decoder_layers],
        [recorded[layer.cross_attn][0].float().cpu() for layer in model.decoder_layers],
    )


@torch.inference_mode()
def cross_attention(
    model: Transformer,
    sources: list[list[int]],
    outputs: list[list[int]],
    layer: int,
    encoded: tuple[Tensor, Tensor] | None = None,
    group: int = 64,
    first: int | None = None,
) -> list[Tensor]:
    """One decoder layer's cross-attention weights (heads, T, S) for each ``source`` -> ``output`` pair: what
    ``--alignments`` needs, without the other layers' weights (``encoded``: the sources' encoder output and
    mask, one row per pair, when the caller has them). Pairs of similar output length go through in groups
    of ``group``, each padded only to its own longest, as the encoder groups its sources. ``first`` is a token
    the decoder reads before every output, as the search forced it (a decoder-side target tag): read, and its
    row left out of the weights."""
    module = model.decoder_layers[layer].cross_attn
    skip = 0 if first is None else 1
    outputs = outputs if first is None else [[first, *output] for output in outputs]
    order = sorted(range(len(outputs)), key=lambda b: (len(outputs[b]), len(sources[b])))
    found: dict[int, Tensor] = {}
    for start in range(0, len(order), group):
        rows = order[start : start + group]
        part = None
        if encoded is not None:
            width = max(len(sources[b]) for b in rows) + 1  # the tokens and the EOS
            index = torch.tensor(rows, device=encoded[0].device)
            part = (encoded[0][index, :width], encoded[1][index][..., :width])
        weights = _record(model, [sources[b] for b in rows], [outputs[b] for b in rows], [module], part)[module]
        weights = weights.float().cpu()  # (rows, H, T, S)
        for k, b in enumerate(rows):
            found[b] = weights[k, :, skip : len(outputs[b]) + 1, : len(sources[b]) + 1]
    return [found[b] for b in range(len(outputs))]


class _Recorded(Exception):
    """Every module asked for has recorded its weights: the forward pass stops there."""


def _record(
    model: Transformer,
    sources: list[list[int]],
    outputs: list[list[int]],
    modules: list[Attention],
    encoded: tuple[Tensor, Tensor] | None = None,
) -> dict[Attention, Tensor]:
    """The weights (B, H, T, S) each of ``modules`` applies when the model reads ``sources`` and ``outputs``
    (teacher forcing; padded rows, the padding masked as in training)."""
    device = next(model.parameters()).device
    src = pad_rows([source + [EOS_ID] for source in sources]).to(device)
    tgt_in = pad_rows([[BOS_ID] + output for output in outputs]).to(device)
    recorded: dict[Attention, Tensor] = {}

    def record(module: Attention, args: tuple[Tensor, ...], kwargs: dict[str, Any], _output: Tensor) -> None:
        x, mask = args[0], kwargs.get("mask")
        if isinstance(module, CrossAttention):
            recorded[module] = module.attention_map(x, args[1], mask)
        else:
            recorded[module] = module.attention_map(x, mask, kwargs.get("causal", False))
        if len(recorded) == len(modules):
            raise _Recorded  # the layers above are not needed

    hooks = [m.register_forward_hook(record, with_kwargs=True) for m in modules]
    try:
        memory, src_mask = encoded if encoded is not None else model.encode(src)
        model.decode(tgt_in, memory, src_mask)
    except _Recorded:
        pass
    finally:
        for hook in hooks:
            hook.remove()
    return recorded


def word_starts(pieces: list[str]) -> list[int]:
    """The word index of each SentencePiece piece (a piece starting with '▁' starts a word); a multilingual
    model's target tag (``>>fra<<``, before the first word) is no word of the line: it goes with the first."""
    index, words = -1, []
    for piece in pieces:
        if TAG.fullmatch(piece):
            words.append(max(index, 0))
            continue
        if piece.startswith("\u2581") or index < 0:
            index += 1
        words.append(index)
    return words


def word_alignment(cross: Tensor, source_pieces: list[str], output_pieces: list[str]) -> list[tuple[int, int]]:
    """Pharaoh (source word, output word) pairs: each output word linked to the source word it attends
    to most, then each source word left unlinked to the output word that attends to it most. ``cross`` is
    (heads, T, S) of one layer; EOS and BOS rows and columns are left out."""
    weights = cross.mean(dim=0)[: len(output_pieces), : len(source_pieces)]  # (output pieces, source pieces)
    src_words, out_words = word_starts(source_pieces), word_starts(output_pieces)
    if not src_words or not out_words:
        return []
    n_src, n_out = src_words[-1] + 1, out_words[-1] + 1
    by_source = torch.zeros(len(output_pieces), n_src).index_add_(1, torch.tensor(src_words), weights)
    by_words = torch.zeros(n_out, n_src).index_add_(0, torch.tensor(out_words), by_source)  # summed over pieces
    links = [(int(by_words[j].argmax()), j) for j in range(n_out)]
    # A source word no output word chose is linked to the output word that attends to it most, after the
    # others (each output word's first link stays its best): markup never loses the words of an element.
    chosen = {i for i, _ in links}
    return links + [(i, int(by_words[:, i].argmax())) for i in range(n_src) if i not in chosen]


def alignment_layer(model: Transformer, layer: int | None) -> int:
    """The decoder layer whose cross-attention aligns: ``layer`` (negative counts from the end), or by
    default the penultimate one, which aligns best in Garg et al. (2019)."""
    depth = len(model.decoder)
    if layer is None:
        return guided_layer(depth)
    if not -depth <= layer < depth:
        raise NmtError(f"--alignment-layer {layer}: the decoder has {depth} layers (0 to {depth - 1}, or -1 to -{depth})")
    return layer % depth


def pharaoh(pairs: list[tuple[int, int]]) -> str:
    return " ".join(f"{i}-{j}" for i, j in pairs)


def parse_pharaoh(text: str) -> list[tuple[int, int]]:
    """``"0-0 1-2"`` -> ``[(0, 0), (1, 2)]``."""
    return [(int(i), int(j)) for i, j in (pair.split("-") for pair in text.split())]


__all__ = [
    "AttentionMaps",
    "attention_maps",
    "cross_attention",
    "word_alignment",
    "word_starts",
    "alignment_layer",
    "pharaoh",
    "parse_pharaoh",
]
