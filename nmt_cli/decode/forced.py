"""Forced scores: the model's log-probability of given translations (``nmt score --model``).

For filtering and reranking corpora: each (source, hypothesis) pair gets the sum of the
log-probabilities of its target tokens and the EOS under teacher forcing, the mean per token,
and the sum normalised by the length penalty, which is the score the beam search ranks by (so
scoring the model's own output gives back the search's score). Batched like translation.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from ..config import DecodeConfig
from ..data.batches import pad_rows
from ..data.vocab import BOS_ID, EOS_ID, PAD_ID
from ..model.transformer import Transformer
from .ensemble import Ensemble
from .search import length_penalty


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
    model: Transformer | Ensemble, pairs: list[tuple[list[int], list[int]]], config: DecodeConfig, device: torch.device
) -> list[PairScore]:
    """Scores of ``pairs`` of (source ids, target ids), both without EOS, in order.

    A source longer than the model allows is truncated as translation does; a target that does not
    fit the model's positions gets ``total=None``.
    """
    limit = model.config.max_positions - 1  # room for the EOS (source) and the BOS (target)
    results: list[PairScore | None] = [None] * len(pairs)
    scorable = []
    for i, (_, target) in enumerate(pairs):
        if len(target) > limit:
            results[i] = PairScore(None, len(target) + 1, None)
        else:
            scorable.append(i)
    for batch in _batches(scorable, pairs, config.batch_tokens):
        src = pad_rows([pairs[i][0][:limit] + [EOS_ID] for i in batch]).to(device)
        tgt_in = pad_rows([[BOS_ID] + pairs[i][1] for i in batch]).to(device)
        tgt_out = pad_rows([pairs[i][1] + [EOS_ID] for i in batch]).to(device)
        memory, src_mask = model.encode(src)
        if isinstance(model, Ensemble):
            assert isinstance(memory, list)
            log_probs = model.log_probs(tgt_in, memory, src_mask)  # (B, T, V)
            chosen = log_probs.gather(-1, tgt_out[..., None]).squeeze(-1).masked_fill(tgt_out == PAD_ID, 0.0)
        else:
            assert isinstance(memory, torch.Tensor)
            chosen = _target_log_probs(model, model.decode(tgt_in, memory, src_mask), tgt_out)
        for i, total in zip(batch, chosen.sum(dim=1).tolist()):
            tokens = len(pairs[i][1]) + 1
            results[i] = PairScore(
                total, tokens, total / float(length_penalty(float(tokens), config)) if math.isfinite(total) else total
            )
    return results  # type: ignore[return-value]


# Rows of logits normalised at a time: a whole batch's (B, T, V) log-probabilities are hundreds of MB at
# translation's batch sizes (4,000 tokens x 8,000 pieces x 4 bytes each for the logits and their log-softmax).
ROWS_PER_BLOCK = 512


def _target_log_probs(model: Transformer, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Each target token's log-probability (B, T), 0 at padding: only the non-padding rows of ``hidden`` are
    projected to the vocabulary, a block of rows at a time."""
    keep = targets != PAD_ID
    rows, wanted = hidden[keep], targets[keep]
    chosen = torch.zeros(targets.shape, dtype=torch.float32, device=hidden.device)
    picked = torch.empty(wanted.shape, dtype=torch.float32, device=hidden.device)
    for start in range(0, rows.shape[0], ROWS_PER_BLOCK):
        block = slice(start, start + ROWS_PER_BLOCK)
        log_probs = model.logits(rows[block]).float().log_softmax(dim=-1)
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


__all__ = ["PairScore", "forced_scores"]
