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

import copy
import itertools
from collections.abc import Callable, Iterator
from dataclasses import fields

from ..config import DecodeConfig
from ..languages import LineIdentifier
from .translation import EMPTY, Engine, Lines, Translation, TranslationStats

IN_TARGET = "in the target language already"
NOT_READ = "in a language the model does not read"


class ByLanguageEngine(Engine):
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
        self.stats = TranslationStats()  # every engine's counts added up, and the lines kept as written

    def new_document(self) -> None:
        pass

    def read_as(self, line: str) -> tuple[str | None, str]:
        """(the language to translate ``line`` from, or None to keep it; the language identified)."""
        language = self.identifier.identify(line)
        return (language if language in self.readers else None), language

    def translate_lines(self, given: Lines) -> Iterator[list[Translation]]:
        assert given.prefixes is None and given.documents is None  # refused with --from auto before a model is loaded
        source = iter(given.text)
        at = given.first_line
        while chunk := list(itertools.islice(source, self.chunk_lines)):
            yield from self._chunk(chunk, at)
            at += len(chunk)

    def _chunk(self, chunk: list[str], first: int) -> list[list[Translation]]:
        found: list[list[Translation] | None] = [None] * len(chunk)
        groups: dict[str, list[int]] = {}
        stats = self.stats
        for i, line in enumerate(chunk):
            if not line.strip():
                found[i] = [EMPTY]
                continue
            language, identified = self.read_as(line)
            if language is None:
                stats.kept_as_written[identified] = stats.kept_as_written.get(identified, 0) + 1
                stats.sentences += 1
                why = IN_TARGET if identified == self.target else NOT_READ
                found[i] = [Translation(line.rstrip("\r\n"), 0.0, source_language=identified, passed=why)]
            else:
                stats.translated_from[language] = stats.translated_from.get(language, 0) + 1
                groups.setdefault(language, []).append(i)
        for language, rows in groups.items():
            engine = self.engines.get(language) or self.engines.setdefault(language, self.open_for(language))
            before = copy.deepcopy(engine.stats)
            hyps = list(engine.translate([chunk[i] for i in rows]))
            self._add(before, engine.stats, [first + i for i in rows])
            for i, hyp in zip(rows, hyps):
                found[i] = [h._replace(source_language=language) for h in hyp]
        return [hyps for hyps in found if hyps is not None]

    def _add(self, before: TranslationStats, after: TranslationStats, places: list[int]) -> None:
        """What an engine counted for one group of lines, added to this engine's counts; the engine numbers the
        group's lines from 0, ``places`` gives them back their places in the input."""
        for f in fields(TranslationStats):
            old, new = getattr(before, f.name), getattr(after, f.name)
            if isinstance(new, int):
                setattr(self.stats, f.name, getattr(self.stats, f.name) + new - old)
            elif isinstance(new, list):
                getattr(self.stats, f.name).extend(places[j] for j in new[len(old) :])

    def summary(self) -> str:
        """One line: how many lines were read in which language, and how many kept as written, and why."""
        read, kept = (_most_first(counts) for counts in (self.stats.translated_from, self.stats.kept_as_written))
        line = f"--from auto: translated from {read or 'no language'}"
        if kept:
            line += (
                f"; kept as written {sum(self.stats.kept_as_written.values()):,} line(s) ({kept}): {IN_TARGET} "
                f"({self.target}) or {NOT_READ} ({', '.join(self.readers)})"
            )
        return line


def _most_first(counts: dict[str, int]) -> str:
    return ", ".join(f"{language} {count:,}" for language, count in sorted(counts.items(), key=lambda item: -item[1]))
