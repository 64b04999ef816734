"""``nmt translate -m MODEL``: text in, text out, one output line per input line, in order."""

from __future__ import annotations

import itertools
import os
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import typer

from ..errors import NmtError
from ..formats import file_format_help
from ..quality.flag_names import FLAGS
from ..utils.allocator import bound_kernel_caches
from .common import ThreadsOption, console, decode_option, device_option, language_option, resolve_device
from .common import count as counted
from .lines_io import input_lines, output_sink, report_stats, with_progress
from .translate_engine import open_engine
from .translate_options import Engines, Plan, Precisions, TranslateOptions

if TYPE_CHECKING:  # imported where used: the command line starts without torch
    from ..decode.translation import Engine, Translation


# `nmt translate --help` lists its options under these titles, in this order (cli.py draws them).
OPTION_GROUPS = {
    "Input and output": ("models", "to", "source", "zero_shot", "input", "output", "output_format", "nbest", "progress"),
    "Search": (
        "beam", "alpha", "length_penalty", "stop", "max_len_a", "max_len_b", "prefix",
        "sampling", "temperature", "top_k", "top_p", "seed",
    ),
    "Documents": (
        "file_format", "markup", "keep_tags", "docids", "context_segment", "alignments", "alignment_layer",
        "fuzzy", "retranslate", "fuzzy_below", "max_unpacked_mb", "max_unpack_ratio",
    ),
    "Terminology": ("glossaries", "keep_terms", "glossary_mode", "protect"),
    "Quality": ("confidence",),
    "Long jobs": ("chunk_lines", "shard", "restart"),
    "Engine": (
        "engine", "device", "threads", "dtype", "batch_tokens", "batch_size", "workers", "cuda_graphs",
    ),
}  # fmt: skip


