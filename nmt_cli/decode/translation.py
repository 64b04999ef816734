"""What every translation engine is to its callers: an :class:`Engine` turns lines into, per line, a
``Translation`` per hypothesis of its n-best list, best first, and counts what it did (:class:`TranslationStats`).

Our engine (``decode/translator.py``, ``Translator``) and CTranslate2's (``decode/ctranslate2_engine.py``,
``CTranslate2Translator``) are both Engines, each with every choice (model, device, precision, decoding
settings) fixed when it is made; ``nmt translate`` picks one and reads lines through it.

``Translation`` is a named tuple, so that ``hyps[0][0]`` (the text of the best) reads as it always did; new code
reads the names.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from ..config import DecodeConfig
    from ..terms.matching import TermMatcher
    from .assess import Assessment
    from .constrained import Constraint
    from .search import Hypothesis


class Translation(NamedTuple):
    """One hypothesis: its text, its score (the search's: summed log-probability over the length penalty), and
    where asked for, its Pharaoh word alignment (``alignments=True``) and its assessment (``assess=True``); with a
    glossary, ``missing_terms``: the source terms whose translation it lacks (empty: every one is there)."""

    text: str
    score: float
    alignment: str | None = None
    assessment: Assessment | None = None
    missing_terms: tuple[str, ...] | None = None
    source_language: str | None = None  # --from auto: the language its line was identified as
    passed: str | None = None  # --from auto: why its line is kept as written, not translated (None: translated)

    def record(self, index: int, rank: int, alignments: bool, confidence: bool) -> dict[str, Any]:
        """``--format jsonl``'s object for this hypothesis of input line ``index``."""
        record: dict[str, Any] = {"line": index, "rank": rank, "translation": self.text, "score": round(self.score, 4)}
        if self.source_language is not None:
            record["source_language"] = self.source_language
        if self.passed is not None:
            record["kept"] = self.passed
            return record  # nothing was translated: no confidence, alignment or terms to report
        if confidence:
            assessment = self.assessment
            assert assessment is not None  # --confidence: the translator assessed every hypothesis
            record.update(assessment.fields())
            record["features"] = assessment.features.as_dict()
        if alignments:
            record["alignment"] = self.alignment
        if self.missing_terms is not None:
            record["missing_terms"] = list(self.missing_terms)
        return record

    def tsv_row(self, index: int, rank: int, alignments: bool, confidence: bool) -> str:
        """``--format tsv``'s line: line, rank, score, (confidence, flags), text, (alignment)."""
        judged = self._judged() if confidence else []
        columns = [str(index), str(rank), f"{self.score:.4f}", *judged, self.text]
        return "\t".join(columns + ([self.alignment or ""] if alignments else [])) + "\n"

    def columns(self, alignments: bool, confidence: bool) -> list[str]:
        """What follows the text in the text format: the alignment, the confidence and flags, as asked."""
        return ([self.alignment or ""] if alignments else []) + (self._judged() if confidence else [])

    def _judged(self) -> list[str]:
        """The confidence (uncalibrated: marked with a ~) and the flags, as text columns."""
        if self.passed is not None:  # kept as written (--from auto): nothing the model could be trusted for
            return ["", "kept"]
        assert self.assessment is not None
        mark = "" if self.assessment.confidence is not None else "~"
        return [f"{mark}{self.assessment.shown_confidence:.3f}", ",".join(self.assessment.flags)]


EMPTY = Translation("", 0.0)  # an empty input line translates to an empty line


def output_lines(
    index: int, hyps: list[Translation], nbest: int, output_format: str, alignments: bool, confidence: bool
) -> str:
    """One input line's output in ``nmt translate``'s ``--format``: its translation (then the alignment, the
    confidence and flags, as asked), or INDEX, SCORE, TEXT lines for an n-best list; jsonl and tsv: one record
    per hypothesis."""
    if output_format == "jsonl":
        return "".join(
            json.dumps(hyp.record(index, rank, alignments, confidence), ensure_ascii=False) + "\n"
            for rank, hyp in enumerate(hyps)
        )
    if output_format == "tsv":
        return "".join(hyp.tsv_row(index, rank, alignments, confidence) for rank, hyp in enumerate(hyps))
    if nbest == 1:
        return "\t".join([hyps[0].text, *hyps[0].columns(alignments, confidence)]) + "\n"
    return "".join(
        "\t".join([str(index), f"{hyp.score:.4f}", hyp.text, *hyp.columns(alignments, confidence)]) + "\n" for hyp in hyps
    )


@dataclass
class TranslationStats:
    """Counts the caller reports when translation ends."""

    sentences: int = 0
    empty: int = 0
    truncated: int = 0
    output_tokens: int = 0
    truncated_lines: list[int] = field(default_factory=list)
    control_lines: int = 0  # lines with control characters, each replaced by a space
    term_lines: int = 0  # lines holding glossary terms
    term_failures: list[int] = field(default_factory=list)  # lines whose best translation lacks one of them
    translated_from: dict[str, int] = field(default_factory=dict)  # --from auto: lines by the language read
    kept_as_written: dict[str, int] = field(default_factory=dict)  # --from auto: lines kept, by language identified


@dataclass(frozen=True)
class Lines:
    """What an engine is asked to translate (:meth:`Engine.translate`'s arguments as one value, passed on from one
    engine to the one it wraps): the lines, and per line what goes with it."""

    text: Iterable[str]
    prefixes: Iterable[str] | None = None  # one per line: the output starts with it
    first_line: int = 0  # the index of the first line in the whole input (a resumed job's or a shard's start)
    documents: Iterable[str] | None = None  # one id per line: the lines a model reading context reads together


class Engine:
    """Lines in, n-best lists out, in order: what every engine is (each writes :meth:`translate_lines`)."""

    config: DecodeConfig  # the decoding settings it runs with
    languages: tuple[str, str]  # the model's source and target language ("" when unknown)
    max_positions: int  # the longest sequence the model takes (0: not known)
    terms: TermMatcher | None  # the glossary and names to keep it applies (--glossary, --keep-terms), or None
    context_sentences: int  # earlier sentences of its document a line reads (0: every line alone)
    stats: TranslationStats  # what it translated so far (lines, empty, truncated, ...)

    def translate(
        self,
        lines: Iterable[str],
        prefixes: Iterable[str] | None = None,
        first_line: int = 0,
        documents: Iterable[str] | None = None,
    ) -> Iterator[list[Translation]]:
        """For every line its n-best list; ``prefixes``, one per line, start the outputs; ``first_line`` is the
        index of the first line in the whole input (a resumed job's or a shard's start); ``documents``, one id
        per line, says which lines a model reading document context reads together."""
        return self.translate_lines(Lines(lines, prefixes, first_line, documents))

    def translate_lines(self, given: Lines) -> Iterator[list[Translation]]:
        """:meth:`translate` with its arguments as one value."""
        raise NotImplementedError

    def new_document(self) -> None:
        """The next line begins a document (each file a format hands over is one)."""
        raise NotImplementedError


# Sentences' sources and their n-best hypotheses -> what finishing them asks of the model (alignments, assessments).
Finish = Callable[[list[list[int]], list[list["Hypothesis"]]], Any]


@dataclass(frozen=True)
class SearchRequest:
    """What a :class:`SearchService` is asked to search: each source's n-best hypotheses under ``config``."""

    sources: list[list[int]]
    config: DecodeConfig
    nbest: int
    constraints: list[tuple[Constraint, ...]] | None = None  # per source, what its output must hold
    first_token: int | None = None  # the token every output starts with, left out of it
    finish: Finish | None = None  # run on the hypotheses where the model is free to run


class SearchService(Protocol):
    """Where a :class:`~.translator.Translator` sends its searches instead of running them itself: the server's
    decoding loop (``serve/loop.py``, ``LoopSearches``), which batches every request's sentences together, joining
    and leaving between steps. ``nmt serve`` thus translates a request with the very engines ``nmt translate``
    builds; only the batching differs."""

    def search(self, request: SearchRequest) -> tuple[list[list[Hypothesis]], Any]:
        """Each source's n-best hypotheses, and what ``request.finish`` made of them (None without it)."""
        ...
