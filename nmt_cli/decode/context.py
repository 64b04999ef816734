"""Translating documents with a model that reads context: by concatenation (``model.concat``, data/context.py) or
by segment-level recurrence (``model.recurrence``, model/recurrence.py).

Each sentence is read after the previous K sentences of its document, each followed by ``<brk>``, as the model
was trained. A 2-to-1 model needs only sources, so every sentence of a chunk is translated at once. A 2-to-2
model (``model.concat_target``) also starts its output with its own translations of those sentences (forced,
then left out of what it returns), so the sentences of one document are translated in order.

A recurrent model (:class:`DocumentPast`) reads each sentence alone, its layers attending to the keys and values
they computed for the previous sentences of its document: the encoder's of their sources, the decoder's of the
translations chosen for them (beam search's best, as the search cached them). So its documents too go a
sentence at a time, and nothing is read twice.

Both go through :func:`in_document_order`: the chunk's documents side by side, and each document cut into
segments (``decode.context_segment`` sentences) that go side by side too, each segment first translating again
the sentences before it (its *leads*), so that a long page does not go one sentence per batch. What a document
carries into the next chunk is a :class:`Carried`.

The caller says where documents start (``nmt translate``: after a blank line, or where ``--docids`` changes);
blank lines are translated as blank and read as no context; the context runs on from one chunk to the next. A
sentence-level model never comes here, and a document of one sentence reads no context.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import sentencepiece as spm
import torch

from ..data.batches import pad_rows
from ..data.context import break_id, join_context
from ..data.vocab import BOS_ID, PAD_ID
from ..errors import NmtError
from ..model.recurrence import SentencePast, batch_pasts, sentence_pasts, sentence_pasts_kept
from ..model.transformer import Transformer
from .ensemble import Ensemble
from .loading import LoadedModel
from .search import Hypothesis
from .steppers import Encoded
from .translation import Translation

if TYPE_CHECKING:  # the translator reads documents through a reader: the import goes one way at run time
    from .translator import Translator


@dataclass(frozen=True)
class Chunk:
    """One chunk of a stream of lines as a document reader takes it: each sentence's source ids (empty: a blank
    line), its target prefix where it has one, and whether it begins a document."""

    encoded: list[list[int]]
    prefixes: list[list[int]] | None
    starts: Sequence[bool]


class DocumentReader(Protocol):
    """How a model reads its document's earlier sentences: :class:`DocumentContext` (concatenation) or
    :class:`DocumentPast` (recurrence)."""

    sentences: int  # earlier sentences of its document that a sentence reads

    def translate(self, translator: Translator, chunk: Chunk) -> list[list[Translation]]:
        """The n-best lists of one chunk's sentences."""
        ...


def document_reader(loaded: LoadedModel, max_positions: int, segment: int = 0) -> DocumentReader | None:
    """How a model reads its document's earlier sentences: by concatenation, by recurrence, or not at all (None);
    ``segment``: the sentences of a segment (``decode.context_segment``, :func:`in_document_order`)."""
    model = loaded.recipe.model
    if model.concat:
        vocabs = loaded.src_vocab, loaded.tgt_vocab
        return DocumentContext.of(model.concat, model.concat_target, *vocabs, max_positions, segment)
    if model.recurrence:
        if isinstance(loaded.model, Ensemble):
            raise NmtError(f"{loaded.path}: models trained with model.recurrence translate alone, not as an ensemble")
        return DocumentPast(model.recurrence, segment)
    return None


class DocumentStarts:
    """Where documents start in a stream of lines: where the document id changes (``--docids``: one id per line),
    or without ids after a blank line; the first line begins one, and so does the line after :meth:`new_document`."""

    def __init__(self) -> None:
        self._previous: tuple[str | None, bool] = (None, True)  # the last line's document id, and whether it was blank

    def new_document(self) -> None:
        self._previous = (None, True)

    def of(self, chunk: list[str], ids: Iterator[str] | None, line_number: int) -> list[bool]:
        """Per line of the chunk, whether it begins a document (``line_number``: lines read before the chunk)."""
        starts = []
        for number, line in enumerate(chunk):
            blank = not line.strip()
            if ids is None:
                starts.append(self._previous[1])
                self._previous = (None, blank)
                continue
            document = next(ids, None)
            if document is None:
                raise NmtError(
                    f"the document ids end at line {line_number + number} but the input goes on; give one id per input line"
                )
            starts.append(document.strip() != self._previous[0])
            self._previous = (document.strip(), blank)
        return starts