def run(
    models: list[Path] = typer.Option(
        ...,
        "--model",
        "-m",
        help="Model folder (its model.pt) or any checkpoint "
        "file; repeat (-m A -m B) for an ensemble of models sharing one vocabulary.",
    ),
    input: Path = typer.Option(None, "--input", "-i", help="Input text file.  [default: stdin]", show_default=False),
    output: Path = typer.Option(
        None, "--output", "-o", help="Output file, written atomically.  [default: stdout]", show_default=False
    ),
    beam: int = decode_option("beam", "--beam", "-b"),
    alpha: float = decode_option("alpha", "--alpha"),
    length_penalty: str = decode_option("length_penalty", "--length-penalty"),
    stop: str = decode_option("stop", "--stop"),
    max_len_a: float = decode_option("max_len_a", "--max-len-a"),
    max_len_b: int = decode_option("max_len_b", "--max-len-b"),
    nbest: int = typer.Option(
        1, "--nbest", "-n", min=1, max=1024, help="Print the N best hypotheses as INDEX<tab>SCORE<tab>TEXT lines."
    ),
    batch_tokens: int = decode_option("batch_tokens", "--batch-tokens"),
    batch_size: int = decode_option("batch_size", "--batch-size"),
    workers: int = decode_option("workers", "--workers"),
    device: str = device_option(),
    threads: int = ThreadsOption,
    dtype: Precisions | None = typer.Option(
        None,
        "--dtype",
        help="Weights and arithmetic: fp32, or bf16/fp16 (faster "
        "on GPUs and on CPUs with native bf16; outputs can differ slightly from fp32's), or int8 on the CPU (linear "
        "layers in 8 bits, weights and inputs: faster, outputs a little different). With "
        "--engine ctranslate2: its compute type float32, bfloat16, float16, or int8 (8-bit weights, "
        "CTranslate2's fastest on most CPUs).  [default: fp32; with ctranslate2, the type the model was exported with]",
        show_default=False,
    ),
    engine: Engines = typer.Option(
        "nmt",
        "--engine",
        help="nmt (PyTorch), or ctranslate2 with -m naming a folder "
        "written by `nmt export` (length penalty there is always |Y|^alpha).",
    ),
    prefix: Path = typer.Option(
        None,
        "--prefix",
        help="Target prefixes, one per input line (empty line: none): "
        "each output starts with its prefix and the search continues from there.",
        show_default=False,
    ),
    docids: Path = typer.Option(
        None,
        "--docids",
        help="Document ids, one per input line: a model that reads document context (model.recurrence, "
        "model.concat) reads each line after the earlier lines of its document (without this file a blank line "
        "ends a document).",
        show_default=False,
    ),
    context_segment: int = decode_option("context_segment", "--context-segment"),
    alignments: bool = typer.Option(
        False,
        "--alignments",
        help="Append a tab and Pharaoh word alignments (src-out "
        "word indices, 0-based): from the guided head of a model trained with train.guided_alignment, else from "
        "one decoder layer's cross-attention, heads averaged.",
    ),
    alignment_layer: int = typer.Option(
        None,
        "--alignment-layer",
        min=-1024,
        max=1024,
        help="Decoder layer for --alignments, heads averaged (negative: from the end). "
        "[the penultimate; a guided model's guided head]",
        show_default=False,
    ),
    sampling: bool = typer.Option(
        False,
        "--sampling",
        help="Sample each token instead of beam search (e.g. for "
        "back-translation); with --nbest K, up to K distinct samples per line.",
    ),
    temperature: float = decode_option("temperature", "--temperature"),
    top_k: int = decode_option("top_k", "--top-k"),
    top_p: float = decode_option("top_p", "--top-p"),
    seed: int = decode_option("seed", "--seed"),
    cuda_graphs: bool = decode_option("cuda_graphs", "--cuda-graphs/--no-cuda-graphs"),
    progress: bool = typer.Option(
        None,
        "--progress/--no-progress",
        help="Progress on stderr.  [default: on when writing to a file]",
        show_default=False,
    ),
    chunk_lines: int = typer.Option(
        10_000,
        "--chunk-lines",
        min=1,
        max=10_000_000,
        help="Lines read, sorted by length and batched together; with -i and -o also the unit of "
        "progress kept for resuming (a killed run loses at most one chunk) and of --shard.",
    ),
    shard: str = typer.Option(
        None,
        "--shard",
        metavar="I/N",
        help="Translate only shard I of N (0 to N-1) of the -i file: consecutive lines, so the N "
        "outputs concatenated in order equal one run's output (for array jobs; under torchrun "
        "each process takes the shard of its rank by itself).",
        show_default=False,
    ),
    restart: bool = typer.Option(
        False, "--restart", help="Start over, discarding the progress an interrupted run of -o kept beside it."
    ),
    file_format: str = typer.Option(
        None,
        "--file-format",
        metavar="FORMAT",
        help=file_format_help(),
        show_default=False,
    ),
    fuzzy: bool = typer.Option(
        True, "--fuzzy/--no-fuzzy", help="gettext: flag machine translations fuzzy, for a translator to review."
    ),
    retranslate: bool = typer.Option(
        False, "--retranslate", help="gettext: translate entries that already have a translation too."
    ),
    fuzzy_below: float = typer.Option(
        0.5,
        "--fuzzy-below",
        min=0.0,
        max=1.0,
        help="gettext with --confidence: flag fuzzy only the entries whose confidence is below this, or that "
        "carry a flag; each entry gets a comment with its confidence.",
    ),
    keep_tags: str = typer.Option(
        "",
        "--keep-tags",
        help="More elements whose content is kept as written, as code is (comma-separated names, e.g. "
        "keyword,uicontrol): with --markup and in HTML, Markdown and XLIFF documents.",
        show_default=False,
    ),
    max_unpacked_mb: int = typer.Option(
        100,
        "--max-unpacked-mb",
        min=1,
        max=1 << 20,
        help="A compressed document (.docx) whose XML parts unpack to more is refused before it is unpacked.",
    ),
    max_unpack_ratio: float = typer.Option(
        100.0,
        "--max-unpack-ratio",
        min=1.0,
        max=1e9,
        help="A compressed document with a part (over 1 MiB) that unpacks to more times its packed size is "
        "refused (text packs 3 to 10 times; a decompression bomb, thousands).",
    ),
    markup: bool = typer.Option(
        False,
        "--markup",
        help="Each input line is an HTML/XML fragment: its text is translated as one sentence and every tag "
        "comes back, well-formed, around the words aligned to the words it wrapped.",
    ),
    confidence: bool = typer.Option(
        False,
        "--confidence",
        help="Give each translation a confidence in [0, 1] (the calibrated probability that it is acceptable, "
        f"from one more teacher-forced pass) and flags ({', '.join(FLAGS)}).",
    ),
    glossaries: list[Path] = typer.Option(
        [],
        "--glossary",
        help="Terminology: TSV or CSV (source term, translation, alternatives as A|B) or TBX; every source "
        "term found (word boundaries, case-insensitive unless it has capitals) gets one of its translations in "
        "the output. Repeat for several files.",
        show_default=False,
    ),
    keep_terms: list[Path] = typer.Option(
        [],
        "--keep-terms",
        help="Names copied into the translation exactly as written, one a line. Repeat for several files.",
        show_default=False,
    ),
    glossary_mode: Literal["hard", "soft"] = typer.Option(
        "hard",
        "--glossary-mode",
        help="hard: every term is in the output (constrained beam search; a sentence where none fits the length "
        "limit is reported); soft: terms are favoured by a score bonus, fluency first.",
    ),
    output_format: Literal["text", "jsonl", "tsv"] = typer.Option(
        "text",
        "--format",
        help="text (translations; with --confidence a tab, the confidence and the flags follow), jsonl (one "
        "object a line: translation, score, confidence, flags, alignment) or tsv.",
    ),
    to: str = language_option(
        "--to",
        "The target language of a model that translates into several (an OPUS-MT multilingual model's "
        ">>fra<< tags): an ISO 639-1 or 639-3 code (fr, fra) or the tag's name. A model with one target needs none.",
    ),
    source: str = language_option(
        "--from",
        "The source language, for a model that reads several: checked against the directions it knows; a "
        "direction it was never trained on goes through a pivot language (de-fr through en). auto: each line's "
        "language identified (plain lines; needs nmt-cli[langid]); lines already in the target language, or surely "
        "in one the model does not read, are kept as written.",
    ),
    zero_shot: bool = typer.Option(
        False,
        "--zero-shot",
        help="With --from and --to naming a direction never trained: translate directly, not through a pivot.",
    ),
    protect: bool = typer.Option(
        True,
        "--protect/--no-protect",
        help="Lines: paths, URLs, e-mail addresses, options, numbers and identifiers are hidden from the model and "
        "come back exactly as written (documents always keep them). Not with --prefix or --markup.",
    ),
) -> None:
    """Translate lines with beam search (or greedy with --beam 1)."""
    bound_kernel_caches()  # decoding's batches come in every shape (utils/allocator.py)
    decoding = dict(
        beam=beam, alpha=alpha, length_penalty=length_penalty, stop=stop, max_len_a=max_len_a, max_len_b=max_len_b,
        batch_tokens=batch_tokens, batch_size=batch_size, workers=workers, cuda_graphs=cuda_graphs,
        context_segment=context_segment, sampling=sampling or None, temperature=temperature, top_k=top_k, top_p=top_p,
        seed=seed,
    )  # fmt: skip
    options = TranslateOptions(
        models=models, input=input, output=output, nbest=nbest, device=device, threads=threads, dtype=dtype,
        engine=engine, prefix=prefix, docids=docids, alignments=alignments, alignment_layer=alignment_layer,
        sampling=sampling, progress=progress, chunk_lines=chunk_lines, shard=shard, restart=restart,
        file_format=file_format, fuzzy=fuzzy, retranslate=retranslate, fuzzy_below=fuzzy_below, keep_tags=keep_tags,
        max_unpacked_mb=max_unpacked_mb, max_unpack_ratio=max_unpack_ratio, markup=markup, confidence=confidence,
        output_format=output_format, glossaries=glossaries, keep_terms=keep_terms, glossary_mode=glossary_mode,
        protect=protect, to=to, source=source, zero_shot=zero_shot, decoding=decoding,
    )  # fmt: skip
    translate_with(options, options.checked())


