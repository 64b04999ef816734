"""Which served model a request reaches (``serve/requests.py``), without loading any."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from nmt_cli.serve.requests import BadRequest, pick_model


def served(name: str, pair: str, pivot: object = None) -> SimpleNamespace:
    source, target = pair.split("-")
    return SimpleNamespace(name=name, source=source, target=target, pivot=pivot)


def test_a_pair_served_by_two_models_is_reached_by_its_languages_at_the_first_loaded():
    """LibreTranslate clients name languages only: two models of one pair (a teacher and its student) must not
    make the pair unreachable; "model" still names either."""
    big, small, other = served("en-de", "en-de"), served("en-de.2", "en-de"), served("en-fr", "en-fr")
    models = [big, small, other]
    assert pick_model({"source": "en", "target": "de"}, models, ["Hello"], None)[0] is big
    assert pick_model({"model": "en-de.2"}, models, ["Hello"], None)[0] is small
    assert pick_model({"source": "en", "target": "fr"}, models, ["Hello"], None)[0] is other
    with pytest.raises(BadRequest, match="several models fit"):  # two different pairs: which one is a guess
        pick_model({"source": "en"}, models, ["Hello"], None)


def test_a_direction_served_directly_wins_over_the_same_one_through_a_pivot():
    through = served("de-fr", "de-fr", pivot=served("de-en", "de-en"))
    direct = served("de-fr.2", "de-fr")
    assert pick_model({"source": "de", "target": "fr"}, [through, direct], ["Hallo"], None)[0] is direct
