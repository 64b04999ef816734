"""An :class:`~.translation.Engine` that never shows the model what must come back unchanged.

Plain lines hold paths, URLs, e-mail addresses, options, numbers and identifiers that a model trained on prose
translates as words (``/etc/passwd`` dropped, ``1,024`` turned into ``200000000000001``). Documents already mask
them (``formats/protect.py``); this wrapper does the same for lines: each line is masked before the engine reads
it and every hypothesis gets its spans back, byte for byte (``Masked.restore``: a mask the model lost is put back
at its place, one it invented removed; the line's own placeholders, ``%s`` or ``{name}``, are kept exactly
too). A span never holds a space, so word positions, and with them
alignments, are those of the original line.

Masks cost words: a model reads ``%s`` where it would have read ``15`` or ``--force`` and translates the words
beside it less well ("Rotate the view 15 degrees" came back as "Die Sicht »15« wird ..."). So a line is first
translated as it is, and only a line whose translation lost, changed, repeated or glued onto one of its spans is
translated again with masks (``protect.keeps_spans``): every span still comes back exactly, and a line the model
handled well keeps its unmasked translation. Lines with nothing to protect are translated once, as before; where
the engine reads context, a prefix or a glossary (whose names must be masked to be kept), lines are masked at once.
"""

from __future__ import annotations

import copy
import itertools
from collections import deque
from collections.abc import Iterable, Iterator

from ..config import DecodeConfig
from ..formats.protect import Masked, keeps_spans, mask_line, protected_spans
from .translation import Engine, Lines, Translation

CHUNK_LINES = 10_000  # lines translated before the ones that need masks go again (an engine's own chunk otherwise)


class ProtectedEngine(Engine):
    """``engine`` with every line's protected spans masked on the way in and restored on the way out; what it
    reports is the engine's own. With ``terms`` (``--keep-terms``, ``--glossary``): a name to keep is
    masked too, so it comes back as written and ends where it ends (no "Ubuntuu"); a glossary term is never
    masked, so that the engine's constrained search sees and translates it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.terms = engine.terms
        self.config: DecodeConfig = engine.config
        self.languages, self.max_positions = engine.languages, engine.max_positions
        self.context_sentences = engine.context_sentences
        self.stats = engine.stats  # its counts are the engine's (one object, counted in place)

    def new_document(self) -> None:
        self.engine.new_document()

    def mask(self, line: str) -> Masked:
        found = self.terms.find(line) if self.terms is not None else []
        keep = [(m.start, m.end) for m in found if m.term.kept]
        return mask_line(line, keep=keep, free=[(m.start, m.end) for m in found if not m.term.kept])

    def translate_lines(self, given: Lines) -> Iterator[list[Translation]]:
        if given.prefixes is None and given.documents is None and not self.context_sentences and self.terms is None:
            source, first_line = iter(given.text), given.first_line
            size = getattr(self.engine, "chunk_lines", CHUNK_LINES)
            while chunk := list(itertools.islice(source, size)):
                yield from self._unmasked_first(chunk, first_line)
                first_line += len(chunk)
            return
        yield from self._masked(given)

    def _unmasked_first(self, chunk: list[str], first_line: int) -> list[list[Translation]]:
        """The chunk translated as it is; the lines whose translation did not keep their spans, again masked."""
        found: list[list[Translation]] = []
        again: list[int] = []
        for i, (line, hyps) in enumerate(zip(chunk, self.engine.translate(chunk, None, first_line))):
            plain = Masked(line, {})  # its placeholders repaired as a masked line's are
            found.append([hyp._replace(text=plain.restore(hyp.text)) for hyp in hyps])
            if protected_spans(line) and not all(keeps_spans(line, hyp.text) for hyp in found[-1]):
                again.append(i)
        if again:
            counted = copy.deepcopy(self.engine.stats)
            for i, hyps in zip(again, self._masked(Lines([chunk[i] for i in again]))):
                found[i] = hyps
            tokens = self.engine.stats.output_tokens  # the work done; the lines were counted once already
            vars(self.engine.stats).update(vars(counted), output_tokens=tokens)
        return found

    def _masked(self, given: Lines) -> Iterator[list[Translation]]:
        pending: deque[Masked] = deque()

        def masked(source: Iterable[str]) -> Iterator[str]:
            # lazily, so that a stream (stdin) is read as the engine asks for it
            for line in source:
                pending.append(self.mask(line))
                yield pending[-1].text

        for hyps in self.engine.translate(masked(given.text), given.prefixes, given.first_line, given.documents):
            line = pending.popleft()  # the engine answers in order, each line after reading it
            yield [hyp._replace(text=line.restore(hyp.text)) for hyp in hyps]
