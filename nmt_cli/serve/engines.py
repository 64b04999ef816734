"""``nmt translate``'s engines for the server's requests, searching on the models' decoding loops.

A text request's lines are translated as ``nmt translate`` translates lines (``decode/protected.py`` around a
``Translator``, through ``decode/pivot.py`` for a direction served by pivoting; glossaries, names to keep and
confidence as there); a document or an HTML page as ``nmt translate`` translates a file (``Translator.sentences``,
word-aligned for markup). What differs is only where the searches run: each ``Translator`` hands them to its
model's decoding loop (``loop.LoopSearches``), which batches every request's sentences together. A model that
reads document context decodes a request as one document in the request's own thread, one request at a time
(its sentences depend on each other, so they cannot join a shared batch).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..config import DecodeConfig
from ..decode.pivot import PivotEngine
from ..decode.protected import ProtectedEngine
from ..decode.translation import Engine, Translation
from ..decode.translator import Translator
from ..formats import Sentences
from ..formats.segments import through_pivot
from ..terms.glossary import Glossary
from .loop import LoopSearches
from .requests import ServedModel, TranslationRequest

DOCUMENT_BLOCK = 64  # a document's sentences join the running batch this many at a time: a file never holds it alone

# One request at a time per model that reads document context: a request's lines are translated in order, each
# after the ones before it, in the request's thread.
_CONTEXT_LOCKS: dict[str, threading.Lock] = {}


def line_engine(request: TranslationRequest, searches: LoopSearches) -> Engine:
    """What translates a text request's lines: paths, URLs and numbers protected as on the command line."""
    model, config, nbest = request.model, request.config, request.nbest
    if model.pivot is None:
        translator = _translator(model, config, nbest, searches, confidence=request.confidence, glossary=request.glossary)
        return ProtectedEngine(translator)
    first = _translator(model.pivot, config, 1, searches)
    second = _translator(model, config, nbest, searches, glossary=request.glossary)
    return ProtectedEngine(PivotEngine(first, second, (model.pivot.source, model.target)))


def translate_lines(engine: Engine, model: ServedModel, lines: list[str]) -> list[list[Translation]]:
    """The lines' n-best lists (in the request's worker thread); a model that reads context reads them as one
    document. Sampling draws from one generator in order, as on the command line (the same seed, lines and
    batches give the same samples): it runs in the loop's thread between two steps, alone."""

    def translated() -> list[list[Translation]]:
        if not reads_context(model):
            return list(engine.translate(lines))
        with _CONTEXT_LOCKS.setdefault(model.name, threading.Lock()):
            return list(engine.translate(lines, documents=["request"] * len(lines)))

    return model.loop.run_alone(translated) if engine.config.sampling else translated()


def document_sentences(model: ServedModel, searches: LoopSearches, glossary: Glossary | None = None) -> Sentences:
    """A document's (or an HTML page's) sentences -> translations, word-aligned for markup, as ``nmt translate``
    translates a file; through the pivot language first for a direction served by pivoting (alignments joined
    through the pivot's words)."""
    if model.pivot is not None:  # its loaded model, loop and tags are the second step's
        return through_pivot(document_sentences(model.pivot, searches), _direct_sentences(model, searches))
    return _direct_sentences(model, searches, glossary)


def _direct_sentences(model: ServedModel, searches: LoopSearches, glossary: Glossary | None = None) -> Sentences:
    """:func:`document_sentences` by ``model``'s own direction."""
    config = model.loaded.recipe.decode
    if reads_context(model):
        sentences = Translator(model.loaded, config, alignments=True).sentences()
        lock = _CONTEXT_LOCKS.setdefault(model.name, threading.Lock())
        assert sentences.align is not None
        return Sentences(_locked(lock, sentences.translate), _locked(lock, sentences.align))
    plain = _translator(model, config, 1, searches, glossary=glossary, chunk_lines=DOCUMENT_BLOCK).sentences()
    aligned = _translator(model, config, 1, searches, glossary=glossary, chunk_lines=DOCUMENT_BLOCK, alignments=True)
    return replace(plain, align=aligned.sentences().align)  # aligned only where markup asks for it


def reads_context(model: ServedModel) -> bool:
    return model.loaded.recipe.model.reads_context


def _translator(
    model: ServedModel,
    config: DecodeConfig,
    nbest: int,
    searches: LoopSearches,
    *,
    confidence: bool = False,
    glossary: Glossary | None = None,
    alignments: bool = False,
    chunk_lines: int = 10_000,
) -> Translator:
    """The ``Translator`` ``nmt translate`` makes for this direction, its searches on the model's loop."""
    return Translator(
        model.loaded,
        config,
        nbest=nbest,
        chunk_lines=chunk_lines,
        alignments=alignments,
        assess=confidence,
        glossary=glossary,
        source_prefix=model.source_prefix,
        target_tag=model.target_tag,
        service=None if reads_context(model) or config.sampling else searches.on(model.loop),
    )


def _locked(lock: threading.Lock, run: Callable[[list[str]], Any]) -> Callable[[list[str]], Any]:
    def call(lines: list[str]) -> Any:
        with lock:
            return run(lines)

    return call