def document_starts(ids: Sequence[str]) -> list[bool]:
    """Per line of a whole input with its document ids (``--docids``), whether it begins a document: the rule of
    :class:`DocumentStarts`, where the id changes."""
    return DocumentStarts().of(list(ids), iter(ids), 0)


def check_docids(name: object, ids: int, lines: int, input_name: object, reads_context: bool) -> None:
    """``--docids`` goes with a model that reads document context (``model.reads_context``), one id per line of
    its input: else a one-line refusal that names the file and the fix."""
    if not reads_context:
        raise NmtError(
            f"--docids {name}: this model reads each sentence alone (trained without model.concat or "
            "model.recurrence); drop --docids"
        )
    if ids != lines:
        raise NmtError(
            f"--docids {name}: {ids:,} document ids for the {lines:,} lines of {input_name}; give one id per line"
        )


@dataclass
class DocumentContext:
    """The sentences of the current document a translator remembers: (source ids, translation ids), oldest first."""

    sentences: int
    src_break: int
    tgt_break: int | None  # None: the model reads no target context (2-to-1)
    max_src: int  # longest source the model reads, context included
    max_prefix: int  # longest target context, leaving room for the translation
    tgt_vocab: spm.SentencePieceProcessor
    segment: int = 0  # 2-to-2: sentences per segment (in_document_order)
    history: deque[tuple[list[int], list[int]]] = field(default_factory=deque)  # 2-to-1
    carried: Carried = field(default_factory=lambda: Carried())  # 2-to-2

    @classmethod
    def of(
        cls,
        sentences: int,
        target: bool,
        src_vocab: spm.SentencePieceProcessor,
        tgt_vocab: spm.SentencePieceProcessor,
        max_positions: int,
        segment: int = 0,
    ) -> DocumentContext:
        what = "a model trained with model.concat"
        tgt_break = break_id(tgt_vocab, what) if target else None
        src_break = break_id(src_vocab, what)
        return cls(sentences, src_break, tgt_break, max_positions - 1, (max_positions - 1) // 2, tgt_vocab, segment)

    def translate(
        self,
        translator: Translator,
        chunk: Chunk,
    ) -> list[list[Translation]]:
        """The n-best lists of one chunk's sentences (source ids); ``starts[i]``: sentence i begins a document."""
        if self.tgt_break is None:
            return self._sources_only(translator, chunk)
        return self._in_order(translator, chunk)

    def _sources_only(
        self,
        translator: Translator,
        chunk: Chunk,
    ) -> list[list[Translation]]:
        rows, contexts = [], []
        for ids, start in zip(chunk.encoded, chunk.starts):
            if start:
                self.history.clear()
            row, skip = join_context([src for src, _ in self.history], ids, self.src_break, self.max_src) if ids else ([], 0)
            rows.append(row)
            contexts.append((skip, 0))
            if ids:
                self._remember(self.history, ids, [])
        return translator.translate_encoded(rows, chunk.prefixes, contexts)

    def _in_order(
        self,
        translator: Translator,
        chunk: Chunk,
    ) -> list[list[Translation]]:
        """2-to-2: each document's sentences in turn, the chunk's documents side by side."""
        tgt_break = self.tgt_break
        assert tgt_break is not None

        def step(wave: Wave, histories: list[deque[tuple[list[int], list[int]]]]) -> list[tuple[list[Translation], Any]]:
            rows, forced, contexts = [], [], []
            for item in wave:
                history = histories[item.segment]
                source, skip = join_context([src for src, _ in history], item.ids, self.src_break, self.max_src)
                start, keep = join_context([tgt for _, tgt in history], [], tgt_break, self.max_prefix)
                rows.append(source)
                forced.append(start + (item.prefix or []))
                contexts.append((skip, keep))
            counted = [item.index is not None for item in wave]
            # The translation is read back as the training data's references were: its text encoded afresh.
            return [
                (hyps, (item.ids, self.tgt_vocab.encode(hyps[0].text, out_type=int)))
                for item, hyps in zip(wave, translator.translate_encoded(rows, forced, contexts, counted=counted))
            ]

        results, self.carried = in_document_order(
            chunk.encoded, chunk.prefixes, chunk.starts, self.carried, self.sentences, self.segment, step,
            lambda n: translator.translate_encoded([[]] * n, None, None),
        )  # fmt: skip
        return results

    def _remember(self, history: deque[tuple[list[int], list[int]]], source: list[int], translation: list[int]) -> None:
        history.append((source, translation))
        while len(history) > self.sentences:
            history.popleft()


def _documents(encoded: list[list[int]], starts: Sequence[bool]) -> list[list[int]]:
    """The chunk's non-blank sentences grouped by document, in order (blank lines belong to none)."""
    documents: list[list[int]] = []
    new = True
    for i, (ids, start) in enumerate(zip(encoded, starts)):
        new = new or start
        if ids:
            if new:
                documents.append([])
                new = False
            documents[-1].append(i)
    return documents


@dataclass
class DocumentPast:
    """What a recurrent model remembers of the current document: the last N sentences' keys and values."""

    sentences: int
    segment: int = 0  # sentences per segment (in_document_order)
    carried: Carried = field(default_factory=lambda: Carried())

    def translate(
        self,
        translator: Translator,
        chunk: Chunk,
    ) -> list[list[Translation]]:
        """The n-best lists of one chunk's sentences; ``starts[i]``: sentence i begins a document."""
        translate_with_pasts = translator.translate_with_pasts

        def step(wave: Wave, histories: list[deque[SentencePast]]) -> list[tuple[list[Translation], Any]]:
            forced = [item.prefix or [] for item in wave] if chunk.prefixes is not None else None
            pasts = [list(histories[item.segment]) for item in wave]
            counted = [item.index is not None for item in wave]
            found, left = translate_with_pasts([item.ids for item in wave], forced, pasts, counted=counted)
            return list(zip(found, left))

        def blank(count: int) -> list[list[Translation]]:
            return translate_with_pasts([[]] * count, None, [[]] * count)[0]

        results, self.carried = in_document_order(
            chunk.encoded, chunk.prefixes, chunk.starts, self.carried, self.sentences, self.segment, step, blank
        )
        return results


Search = Callable[..., list[list[Hypothesis]]]  # (model, src, prefix, encoded) -> n-best lists


@torch.inference_mode()
def search_with_pasts(
    model: Transformer, src: torch.Tensor, prefix: torch.Tensor | None, pasts: list[list[SentencePast]], search: Search
) -> tuple[list[list[Hypothesis]], list[SentencePast]]:
    """``model.recurrence``: the sentences ``src`` searched (``search``) with their previous sentences' keys/values
    as every self-attention layer's past, and the keys/values each leaves its successor: its source's, and its best
    translation's as the search kept them (``Hypothesis.kept``; a strategy that keeps none, sampling or constrained
    search, has the translations read once more teacher-forced)."""
    like = model.output.weight
    memory, src_mask, kept_encoder = model.encode_kept(src, batch_pasts(pasts, "encoder", len(model.encoder), like))
    decoder_past = batch_pasts(pasts, "decoder", len(model.decoder), like)
    found = search(model, src, prefix, Encoded(memory, src_mask, decoder_past))
    lengths = (src != PAD_ID).sum(dim=1).tolist()
    if all(hyps and hyps[0].kept is not None for hyps in found):
        return found, sentence_pasts_kept(kept_encoder, lengths, [hyps[0].kept for hyps in found])  # type: ignore[misc]
    chosen = [[BOS_ID] + (hyps[0].tokens if hyps else []) for hyps in found]
    _, kept_decoder = model.decode_kept(pad_rows(chosen).to(src.device), memory, src_mask, decoder_past)
    return found, sentence_pasts(kept_encoder, kept_decoder, lengths, [len(c) for c in chosen])


@dataclass(frozen=True)
class Item:
    """One sentence of a wave: its segment, its source ids and target prefix, and its line in the chunk (None: a
    lead, translated again only for what it leaves its segment's next sentence)."""

    segment: int
    ids: list[int]
    prefix: list[int] | None
    index: int | None


Wave = list[Item]  # one sentence of each segment that still has one
Result = TypeVar("Result")  # what a sentence's turn gives: its n-best list (translation), its score (forced scores)


@dataclass
class Carried:
    """What a document that goes on in the next chunk carries: how many of its sentences were read, what the last
    ones left (``history``), and the last ones themselves (``recent``: ids and prefix), which a segment that begins
    in the next chunk translates again as its leads."""

    position: int = 0
    history: deque[Any] = field(default_factory=deque)
    recent: deque[tuple[list[int], list[int] | None]] = field(default_factory=deque)


def in_document_order(
    encoded: list[list[int]],
    prefixes: list[list[int]] | None,
    starts: Sequence[bool],
    carried: Carried,
    keep: int,
    segment: int,
    step: Callable[[Wave, list[deque[Any]]], list[tuple[Result, Any]]],
    blank: Callable[[int], list[Result]],
) -> tuple[list[Result], Carried]:
    """Translate a chunk's documents where each sentence reads what its ``keep`` predecessors left: ``step``
    translates one wave given each segment's history and returns, per sentence, its result (an n-best list; forced
    scoring's a score) and what it leaves (None: nothing); ``blank`` translates that many blank lines, which read
    and leave nothing. ``carried``: the document that began in an earlier chunk; returns the results and what the
    next chunk carries.

    A document goes a sentence at a time, so the chunk's documents go side by side, and each document is cut into
    segments of ``segment`` sentences (0: none) that go side by side too: the waves are as many as a segment's
    sentences, not a long page's. A segment begins with the ``keep`` sentences before it translated again
    (*leads*: their translations are dropped, what they leave is kept), so every sentence reads the context it
    would read in order, made from translations that read none themselves. Segments begin at fixed positions in
    their document (multiples of ``segment``), so where chunks end does not change a translation."""
    documents = _documents(encoded, starts)
    continues = bool(documents) and not any(starts[: documents[0][0] + 1])
    segments: list[list[Item]] = []
    histories: list[deque[Any]] = []
    after = Carried() if any(starts) else carried
    for number, document in enumerate(documents):
        before = carried if number == 0 and continues else Carried()
        read = deque(before.recent, maxlen=max(keep, 1))
        for offset, i in enumerate(document):
            position, prefix = before.position + offset, prefixes[i] if prefixes is not None else None
            boundary = bool(segment) and position > 0 and position % segment == 0
            if offset == 0 or boundary:
                histories.append(before.history if offset == 0 and not boundary else deque())
                segments.append([])
                if boundary:
                    segments[-1].extend(Item(len(segments) - 1, ids, lead, None) for ids, lead in list(read)[-keep:])
            segments[-1].append(Item(len(segments) - 1, encoded[i], prefix, i))
            read.append((encoded[i], prefix))
        after = Carried(before.position + len(document), histories[-1], deque(list(read)[-keep:]))
    results: list[Result | None] = [None for _ in encoded]
    for turn in range(max((len(s) for s in segments), default=0)):
        wave = [s[turn] for s in segments if turn < len(s)]
        for item, (hyps, left) in zip(wave, step(wave, histories)):
            if item.index is not None:
                results[item.index] = hyps
            if left is not None:
                histories[item.segment].append(left)
                while len(histories[item.segment]) > keep:
                    histories[item.segment].popleft()
    empty = [i for i, ids in enumerate(encoded) if not ids]
    for i, hyps in zip(empty, blank(len(empty)) if empty else []):
        results[i] = hyps
    return results, after  # type: ignore[return-value]  # every line got its result
