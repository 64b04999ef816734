"""The two-stage top-k of the search (decode/top_k.py) returns what ``torch.topk`` does."""

from __future__ import annotations

import pytest
import torch

from nmt_cli.decode import top_k
from nmt_cli.decode.top_k import top_k_rows


@pytest.mark.parametrize("rows, columns, k", [(64, 8000, 8), (300, 4099, 8), (5, 70000, 1), (9, 5000, 10)])
def test_two_stage_top_k_equals_topk(rows, columns, k, monkeypatch):
    """Whole chunks and a tail of columns, one and many per row, with the largest entries crowded
    into one chunk in some rows (where a one-maximum-per-chunk shortcut would fail)."""
    monkeypatch.setattr(top_k, "TWO_STAGE_MIN_ENTRIES", 0)
    generator = torch.Generator().manual_seed(rows + columns)
    scores = torch.randn(rows, columns, generator=generator).log_softmax(dim=1)
    scores[0, 64 : 64 + k] += 50.0  # row 0: its k best in one chunk
    scores[1, -k:] += 50.0  # row 1: its k best in the tail (or the last chunk)
    values, columns_of = top_k_rows(scores, k)
    expected = scores.topk(k, dim=1)
    torch.testing.assert_close(values, expected.values, atol=0, rtol=0)
    assert torch.equal(columns_of, expected.indices)
    assert set(columns_of[0].tolist()) == set(range(64, 64 + k))


def test_masked_rows_keep_their_one_allowed_entry(monkeypatch):
    """Rows at their length limit are -inf but for EOS: the one finite entry comes first, the rest -inf."""
    monkeypatch.setattr(top_k, "TWO_STAGE_MIN_ENTRIES", 0)
    scores = torch.randn(4, 3000).log_softmax(dim=1)
    scores[2] = float("-inf")
    scores[2, 2999] = -0.5
    values, columns_of = top_k_rows(scores, 8)
    assert columns_of[2, 0] == 2999 and values[2, 0] == -0.5
    assert torch.isinf(values[2, 1:]).all()
    torch.testing.assert_close(values, scores.topk(8, dim=1).values, atol=0, rtol=0)


def test_small_inputs_go_to_topk():
    """Below the threshold (and for too few columns) the plain ``topk`` answers: same results either way."""
    scores = torch.randn(2, 100)
    values, columns_of = top_k_rows(scores, 3)
    expected = scores.topk(3, dim=1)
    assert torch.equal(values, expected.values) and torch.equal(columns_of, expected.indices)
