"""From a file's texts to sentences and back: the one place formats meet the translator.

A format hands over texts (a message, a paragraph); each is cut into lines, each line into sentences
(sentencex, Wikimedia's rule-based splitter: abbreviations and numbers handled for 250 languages, no
model to download; when it is not installed a line is one sentence). Every sentence of the whole
file goes to the translator in one call, so they are sorted and batched together as ``nmt
translate`` batches a file's lines. What must not be translated (code, paths, numbers) is masked
before (``protect.py``); each translation then gets its source's placeholders and masked spans back
(``placeholders.py``) and the texts are put together again with the source's spacing and line breaks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .placeholders import PLACEHOLDER
from .protect import Masked, mask, protected_spans

# Sentences in, translations out, in order (a Translator's best hypotheses).
TranslateSentences = Callable[[list[str]], list[str]]
# A translation and its word alignment: (source word, target word) pairs, words as runs of non-space.
Aligned = tuple[str, list[tuple[int, int]]]


@dataclass(frozen=True)
class TextConfidence:
    """A text's confidence in [0, 1] and flags (``nmt translate --confidence``): what a document format writes
    of the assessments (``decode/assess.py``) of its sentences."""

    confidence: float
    flags: tuple[str, ...] = ()

    def worst(self, other: TextConfidence) -> TextConfidence:
        """A text of several sentences is as confident as its least confident one, with all their flags."""
        return TextConfidence(min(self.confidence, other.confidence), tuple(sorted({*self.flags, *other.flags})))


UNDOUBTED = TextConfidence(1.0)  # a text with nothing to translate, or translated without --confidence


@dataclass(frozen=True)
class Sentences:
    """What a format needs from a translator: sentences translated, and, for markup, word-aligned.

    ``align`` is the model's alignment (``nmt translate --alignments``); an engine without one (CTranslate2)
    leaves it None and tags follow a monotone alignment: word i of n goes with word i*m/n of m."""

    translate: TranslateSentences
    align: Callable[[list[str]], list[Aligned]] | None = None
    # translations with their confidence and flags (--confidence); None when the engine cannot assess them
    assess: Callable[[list[str]], list[tuple[str, TextConfidence]]] | None = None
    # the glossary terms a source text holds, each with its approved translation (--glossary); None: no glossary
    terms: Callable[[str], list[tuple[str, str]]] | None = None
    # where a source text holds names to keep as written (--keep-terms): masked like paths, so they come back
    # whole and end where they end; None: none
    kept: Callable[[str], list[tuple[int, int]]] | None = None

    def aligned(self, sentences: list[str]) -> list[Aligned]:
        if self.align is not None:
            return self.align(sentences)
        return [(t, monotone(len(s.split()), len(t.split()))) for s, t in zip(sentences, self.translate(sentences))]


def monotone(n_source: int, n_target: int) -> list[tuple[int, int]]:
    """Each target word linked to the source word at the same relative place."""
    if not n_source:
        return []
    return [(min(n_source - 1, j * n_source // max(n_target, 1)), j) for j in range(n_target)]


def through_pivot(first: Sentences, second: Sentences) -> Sentences:
    """Sentences translated by ``first`` into a pivot language, then by ``second`` out of it; each word
    alignment joined through the pivot's words (a source word goes with the target words its pivot words
    went to)."""

    def translate(sentences: list[str]) -> list[str]:
        return second.translate(first.translate(sentences))

    def align(sentences: list[str]) -> list[Aligned]:
        middle = first.aligned(sentences)
        last = second.aligned([text for text, _ in middle])
        return [(text, joined_links(into, out_of)) for (_, into), (text, out_of) in zip(middle, last)]

    return Sentences(translate, align)


def joined_links(into: list[tuple[int, int]], out_of: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Word alignment source->target from source->pivot and pivot->target, in order."""
    targets_of: dict[int, list[int]] = {}
    for middle, target in out_of:
        targets_of.setdefault(middle, []).append(target)
    return sorted({(source, target) for source, middle in into for target in targets_of.get(middle, [])})


