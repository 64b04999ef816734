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


class RankedDetector:
    """A language identifier that ranks as told (``languages.py``'s is trained; this one is the test's)."""

    unavailable = None

    def __init__(self, ranked: list[tuple[str, float]]) -> None:
        self.ranked = ranked

    def detect(self, text: str) -> list[tuple[str, float]]:
        return self.ranked


def test_source_auto_takes_what_detect_ranks_first_or_says_why_not():
    """/translate with "source": "auto" agrees with /detect: English text for a model into English is refused as
    English already (it was translated "from French", detected at 0.15%), as is a language no model reads."""
    models = [served("de-en", "de-en"), served("fr-en", "fr-en"), served("en-de", "en-de")]
    german = RankedDetector([("de", 97.5), ("en", 2.0)])
    model, detected = pick_model({"source": "auto", "target": "en"}, models, ["Ein Hund."], german)
    assert model.name == "de-en" and detected == ("de", 97.5)
    english = RankedDetector([("en", 99.78), ("fr", 0.15)])
    with pytest.raises(BadRequest, match=r"the text is in en already \(detected, 99.78% sure\)"):
        pick_model({"source": "auto", "target": "en"}, models, ["A dog."], english)
    spanish = RankedDetector([("es", 96.0), ("fr", 3.0)])
    with pytest.raises(BadRequest, match=r"the text is in es .* no model here reads it into en; models read de, fr"):
        pick_model({"source": "auto", "target": "en"}, models, ["Un perro."], spanish)
    unsure = RankedDetector([("en", 50.0), ("de", 50.0)])  # one word: the likeliest language a model reads
    assert pick_model({"source": "auto", "target": "en"}, models, ["Hi"], unsure)[1] == ("de", 50.0)
