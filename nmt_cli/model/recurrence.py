"""Segment-level recurrence (Transformer-XL, Dai et al. 2019, section 3.2) across the sentences of a document.

With ``model.recurrence: N`` every self-attention layer, of the encoder and of the decoder, attends to the
current sentence and to the keys and values its own layer computed for the previous N sentences of the same
document (the *past*), with no gradient through them. Transformer-XL's relative positions (``model.positions:
xl``) run across past and present: the past sits just before the sentence, so its last token is one position
away from the sentence's first.

A :class:`Past` is one layer's past for a batch: keys and values (B, H, M, d_k), right-aligned (padding first,
so every row's past ends where its sentence begins) and ``visible`` (B, M) where a column is real. A
:class:`SentencePast` is what one sentence leaves its successor: per layer, its keys and values without padding.
The model (``transformer.py``) takes pasts and hands back the present's keys and values when asked to ``keep``
them; translation carries the chosen translation's from one sentence to the next (``decode/context.py``).

Training reads consecutive sentences of a document as one row (a *chain*, ``data/chains.py``) in one pass:
:class:`SentenceBlocks` lets each sentence attend to its own tokens and, through a detached copy of the keys and
values, to the N sentences before it in the row. That is the past translation gives it, computed once: as in
Transformer-XL's training, the memory is what the previous segment already computed, with no gradient through it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Past:
    """One layer's past for a batch: keys/values (B, H, M, d_k), right-aligned; visible (B, M) where real."""

    keys: Tensor
    values: Tensor
    visible: Tensor

    def mask(self, present: Tensor | None, batch: int, t_k: int) -> Tensor:
        """The key mask (B, 1, 1 or Tq, M + T) of past and present columns: the past's ``visible``, then the
        present's mask (``present``, broadcast to (B, 1, 1 or Tq, T); None: all visible)."""
        past = self.visible[:, None, None, :]
        if present is None:
            present = torch.ones(batch, 1, 1, t_k, dtype=torch.bool, device=past.device)
        rows = max(past.size(2), present.size(2))
        return torch.cat([past.expand(-1, -1, rows, -1), present.expand(batch, -1, rows, -1)], dim=-1)

    def rows(self, index: Tensor) -> Past:
        """The past of rows ``index`` only, as wide as the widest of them (right-aligned: the columns none of them
        sees come first, and go)."""
        visible = self.visible.index_select(0, index)
        seen = visible.any(dim=0)
        start = int(seen.int().argmax()) if bool(seen.any()) else self.width
        keys, values = self.keys.index_select(0, index), self.values.index_select(0, index)
        return Past(keys[:, :, start:], values[:, :, start:], visible[:, start:])

    @property
    def width(self) -> int:
        """Its columns, M."""
        return self.keys.size(2)

    def step_attention(self, q: Tensor, keys: Tensor, values: Tensor, bias: Tensor | None) -> Tensor:
        """Incremental decoding: softmax(q k^T / sqrt(d_k) + bias) v over this past and the rows' own steps, for one
        new query per row, q (N, H, 1, d_k); ``keys``/``values`` (N, H, T, d_k) the rows' steps so far (all seen);
        ``bias`` (N, H, 1, M + T), the position term. Rows come in sentences: N = B x G, sentence b's G rows (its
        hypotheses) consecutive. A sentence's rows are G queries over one copy of its past, as over its encoder
        output, so the past is never copied per hypothesis or per step."""
        b, heads, m, d_k = self.keys.shape
        n = q.size(0)
        grouped = q.reshape(b, n // b, heads, d_k).transpose(1, 2)  # (B, H, G, d_k)
        past_scores = (grouped @ self.keys.to(q.dtype).transpose(-2, -1)).masked_fill(
            ~self.visible[:, None, None, :], float("-inf")
        )  # (B, H, G, M)
        own_scores = q @ keys.transpose(-2, -1)  # (N, H, 1, T)
        scores = torch.cat([past_scores.transpose(1, 2).reshape(n, heads, 1, m), own_scores], dim=-1) / math.sqrt(d_k)
        if bias is not None:
            scores = scores + bias
        weights = scores.float().softmax(dim=-1).to(values.dtype)
        past_weights = weights[..., :m].reshape(b, n // b, heads, m).transpose(1, 2)  # (B, H, G, M)
        from_past = (past_weights @ self.values.to(values.dtype)).transpose(1, 2).reshape(n, heads, 1, d_k)
        return from_past + weights[..., m:] @ values


@dataclass
class SentencePast:
    """What one sentence leaves the next: per encoder and per decoder layer, its self-attention keys and
    values (H, T, d_k), padding left out."""

    encoder: list[tuple[Tensor, Tensor]]
    decoder: list[tuple[Tensor, Tensor]]


Kept = list[tuple[Tensor, Tensor]]  # per layer, the present's keys/values (B, H, T, d_k), as a layer hands them back


def sentence_pasts(
    encoder: Kept, decoder: Kept, src_lengths: Sequence[int], tgt_lengths: Sequence[int]
) -> list[SentencePast]:
    """Each row's :class:`SentencePast` from a batch's kept keys/values and the rows' real lengths (source
    tokens with EOS; decoder inputs with BOS)."""

    return [SentencePast(e, d) for e, d in zip(_rows(encoder, src_lengths), _rows(decoder, tgt_lengths))]


def sentence_pasts_kept(
    encoder: Kept, src_lengths: Sequence[int], decoder: Sequence[list[tuple[Tensor, Tensor]]]
) -> list[SentencePast]:
    """:func:`sentence_pasts` where each row's decoder keys/values are given per layer, (H, T, d_k) without padding:
    the search kept them for the translation it chose (``decode/search.py``, ``Hypothesis.kept``)."""
    return [SentencePast(e, list(d)) for e, d in zip(_rows(encoder, src_lengths), decoder)]


def _rows(kept: Kept, lengths: Sequence[int]) -> list[list[tuple[Tensor, Tensor]]]:
    """Each row's keys/values per layer, its first ``lengths[b]`` positions. Copies, not views: a view would keep the
    whole batch's keys/values alive for as long as the document goes on."""
    return [[(k[b, :, :n].clone(), v[b, :, :n].clone()) for k, v in kept] for b, n in enumerate(lengths)]


def batch_pasts(histories: Sequence[Sequence[SentencePast]], side: str, layers: int, like: Tensor) -> list[Past] | None:
    """Per layer, the :class:`Past` of a batch whose row b read the sentences ``histories[b]`` (oldest first;
    empty: none) on ``side`` ("encoder" or "decoder"); None when no row has a past."""
    if not any(histories):
        return None
    out = []
    for layer in range(layers):
        rows = [[getattr(past, side)[layer] for past in history] for history in histories]  # per row, its sentences' (k, v)
        joined = [
            (torch.cat([k for k, _ in row], dim=1), torch.cat([v for _, v in row], dim=1)) if row else None for row in rows
        ]
        width = max(kv[0].size(1) for kv in joined if kv is not None)
        heads, d_k = next(kv[0].shape for kv in joined if kv is not None)[0::2]
        keys = like.new_zeros((len(rows), heads, width, d_k))
        values = like.new_zeros((len(rows), heads, width, d_k))
        visible = torch.zeros(len(rows), width, dtype=torch.bool, device=like.device)
        for b, kv in enumerate(joined):
            if kv is not None:
                n = kv[0].size(1)
                keys[b, :, width - n :], values[b, :, width - n :] = kv
                visible[b, width - n :] = True
        out.append(Past(keys, values, visible))
    return out


@dataclass
class SentenceBlocks:
    """What each position of a batch of chains (training, ``data/chains.py``) attends to in one self-attention
    layer: ``live`` (B, 1, T, T), the keys of its own sentence (its past positions only in the decoder), attended
    as usual; ``past`` (B, 1, T, T), the keys of the up to N sentences before it in the row, attended through a
    detached copy, so no gradient flows into an earlier sentence from a later one."""

    live: Tensor
    past: Tensor

    @classmethod
    def of(cls, blocks: Tensor, sentences: int, causal: bool) -> SentenceBlocks:
        """From each position's sentence number in its chain (B, T); padding's number is beyond every past's reach
        (``data/chains.py``), so padding attends to padding alone and nothing real attends to it."""
        behind = blocks[:, :, None] - blocks[:, None, :]  # (B, Tq, Tk): how many sentences the key lies behind
        live = behind == 0
        if causal:  # a sentence's positions are consecutive: within it, the usual causal mask
            t = blocks.size(1)
            live = live & torch.ones(t, t, dtype=torch.bool, device=blocks.device).tril()
        past = (behind >= 1) & (behind <= sentences)
        return cls(live[:, None], past[:, None])

    def attention(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, dropout: float) -> Tensor:
        """softmax(q k^T / sqrt(d_k) + bias) v over live and past keys, the past's keys and values detached."""
        scores = torch.where(self.live, q @ k.transpose(-2, -1), q @ k.detach().transpose(-2, -1)) / math.sqrt(q.size(-1))
        if bias is not None:
            scores = scores + bias
        scores = scores.masked_fill(~(self.live | self.past), float("-inf"))
        weights = scores.float().softmax(dim=-1)
        if dropout:
            weights = torch.nn.functional.dropout(weights, dropout)
        weights = weights.to(v.dtype)
        return weights.masked_fill(~self.live, 0.0) @ v + weights.masked_fill(~self.past, 0.0) @ v.detach()


def cross_blocks(tgt_blocks: Tensor, src_blocks: Tensor) -> Tensor:
    """The cross-attention mask (B, 1, T, S) of a batch of chains: each target sentence reads its own source. A
    position that matches no source position (target padding where the source row has none) reads them all: an
    empty row would make its attention NaN, and a NaN at a padded position still spoils the products it enters."""
    same = tgt_blocks[:, :, None] == src_blocks[:, None, :]
    return (same | ~same.any(dim=-1, keepdim=True))[:, None]
