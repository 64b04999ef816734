"""How much a document model uses its context: conditional cross-mutual information (CXMI, Fernandes et al. 2021).

The same model scores each reference twice, in its document's context and alone (the sentence as the start of a
document); CXMI is the mean, per target token, of the log-likelihood in context minus alone. Above zero, the
context makes the references likelier: the model reads it. Unlike BLEU or a contrastive set, it does not hang on
whether one search or a handful of examples happened to go one way; a bootstrap over the sentences gives its
interval. ``nmt score --model --docids`` reports it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np


class Scored(Protocol):
    """A pair's forced score (``decode/forced.py``'s ``PairScore``): its log-probability (None: it could not be
    scored) and the target tokens scored."""

    @property
    def total(self) -> float | None: ...

    @property
    def tokens(self) -> int: ...


@dataclass(frozen=True)
class Cxmi:
    """CXMI in nats a token, its bootstrap interval, and what it was measured over."""

    value: float
    low: float
    high: float
    sentences: int
    tokens: int

    def summary(self) -> str:
        verdict = "the context makes the references likelier" if self.low > 0 else "no sure gain from the context"
        return (
            f"CXMI {self.value:+.4f} nats a token over {self.sentences:,} sentences ({self.tokens:,} tokens); 95% "
            f"bootstrap interval {self.low:+.4f} to {self.high:+.4f}: {verdict}"
        )


def cxmi(in_context: Sequence[Scored], alone: Sequence[Scored], samples: int = 1000, seed: int = 0) -> Cxmi:
    """CXMI of sentences scored in context and alone (the same pairs, in order); a pair either could not score
    (too long for the model) is left out. The interval resamples sentences ``samples`` times (2.5th and 97.5th
    percentiles), seeded, so a report is the same each time."""
    if len(in_context) != len(alone):
        raise ValueError(f"{len(in_context)} scores in context but {len(alone)} alone")
    gains, counts = [], []
    for with_context, without in zip(in_context, alone):
        if with_context.total is None or without.total is None:
            continue
        gains.append(with_context.total - without.total)
        counts.append(with_context.tokens)
    if not gains:
        return Cxmi(0.0, 0.0, 0.0, 0, 0)
    gain, count = np.array(gains), np.array(counts, dtype=np.float64)
    value = float(gain.sum() / count.sum())
    draw = np.random.default_rng(seed)
    resampled = []
    for start in range(0, samples, 100):  # 100 resamples at a time: bounded memory for long test sets
        picked = draw.integers(0, len(gains), size=(min(100, samples - start), len(gains)))
        resampled.append(gain[picked].sum(axis=1) / count[picked].sum(axis=1))
    low, high = np.percentile(np.concatenate(resampled), [2.5, 97.5])
    return Cxmi(value, float(low), float(high), len(gains), int(count.sum()))
