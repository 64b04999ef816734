"""Translating with a CTranslate2 folder (``nmt translate --engine ctranslate2``): the runtime engine beside our
own ``Translator``, with the same ``Engine`` interface. ``convert/ctranslate2.py`` writes the folder.

CTranslate2 is optional: ``pip install 'nmt-cli[ct2]'``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType

from ..config import DataConfig, DecodeConfig, load_recipe
from ..data.batches import decoding_batches
from ..errors import NmtError, reason
from ..terms.matching import TermMatcher
from ..utils.text import as_one_line
from .translation import EMPTY, Engine, Lines, Translation, TranslationStats
from .translator import clean_source_line

# An exported folder: CTranslate2's model.bin, and beside it our SentencePiece models and the recipe.
SPM_SOURCE, SPM_TARGET, RECIPE_FILE = "source.spm.model", "target.spm.model", "nmt_recipe.yaml"


def require_ctranslate2() -> ModuleType:
    try:
        import ctranslate2
    except ImportError:
        raise NmtError(
            "CTranslate2 is not installed; run: pip install 'nmt-cli[ct2]' (or pip install ctranslate2)"
        ) from None
    return ctranslate2


class CTranslate2Engine:
    """Translation through an exported CTranslate2 folder, with nmt's SentencePiece models."""

    def __init__(
        self, folder: Path, device: str = "cpu", threads: int = 0, compute_type: str = "default", workers: int = 1
    ) -> None:
        """``threads`` in all (0: CTranslate2's default), shared by ``workers`` batches translated at once
        (its ``inter_threads``; each worker gets ``threads // workers``, at least one)."""
        ctranslate2 = require_ctranslate2()
        import sentencepiece as spm

        if not (folder / "model.bin").is_file():
            raise NmtError(
                f"{folder}: not a CTranslate2 model folder; create it with nmt export MODEL_DIR OUT --for ctranslate2"
            )
        try:
            self.translator = ctranslate2.Translator(
                str(folder),
                device=device,
                inter_threads=workers,
                intra_threads=max(1, threads // workers) if threads else 0,
                compute_type=compute_type,
            )
        except (ValueError, RuntimeError) as err:
            raise NmtError(
                f"{folder}: CTranslate2 cannot run it with compute type {compute_type} on {device} "
                f"({reason(err)}); use another --dtype or leave it out, or if model.bin "
                "is damaged, write the folder again with nmt export"
            ) from None
        self.src = spm.SentencePieceProcessor(model_file=str(folder / SPM_SOURCE))
        self.tgt = spm.SentencePieceProcessor(model_file=str(folder / SPM_TARGET))
        self.output_tokens = 0
        self.source_prefix: list[str] = []  # set by the caller for --to
        self.target_prefix: list[str] = []  # the same, for a model whose decoder reads the tag first
        # a tag read from the source is never written (as our engine's Transformer.suppressed)
        self.suppressed: list[list[str]] = []
        recipe = folder / RECIPE_FILE
        stored = load_recipe(recipe) if recipe.is_file() else None
        self.decode_config = stored.decode if stored is not None else DecodeConfig()
        self.data = stored.data if stored is not None else DataConfig()
        # The language pair, for file formats that name it (a gettext catalogue's Language); "" when unknown.
        self.languages = (stored.data.src_lang, stored.data.tgt_lang) if stored is not None else ("", "")

    def translate(self, lines: Sequence[str], config: DecodeConfig, nbest: int = 1) -> list[list[Translation]]:
        """n-best ``Translation`` (text, score) per line. CTranslate2 normalises scores by |Y|^alpha (no GNMT form).

        The lines go in our engine's batches (``decoding_batches``: longest first, ``batch_size`` lines,
        ``batch_tokens`` tokens), each limited to ``max_len_a`` x its longest line + ``max_len_b`` tokens
        before EOS, as our search limits each line (one line per batch: the same limit). CTranslate2
        takes one limit per call, so each batch is a call of its own, all submitted at once so that its
        ``inter_threads`` workers take them in turn. (One call for a whole block gave every line the
        block's longest limit: a short line that repeated itself ran on for as long.)
        """
        pieces = [self.src.encode(line.strip(), out_type=str) for line in lines]
        if self.source_prefix:  # a multilingual model's target tag, as its own piece (decode/targets.py)
            pieces = [[*self.source_prefix, *line_pieces] if line_pieces else line_pieces for line_pieces in pieces]
        results: list[list[Translation]] = [[EMPTY] for _ in lines]
        todo = [i for i, line_pieces in enumerate(pieces) if line_pieces]
        widths = [len(line_pieces) + 1 for line_pieces in pieces]
        submitted = []
        for batch in decoding_batches(widths, todo, config.batch_size, config.batch_tokens):
            limit = max(1, int(config.max_len_a * len(pieces[batch[0]]) + config.max_len_b))  # batch[0]: longest
            pending = self.translator.translate_batch(
                [pieces[i] for i in batch],
                beam_size=config.beam,
                num_hypotheses=nbest,
                return_scores=True,
                length_penalty=config.alpha,
                max_batch_size=0,  # the batch as given
                max_decoding_length=limit + len(self.target_prefix),
                target_prefix=[self.target_prefix] * len(batch) if self.target_prefix else None,
                suppress_sequences=self.suppressed or None,
                asynchronous=True,
            )
            submitted.append((batch, pending))
        for batch, pending in submitted:
            for i, result in zip(batch, pending):
                output = result.result()
                skip = len(self.target_prefix)  # the tag the decoder was given: not part of the translation
                self.output_tokens += len(output.hypotheses[0]) + 1 - skip
                results[i] = [
                    Translation(as_one_line(self.tgt.decode_pieces(hyp[skip:])), score)
                    for hyp, score in zip(output.hypotheses, output.scores)
                ]
        return results


class CTranslate2Translator(Engine):
    """The :class:`..decode.translation.Engine` of ``nmt translate --engine ctranslate2``: lines in chunks of
    ``chunk_lines`` through a :class:`CTranslate2Engine` with one decoding config, counted as our
    ``Translator`` counts them. No target prefixes (the command refuses them for this engine)."""

    def __init__(self, engine: CTranslate2Engine, config: DecodeConfig, nbest: int = 1, chunk_lines: int = 10_000) -> None:
        self.engine, self.config, self.nbest, self.chunk_lines = engine, config, nbest, chunk_lines
        self.stats = TranslationStats()
        self.languages = engine.languages
        self.max_positions = 0  # not stored in an exported folder
        self.terms: TermMatcher | None = None  # this engine takes no glossary (commands/translate_options.py)
        self.context_sentences = 0  # every line alone

    def new_document(self) -> None:
        pass  # every line is read alone

    def translate_lines(self, given: Lines) -> Iterator[list[Translation]]:
        if given.prefixes is not None:
            raise NmtError("target prefixes run with --engine nmt only; drop --engine ctranslate2")
        if given.documents is not None:
            raise NmtError("document context runs with --engine nmt only; drop --engine ctranslate2")
        source = iter(given.text)
        while block := [clean_source_line(line, self.stats) for line in itertools.islice(source, self.chunk_lines)]:
            for hyps in self.engine.translate(block, self.config, self.nbest):
                self.stats.sentences += 1
                self.stats.output_tokens = self.engine.output_tokens
                yield hyps
