"""Token batches: padded size within max_tokens, every pair once, full batches, deterministic order."""

from __future__ import annotations

import numpy as np
import pytest

from nmt_cli.data.batches import decoding_batches, make_batches


@pytest.fixture
def lengths() -> np.ndarray:
    # Caption-like lengths (many short, a long tail), as Multi30k's.
    rng = np.random.default_rng(0)
    return np.clip(rng.gamma(6.0, 2.5, size=5000).astype(np.int64) + 2, 2, 90)


def test_every_pair_once_within_max_tokens(lengths):
    batches = make_batches(lengths, 1024, 80, seed=3, epoch=0)
    used = np.concatenate(batches)
    assert sorted(used.tolist()) == np.flatnonzero(lengths <= 80).tolist()  # longer pairs left out
    assert all(len(b) * lengths[b].max() <= 1024 for b in batches)


def test_only_one_batch_is_not_full(lengths):
    # A batch is full when the next pair in length order would not fit. Cutting per length bucket
    # left one short batch per bucket; each took a full-size optimizer step on a few sentences.
    batches = make_batches(lengths, 1024, 1000, seed=3, epoch=0)
    widest = [int(lengths[b].max()) for b in batches]
    not_full = [i for i, b in enumerate(batches) if (len(b) + 1) * widest[i] <= 1024 - widest[i]]
    assert len(not_full) <= 1
    padded = sum(len(b) * w for b, w in zip(batches, widest))
    assert 1 - lengths.sum() / padded < 0.05  # neighbouring lengths: little padding


def test_order_is_deterministic_per_seed_and_epoch(lengths):
    first = make_batches(lengths, 1024, 1000, seed=3, epoch=0)
    again = make_batches(lengths, 1024, 1000, seed=3, epoch=0)
    other = make_batches(lengths, 1024, 1000, seed=3, epoch=1)
    assert all(np.array_equal(a, b) for a, b in zip(first, again)) and len(first) == len(again)
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))
    evaluation = make_batches(lengths, 1024, 1000, seed=None)
    assert [int(lengths[b].max()) for b in evaluation] == sorted(int(lengths[b].max()) for b in evaluation)


def test_decoding_batches_longest_first_within_lines_and_tokens():
    widths = [3, 10, 5, 7, 5, 1]
    todo = [0, 1, 2, 3, 4]  # line 5 left out (an empty line, say)
    assert list(decoding_batches(widths, todo, batch_size=2, batch_tokens=10**6)) == [[1, 3], [2, 4], [0]]
    # at most 20 tokens counting padding to the batch's longest line: 2 x 10, then 3 x 5
    assert list(decoding_batches(widths, todo, batch_size=0, batch_tokens=20)) == [[1, 3], [2, 4, 0]]
    assert list(decoding_batches(widths, todo, batch_size=0, batch_tokens=19)) == [[1], [3, 2], [4, 0]]
    assert list(decoding_batches(widths, [], batch_size=0, batch_tokens=20)) == []
    assert list(decoding_batches([50], [0], batch_size=0, batch_tokens=20)) == [[0]]  # a line longer than the budget
