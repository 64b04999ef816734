"""Mixing languages and directions by temperature, as fairseq, XLM and M2M-100 do.

A multilingual recipe trains directions of different sizes. Read in proportion to their size, a small
direction is seen too rarely to be learned; read equally often, a large one is cut short and a small one
repeated until the model learns it by heart. Temperature sampling sits between: a direction's share is its
size to the power 1/T (T=1: in proportion to size; large T: the same share for every direction). The same
rule weighs each language's text when the joint vocabulary is learned.
"""

from __future__ import annotations

import numpy as np


def temperature_shares(sizes: dict[str, int], temperature: float, total: int) -> dict[str, int]:
    """How many of ``total`` draws each of ``sizes``' members gets: its size to the power 1/T, normalised
    (at least one for a non-empty member; none for an empty one)."""
    weights = {name: size ** (1.0 / temperature) for name, size in sizes.items() if size > 0}
    norm = sum(weights.values())
    if not norm:
        return {name: 0 for name in sizes}
    return {name: max(1, int(total * weights[name] / norm)) if name in weights else 0 for name in sizes}


def epoch_pool(directions: np.ndarray, temperature: float, seed: int, epoch: int) -> np.ndarray:
    """The pair indices one epoch reads, each direction's share drawn by temperature (``directions``: each pair's
    direction number). An epoch holds as many pairs as the data; a direction larger than its share gives a
    different random part of itself each epoch, a smaller one is read whole as often as fits and then in
    part. A pure function of (seed, epoch), so that every process of a group, and a resumed run, draws the same."""
    counts = np.bincount(directions)
    shares = temperature_shares({str(d): int(c) for d, c in enumerate(counts)}, temperature, len(directions))
    rng = np.random.default_rng([seed, epoch, 7919])  # apart from the batches' own stream
    order = np.argsort(directions, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)])
    pool = []
    for number, count in enumerate(counts):
        members = order[starts[number] : starts[number + 1]]
        wanted = shares[str(number)]
        repeats, rest = divmod(wanted, count) if count else (0, 0)
        pool.extend([members] * repeats)
        if rest:
            pool.append(rng.choice(members, size=rest, replace=False))
    return np.concatenate(pool) if pool else np.zeros(0, dtype=np.int64)


__all__ = ["epoch_pool", "temperature_shares"]
