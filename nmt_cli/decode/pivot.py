"""An :class:`~.translation.Engine` for a direction a multilingual model was never trained on: through a pivot.

A model trained on en-de, de-en, en-fr and fr-en knows German and French but never saw German paired with French.
Asked for German->French directly ("zero-shot": a German source with the ``>>fr<<`` tag), a small model often
answers in the wrong language or copies; through English, each step is a direction it learned (the benchmarks
compare both: docs/benchmarks.md). ``nmt translate --from de --to fr`` goes through the pivot unless
``--zero-shot`` asks for the direct route; the server pivots the same way (``serve/server.py``).

Each line's best translation into the pivot is what the second step reads; the second step's n-best lists,
prefixes, scores and assessments are the answer, and word alignments are joined through the pivot's words.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from ..formats.segments import joined_links
from .attention_maps import parse_pharaoh, pharaoh
from .translation import Engine, Lines, Translation


class PivotEngine(Engine):
    """``first`` into the pivot language, then ``second`` out of it; its settings and counts are ``second``'s."""

    def __init__(self, first: Engine, second: Engine, languages: tuple[str, str], chunk_lines: int = 10_000) -> None:
        self.first, self.second = first, second
        self.languages = languages
        self.chunk_lines = chunk_lines
        self.config, self.max_positions, self.terms = second.config, second.max_positions, second.terms
        self.context_sentences = 0  # a pivot reads every line alone
        self.stats = second.stats  # its counts are the second step's (one object, counted in place)

    def translate_lines(self, given: Lines) -> Iterator[list[Translation]]:
        source, first_line = iter(given.text), given.first_line
        starts = iter(given.prefixes) if given.prefixes is not None else None
        while chunk := list(itertools.islice(source, self.chunk_lines)):
            middle = [hyps[0] for hyps in self.first.translate(chunk, None, first_line)]
            chunk_starts = list(itertools.islice(starts, len(chunk))) if starts is not None else None
            finals = self.second.translate([m.text for m in middle], chunk_starts, first_line)
            for into, hyps in zip(middle, finals):
                yield [_joined(into, hyp) for hyp in hyps]
            first_line += len(chunk)

    def new_document(self) -> None:
        self.first.new_document()
        self.second.new_document()


def _joined(into: Translation, hyp: Translation) -> Translation:
    """``hyp`` (pivot -> target) with its word alignment read from the source: through ``into``'s."""
    if hyp.alignment is None or into.alignment is None:
        return hyp
    return hyp._replace(alignment=pharaoh(joined_links(parse_pharaoh(into.alignment), parse_pharaoh(hyp.alignment))))


__all__ = ["PivotEngine"]
