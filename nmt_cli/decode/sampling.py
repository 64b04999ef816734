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

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..data.vocab import EOS_ID, PAD_ID
from ..model.transformer import Transformer
from .search import BeamStep, Hypothesis, length_limits, length_penalty, run_search
from .steering import Steering, StepProcessor
from .steppers import Encoded, RowLogits

OVERSAMPLE = 2  # rows per requested sample: duplicates are dropped, so draw more than asked


class Sampling:
    """Sampling as a strategy of the search loop (``search.run_search``): R rows per sentence from the first step,
    each drawing its own tokens; a row that ended feeds EOS (unscored) until its sentence's rows all have."""

    def __init__(
        self, n_sent: int, width: int, rows: int, config: DecodeConfig, generator: torch.Generator | None,
        device: torch.device,
    ) -> None:  # fmt: skip
        self.first_rows = self.rows = rows
        self.config, self.generator = config, generator
        self.outputs = torch.full((n_sent * rows, width), PAD_ID, dtype=torch.long, device=device)  # by original row
        self.lengths = torch.full((n_sent * rows,), -1, dtype=torch.long, device=device)  # tokens before EOS; -1: open
        self.scores = torch.zeros(n_sent * rows, device=device)

    def choose(self, logits: Tensor | RowLogits, t: int, sentences: Tensor, max_len: Tensor, steering: Steering) -> BeamStep:
        r = self.rows
        alive = (sentences[:, None] * r + torch.arange(r, device=sentences.device)).flatten()  # original row of each
        whole = logits[0 : logits.size(0)] if isinstance(logits, RowLogits) else logits  # one product for all rows
        log_probs = steering(whole)  # (n_alive, V)
        drawn = torch.multinomial(_reshaped(log_probs, self.config).exp(), 1, generator=self.generator).squeeze(1)
        still_open = self.lengths[alive] < 0
        tokens = torch.where(still_open, drawn, EOS_ID)  # ended rows keep feeding EOS, and are not scored
        self.outputs[alive, t] = torch.where(still_open, tokens, self.outputs[alive, t])
        self.scores[alive] += torch.where(still_open, log_probs.gather(1, tokens[:, None]).squeeze(1), 0.0)
        ended = still_open & (tokens == EOS_ID)
        self.lengths[alive[ended]] = t
        done = (self.lengths[alive] >= 0).view(-1, r).all(dim=1)  # every row of the sentence ended
        return BeamStep(None, None, tokens.view(-1, r), done)

    def advance(self, chosen: BeamStep, keep: Tensor | None, rows: Tensor | None) -> None:
        pass  # every row goes on with its own token; the outputs are kept by original row

    def results(self) -> list[list[Hypothesis]]:
        normalised = self.scores / length_penalty(self.lengths.double() + 1, self.config).float()
        return _distinct_best(self.outputs.tolist(), self.lengths.tolist(), normalised.tolist(), self.rows)


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
    rows = nbest * OVERSAMPLE if nbest > 1 else 1
    max_len = length_limits(src, config, model.config.max_positions, prefix)
    sampling = Sampling(src.size(0), int(max_len.max()) + 1, rows, config, generator, src.device)
    return [hyps[:nbest] for hyps in run_search(model, src, config, sampling, max_len, True, prefix, encoded, rules)]


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
