"""Temperature sampling of directions (data/mixing.py) and the pivot through which untrained directions go."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from nmt_cli.data.mixing import epoch_pool, temperature_shares
from nmt_cli.decode.targets import pivot_language
from nmt_cli.formats.segments import joined_links


def test_temperature_one_keeps_the_sizes_and_a_large_one_evens_them():
    sizes = {"big": 9000, "small": 1000}
    assert temperature_shares(sizes, 1.0, 10_000) == {"big": 9000, "small": 1000}
    even = temperature_shares(sizes, 1000.0, 10_000)
    assert abs(even["big"] - even["small"]) < 50
    five = temperature_shares(sizes, 5.0, 10_000)
    assert 1000 < five["small"] < even["small"] and sum(five.values()) <= 10_000
    assert temperature_shares({"a": 10, "none": 0}, 5.0, 10) == {"a": 10, "none": 0}


def test_an_epoch_draws_each_direction_its_share_the_same_for_the_same_seed_and_epoch():
    directions = np.repeat([0, 1], [900, 100])
    pool = epoch_pool(directions, 5.0, seed=1, epoch=0)
    counts = np.bincount(directions[pool], minlength=2)
    shares = temperature_shares({"0": 900, "1": 100}, 5.0, 1000)
    assert counts.tolist() == [shares["0"], shares["1"]]
    small = pool[directions[pool] == 1]
    assert np.all(np.bincount(small, minlength=1000)[900:] >= 3)  # the small direction, read whole, several times
    assert len(np.unique(pool[directions[pool] == 0])) == shares["0"]  # the large one: a part, each pair once
    assert np.array_equal(pool, epoch_pool(directions, 5.0, seed=1, epoch=0))  # resumable, the same on every process
    assert not np.array_equal(pool, epoch_pool(directions, 5.0, seed=1, epoch=1))
    assert np.array_equal(np.sort(epoch_pool(directions, 1.0, 1, 0)), np.arange(1000))  # T=1: every pair once


@pytest.mark.parametrize(
    ("source", "to", "expected"),
    [
        ("de", "fr", "en"),
        ("fr", "de", "en"),
        ("en", "fr", None),
        ("deu", "fra", "en"),
        ("de", "es", None),
        (None, "fr", None),
    ],
)
def test_an_untrained_direction_goes_through_the_language_that_joins_it(source, to, expected):
    data = SimpleNamespace(pairs=("en-de", "de-en", "en-fr", "fr-en", "de-it", "it-fr"))
    assert pivot_language(data, source, to) == expected
    assert pivot_language(SimpleNamespace(pairs=("de-it", "it-fr")), "de", "fr") == "it"
    assert pivot_language(SimpleNamespace(pairs=()), "de", "fr") is None


def test_word_alignments_join_through_the_pivot_words():
    # source words 0,1 -> pivot 1,0; pivot 0 -> target 0 and 2, pivot 1 -> target 1
    assert joined_links([(0, 1), (1, 0)], [(0, 0), (0, 2), (1, 1)]) == [(0, 1), (1, 0), (1, 2)]
    assert joined_links([(0, 5)], [(0, 0)]) == []


def test_a_direction_into_its_own_language_is_refused():
    from nmt_cli.decode.targets import route
    from nmt_cli.errors import NmtError

    data = SimpleNamespace(pairs=("en-de", "de-en"), src_lang="", tgt_lang="", language_tag="source")
    with pytest.raises(NmtError, match="the same language"):
        route(data, None, "deu", "model", "de")
