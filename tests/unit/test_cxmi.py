"""CXMI (score/cxmi.py): the mean gain a token from reading the context, and its bootstrap interval."""

from __future__ import annotations

import pytest

from nmt_cli.decode.forced import PairScore
from nmt_cli.score.cxmi import cxmi


def scores(totals, tokens):
    return [PairScore(total, n, None) for total, n in zip(totals, tokens)]


def test_cxmi_is_the_gain_a_token_and_its_interval_holds_it():
    tokens = [4, 6, 10, 5] * 25
    alone = scores([-1.0 * n for n in tokens], tokens)
    gains = [0.5, -0.1, 1.0, 0.0] * 25
    in_context = scores([a.total + g for a, g in zip(alone, gains)], tokens)
    found = cxmi(in_context, alone)
    assert found.value == pytest.approx(sum(gains) / sum(tokens))
    assert found.low < found.value < found.high and found.sentences == 100 and found.tokens == sum(tokens)
    assert cxmi(in_context, alone) == found  # seeded: the same report each time
    assert "+0.0560" in found.summary() and "likelier" in found.summary()


def test_no_gain_is_zero_and_unscorable_pairs_are_left_out():
    same = scores([-3.0, -2.0, None], [3, 2, 9])
    found = cxmi(same, scores([-3.0, -2.0, -9.0], [3, 2, 9]))
    assert (found.value, found.low, found.high, found.sentences, found.tokens) == (0.0, 0.0, 0.0, 2, 5)
    assert "no sure gain" in found.summary()
    worse = cxmi(scores([-4.0] * 50, [2] * 50), scores([-3.0] * 50, [2] * 50))
    assert worse.value == pytest.approx(-0.5) and worse.high == pytest.approx(-0.5)
    with pytest.raises(ValueError):
        cxmi(same, same[:2])
