"""Which glossary terms a sentence holds, and where.

A source term matches on word boundaries (a hyphen does not end a word), case-insensitively unless it has
capitals of its own ("file" matches "File" and "FILE"; "Repository" only itself), the longest first where terms
overlap ("file system" before "file"). Text the model never translates -- placeholders, and the code, paths,
URLs, options and numbers that ``formats/protect.py`` masks -- holds no term: ``/usr/share/file`` is a path,
not the term "file"; a term that covers such a span whole ("GitHub", "README.md") is the user's, and matches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..formats.placeholders import PLACEHOLDER
from ..formats.protect import protected_spans
from .glossary import Glossary, Term


@dataclass(frozen=True)
class TermMatch:
    """One occurrence of a term: the characters ``start:end`` of the sentence."""

    start: int
    end: int
    term: Term


class TermMatcher:
    """A glossary compiled for matching: two alternations, longest term first (one for the terms matched in any
    case, one for those with capitals of their own)."""

    def __init__(self, glossary: Glossary) -> None:
        self.glossary = glossary
        folded = [t for t in glossary.terms if t.source == t.source.lower()]
        exact = [t for t in glossary.terms if t.source != t.source.lower()]
        self._folded = {t.source: t for t in folded}
        self._exact = {t.source: t for t in exact}
        self._patterns = [
            (pattern, table)
            for pattern, table in (
                (_alternation(folded, re.IGNORECASE), self._folded),
                (_alternation(exact, 0), self._exact),
            )
            if pattern is not None
        ]

    def applied(self, text: str) -> list[tuple[str, str]]:
        """``text``'s terms, each with its approved (first) translation, once each, in order: what a gettext
        entry's comment names as the glossary applied."""
        return list(dict.fromkeys((m.term.source, m.term.targets[0]) for m in self.find(text)))

    def kept_spans(self, text: str) -> list[tuple[int, int]]:
        """Where ``text`` holds names to keep as written (terms whose translation is themselves)."""
        return [(m.start, m.end) for m in self.find(text) if m.term.kept]

    def find(self, text: str) -> list[TermMatch]:
        """The terms of ``text``, in order, none overlapping another or a protected span."""
        candidates = []
        for pattern, table in self._patterns:
            for found in pattern.finditer(text):
                term = table[found.group(0) if table is self._exact else found.group(0).lower()]
                candidates.append(TermMatch(found.start(), found.end(), term))
        blocked = protected_spans(text) + [m.span() for m in PLACEHOLDER.finditer(text)]
        chosen: list[TermMatch] = []
        for candidate in sorted(candidates, key=lambda m: (m.start, -(m.end - m.start))):
            # a term inside a protected span is not one ("file" in /usr/share/file); a term that covers one is
            # the user's word for it ("GitHub", "README.md"), and wins
            if any(
                candidate.start < end and start < candidate.end
                for start, end in blocked
                if not _within(start, end, candidate)
            ):
                continue
            if chosen and candidate.start < chosen[-1].end:
                continue  # inside or across a longer (or earlier) term
            chosen.append(candidate)
        return chosen


# Served glossaries are compiled once, at start-up (a 100,000-term glossary takes the better part of a minute),
# and found again by identity: they live as long as the server.
_COMPILED: dict[int, TermMatcher] = {}


def compiled(glossary: Glossary, keep: bool = False) -> TermMatcher:
    """The glossary's matcher: the one compiled before when there is one; ``keep`` stores it for later calls."""
    matcher = _COMPILED.get(id(glossary))
    if matcher is None or matcher.glossary is not glossary:
        matcher = TermMatcher(glossary)
        if keep:
            _COMPILED[id(glossary)] = matcher
    return matcher


def _within(start: int, end: int, match: TermMatch) -> bool:
    return match.start <= start and end <= match.end


def _alternation(terms: list[Term], flags: int) -> re.Pattern[str] | None:
    if not terms:
        return None
    ordered = sorted((t.source for t in terms), key=len, reverse=True)
    # a hyphen joins words into one ("cherry-pick" holds no term "cherry"); a term may hold one itself
    return re.compile(r"(?<![\w-])(?:" + "|".join(re.escape(s) for s in ordered) + r")(?![\w-])", flags)