def as_sentences(translate: TranslateSentences | Sentences) -> Sentences:
    return translate if isinstance(translate, Sentences) else Sentences(translate)


_SPACE_AROUND = re.compile(r"^(\s*)(.*?)(\s*)$", re.DOTALL)


def split_sentences(line: str, language: str) -> list[str]:
    """``line`` as sentences whose concatenation is ``line`` (spaces kept with the sentence before them)."""
    if not line.strip():
        return [line]
    try:
        from sentencex import segment
    except ImportError:
        return [line]
    pieces = list(segment(language, line))
    if "".join(pieces) != line:
        return [line]
    # The splitter knows abbreviations, not printf: "%.*s" would be cut after "%." Never cut inside a placeholder.
    inside = {i for match in PLACEHOLDER.finditer(line) for i in range(match.start() + 1, match.end())}
    cuts, at = [0], 0
    for piece in pieces[:-1]:
        at += len(piece)
        if at not in inside:
            cuts.append(at)
    cuts.append(len(line))
    return [line[start:end] for start, end in zip(cuts, cuts[1:])]


def _kept_first(kept: list[tuple[int, int]], protected: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Names to keep, and the protected spans that overlap none of them."""
    return sorted([*kept, *[(a, b) for a, b in protected if not any(a < y and x < b for x, y in kept)]])


def translate_texts(texts: Sequence[str], translate: TranslateSentences | Sentences, source_language: str) -> list[str]:
    """Each text translated sentence by sentence, with its line breaks, spacing and placeholders kept."""
    sentences = as_sentences(translate)
    unassessed = lambda cores: [(t, UNDOUBTED) for t in sentences.translate(cores)]  # noqa: E731
    return [text for text, _ in _translate_texts(texts, unassessed, source_language, sentences.kept)]


def assess_texts(texts: Sequence[str], sentences: Sentences, source_language: str) -> list[tuple[str, TextConfidence]]:
    """As :func:`translate_texts`, each text with the confidence of its least confident sentence."""
    assert sentences.assess is not None
    return _translate_texts(texts, sentences.assess, source_language, sentences.kept)


def _translate_texts(
    texts: Sequence[str],
    translate: Callable[[list[str]], list[tuple[str, TextConfidence]]],
    source_language: str,
    kept: Callable[[str], list[tuple[int, int]]] | None = None,
) -> list[tuple[str, TextConfidence]]:
    plans: list[list[list[tuple[str, Masked, str]]]] = []  # per text, line, sentence: (before, core, after)
    cores: list[str] = []
    for text in texts:
        lines = []
        for line in text.split("\n"):
            sentences = []
            for sentence in split_sentences(line, source_language):
                before, core, after = _SPACE_AROUND.match(sentence).groups()  # type: ignore[union-attr]
                # code, paths, numbers and names to keep: never shown to the model (protect.py)
                masked = mask(core, _kept_first(kept(core), protected_spans(core)) if kept is not None else None)
                sentences.append((before, masked, after))
                if masked.translatable:
                    cores.append(masked.text)
            lines.append(sentences)
        plans.append(lines)
    translated = iter(translate(cores) if cores else [])
    out = []
    for lines in plans:
        rebuilt, assessed = [], UNDOUBTED
        for sentences in lines:
            pieces = []
            for before, masked, after in sentences:
                core = masked.text
                if masked.translatable:
                    text, judged = next(translated)
                    assessed = assessed.worst(judged)
                    core = masked.restore(text, PLACEHOLDER)
                else:  # nothing but codes, paths or numbers: kept as written
                    core = masked.restore(core, PLACEHOLDER)
                pieces.append(before + core + after)
            rebuilt.append("".join(pieces))
        out.append(("\n".join(rebuilt), assessed))
    return out
