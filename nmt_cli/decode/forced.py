"""Forced scores: the model's log-probability of given translations (``nmt score --model``).

For filtering and reranking corpora: each (source, hypothesis) pair gets the sum of the
log-probabilities of its target tokens and the EOS under teacher forcing, the mean per token,
and the sum normalised by the length penalty, which is the score the beam search ranks by (so
scoring the model's own output gives back the search's score). Batched like translation.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..config import DecodeConfig
from ..data.batches import pad_rows
from ..data.vocab import BOS_ID, EOS_ID, PAD_ID
from ..model.recurrence import SentencePast, batch_pasts, sentence_pasts
from ..model.transformer import Transformer
from .context import Carried, Item, in_document_order
from .ensemble import Ensemble
from .search import length_penalty
from .steering import NeverWritten


@dataclass(frozen=True)
class PairScore:
    """Log-probability of one hypothesis given its source (natural log); None when it cannot be scored."""

    total: float | None
    tokens: int  # target tokens scored, EOS included
    normalised: float | None

    @property
    def per_token(self) -> float | None:
        return None if self.total is None else self.total / self.tokens


@torch.inference_mode()
def forced_scores(
    model: Transformer | Ensemble,
    pairs: list[tuple[list[int], list[int]]],
    config: DecodeConfig,
    device: torch.device,
    skips: list[int] | None = None,
    unwritten: Sequence[int] = (),
) -> list[PairScore]:
    """Scores of ``pairs`` of (source ids, target ids), both without EOS, in order; with ``skips``, the first
    that many target tokens of each pair are context (document context, ``data/context.py``): read, not scored.
    ``unwritten``: ids out of the output vocabulary (``LoadedModel.unwritten``), as the searches leave them out,
    so a translation's score here is the search's.

    A source longer than the model allows is truncated as translation does; a target that does not
    fit the model's positions gets ``total=None``.
    """
    skipped = skips if skips is not None else [0] * len(pairs)
    limit = model.config.max_positions - 1  # room for the EOS (source) and the BOS (target)
    results: list[PairScore | None] = [None] * len(pairs)
    never = NeverWritten(unwritten) if unwritten else None
    scorable = []
    for i, (_, target) in enumerate(pairs):
        if len(target) > limit:
            results[i] = PairScore(None, len(target) + 1 - skipped[i], None)
        else:
            scorable.append(i)
    for batch in _batches(scorable, pairs, config.batch_tokens):
        src = pad_rows([pairs[i][0][:limit] + [EOS_ID] for i in batch]).to(device)
        tgt_in = pad_rows([[BOS_ID] + pairs[i][1] for i in batch]).to(device)
        tgt_out = pad_rows([[PAD_ID] * skipped[i] + pairs[i][1][skipped[i] :] + [EOS_ID] for i in batch]).to(device)
        memory, src_mask = model.encode(src)
        if isinstance(model, Ensemble):
            assert isinstance(memory, list)
            log_probs = model.log_probs(tgt_in, memory, src_mask)  # (B, T, V)
            if never is not None:  # renormalised without them, as the search's steps are
                log_probs = never.edit(log_probs).log_softmax(dim=-1)
            chosen = log_probs.gather(-1, tgt_out[..., None]).squeeze(-1).masked_fill(tgt_out == PAD_ID, 0.0)
        else:
            assert isinstance(memory, torch.Tensor)
            chosen = _target_log_probs(model, model.decode(tgt_in, memory, src_mask), tgt_out, never)
        for i, total in zip(batch, chosen.sum(dim=1).tolist()):
            tokens = len(pairs[i][1]) + 1 - skipped[i]
            results[i] = PairScore(
                total, tokens, total / float(length_penalty(float(tokens), config)) if math.isfinite(total) else total
            )
    return results  # type: ignore[return-value]


@torch.inference_mode()
def forced_scores_with_pasts(
    model: Transformer,
    pairs: list[tuple[list[int], list[int]]],
    starts: list[bool],
    config: DecodeConfig,
    device: torch.device,
) -> list[PairScore]:
    """:func:`forced_scores` for a model with segment-level recurrence (``model.recurrence``): each pair of a
    document (``starts[i]``: pair i begins one) read with the keys/values its document's previous pairs left,
    as translation reads them, the given targets standing for the chosen translations. Scheduled as translation
    schedules them (``context.in_document_order``): the documents a pair of each at a time; a pair with an empty
    source, as a blank line, reads and leaves nothing."""

    def scored(part: list[tuple[int, int]], histories: list[list[SentencePast]]) -> list[tuple[PairScore, Any]]:
        """Each (document, pair) of ``part`` with its document's history, in batches of ``decode.batch_tokens``."""
        found: dict[int, tuple[PairScore, Any]] = {}
        document_of = {i: n for n, i in part}
        for batch in _batches([i for _, i in part], pairs, config.batch_tokens):
            batch_part = [(document_of[i], i) for i in batch]
            found.update(zip(batch, _scores_with_pasts(model, pairs, batch_part, histories, config, device)))
        return [found[i] for _, i in part]

    def wave(items: list[Item], histories: list[deque[SentencePast]]) -> list[tuple[PairScore, Any]]:
        return scored([(item.segment, _index(item)) for item in items], [list(h) for h in histories])

    def blank(count: int) -> list[PairScore]:
        empty = [i for i, (source, _) in enumerate(pairs) if not source]
        return [score for score, _ in scored([(0, i) for i in empty], [[]])]

    sources = [source for source, _ in pairs]
    keep = model.config.recurrence
    return in_document_order(sources, None, starts, Carried(), keep, 0, wave, blank)[0]


