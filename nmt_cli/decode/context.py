"""Translating documents with a model that reads context: by concatenation (``model.concat``, data/context.py) or
by segment-level recurrence (``model.recurrence``, model/recurrence.py).

Each sentence is read after the previous K sentences of its document, each followed by ``<brk>``, as the model
was trained. A 2-to-1 model needs only sources, so every sentence of a chunk is translated at once. A 2-to-2
model (``model.concat_target``) also starts its output with its own translations of those sentences (forced,
then left out of what it returns), so the sentences of one document are translated in order: the first sentence
of every document in the chunk, then every second, and so on.

A recurrent model (:class:`DocumentPast`) reads each sentence alone, its layers attending to the keys and values
they computed for the previous sentences of its document: the encoder's of their sources, the decoder's of the
translations chosen for them (beam search's best, read once more teacher-forced). So its documents too go a
sentence of each at a time, and nothing is read twice.

The caller says where documents start (``nmt translate``: after a blank line, or where ``--docids`` changes);
blank lines are translated as blank and read as no context; the context runs on from one chunk to the next. A
sentence-level model never comes here, and a document of one sentence reads no context.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import sentencepiece as spm
import torch

from ..data.batches import pad_rows
from ..data.context import break_id, join_context
from ..data.vocab import BOS_ID, PAD_ID
from ..errors import NmtError
from ..model.recurrence import SentencePast, batch_pasts, sentence_pasts
from ..model.transformer import Transformer
from .ensemble import Ensemble
from .loading import LoadedModel
from .search import Hypothesis
from .translation import Translation


class EncodedTranslator(Protocol):
    """What a document reader asks of the translator: sentences already encoded as source ids translated with the
    context it gives them."""

    def translate_encoded(
        self,
        encoded: list[list[int]],
        prefixes: list[list[int]] | None = None,
        contexts: Sequence[tuple[int, int]] | None = None,
    ) -> list[list[Translation]]:
        """Rows whose source and prefix start with ``contexts[i]`` tokens of context, left out of the outputs."""
        ...

    def translate_with_pasts(
        self, encoded: list[list[int]], prefixes: list[list[int]] | None, pasts: list[list[SentencePast]]
    ) -> tuple[list[list[Translation]], list[SentencePast | None]]:
        """Rows read after their previous sentences' keys/values; also what each row leaves (None: nothing)."""
        ...


class DocumentReader(Protocol):
    """How a model reads its document's earlier sentences: :class:`DocumentContext` (concatenation) or
    :class:`DocumentPast` (recurrence)."""

    sentences: int  # earlier sentences of its document that a sentence reads

    def translate(
        self, translator: EncodedTranslator, encoded: list[list[int]], prefixes: list[list[int]] | None,
        starts: Sequence[bool],
    ) -> list[list[Translation]]:  # fmt: skip
        """The n-best lists of one chunk's sentences (source ids); ``starts[i]``: sentence i begins a document."""
        ...


def document_reader(loaded: LoadedModel, max_positions: int) -> DocumentReader | None:
    """How a model reads its document's earlier sentences: by concatenation, by recurrence, or not at all (None)."""
    model = loaded.recipe.model
    if model.concat:
        return DocumentContext.of(model.concat, model.concat_target, loaded.src_vocab, loaded.tgt_vocab, max_positions)
    if model.recurrence:
        if isinstance(loaded.model, Ensemble):
            raise NmtError(f"{loaded.path}: models trained with model.recurrence translate alone, not as an ensemble")
        return DocumentPast(model.recurrence)
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