def translate_with(o: TranslateOptions, plan: Plan) -> None:
    """``nmt translate`` once its options are checked: open the engine, then translate the document, the job
    (resumable, sharded) or the stream of lines."""
    import torch

    from ..decode.file_job import Shard
    from ..decode.protected import ProtectedEngine
    from ..decode.translation import output_lines
    from ..formats.unpack import MIB, UnpackLimits
    from ..score.metrics import read_lines

    launched = "WORLD_SIZE" in os.environ
    threads = o.cpu_threads()
    torch.set_num_threads(threads)
    target = resolve_device(o.device, int(os.environ.get("LOCAL_RANK", "0")) if launched else None)
    translator = open_engine(o, target, threads, plan.aligned)
    routed = translator if o.source == "auto" else None  # --from auto: says at the end what it read and kept
    if plan.line_by_line and o.protect and not o.markup and o.prefix is None:
        translator = ProtectedEngine(translator)
    input, output, prefix, docids = o.input, o.output, o.prefix, o.docids
    prefixes = read_lines(prefix) if prefix is not None else None
    documents = read_lines(docids) if docids is not None else None
    _check_context_options(translator, documents, input, docids)

    def results(lines: Iterable[str], first: int = 0) -> Iterator[list[Translation]]:
        if first and input is not None:
            # a resumed job or a shard starting mid-input: the document's earlier lines are read again first
            _read_context_before(translator, input, first, documents)
        ids = documents[first:] if documents is not None else None
        return translator.translate(lines, prefixes[first:] if prefixes is not None else None, first, ids)

    def texts(lines: Iterator[str], first: int = 0) -> Iterator[str]:
        if o.markup:
            kept = translator.terms.kept_spans if translator.terms is not None else None
            found = _sentences(results, plan.aligned, kept=kept)
            yield from _markup_lines(lines, first, found, o.chunk_lines, plan.kept_tags)
            return
        for index, hyps in enumerate(results(lines, first), start=first):
            yield output_lines(index, hyps, o.nbest, o.output_format, o.alignments, o.confidence)

    def one_document(lines: Iterable[str], first: int = 0) -> Iterator[list[Translation]]:
        """A file's sentences, handed over in one call and in order, read as one document."""
        if not translator.context_sentences:
            return translator.translate(lines)
        translator.new_document()
        return translator.translate(lines, documents=itertools.repeat("file"))

    show = o.progress if o.progress is not None else output is not None
    show = show and int(os.environ.get("RANK", "0")) == 0
    started = time.perf_counter()
    if not plan.line_by_line:
        assert input is not None
        gettext_options = (o.fuzzy, o.retranslate, o.fuzzy_below if o.confidence else None)
        matcher = translator.terms  # --glossary: gettext notes the terms applied; --keep-terms: masked as in lines
        terms, kept = (matcher.applied, matcher.kept_spans) if matcher is not None else (None, None)
        sentences = _sentences(one_document, plan.aligned, o.confidence, show, terms, kept)
        limits = UnpackLimits(o.max_unpacked_mb * MIB, o.max_unpack_ratio)
        count = _translate_document(
            input, output, plan.file_format, sentences, translator.languages, gettext_options, limits, plan.kept_tags
        )
        if show:
            console.print(f"{input}: {counted(count, 'entry', 'entries')} translated into {output or 'stdout'}")
    elif input is not None and (output is not None or plan.shard is not None):
        identity = _job_identity(o, translator)
        _run_job(input, output, plan.shard or Shard(), launched, o.chunk_lines, identity, texts, o.restart, show)
    else:
        with input_lines(input) as lines, output_sink(output) as sink:
            for text in with_progress(texts(lines), show):
                sink.write(text)
    report_stats(translator.stats, time.perf_counter() - started, show, translator.max_positions)
    if routed is not None:
        console.print(routed.summary())  # type: ignore[attr-defined]


