"""The length histogram of a prepared corpus, summarised in buckets for ``nmt prepare``'s table.

A pair's length is ``max(src_len, tgt_len) + 1`` (the EOS). Bucket upper bounds grow
geometrically (about 10% apart), short sentences get exact-length buckets. Training batches
are cut from the length-sorted corpus, not per bucket (see ``batches.make_batches``).
"""

from __future__ import annotations

import math

import numpy as np


class LengthHistogram:
    """Counts pair lengths chunk by chunk; memory is bounded by the longest sentence."""

    def __init__(self) -> None:
        self.counts = np.zeros(1, dtype=np.int64)

    def add(self, pair_lengths: np.ndarray) -> None:
        if len(pair_lengths) == 0:
            return
        counts = np.bincount(pair_lengths)
        if len(counts) > len(self.counts):
            self.counts = np.pad(self.counts, (0, len(counts) - len(self.counts)))
        self.counts[: len(counts)] += counts


def bucket_boundaries(histogram: np.ndarray, growth: float = 1.1) -> list[int]:
    """Inclusive upper bounds of non-empty buckets, ascending, covering every length seen."""
    longest = int(np.flatnonzero(histogram)[-1]) if histogram.any() else 1
    bounds: list[int] = []
    upper = 1
    while True:
        bounds.append(upper)
        if upper >= longest:
            break
        upper = max(upper + 1, math.ceil(upper * growth))
    cumulative = np.cumsum(np.pad(histogram, (0, max(0, bounds[-1] + 1 - len(histogram)))))
    kept, previous = [], 0
    for bound in bounds:
        if cumulative[bound] > previous:
            kept.append(bound)
            previous = cumulative[bound]
    return kept


def bucket_table(histogram: np.ndarray, bounds: list[int]) -> list[tuple[int, int, int]]:
    """(low, high, pairs) per bucket, for display and metadata."""
    rows, low = [], 1
    for high in bounds:
        rows.append((low, high, int(histogram[low : high + 1].sum())))
        low = high + 1
    return rows