def _index(item: Item) -> int:
    assert item.index is not None  # without segments no sentence is a lead
    return int(item.index)


def _scores_with_pasts(
    model: Transformer,
    pairs: list[tuple[list[int], list[int]]],
    part: list[tuple[int, int]],
    histories: list[list[SentencePast]],
    config: DecodeConfig,
    device: torch.device,
) -> list[tuple[PairScore, SentencePast]]:
    """One batch of a wave: each pair (document n, pair i) scored with its document's history as its past,
    and what it leaves the next pair."""
    limit = model.config.max_positions - 1
    sources = [pairs[i][0][:limit] + [EOS_ID] for _, i in part]
    targets = [[BOS_ID] + pairs[i][1][:limit] for _, i in part]
    pasts = [histories[n] for n, _ in part]
    like = model.output.weight
    src = pad_rows(sources).to(device)
    memory, src_mask, kept_encoder = model.encode_kept(src, batch_pasts(pasts, "encoder", len(model.encoder), like))
    tgt_in = pad_rows(targets).to(device)
    tgt_out = pad_rows([t[1:] + [EOS_ID] for t in targets]).to(device)
    decoder_past = batch_pasts(pasts, "decoder", len(model.decoder), like)
    hidden, kept_decoder = model.decode_kept(tgt_in, memory, src_mask, decoder_past)
    totals = _target_log_probs(model, hidden, tgt_out, None).sum(dim=1).tolist()
    left = sentence_pasts(kept_encoder, kept_decoder, [len(s) for s in sources], [len(t) for t in targets])
    out = []
    for (_, i), total, past in zip(part, totals, left):
        tokens = len(pairs[i][1]) + 1
        if len(pairs[i][1]) > limit:
            out.append((PairScore(None, tokens, None), past))
            continue
        out.append((PairScore(total, tokens, total / float(length_penalty(float(tokens), config))), past))
    return out


# Rows of logits normalised at a time: a whole batch's (B, T, V) log-probabilities are hundreds of MB at
# translation's batch sizes (4,000 tokens x 8,000 pieces x 4 bytes each for the logits and their log-softmax).
ROWS_PER_BLOCK = 512


def _target_log_probs(
    model: Transformer, hidden: torch.Tensor, targets: torch.Tensor, never: NeverWritten | None
) -> torch.Tensor:
    """Each target token's log-probability (B, T), 0 at padding: only the non-padding rows of ``hidden`` are
    projected to the vocabulary (without the ids ``never`` names), a block of rows at a time."""
    keep = targets != PAD_ID
    rows, wanted = hidden[keep], targets[keep]
    chosen = torch.zeros(targets.shape, dtype=torch.float32, device=hidden.device)
    picked = torch.empty(wanted.shape, dtype=torch.float32, device=hidden.device)
    for start in range(0, rows.shape[0], ROWS_PER_BLOCK):
        block = slice(start, start + ROWS_PER_BLOCK)
        logits = model.logits(rows[block]).float()
        log_probs = (logits if never is None else never.edit(logits)).log_softmax(dim=-1)
        picked[block] = log_probs.gather(-1, wanted[block, None]).squeeze(-1)
    chosen[keep] = picked
    return chosen


def _batches(indices: list[int], pairs: list[tuple[list[int], list[int]]], batch_tokens: int) -> Iterator[list[int]]:
    """Length-sorted batches of at most ``batch_tokens`` padded tokens on the longer side."""

    def longest(i: int) -> int:
        return max(len(pairs[i][0]), len(pairs[i][1])) + 1

    order = sorted(indices, key=longest, reverse=True)
    batch: list[int] = []
    for i in order:
        width = longest(batch[0] if batch else i)  # the first pair of a batch is its longest
        if batch and (len(batch) + 1) * width > batch_tokens:
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


__all__ = ["PairScore", "forced_scores", "forced_scores_with_pasts"]
