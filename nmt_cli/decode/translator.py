"""Translation of text lines with a trained model: load, encode, batch, search, restore order.

Lines stream through in chunks, so a file of millions of lines needs bounded memory.
Within a chunk, sentences are sorted by length for batching and the results put back in
input order. An empty line gives an empty line; a line longer than the model allows is
truncated (and counted, so the caller can warn once).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace

import torch

from ..config import DecodeConfig
from ..data.batches import decoding_batches, pad_rows
from ..data.vocab import BOS_ID, EOS_ID, PAD_ID
from ..errors import NmtError
from ..formats.segments import Sentences
from ..model.guided import GUIDED_HEAD
from ..model.recurrence import Kept, SentencePast, batch_pasts, sentence_pasts
from ..model.transformer import Transformer
from ..terms.glossary import Glossary
from ..terms.matching import TermMatcher
from ..utils.text import as_one_line, has_control_characters, replace_control_characters
from .assess import Assessment, Assessor, teacher_forced
from .attention_maps import alignment_layer as alignment_layer_of
from .attention_maps import cross_attention, pharaoh, word_alignment
from .constrained import CONSTRAINED_MIN_BEAM, Constraint, GlossaryMode, constrained_beam_search, term_constraints
from .context import DocumentContext, DocumentPast
from .ensemble import Ensemble
from .loading import LoadedModel
from .parallel import run_batches, worker_count
from .sampling import sample
from .search import Hypothesis, search
from .sentences import sentences_of
from .translation import EMPTY, Translation, TranslationStats


def _check_glossary_use(loaded: LoadedModel, config: DecodeConfig, reads_documents: bool) -> None:
    """A glossary needs a search whose hypotheses can be steered: not sampling, not a document model (yet)."""
    if config.sampling:
        raise NmtError("--glossary and --keep-terms steer beam search; drop --sampling")
    if reads_documents:
        raise NmtError(
            f"{loaded.path} reads document context (model.concat / model.recurrence); glossaries are applied by "
            "sentence-level models only so far: translate with a sentence-level model or drop --glossary"
        )


def check_term_lengths(glossary: Glossary, loaded: LoadedModel) -> None:
    """A term whose translation alone takes more pieces than a translation may hold can never be met: refused,
    naming its file and line (a quarter of the model's length, so the sentence around it has room too)."""
    limit = max(1, (loaded.recipe.model.max_positions - 1) // 4)
    for term in glossary.terms:
        for target in term.targets:
            pieces = len(loaded.tgt_vocab.encode(target, out_type=int))
            if pieces > limit:
                raise NmtError(
                    f"{term.where}: the translation of '{term.source}' takes {pieces} pieces, more than a "
                    f"quarter of what this model translates at once ({limit}); shorten the term"
                )


def _document_reader(loaded: LoadedModel, max_positions: int) -> DocumentContext | DocumentPast | None:
    """How a model reads its document's earlier sentences: by concatenation, by recurrence, or not at all."""
    model = loaded.recipe.model
    if model.concat:
        return DocumentContext.of(model.concat, model.concat_target, loaded.src_vocab, loaded.tgt_vocab, max_positions)
    if model.recurrence:
        if isinstance(loaded.model, Ensemble):
            raise NmtError(f"{loaded.path}: models trained with model.recurrence translate alone, not as an ensemble")
        return DocumentPast(model.recurrence)
    return None


def chunk_seed(seed: int, chunk_number: int) -> int:
    """The sampling seed of a chunk: ``seed`` itself for the first, so short inputs sample as before."""
    return (seed + chunk_number * 0x9E3779B97F4A7C15) % 2**63


def clean_source_line(line: str, stats: TranslationStats) -> str:
    """A source line without its line end; a lone CR and any control character inside it are spaces, as
    prepare reads them (``utils/text.py``), counted in ``stats``."""
    line = line.rstrip("\r\n").replace("\r", " ")
    if has_control_characters(line):
        stats.control_lines += 1
        line = replace_control_characters(line)
    return line


class Aligner:
    """Pharaoh word alignments of hypotheses from one decoder layer's cross-attention (``--alignments``,
    and the tags of documents: the command's translator and the server's loop both use it). A model trained
    with guided alignment (``train.guided_alignment``) aligns with its guided head alone; otherwise, or at
    an explicitly chosen ``layer``, the layer's heads are averaged."""

    def __init__(self, loaded: LoadedModel, model: Transformer | None = None, layer: int | None = None) -> None:
        first = loaded.model.models[0] if isinstance(loaded.model, Ensemble) else loaded.model
        self.loaded = loaded
        self.model = model if model is not None else first
        guided = layer is None and loaded.recipe.train.guided_alignment > 0
        self.layer = alignment_layer_of(self.model, layer)
        self.heads = [GUIDED_HEAD] if guided else None

    def align(
        self,
        sources: list[list[int]],
        found: list[list[Hypothesis]],
        memory: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> list[list[str]]:
        """Per sentence, per hypothesis, its alignment ("i-j ..."), from one teacher-forced pass over them all
        (on the search's encoder output when given: each sentence's row once per hypothesis)."""
        pairs_src, outputs, memory = teacher_forced(sources, found, memory)
        crosses = iter(cross_attention(self.model, pairs_src, outputs, self.layer, memory))
        src_piece, tgt_piece = self.loaded.src_vocab.IdToPiece, self.loaded.tgt_vocab.IdToPiece
        out = []
        for source, hyps in zip(sources, found):
            pieces = [src_piece(t) for t in source]
            out.append(
                [pharaoh(word_alignment(self._heads(next(crosses)), pieces, [tgt_piece(t) for t in h.tokens])) for h in hyps]
            )
        return out

    def _heads(self, cross: torch.Tensor) -> torch.Tensor:
        """The heads of one (H, T, S) cross-attention that align: the guided one, or all."""
        return cross if self.heads is None else cross[self.heads]


class Translator:
    """Our :class:`.translation.Engine`: lines of source text into n-best lists of ``Translation``."""

    def __init__(
        self,
        loaded: LoadedModel,
        config: DecodeConfig,
        device: str | torch.device = "cpu",
        nbest: int = 1,
        chunk_lines: int = 10000,
        alignments: bool = False,
        alignment_layer: int | None = None,
        assess: bool = False,
        glossary: Glossary | None = None,
        glossary_mode: GlossaryMode = "hard",
        source_prefix: tuple[int, ...] = (),
        target_tag: int | None = None,
    ) -> None:
        if nbest > config.beam and not config.sampling:
            raise NmtError(f"--nbest {nbest} is larger than the beam ({config.beam}); raise --beam or lower --nbest")
        self.loaded = loaded
        self.config = config
        self.device = torch.device(device)
        self.nbest = nbest
        self.chunk_lines = chunk_lines
        self.max_src = loaded.recipe.model.max_positions - 1  # room for the EOS
        self.stats = TranslationStats()
        self.languages = (loaded.recipe.data.src_lang, loaded.recipe.data.tgt_lang)
        self.max_positions = loaded.recipe.model.max_positions
        self.generator = torch.Generator(self.device).manual_seed(config.seed) if config.sampling else None
        # --alignments: each Translation gets its alignment "i-j ..." from one layer's cross-attention
        first = loaded.model.models[0] if isinstance(loaded.model, Ensemble) else loaded.model
        self.align_model = first if alignments else None
        self.align_layer = alignment_layer  # None: the guided head where the model has one, else the default layer
        if alignments:
            alignment_layer_of(first, alignment_layer)  # refuses a layer the decoder does not have
        # assess: each Translation also gets an Assessment (quality/): features, calibrated confidence, flags
        self.assessor = Assessor.of(loaded, config, alignment_layer) if assess else None
        # a model that reads its document's earlier sentences (model.concat): what it remembers of them
        self.document = _document_reader(loaded, self.max_positions)
        self.last_pasts: list[SentencePast | None] = []  # model.recurrence: what the last rows translated left
        self._previous: tuple[str | None, bool] = (None, True)  # the last line's document id, and whether it was blank
        # --glossary / --keep-terms: each line's terms become constraints of its search (decode/constrained.py)
        self.terms = TermMatcher(glossary) if glossary is not None and len(glossary) else None
        self.glossary_mode = glossary_mode
        # a multilingual model's target tag (decode/targets.py): the first id of every non-empty source line
        self.source_prefix = list(source_prefix)
        # one whose decoder reads the tag first (data.language_tag: target): every output starts with it, unshown
        self.target_tag = target_tag
        if self.terms is not None:
            _check_glossary_use(loaded, config, self.document is not None)
            check_term_lengths(self.terms.glossary, loaded)

    def translate(
        self,
        lines: Iterable[str],
        prefixes: Iterable[str] | None = None,
        first_line: int = 0,
        documents: Iterable[str] | None = None,
    ) -> Iterator[list[Translation]]:
        """Yield, for every input line in order, its n-best list of ``Translation``; each output starts with
        the line's target prefix when ``prefixes`` gives one (an empty prefix: none).

        ``first_line`` is the index of the first line in the whole input (a chunk boundary, when a job
        resumes or is one shard of several): sampling draws each chunk from a generator seeded by
        ``decode.seed`` and the chunk's number, so a chunk samples the same wherever it is translated.

        A model that reads document context (``model.concat``) reads each line after the earlier lines of its
        document: ``documents`` gives each line's document id (``--docids``); without it a blank line ends a
        document. A sentence-level model reads every line alone.
        """
        source = iter(lines)
        starts = iter(prefixes) if prefixes is not None else None
        ids = iter(documents) if documents is not None else None
        chunk_number = first_line // self.chunk_lines
        while chunk := list(itertools.islice(source, self.chunk_lines)):
            if self.generator is not None:
                self.generator.manual_seed(chunk_seed(self.config.seed, chunk_number))
            chunk_number += 1
            chunk = [self._clean(line) for line in chunk]
            beginnings = self._document_starts(chunk, ids)
            chunk_prefixes = None
            if starts is not None:
                chunk_prefixes = [line.rstrip("\r\n").strip() for line in itertools.islice(starts, len(chunk))]
                if len(chunk_prefixes) < len(chunk):
                    raise NmtError(
                        f"the target prefixes end at line {self.stats.sentences + len(chunk_prefixes)} "
                        "but the input goes on; give one prefix line (empty: none) per input line"
                    )
            yield from self._translate_chunk(chunk, chunk_prefixes, beginnings)

    def new_document(self) -> None:
        """The next line begins a document (each file a format hands over is one)."""
        self._previous = (None, True)

    def _document_starts(self, chunk: list[str], ids: Iterator[str] | None) -> list[bool]:
        """Per line of the chunk, whether it begins a document: its id differs from the line before's, or
        without ids the line before was blank (the first line of the input begins one)."""
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
                    f"the document ids end at line {self.stats.sentences + number} but the input goes on; "
                    "give one id per input line"
                )
            starts.append(document.strip() != self._previous[0])
            self._previous = (document.strip(), blank)
        return starts

    def sentences(self) -> Sentences:
        """This translator as ``nmt_cli.formats`` wants it (``translate_file``): best translations, with word
        alignments when it was built with ``alignments=True`` (tags then land on the aligned words; without,
        on a monotone alignment)."""

        def in_one_document(lines: list[str]) -> Iterator[list[Translation]]:
            # a format hands over every sentence of one file, in order: one document, blank lines and all
            self.new_document()
            return self.translate(lines, documents=itertools.repeat("file", len(lines)))

        kept = self.terms.kept_spans if self.terms is not None else None
        return sentences_of(in_one_document, self.align_model is not None, terms=self.terms_in_text(), kept=kept)

    def _clean(self, line: str) -> str:
        return clean_source_line(line, self.stats)

    def _translate_chunk(
        self, lines: list[str], prefixes: list[str] | None = None, documents: list[bool] | None = None
    ) -> list[list[Translation]]:
        encoded = self.loaded.src_vocab.encode([line.strip() for line in lines], out_type=int)
        if self.source_prefix:
            encoded = [self.source_prefix + ids if ids else ids for ids in encoded]
        starts = self.loaded.tgt_vocab.encode(prefixes, out_type=int) if prefixes is not None else None
        if self.document is not None:
            return self.read_in_context(encoded, starts, documents or [True] * len(lines))
        if self.terms is not None:
            return self._with_terms(lines, encoded, starts)
        return self.translate_encoded(encoded, starts)

    def _with_terms(
        self, lines: list[str], encoded: list[list[int]], prefixes: list[list[int]] | None
    ) -> list[list[Translation]]:
        """Lines translated with their glossary terms as constraints; each translation says which it lacks."""
        first = self.stats.sentences
        constraints = [self.constraints_of(line.strip()) for line in lines]
        results = self.translate_encoded(encoded, prefixes, constraints=constraints)
        for number, (wanted, hyps) in enumerate(zip(constraints, results)):
            if wanted:
                self.stats.term_lines += 1
            for rank, hyp in enumerate(hyps):
                missing = tuple(c.source for c in wanted if not c.met_by(hyp.text))
                hyps[rank] = hyp._replace(missing_terms=missing)
            if hyps[0].missing_terms:
                self.stats.term_failures.append(first + number + 1)
        return results

    def terms_in_text(self) -> Callable[[str], list[tuple[str, str]]] | None:
        """With a glossary: a text's terms, each with its approved (first) translation, once each, in order."""
        return self.terms.applied if self.terms is not None else None

    def constraints_of(self, text: str) -> tuple[Constraint, ...]:
        """The constraints of one source sentence: each glossary term it holds (:func:`.constrained.term_constraints`)."""
        assert self.terms is not None
        return term_constraints(self.terms, self.loaded.tgt_vocab, text)

    def read_in_context(
        self, encoded: list[list[int]], prefixes: list[list[int]] | None, starts: Sequence[bool]
    ) -> list[list[Translation]]:
        """Sentences of documents (source ids) translated in their context (``starts[i]``: sentence i begins a
        document), by the model's way of reading context."""
        if isinstance(self.document, DocumentPast):
            return self.document.translate(self._translate_with_pasts, encoded, prefixes, starts)
        assert self.document is not None
        return self.document.translate(self.translate_encoded, encoded, prefixes, starts)

    def _translate_with_pasts(
        self, encoded: list[list[int]], prefixes: list[list[int]] | None, pasts: list[list[SentencePast]]
    ) -> tuple[list[list[Translation]], list[SentencePast | None]]:
        found = self.translate_encoded(encoded, prefixes, pasts=pasts)
        return found, self.last_pasts

    def translate_encoded(
        self,
        encoded: list[list[int]],
        prefixes: list[list[int]] | None = None,
        contexts: Sequence[tuple[int, int]] | None = None,
        pasts: list[list[SentencePast]] | None = None,
        constraints: list[tuple[Constraint, ...]] | None = None,
    ) -> list[list[Translation]]:
        """The n-best lists of sentences already encoded as source ids (no EOS), in order; ``prefixes``
        are target ids each output must start with; ``constraints``, per sentence, what its output must hold.

        With ``contexts`` (document context, ``decode/context.py``), each sentence's source and prefix start with
        that many tokens of context, which its outputs leave out; alignments and assessments read the sentence
        and its output alone. With ``pasts`` (``model.recurrence``), each sentence's model reads the keys/values
        its previous sentences left, and :attr:`last_pasts` then holds what each sentence leaves (None: empty).

        Empty sentences give an empty line; too long ones are truncated and counted.
        """
        encoded = list(encoded)
        contexts = list(contexts) if contexts is not None else None
        if self.target_tag is not None:  # forced as the output's first token, left out as context is
            prefixes = [[self.target_tag, *(prefixes[i] if prefixes else [])] for i in range(len(encoded))]
            contexts = [(c[0], c[1] + 1) for c in contexts] if contexts else [(0, 1)] * len(encoded)
        empty = EMPTY._replace(alignment="") if self.align_model is not None else EMPTY
        if self.assessor is not None:
            empty = empty._replace(assessment=self.assessor.nothing())
        results: list[list[Translation]] = [[empty] for _ in encoded]
        todo = []
        for i, ids in enumerate(encoded):
            self.stats.sentences += 1
            if not ids:
                self.stats.empty += 1
                continue
            if len(ids) > self.max_src:
                self.stats.truncated += 1
                encoded[i] = ids[: self.max_src]
            todo.append(i)
        batches = list(self._batches(todo, encoded))
        threads = torch.get_num_threads()
        search_all = run_batches(
            lambda batch: self._search(batch, encoded, prefixes, pasts, constraints),
            batches,
            self._workers_for(batches, threads),
            threads,
        )
        read = encoded if contexts is None else [ids[skip:] for ids, (skip, _) in zip(encoded, contexts)]
        self.last_pasts = [None] * len(encoded)
        for batch, (found, memory, left) in zip(batches, search_all):
            if left is not None:
                for i, past in zip(batch, left):
                    self.last_pasts[i] = past
                memory = None  # the encoder output read the past: alignments read the sentence alone
            if contexts is not None:
                found = [[Hypothesis(h.tokens[contexts[i][1] :], h.score) for h in hyps] for i, hyps in zip(batch, found)]
                memory = None  # the search's encoder output read the context too
            links = self._alignments(batch, found, read, memory) if self.align_model is not None else None
            assessed = self._assessments(batch, found, read, memory) if self.assessor is not None else None
            for n, (i, hyps) in enumerate(zip(batch, found)):
                results[i] = [
                    self._detokenize(
                        h, links[n][k] if links is not None else None, assessed[n][k] if assessed is not None else None
                    )
                    for k, h in enumerate(hyps)
                ] or [self._nothing()]
        return results

    def _assessments(
        self,
        batch: list[int],
        found: list[list[Hypothesis]],
        encoded: list[list[int]],
        memory: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> list[list[Assessment]]:
        """Every hypothesis of one batch assessed (decode/assess.py): one teacher-forced pass over them all."""
        assert self.assessor is not None
        return self.assessor.assess([encoded[i] for i in batch], found, memory)

    def _alignments(
        self,
        batch: list[int],
        found: list[list[Hypothesis]],
        encoded: list[list[int]],
        memory: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> list[list[str]]:
        """Pharaoh word alignments of every hypothesis of one batch, from one teacher-forced pass over them all
        (on the search's encoder output when it has it: each sentence's row once per hypothesis)."""
        assert self.align_model is not None
        aligner = Aligner(self.loaded, self.align_model, self.align_layer)
        return aligner.align([encoded[i] for i in batch], found, memory)

    def _search(
        self,
        batch: list[int],
        encoded: list[list[int]],
        prefixes: list[list[int]] | None,
        pasts: list[list[SentencePast]] | None = None,
        constraints: list[tuple[Constraint, ...]] | None = None,
    ) -> tuple[list[list[Hypothesis]], tuple[torch.Tensor, torch.Tensor] | None, list[SentencePast] | None]:
        """The n-best hypotheses of the sentences ``batch`` indexes (thread-safe: a worker may run it), the
        encoder output when alignments will want it again, and with ``pasts`` what each sentence leaves."""
        if constraints is not None and any(constraints[i] for i in batch):
            return self._search_constrained(batch, encoded, prefixes, constraints), None, None
        src = pad_rows([encoded[i] + [EOS_ID] for i in batch]).to(self.device)
        prefix = self._prefix(batch, prefixes)
        if pasts is not None:
            found, left = self.search_with_pasts(src, prefix, [pasts[i] for i in batch])
            return found, None, left
        if self.config.sampling:
            return sample(self.loaded.model, src, self.config, self.nbest, self.generator, prefix), None, None
        memory = None
        wanted = self.align_model or (self.assessor.model if self.assessor else None)
        if wanted is not None and wanted is self.loaded.model:
            with torch.inference_mode():
                memory = self.loaded.model.encode(src)
        return search(self.loaded.model, src, self.config, self.nbest, prefix, memory), memory, None

    def _search_constrained(
        self,
        batch: list[int],
        encoded: list[list[int]],
        prefixes: list[list[int]] | None,
        constraints: list[tuple[Constraint, ...]],
    ) -> list[list[Hypothesis]]:
        """A batch holding glossary terms: constrained beam search. Its sentences without terms go through the
        plain beam step on the same logits (their outputs are unconstrained decoding's); under greedy search
        they are searched apart, greedily, and the rest with a beam of at least ``CONSTRAINED_MIN_BEAM``."""
        if self.config.beam >= CONSTRAINED_MIN_BEAM:
            src = pad_rows([encoded[i] + [EOS_ID] for i in batch]).to(self.device)
            wanted, prefix = [constraints[i] for i in batch], self._prefix(batch, prefixes)
            return constrained_beam_search(
                self.loaded.model, src, self.config, wanted, self.nbest, self.glossary_mode, prefix=prefix
            )
        found: dict[int, list[Hypothesis]] = {}
        plain = [i for i in batch if not constraints[i]]
        if plain:
            found.update(zip(plain, self._search(plain, encoded, prefixes)[0]))
        bound = [i for i in batch if constraints[i]]
        src = pad_rows([encoded[i] + [EOS_ID] for i in bound]).to(self.device)
        config = replace(self.config, beam=CONSTRAINED_MIN_BEAM)
        wanted, prefix = [constraints[i] for i in bound], self._prefix(bound, prefixes)
        hyps = constrained_beam_search(self.loaded.model, src, config, wanted, self.nbest, self.glossary_mode, prefix=prefix)
        found.update(zip(bound, hyps))
        return [found[i] for i in batch]

    def _prefix(self, batch: list[int], prefixes: list[list[int]] | None) -> torch.Tensor | None:
        """The target prefixes of the sentences ``batch`` indexes, (n, P) PAD-padded; None when none has one."""
        if prefixes is None or not any(prefixes[i] for i in batch):
            return None
        return pad_rows([prefixes[i][: self.max_src] or [PAD_ID] for i in batch]).to(self.device)

    @torch.inference_mode()
    def search_with_pasts(
        self, src: torch.Tensor, prefix: torch.Tensor | None, pasts: list[list[SentencePast]]
    ) -> tuple[list[list[Hypothesis]], list[SentencePast]]:
        """``model.recurrence``: the sentences ``src`` searched with their previous sentences' keys/values as
        every self-attention layer's past, and the keys/values each leaves its successor: its source's, and
        its best translation's, read once more teacher-forced."""
        model = self.loaded.model
        assert isinstance(model, Transformer)
        like = model.output.weight
        kept_encoder: Kept = []
        memory, src_mask = model.encode(src, batch_pasts(pasts, "encoder", len(model.encoder), like), kept_encoder)
        decoder_past = batch_pasts(pasts, "decoder", len(model.decoder), like)
        if self.config.sampling:
            found = sample(model, src, self.config, self.nbest, self.generator, prefix, (memory, src_mask), decoder_past)
        else:
            found = search(model, src, self.config, self.nbest, prefix, (memory, src_mask), decoder_past)
        chosen = [[BOS_ID] + (hyps[0].tokens if hyps else []) for hyps in found]
        kept_decoder: Kept = []
        model.decode(pad_rows(chosen).to(src.device), memory, src_mask, decoder_past, kept_decoder)
        lengths = (src != PAD_ID).sum(dim=1).tolist()
        return found, sentence_pasts(kept_encoder, kept_decoder, lengths, [len(c) for c in chosen])

    def _workers_for(self, batches: list[list[int]], threads: int) -> int:
        """How many of ``batches`` run at once (decode/parallel.py); sampling draws from one generator in
        sequence, so its batches run one at a time."""
        requested = 1 if self.config.sampling else self.config.workers
        if isinstance(self.document, DocumentPast):
            requested = 1  # a wave's batches are few, and each sentence's past goes to the next one
        rows = max((len(batch) for batch in batches), default=0) * max(self.config.beam, self.nbest)
        return worker_count(requested, threads, self.device, len(batches), rows)

    def _batches(self, todo: list[int], encoded: list[list[int]]) -> Iterator[list[int]]:
        widths = [len(tokens) + 1 for tokens in encoded]
        return decoding_batches(widths, todo, self.config.batch_size, self.config.batch_tokens)

    def _detokenize(self, hyp: Hypothesis, alignment: str | None, assessment: Assessment | None) -> Translation:
        self.stats.output_tokens += len(hyp.tokens) + 1
        return Translation(as_one_line(self.loaded.tgt_vocab.decode(hyp.tokens)), hyp.score, alignment, assessment)

    def _nothing(self) -> Translation:
        return Translation("", float("-inf"), "" if self.align_model is not None else None)
