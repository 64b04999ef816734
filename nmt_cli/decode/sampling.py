"""Sampling instead of searching: each output token is drawn from the model's distribution.

Used for sampled back-translation (Edunov et al. 2018) and diverse n-best lists. Each sentence runs
``2 K`` sample rows for ``K`` requested samples (``nbest``), through the same batched, cached
decoder as the beam search (its rows are a sentence's group, as a beam is); the ``K`` best distinct
finished samples are returned. A sentence leaves the batch once all its rows ended.

The distribution can be reshaped (``temperature``, ``top_k``, ``top_p``); the score of a sample is
always its log-probability under the model itself, normalised by the length penalty, so it equals
what ``nmt score --model`` computes for the same output.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..data.vocab import EOS_ID, PAD_ID
from ..model.transformer import Transformer
from .search import BeamStep, Hypothesis, length_limits, length_penalty, pad_columns, run_search, write_at
from .steering import Steering, StepProcessor
from .steppers import Encoded, RowLogits

OVERSAMPLE = 2  # rows per requested sample: duplicates are dropped, so draw more than asked


class Sampling:
    """Sampling as a strategy of the search loop (``search.SearchLoop``): R rows per sentence from the first step,
    each drawing its own tokens; a row that ended feeds EOS (unscored) until its sentence's rows all have."""

    def __init__(self, rows: int, config: DecodeConfig, generator: torch.Generator | None, device: torch.device) -> None:
        self.first_rows = self.rows = rows
        self.config, self.generator = config, generator
        self.outputs = torch.zeros((0, 1), dtype=torch.long, device=device)  # (n * R, W) by open row, PAD after
        self.lengths = torch.zeros(0, dtype=torch.long, device=device)  # tokens before EOS; -1: open
        self.scores = torch.zeros(0, device=device)

    def join(self, count: int, rows: int, width: int, terms: Sequence[Any] | None = None) -> None:
        width = max(width, self.outputs.size(1))
        fresh = self.outputs.new_full((count * rows, width), PAD_ID)
        self.outputs = torch.cat([pad_columns(self.outputs, width), fresh])
        self.lengths = torch.cat([self.lengths, self.lengths.new_full((count * rows,), -1)])
        self.scores = torch.cat([self.scores, self.scores.new_zeros(count * rows)])

    def choose(self, logits: Tensor | RowLogits, t: int | Tensor, max_len: Tensor, steering: Steering) -> BeamStep:
        r = self.rows
        whole = logits[0 : logits.size(0)] if isinstance(logits, RowLogits) else logits  # one product for all rows
        log_probs = steering(whole)  # (rows, V)
        drawn = torch.multinomial(_reshaped(log_probs, self.config).exp(), 1, generator=self.generator).squeeze(1)
        still_open = self.lengths < 0
        tokens = torch.where(still_open, drawn, EOS_ID)  # ended rows keep feeding EOS, and are not scored
        row_t = t if isinstance(t, int) else t.repeat_interleave(r)
        write_at(self.outputs, row_t, tokens)  # an ended row's EOS lands after its length: never read
        self.scores += torch.where(still_open, log_probs.gather(1, tokens[:, None]).squeeze(1), 0.0)
        ended = still_open & (tokens == EOS_ID)
        self.lengths[ended] = row_t if isinstance(row_t, int) else row_t[ended]
        done = (self.lengths >= 0).view(-1, r).all(dim=1)  # every row of the sentence ended
        return BeamStep(None, None, tokens.view(-1, r), done)

    def take(self, done: list[int]) -> list[list[Hypothesis]]:
        r = self.rows
        rows = torch.tensor([p * r + i for p in done for i in range(r)], dtype=torch.long, device=self.scores.device)
        lengths = self.lengths[rows]
        normalised = self.scores[rows] / length_penalty(lengths.double() + 1, self.config).float()
        return _distinct_best(self.outputs[rows].tolist(), lengths.tolist(), normalised.tolist(), r)

    def advance(self, chosen: BeamStep, keep: Tensor | None, rows: Tensor | None, t: int | Tensor) -> None:
        if keep is not None and rows is not None:  # each row goes on with its own token, already written
            self.outputs, self.lengths, self.scores = self.outputs[rows], self.lengths[rows], self.scores[rows]


def sample(
    model: Transformer,
    src: Tensor,
    config: DecodeConfig,
    nbest: int = 1,
    generator: torch.Generator | None = None,
    prefix: Tensor | None = None,
    encoded: Encoded | None = None,
    rules: Sequence[StepProcessor] = (),
) -> list[list[Hypothesis]]:
    """Up to ``nbest`` distinct samples per sentence of ``src``, best score first (``encoded`` and ``rules`` as
    :func:`.search.run_search` takes them)."""
    max_len = length_limits(src, config, model.config.max_positions, prefix)
    sampling = Sampling(sample_rows(nbest), config, generator, src.device)
    return [hyps[:nbest] for hyps in run_search(model, src, config, sampling, max_len, True, prefix, encoded, rules)]


def sample_rows(nbest: int) -> int:
    """Rows a sentence samples with for ``nbest`` distinct samples (:data:`OVERSAMPLE` each)."""
    return nbest * OVERSAMPLE if nbest > 1 else 1


def _reshaped(log_probs: Tensor, config: DecodeConfig) -> Tensor:
    """The sampling distribution (as log-probabilities): temperature, then top-k, then top-p."""
    logits = log_probs / config.temperature
    if config.top_k and config.top_k < logits.size(1):
        kth = logits.topk(config.top_k, dim=1).values[:, -1:]  # (n, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    logits = logits.log_softmax(dim=1)
    if config.top_p < 1.0:
        sorted_logp, order = logits.sort(dim=1, descending=True)
        before = sorted_logp.exp().cumsum(dim=1) - sorted_logp.exp()  # mass of the better tokens
        drop_sorted = before >= config.top_p  # the best token is always kept (nothing before it)
        drop = torch.empty_like(drop_sorted).scatter_(1, order, drop_sorted)  # back to vocabulary order
        logits = logits.masked_fill(drop, float("-inf")).log_softmax(dim=1)
    return logits


def _distinct_best(
    outputs: list[list[int]], lengths: list[int], scores: list[float], per_sentence: int
) -> list[list[Hypothesis]]:
    """Each sentence's distinct finished samples, best first."""
    results = []
    for start in range(0, len(outputs), per_sentence):
        seen, hyps = set(), []
        candidates = range(start, start + per_sentence)
        for row in sorted(candidates, key=lambda r: -scores[r]):
            tokens = tuple(outputs[row][: lengths[row]])
            if lengths[row] >= 0 and tokens not in seen:
                seen.add(tokens)
                hyps.append(Hypothesis(list(tokens), scores[row]))
        results.append(hyps)
    return results


__all__ = ["sample"]