def _job_identity(o: TranslateOptions, translator: Engine) -> dict:
    """What makes a resumable job this job: every setting that changes what it writes (another identity, another
    job: ``decode/file_job.py``)."""
    from ..decode.file_job import file_sha256, job_identity

    identity = job_identity(
        translator.config, o.models, o.engine, o.dtype, o.nbest, o.alignments, o.alignment_layer, o.prefix,
        o.chunk_lines,
    )  # fmt: skip
    identity["settings"].update(
        markup=o.markup, confidence=o.confidence, format=o.output_format, protect=o.protect, to=o.to, source=o.source,
        zero_shot=o.zero_shot,
    )  # fmt: skip
    if o.docids is not None:  # other documents, another job
        identity["docids"] = file_sha256(o.docids)
    if o.glossaries or o.keep_terms:  # other terms, other translations
        identity["terms"] = [file_sha256(p) for p in [*o.glossaries, *o.keep_terms]] + [o.glossary_mode]
    return identity


def _check_context_options(translator: Engine, documents: list[str] | None, input: Path | None, docids: Path | None) -> None:
    """--docids goes with a model that reads document context, one id per input line (checked before anything
    is written when the input is a file)."""
    from ..decode.context import check_docids

    if documents is None:
        return
    count = len(documents)  # standard input: its lines are counted as they come (context.DocumentStarts)
    if input is not None:
        with input_lines(input) as lines:
            count = sum(1 for _ in lines)
    check_docids(docids, len(documents), count, input, bool(translator.context_sentences))


