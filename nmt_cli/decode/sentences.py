"""A translator as the document formats want it: ``formats.Sentences`` built from one function that gives each
line's n-best list (``nmt translate``'s engine with its progress bar, a ``Translator`` reading a file as one
document, the server's). Built here once, so every path hands formats the same translations, alignments and
assessed."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ..formats import Sentences, TextConfidence
from .assess import Assessment
from .attention_maps import parse_pharaoh
from .translation import Translation

Found = Callable[[list[str]], Iterable[list[Translation]]]  # lines -> each line's n-best list, in order


def sentences_of(
    found: Found,
    aligned: bool,
    assessed: bool = False,
    terms: Callable[[str], list[tuple[str, str]]] | None = None,
    kept: Callable[[str], list[tuple[int, int]]] | None = None,
) -> Sentences:
    """Best translations, with their word alignments when ``aligned`` (tags then land on the aligned words;
    without, on a monotone alignment), their confidence and flags when ``assessed``, and the glossary ``terms``
    a text holds where a glossary is applied."""

    def translate(lines: list[str]) -> list[str]:
        return [hyps[0].text for hyps in found(lines)]

    def align(lines: list[str]) -> list[tuple[str, list[tuple[int, int]]]]:
        return [(hyps[0].text, parse_pharaoh(hyps[0].alignment or "")) for hyps in found(lines)]

    def assess(lines: list[str]) -> list[tuple[str, TextConfidence]]:
        return [(hyps[0].text, text_confidence_of(hyps[0].assessment)) for hyps in found(lines)]

    return Sentences(translate, align if aligned else None, assess if assessed else None, terms, kept)


def text_confidence_of(assessment: Assessment | None) -> TextConfidence:
    """What a document format records of an assessment: the confidence shown and the flags."""
    assert assessment is not None  # an assessing translator gives every Translation one
    return TextConfidence(assessment.shown_confidence, tuple(assessment.flags))