@dataclass
class DocumentContext:
    """The sentences of the current document a translator remembers: (source ids, translation ids), oldest first."""

    sentences: int
    src_break: int
    tgt_break: int | None  # None: the model reads no target context (2-to-1)
    max_src: int  # longest source the model reads, context included
    max_prefix: int  # longest target context, leaving room for the translation
    tgt_vocab: spm.SentencePieceProcessor
    history: deque[tuple[list[int], list[int]]] = field(default_factory=deque)

    @classmethod
    def of(
        cls,
        sentences: int,
        target: bool,
        src_vocab: spm.SentencePieceProcessor,
        tgt_vocab: spm.SentencePieceProcessor,
        max_positions: int,
    ) -> DocumentContext:
        what = "a model trained with model.concat"
        tgt_break = break_id(tgt_vocab, what) if target else None
        return cls(sentences, break_id(src_vocab, what), tgt_break, max_positions - 1, (max_positions - 1) // 2, tgt_vocab)

    def translate(
        self,
        translator: EncodedTranslator,
        encoded: list[list[int]],
        prefixes: list[list[int]] | None,
        starts: Sequence[bool],
    ) -> list[list[Translation]]:
        """The n-best lists of one chunk's sentences (source ids); ``starts[i]``: sentence i begins a document."""
        if self.tgt_break is None:
            return self._sources_only(translator.translate_encoded, encoded, prefixes, starts)
        return self._in_order(translator.translate_encoded, encoded, prefixes, starts)

    def _sources_only(
        self,
        translate_encoded: TranslateEncoded,
        encoded: list[list[int]],
        prefixes: list[list[int]] | None,
        starts: Sequence[bool],
    ) -> list[list[Translation]]:
        rows, contexts = [], []
        for ids, start in zip(encoded, starts):
            if start:
                self.history.clear()
            row, skip = join_context([src for src, _ in self.history], ids, self.src_break, self.max_src) if ids else ([], 0)
            rows.append(row)
            contexts.append((skip, 0))
            if ids:
                self._remember(self.history, ids, [])
        return translate_encoded(rows, prefixes, contexts)

    def _in_order(
        self,
        translate_encoded: TranslateEncoded,
        encoded: list[list[int]],
        prefixes: list[list[int]] | None,
        starts: Sequence[bool],
    ) -> list[list[Translation]]:
        """2-to-2: each document's sentences in turn, the chunk's documents side by side."""
        tgt_break = self.tgt_break
        assert tgt_break is not None

        def step(wave: Wave, histories: list[deque[tuple[list[int], list[int]]]]) -> list[tuple[list[Translation], Any]]:
            rows, forced, contexts = [], [], []
            for n, i in wave:
                source, skip = join_context([src for src, _ in histories[n]], encoded[i], self.src_break, self.max_src)
                start, keep = join_context([tgt for _, tgt in histories[n]], [], tgt_break, self.max_prefix)
                rows.append(source)
                forced.append(start + (prefixes[i] if prefixes is not None else []))
                contexts.append((skip, keep))
            # The translation is read back as the training data's references were: its text encoded afresh.
            return [
                (hyps, (encoded[i], self.tgt_vocab.encode(hyps[0].text, out_type=int)))
                for (_, i), hyps in zip(wave, translate_encoded(rows, forced, contexts))
            ]

        results, self.history = in_document_order(
            encoded, starts, self.history, self.sentences, step, lambda n: translate_encoded([[]] * n, None, None)
        )
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
    history: deque[SentencePast] = field(default_factory=deque)

    def translate(
        self,
        translator: EncodedTranslator,
        encoded: list[list[int]],
        prefixes: list[list[int]] | None,
        starts: Sequence[bool],
    ) -> list[list[Translation]]:
        """The n-best lists of one chunk's sentences; ``starts[i]``: sentence i begins a document."""
        translate_with_pasts = translator.translate_with_pasts

        def step(wave: Wave, histories: list[deque[SentencePast]]) -> list[tuple[list[Translation], Any]]:
            forced = [prefixes[i] for _, i in wave] if prefixes is not None else None
            found, left = translate_with_pasts([encoded[i] for _, i in wave], forced, [list(histories[n]) for n, _ in wave])
            return list(zip(found, left))

        def blank(count: int) -> list[list[Translation]]:
            return translate_with_pasts([[]] * count, None, [[]] * count)[0]

        results, self.history = in_document_order(encoded, starts, self.history, self.sentences, step, blank)
        return results


TranslateEncoded = Callable[
    [list[list[int]], "list[list[int]] | None", "Sequence[tuple[int, int]] | None"], list[list[Translation]]
]
Search = Callable[..., list[list[Hypothesis]]]  # (model, src, prefix, encoded, past) -> n-best lists


@torch.inference_mode()
def search_with_pasts(
    model: Transformer, src: torch.Tensor, prefix: torch.Tensor | None, pasts: list[list[SentencePast]], search: Search
) -> tuple[list[list[Hypothesis]], list[SentencePast]]:
    """``model.recurrence``: the sentences ``src`` searched (``search``) with their previous sentences' keys/values
    as every self-attention layer's past, and the keys/values each leaves its successor: its source's, and its best
    translation's, read once more teacher-forced."""
    like = model.output.weight
    memory, src_mask, kept_encoder = model.encode_kept(src, batch_pasts(pasts, "encoder", len(model.encoder), like))
    decoder_past = batch_pasts(pasts, "decoder", len(model.decoder), like)
    found = search(model, src, prefix, (memory, src_mask), decoder_past)
    chosen = [[BOS_ID] + (hyps[0].tokens if hyps else []) for hyps in found]
    _, kept_decoder = model.decode_kept(pad_rows(chosen).to(src.device), memory, src_mask, decoder_past)
    lengths = (src != PAD_ID).sum(dim=1).tolist()
    return found, sentence_pasts(kept_encoder, kept_decoder, lengths, [len(c) for c in chosen])


Wave = list[tuple[int, int]]  # (document number in the chunk, sentence index) of one sentence of each document


def in_document_order(
    encoded: list[list[int]],
    starts: Sequence[bool],
    carried: deque[Any],
    keep: int,
    step: Callable[[Wave, list[deque[Any]]], list[tuple[list[Translation], Any]]],
    blank: Callable[[int], list[list[Translation]]],
) -> tuple[list[list[Translation]], deque[Any]]:
    """Translate a chunk's documents a sentence of each at a time: ``step`` translates one wave given each
    document's history (what its last ``keep`` sentences left) and returns, per sentence, its n-best list and what
    it leaves (None: nothing); ``blank`` translates that many blank lines. ``carried`` is the history of a document
    that began in an earlier chunk; returns the results and the history the next chunk carries."""
    documents = _documents(encoded, starts)
    histories: list[deque[Any]] = [deque() for _ in documents]
    if documents and not any(starts[: documents[0][0] + 1]):
        histories[0] = carried  # the first document began in an earlier chunk
    results: list[list[Translation]] = [[] for _ in encoded]
    for turn in range(max((len(d) for d in documents), default=0)):
        wave = [(n, d[turn]) for n, d in enumerate(documents) if turn < len(d)]
        for (n, i), (hyps, left) in zip(wave, step(wave, histories)):
            results[i] = hyps
            if left is not None:
                histories[n].append(left)
                while len(histories[n]) > keep:
                    histories[n].popleft()
    empty = [i for i, ids in enumerate(encoded) if not ids]
    for i, hyps in zip(empty, blank(len(empty)) if empty else []):
        results[i] = hyps
    if documents:
        return results, histories[-1]
    return results, deque() if any(starts) else carried