def _read_context_before(translator: Engine, input: Path, first: int, documents: list[str] | None = None) -> None:
    """Before a job goes on at line ``first`` (resumed, or a shard), the model reads the lines before it that
    its document context covers, as the uninterrupted job did (their translations are left out)."""
    import dataclasses

    if not translator.context_sentences:
        return
    start = max(0, first - translator.context_sentences)
    with input_lines(input) as handle:
        before = list(itertools.islice(handle, start, first))
    counted = dataclasses.replace(translator.stats)  # the lines read again are not counted twice
    list(translator.translate(before, None, start, documents[start:first] if documents is not None else None))
    vars(translator.stats).update(vars(counted))


def _sentences(results, aligned: bool, assessed: bool = False, show: bool = False, terms=None, kept=None):
    """This command's engine as ``formats.Sentences`` (``decode/sentences.py``), with a progress bar when
    ``show`` (a document's sentences go through in one call, which may take minutes)."""
    from ..decode.sentences import sentences_of

    def found(lines: list[str]) -> Iterator[list[Translation]]:
        return with_progress(results(iter(lines)), show and len(lines) > 1, 0, len(lines))

    return sentences_of(found, aligned, assessed, terms, kept)


def _markup_lines(lines: Iterator[str], first: int, sentences, chunk_lines: int, kept: frozenset[str]) -> Iterator[str]:
    """``--markup``: each line a fragment, translated with its tags (``formats/markup.py``), a chunk at a time;
    the elements ``kept`` (--keep-tags) as written, as code is."""
    from ..formats.markup import translate_fragments
    from ..formats.markup_tree import kept_as_code

    while chunk := [line.rstrip("\r\n") for line in itertools.islice(lines, chunk_lines)]:
        for line in translate_fragments(chunk, sentences, language=None, is_opaque=kept_as_code(kept)):
            yield line + "\n"


def _translate_document(input, output, chosen, sentences, languages, gettext_options, limits, kept) -> int:
    """A document in its own format (``nmt_cli/formats``), its sentences through this command's engine."""
    from ..formats import translate_file

    source_language, target_language = languages
    if not target_language:
        raise NmtError(
            f"{input}: the model does not say its target language (no recipe beside it); a {chosen} file needs it"
        )
    fuzzy, retranslate, fuzzy_below = gettext_options
    options = dict(fuzzy=fuzzy, retranslate=retranslate, fuzzy_below=fuzzy_below, limits=limits, keep_tags=kept)
    return translate_file(input, output, sentences, source_language, target_language, chosen, **options)


def _run_job(input, output, shard, launched, chunk_lines, identity, texts, restart, show) -> None:
    from ..decode.file_job import FileJob, InputFile
    from ..utils.process import die_with_parent
    from ..utils.signals import Interrupted

    if launched:
        die_with_parent(os.getppid())  # a killed torchrun takes its workers along
    source = InputFile.scan(input)
    job = FileJob(
        source, shard, chunk_lines, {**identity, "input": source.sha256, "input_lines": source.lines}, output, launched
    )
    try:
        with input_lines(input) as lines:
            job.run(
                lines, texts, sys.stdout.write, restart, lambda items, done, total: with_progress(items, show, done, total)
            )
    except (Interrupted, KeyboardInterrupt):
        if output is not None:
            console.print(
                f"{output}: {job.kept:,} of {job.shard_size:,} lines translated are kept beside it; run the same "
                "command to continue",
                soft_wrap=True,
            )
        raise
