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
them; training computes (and trains) the previous sentences' (``train/`` via ``Batch.previous``), translation
carries the chosen translation's from one sentence to the next (``decode/context.py``).
"""

from __future__ import annotations

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

    def rows(kept: Kept, lengths: Sequence[int]) -> list[list[tuple[Tensor, Tensor]]]:
        # copies, not views: a view would keep the whole batch's keys/values alive for as long as the document goes on
        return [[(k[b, :, :n].clone(), v[b, :, :n].clone()) for k, v in kept] for b, n in enumerate(lengths)]

    return [SentencePast(e, d) for e, d in zip(rows(encoder, src_lengths), rows(decoder, tgt_lengths))]


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


def right_aligned(kept: Kept, lengths: Tensor, present: Tensor) -> list[Past]:
    """Pasts from a batch's kept keys/values (B, H, T, d_k) whose rows hold ``lengths`` real (left-aligned)
    tokens, ``present`` (B,) False for rows that have no past at all: each row's tokens moved to the right
    end, as a past must sit just before its sentence."""
    width = kept[0][0].size(2)
    columns = torch.arange(width, device=lengths.device)
    # column c of the aligned row reads column c - (width - length) of the original, when that is >= 0
    source = columns[None, :] - (width - lengths)[:, None]  # (B, M)
    visible = (source >= 0) & present[:, None]
    index = source.clamp(min=0)[:, None, :, None]
    out = []
    for k, v in kept:
        gather = index.expand(-1, k.size(1), -1, k.size(3))
        out.append(Past(k.gather(2, gather), v.gather(2, gather), visible))
    return out


def join_pasts(pasts: Sequence[list[Past]]) -> list[Past]:
    """Several sentences' pasts (oldest first), each per layer, as one past per layer."""
    return [
        Past(
            torch.cat([p[layer].keys for p in pasts], dim=2),
            torch.cat([p[layer].values for p in pasts], dim=2),
            torch.cat([p[layer].visible for p in pasts], dim=1),
        )
        for layer in range(len(pasts[0]))
    ]
