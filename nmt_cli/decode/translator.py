"""Translation of text lines with a trained model: encode, batch, search, restore order.

Lines stream through in chunks, so a file of millions of lines needs bounded memory. Within a chunk, sentences are
sorted by length for batching and the results put back in input order. An empty line gives an empty line; a line
longer than the model allows is truncated (and counted, so the caller can warn once). The features around the
search have rooms of their own: document context (``context.py``), glossaries (``glossary_search.py``), word
alignments (``aligner.py``) and assessments (``assess.py``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import replace

import torch

from ..config import DecodeConfig
from ..data.batches import decoding_batches, pad_rows
from ..data.vocab import EOS_ID, PAD_ID
from ..errors import NmtError
from ..formats.segments import Sentences
from ..model.recurrence import SentencePast
from ..model.transformer import Transformer
from ..terms.glossary import Glossary
from ..terms.matching import TermMatcher
from ..utils.text import as_one_line, has_control_characters, replace_control_characters
from .aligner import Aligner
from .assess import Assessment, Assessor
from .constrained import CONSTRAINED_MIN_BEAM, Constraint, GlossaryMode
from .context import Chunk, DocumentStarts, document_reader, search_with_pasts
from .ensemble import Ensemble
from .glossary_search import GlossarySearch
from .loading import LoadedModel
from .parallel import run_batches, worker_count
from .sampling import sample
from .search import Hypothesis, search
from .sentences import sentences_of
from .steppers import Encoded
from .translation import EMPTY, Engine, Lines, SearchRequest, SearchService, Translation, TranslationStats

Found = tuple[list[list[Hypothesis]], "tuple[torch.Tensor, torch.Tensor] | None", "list[SentencePast] | None"]
Finishing = tuple["list[list[str]] | None", "list[list[Assessment]] | None"]  # alignments, assessments


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


class Translator(Engine):
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
        service: SearchService | None = None,
    ) -> None:
        if nbest > config.beam and not config.sampling:
            raise NmtError(f"--nbest {nbest} is larger than the beam ({config.beam}); raise --beam or lower --nbest")
        if service is not None:
            _check_servable(loaded, config, glossary_mode)
        # where the searches run: here, in this thread (None), or a service shared with other callers (the server's
        # decoding loop), which the rest of this class does not see
        self.service = service
        self.loaded, self.config, self.device, self.nbest = loaded, config, torch.device(device), nbest
        self.chunk_lines = chunk_lines
        self.max_positions = loaded.recipe.model.max_positions
        self.max_src = self.max_positions - 1  # room for the EOS
        self.stats = TranslationStats()
        self.languages = (loaded.recipe.data.src_lang, loaded.recipe.data.tgt_lang)
        self.generator = torch.Generator(self.device).manual_seed(config.seed) if config.sampling else None
        # --alignments: each Translation gets its alignment "i-j ..." from one layer's cross-attention
        first = loaded.model.models[0] if isinstance(loaded.model, Ensemble) else loaded.model
        self.aligner = Aligner(loaded, first, alignment_layer) if alignments else None  # refuses a layer not there
        # assess: each Translation also gets an Assessment (quality/): features, calibrated confidence, flags
        self.assessor = Assessor.of(loaded, config, alignment_layer) if assess else None
        # a model that reads its document's earlier sentences (model.concat, model.recurrence): decode/context.py
        self.document = document_reader(loaded, self.max_positions, config.context_segment)
        self.context_sentences = self.document.sentences if self.document is not None else 0
        self.document_starts = DocumentStarts()
        self.last_pasts: list[SentencePast | None] = []  # model.recurrence: what the last rows translated left
        # --glossary / --keep-terms: each line's terms become constraints of its search (decode/glossary_search.py)
        use_terms = glossary is not None and len(glossary) > 0
        self.glossary = GlossarySearch(loaded, config, glossary, glossary_mode) if use_terms and glossary else None
        self.terms: TermMatcher | None = self.glossary.matcher if self.glossary is not None else None
        # a multilingual model's target tag (decode/targets.py): the first id of every non-empty source line
        self.source_prefix = list(source_prefix)
        # one whose decoder reads the tag first (data.language_tag: target): every output starts with it, unshown
        self.target_tag = target_tag

    def translate_lines(self, given: Lines) -> Iterator[list[Translation]]:
        """For every input line in order, its n-best list; each output starts with the line's target prefix where
        ``given.prefixes`` has one. ``given.first_line``: the index of the first line in the whole input (a resumed
        job's or a shard's): sampling seeds each chunk by ``decode.seed`` and the chunk's number, so a chunk samples
        the same wherever it is translated. ``given.documents``: each line's document id (``--docids``) for a model
        that reads document context; without them a blank line ends a document (``context.DocumentStarts``)."""
        source = iter(given.text)
        starts = iter(given.prefixes) if given.prefixes is not None else None
        ids = iter(given.documents) if given.documents is not None else None
        chunk_number = given.first_line // self.chunk_lines
        while chunk := list(itertools.islice(source, self.chunk_lines)):
            if self.generator is not None:
                self.generator.manual_seed(chunk_seed(self.config.seed, chunk_number))
            chunk_number += 1
            chunk = [clean_source_line(line, self.stats) for line in chunk]
            beginnings = self.document_starts.of(chunk, ids, self.stats.sentences)
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
        self.document_starts.new_document()

    def sentences(self) -> Sentences:
        """This translator as ``nmt_cli.formats`` wants it (``translate_file``): best translations, with word
        alignments when it was built with ``alignments=True`` (tags then land on the aligned words; without,
        on a monotone alignment)."""

        def in_one_document(lines: list[str]) -> Iterator[list[Translation]]:
            # a format hands over every sentence of one file, in order: one document, blank lines and all
            self.new_document()
            return self.translate(lines, documents=itertools.repeat("file", len(lines)))

        terms = self.terms
        applied, kept = (terms.applied, terms.kept_spans) if terms is not None else (None, None)
        return sentences_of(in_one_document, self.aligner is not None, terms=applied, kept=kept)

    def _translate_chunk(
        self, lines: list[str], prefixes: list[str] | None = None, documents: list[bool] | None = None
    ) -> list[list[Translation]]:
        encoded = self.loaded.src_vocab.encode([line.strip() for line in lines], out_type=int)
        if self.source_prefix:
            encoded = [self.source_prefix + ids if ids else ids for ids in encoded]
        starts = self.loaded.tgt_vocab.encode(prefixes, out_type=int) if prefixes is not None else None
        if self.document is not None:
            return self.document.translate(self, Chunk(encoded, starts, documents or [True] * len(lines)))
        if self.glossary is not None:
            first = self.stats.sentences
            constraints = [self.glossary.constraints_of(line.strip()) for line in lines]
            results = self.translate_encoded(encoded, starts, constraints=constraints)
            return self.glossary.mark_missing(results, constraints, self.stats, first)
        return self.translate_encoded(encoded, starts)

    def translate_with_pasts(
        self,
        encoded: list[list[int]],
        prefixes: list[list[int]] | None,
        pasts: list[list[SentencePast]],
        *,
        counted: Sequence[bool] | None = None,
    ) -> tuple[list[list[Translation]], list[SentencePast | None]]:
        """``model.recurrence``: :meth:`translate_encoded` with each row's past, and what each row leaves."""
        return self.translate_encoded(encoded, prefixes, pasts=pasts, counted=counted), self.last_pasts

    def translate_encoded(
        self,
        encoded: list[list[int]],
        prefixes: list[list[int]] | None = None,
        contexts: Sequence[tuple[int, int]] | None = None,
        pasts: list[list[SentencePast]] | None = None,
        constraints: list[tuple[Constraint, ...]] | None = None,
        *,
        counted: Sequence[bool] | None = None,
    ) -> list[list[Translation]]:
        """The n-best lists of sentences encoded as source ids (no EOS), in order; ``prefixes``: target ids each
        output starts with; ``constraints``: per sentence, what its output must hold. ``contexts`` (document context,
        ``context.py``): each source and prefix starts with that many tokens of context, left out of the outputs, of
        their alignments and assessments. ``pasts`` (``model.recurrence``): each sentence reads the keys/values its
        previous sentences left; :attr:`last_pasts` then holds what each leaves (None: empty). ``counted[i]``
        False: sentence i is not a line of the input (a document segment's lead) and is left out of :attr:`stats`."""
        encoded = list(encoded)
        if self.service is not None:
            if prefixes is not None or contexts is not None or pasts is not None:
                raise NmtError("target prefixes and document context are not searched by a shared decoding loop")
            return self._served(encoded, constraints)
        contexts = list(contexts) if contexts is not None else None
        if self.target_tag is not None:  # forced as the output's first token, left out as context is
            prefixes = [[self.target_tag, *(prefixes[i] if prefixes else [])] for i in range(len(encoded))]
            contexts = [(c[0], c[1] + 1) for c in contexts] if contexts else [(0, 1)] * len(encoded)
        results: list[list[Translation]] = [[self._nothing(empty=True)] for _ in encoded]
        todo = [i for i in range(len(encoded)) if self._counted(encoded, i, counted is None or counted[i])]
        widths = [len(t) + 1 for t in encoded]
        if pasts is not None:  # each decoder step attends to the past too, padded to the batch's widest
            widths = [w + sum(past.decoder[0][0].size(1) for past in history) for w, history in zip(widths, pasts)]
        batches = list(decoding_batches(widths, todo, self.config.batch_size, self.config.batch_tokens))
        threads = torch.get_num_threads()
        workers = self._workers_for(batches, threads)
        found_all = run_batches(lambda b: self._search(b, encoded, prefixes, pasts, constraints), batches, workers, threads)
        read = encoded if contexts is None else [ids[skip:] for ids, (skip, _) in zip(encoded, contexts)]
        self.last_pasts = [None] * len(encoded)
        for batch, (found, memory, left) in zip(batches, found_all):
            if left is not None:
                for i, past in zip(batch, left):
                    self.last_pasts[i] = past
            if contexts is not None:
                found = [[Hypothesis(h.tokens[contexts[i][1] :], h.score) for h in hyps] for i, hyps in zip(batch, found)]
                memory = None  # the search's encoder output read the context too
            for i, hyps in zip(batch, self._finished(batch, found, read, memory)):
                results[i] = hyps
        return results

    def _served(self, encoded: list[list[int]], constraints: list[tuple[Constraint, ...]] | None) -> list[list[Translation]]:
        """:meth:`translate_encoded` through :attr:`service`: the sentences searched there, aligned and assessed
        where the service runs the model. With a glossary under greedy search, as ``GlossarySearch``
        searches offline: the sentences without terms greedily, those with terms with a beam of at least
        ``CONSTRAINED_MIN_BEAM``."""
        assert self.service is not None
        results: list[list[Translation]] = [[self._nothing(empty=True)] for _ in encoded]
        todo = [i for i in range(len(encoded)) if self._counted(encoded, i)]
        groups = [(todo, self.config)]
        if constraints is not None and self.config.beam < CONSTRAINED_MIN_BEAM:
            bound = replace(self.config, beam=CONSTRAINED_MIN_BEAM)
            groups = [([i for i in todo if not constraints[i]], self.config), ([i for i in todo if constraints[i]], bound)]
        for rows, config in groups:
            if not rows:
                continue
            wanted = [constraints[i] for i in rows] if constraints is not None else None
            # only what reads the model runs where the service runs it; the text is made here, off its thread
            model_work = self._model_work if self.aligner is not None or self.assessor is not None else None
            sources = [encoded[i] for i in rows]
            request = SearchRequest(sources, config, self.nbest, wanted, self.target_tag, model_work)
            found, finishing = self.service.search(request)
            for i, hyps in zip(rows, self._as_translations(found, finishing or (None, None))):
                results[i] = hyps
        return results

    def _counted(self, encoded: list[list[int]], i: int, count: bool = True) -> bool:
        """Count sentence ``i`` (empty, truncated to the model's length) unless told not to, and say whether it is
        searched."""
        self.stats.sentences += count
        if not encoded[i]:
            self.stats.empty += count
            return False
        if len(encoded[i]) > self.max_src:
            self.stats.truncated += count
            encoded[i] = encoded[i][: self.max_src]
        return True

    def _finished(
        self,
        batch: list[int],
        found: list[list[Hypothesis]],
        read: list[list[int]],
        memory: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> list[list[Translation]]:
        """One batch's hypotheses as translations, with their alignments and assessments where asked for: one
        teacher-forced pass over them all, on the search's encoder output when it has it (``memory``)."""
        return self._as_translations(found, self._model_work([read[i] for i in batch], found, memory))

    def _model_work(
        self,
        sources: list[list[int]],
        found: list[list[Hypothesis]],
        memory: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> Finishing:
        """What finishing the hypotheses asks of the model: their word alignments and assessments, where asked for."""
        first = self.target_tag  # the search read it first; so do the passes that read its outputs again
        links = self.aligner.align(sources, found, memory, first) if self.aligner is not None else None
        assessed = self.assessor.assess(sources, found, memory, first) if self.assessor is not None else None
        return links, assessed

    def _as_translations(self, found: list[list[Hypothesis]], finishing: Finishing) -> list[list[Translation]]:
        links, assessed = finishing
        return [
            [
                self._detokenize(h, links[n][k] if links else None, assessed[n][k] if assessed else None)
                for k, h in enumerate(hyps)
            ]
            or [self._nothing()]
            for n, hyps in enumerate(found)
        ]

    def _search(
        self,
        batch: list[int],
        encoded: list[list[int]],
        prefixes: list[list[int]] | None,
        pasts: list[list[SentencePast]] | None = None,
        constraints: list[tuple[Constraint, ...]] | None = None,
    ) -> Found:
        """The n-best hypotheses of the sentences ``batch`` indexes (thread-safe: a worker may run it), the
        encoder output when alignments will want it again, and with ``pasts`` what each sentence leaves."""
        if self.glossary is not None and constraints is not None and any(constraints[i] for i in batch):

            def plain(rows: list[int]) -> list[list[Hypothesis]]:
                return self._search(rows, encoded, prefixes)[0]

            prefix_of = lambda rows: self._prefix(rows, prefixes)  # noqa: E731
            return self.glossary.search(batch, encoded, prefix_of, constraints, plain, self.nbest, self.device), None, None
        src = pad_rows([encoded[i] + [EOS_ID] for i in batch]).to(self.device)
        prefix = self._prefix(batch, prefixes)
        if pasts is not None:  # the encoder output read the past: alignments read the sentence alone
            assert isinstance(self.loaded.model, Transformer)
            found, left = search_with_pasts(self.loaded.model, src, prefix, [pasts[i] for i in batch], self._run)
            return found, None, left
        memory = None
        wanted = self.aligner.model if self.aligner is not None else (self.assessor.model if self.assessor else None)
        if wanted is not None and wanted is self.loaded.model and not self.config.sampling:  # encoded once for both
            with torch.inference_mode():
                memory = self.loaded.model.encode(src)
        return self._run(self.loaded.model, src, prefix, Encoded(*memory) if memory is not None else None), memory, None

    def _run(
        self,
        model: Transformer,
        src: torch.Tensor,
        prefix: torch.Tensor | None,
        encoded: Encoded | None,
    ) -> list[list[Hypothesis]]:
        """The search the config asks for: sampling, or greedy/beam search."""
        rules = self.loaded.rules()
        if self.config.sampling:
            return sample(model, src, self.config, self.nbest, self.generator, prefix, encoded, rules)
        return search(model, src, self.config, self.nbest, prefix, encoded, rules)

    def _prefix(self, batch: list[int], prefixes: list[list[int]] | None) -> torch.Tensor | None:
        """The target prefixes of the sentences ``batch`` indexes, (n, P) PAD-padded; None when none has one."""
        if prefixes is None or not any(prefixes[i] for i in batch):
            return None
        return pad_rows([prefixes[i][: self.max_src] or [PAD_ID] for i in batch]).to(self.device)

    def _workers_for(self, batches: list[list[int]], threads: int) -> int:
        """How many of ``batches`` run at once (decode/parallel.py); sampling draws from one generator in
        sequence, so its batches run one at a time. A recurrent model's batches here are one wave of its documents
        (``context.in_document_order``): one sentence of each, each with its own past, as independent as any."""
        requested = 1 if self.config.sampling else self.config.workers
        rows = max((len(batch) for batch in batches), default=0) * max(self.config.beam, self.nbest)
        return worker_count(requested, threads, self.device, len(batches), rows)

    def _detokenize(self, hyp: Hypothesis, alignment: str | None, assessment: Assessment | None) -> Translation:
        self.stats.output_tokens += len(hyp.tokens) + 1
        return Translation(as_one_line(self.loaded.tgt_vocab.decode(hyp.tokens)), hyp.score, alignment, assessment)

    def _nothing(self, empty: bool = False) -> Translation:
        """What an empty line (``empty``: score 0) or a sentence without any hypothesis translates to."""
        text = EMPTY._replace(score=0.0 if empty else float("-inf"))
        text = text._replace(alignment="") if self.aligner is not None else text
        if empty and self.assessor is not None:
            text = text._replace(assessment=self.assessor.nothing())
        return text


def _check_servable(loaded: LoadedModel, config: DecodeConfig, glossary_mode: GlossaryMode) -> None:
    """What a shared decoding loop (``SearchService``) searches: beam search, hard constraints, sentence by sentence."""
    if config.sampling:
        raise NmtError("a shared decoding loop runs beam search, not sampling")
    if glossary_mode != "hard":
        raise NmtError("a shared decoding loop applies glossaries as hard constraints only")
    if loaded.recipe.model.reads_context:
        raise NmtError(f"{loaded.path} reads document context, which a shared decoding loop does not")
