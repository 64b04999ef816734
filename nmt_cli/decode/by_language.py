"""``nmt translate --from auto``: each line's language identified, and the line translated from it.

A file that mixes languages (support tickets, a forum's posts, subtitles of a film in two languages) is translated
line by line into ``--to``: every line is identified (``languages.py``, the server's identifier), lines of one
language go to the engine of that direction together (opened when first needed, a chunk at a time, so batching
stays what it is for one language), and the translations come back in input order. A line already in the target
language is kept as written: translating it would only damage it. A line the identifier is sure is in a language the
model does not read is kept too, never "translated" from a wrong language; both are counted and marked
(``Translation.passed``), so a reader of ``--format jsonl`` sees why.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import fields

from ..config import DecodeConfig
from ..languages import LineIdentifier
from .translation import EMPTY, Engine, Translation, TranslationStats

IN_TARGET = "in the target language already"
NOT_READ = "in a language the model does not read"


class ByLanguageEngine:
    """Lines routed by their identified language to ``open_for(language)``'s engine, one per language of
    ``readers`` (the languages the model translates into ``target`` from); the first reader's is opened at once
    (what the caller reads of an engine, its settings and limits, is that one's)."""

    def __init__(
        self,
        open_for: Callable[[str], Engine],
        readers: list[str],
        target: str,
        identifier: LineIdentifier,
        chunk_lines: int,
    ) -> None:
        self.open_for, self.readers, self.target, self.identifier = open_for, readers, target, identifier
        self.chunk_lines = max(chunk_lines, 1)
        self.engines: dict[str, Engine] = {readers[0]: open_for(readers[0])}
        first = self.engines[readers[0]]
        self.config: DecodeConfig = first.config
        self.max_positions = first.max_positions
        self.terms = first.terms
        self.context_sentences = 0
        self.languages = ("", target)
        self.identified: Counter[str] = Counter()  # lines by the language they were translated from
        self.kept: Counter[str] = Counter()  # lines kept as written, by the language identified
        self._passed_stats = TranslationStats()

    @property
    def stats(self) -> TranslationStats:
        """Every engine's counts together, and the lines kept as written."""
        total = TranslationStats()
        for stats in [self._passed_stats, *(engine.stats for engine in self.engines.values())]:
            for f in fields(TranslationStats):
                setattr(total, f.name, getattr(total, f.name) + getattr(stats, f.name))
        total.truncated_lines.sort()
        total.term_failures.sort()
        return total

    def new_document(self) -> None:
        pass

    def read_as(self, line: str) -> tuple[str | None, str]:
        """(the language to translate ``line`` from, or None to keep it; the language identified)."""
        language = self.identifier.identify(line)
        return (language if language in self.readers else None), language

    def translate(
        self,
        lines: Iterable[str],
        prefixes: Iterable[str] | None = None,
        first_line: int = 0,
        documents: Iterable[str] | None = None,
    ) -> Iterator[list[Translation]]:
        assert prefixes is None and documents is None  # refused with --from auto before a model is loaded
        source = iter(lines)
        at = first_line
        while chunk := list(itertools.islice(source, self.chunk_lines)):
            yield from self._chunk(chunk, at)
            at += len(chunk)

    def _chunk(self, chunk: list[str], first: int) -> list[list[Translation]]:
        found: list[list[Translation] | None] = [None] * len(chunk)
        groups: dict[str, list[int]] = {}
        for i, line in enumerate(chunk):
            if not line.strip():
                found[i] = [EMPTY]
                continue
            language, identified = self.read_as(line)
            if language is None:
                self.kept[identified] += 1
                self._passed_stats.sentences += 1
                why = IN_TARGET if identified == self.target else NOT_READ
                found[i] = [Translation(line.rstrip("\r\n"), 0.0, source_language=identified, passed=why)]
            else:
                self.identified[language] += 1
                groups.setdefault(language, []).append(i)
        for language, rows in groups.items():
            engine = self.engines.get(language) or self.engines.setdefault(language, self.open_for(language))
            stats = engine.stats
            known = len(stats.truncated_lines), len(stats.term_failures)
            hyps = list(engine.translate([chunk[i] for i in rows]))
            # the engine numbers this group's lines from 0: give them back their places in the input
            stats.truncated_lines[known[0] :] = [first + rows[j] for j in stats.truncated_lines[known[0] :]]
            stats.term_failures[known[1] :] = [first + rows[j] for j in stats.term_failures[known[1] :]]
            for i, hyp in zip(rows, hyps):
                found[i] = [h._replace(source_language=language) for h in hyp]
        return [hyps for hyps in found if hyps is not None]

    def summary(self) -> str:
        """One line: how many lines were read in which language, and how many kept as written, and why."""
        read = ", ".join(f"{language} {count:,}" for language, count in self.identified.most_common())
        kept = ", ".join(f"{language} {count:,}" for language, count in self.kept.most_common())
        line = f"--from auto: translated from {read or 'no language'}"
        if self.kept:
            line += (
                f"; kept as written {sum(self.kept.values()):,} line(s) ({kept}): {IN_TARGET} ({self.target}) "
                f"or {NOT_READ} ({', '.join(self.readers)})"
            )
        return line
