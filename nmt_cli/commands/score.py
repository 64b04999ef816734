"""``nmt score HYP REF...``: sacreBLEU's BLEU, chrF and TER with signatures; paired tests."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import typer

from ..errors import NmtError
from ..utils.allocator import bound_kernel_caches
from .common import console, deprecated, device_option, language_option, resolve_device

# sacreBLEU's tokenizers (BLEU.TOKENIZERS), named here so that --help does not import sacreBLEU; a test keeps them equal
TOKENIZERS = ("13a", "intl", "zh", "ja-mecab", "ko-mecab", "spm", "flores101", "flores200", "spBLEU-1K", "char", "none")


def run(
    files: list[str] = typer.Argument(
        ..., help="HYP REF [REF...] (HYP may be - for stdin); with --compare: HYP_A HYP_B REF [REF...]."
    ),
    metrics: str = typer.Option("bleu", "--metrics", help="Comma-separated: bleu,chrf,ter."),
    tokenize: str = typer.Option(
        None,
        "--tokenize",
        metavar="NAME",
        help=f"sacreBLEU tokenizer for BLEU: {', '.join(TOKENIZERS)}.  [default: 13a]",
        show_default=False,
    ),
    tokenize_old: str = typer.Option(None, "-tok", hidden=True),  # sacrebleu's spellings; ours are --long
    lowercase: bool = typer.Option(False, "--lowercase", help="Case-insensitive BLEU and chrF."),
    lowercase_old: bool = typer.Option(False, "-lc", hidden=True),
    width: int = typer.Option(1, "--width", "-w", min=0, max=10, help="Decimals printed (as sacrebleu -w)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
    paper_bleu: bool = typer.Option(
        False,
        "--paper-bleu",
        help="Also print the tokenized, compound-split BLEU the paper reported (labelled; never instead of sacreBLEU).",
    ),
    lang: str = typer.Option("de", "--lang", help="Target language for --paper-bleu's Moses tokenizer."),
    compare: bool = typer.Option(False, "--compare", help="Paired bootstrap resampling: is HYP_B different from HYP_A?"),
    samples: int = typer.Option(1000, "--samples", help="Bootstrap samples for --compare.", min=10, max=1_000_000),
    models: list[str] = typer.Option(
        None,
        "--model",
        "-m",
        metavar="MODEL",
        help="Forced scores instead: `nmt score --model M SRC HYP` "
        "prints each pair's log-probability under model M (for filtering and "
        "reranking); repeat --model for an ensemble.",
        show_default=False,
    ),
    output_format: Literal["jsonl", "tsv"] = typer.Option(
        "jsonl", "--format", help="With --model: jsonl or tsv (total, per token, normalised by the length penalty)."
    ),
    device: str = device_option(when="With --model: "),
    docids: str = typer.Option(
        None,
        "--docids",
        metavar="FILE",
        help="With --model and a model that reads document context (model.concat, model.recurrence): document "
        "ids, one per line; each pair is scored after the earlier pairs of its document (its context), as "
        'translation reads them, and alone ("alone" in jsonl); CXMI, the mean gain per token from the context, '
        "is printed with its bootstrap interval.",
        show_default=False,
    ),
    to: str = language_option("--to", "With --model, a model that translates into several: the hypotheses' language."),
    source: str = language_option("--from", "With --model, a model that reads several: the sources' language."),
) -> None:
    """Score translations with sacreBLEU (same numbers and signatures as the sacrebleu command), or with
    --model the model's log-probability of each translation."""
    bound_kernel_caches()  # decoding's batches come in every shape (utils/allocator.py)
    from ..score import metrics as m

    if tokenize_old is not None:
        deprecated("nmt score -tok", "--tokenize")
        tokenize = tokenize_old
    if lowercase_old:
        deprecated("nmt score -lc", "--lowercase")
        lowercase = True

    if models and _metric_names(models, m.METRICS):
        # `-m` meant --metrics here before it meant --model, as it does in every other command.
        deprecated(f"nmt score -m {models[0]} (metrics)", f"--metrics {models[0]}")
        metrics, models = models[0], []
    if models:
        _forced(models, files, output_format, device, docids, (source, to))
        return
    if docids is not None:
        raise NmtError("--docids goes with --model (forced scores in context)")

    names = [n.strip().lower() for n in metrics.split(",") if n.strip()]
    if not names:
        raise NmtError(f"--metrics {metrics!r} names no metric; choose from {', '.join(m.METRICS)}")
    for name in names:
        if name not in m.METRICS:
            raise NmtError(f"--metrics: unknown metric '{name}'; choose from {', '.join(m.METRICS)}")
    if tokenize is not None and tokenize not in m.BLEU_TOKENIZERS:
        raise NmtError(f"--tokenize {tokenize}: unknown sacreBLEU tokenizer; choose from {', '.join(m.BLEU_TOKENIZERS)}")
    needed = 3 if compare else 2
    if len(files) < needed:
        raise NmtError(f"give {'HYP_A HYP_B REF' if compare else 'HYP REF'} [REF...]: {len(files)} file(s) given")
    stdin_text = sys.stdin.read() if "-" in files else None
    hyps = [m.read_lines(f, stdin_text, _note) for f in files[: needed - 1]]
    ref_files = files[needed - 1 :]
    refs = [m.read_lines(f, note=_note) for f in ref_files]
    for hyp, name in zip(hyps, files):
        m.check_aligned(hyp, name, refs, ref_files)
    if compare:
        _print_comparison(m.compare(hyps[0], hyps[1], refs, names, samples), files, as_json)
        return
    results = m.score(hyps[0], refs, names, tokenize, lowercase, width)
    if paper_bleu:
        results.append(m.paper_bleu(hyps[0], refs, lang))
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {"name": r.name, "score": round(r.score, 4), "signature": r.signature, "verbose_score": r.line}
                    for r in results
                ],
                indent=1,
                ensure_ascii=False,
            )
        )
    else:
        for result in results:
            typer.echo(result.line)


def _print_comparison(results: list, files: list[str], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps([vars(r) for r in results], indent=1))
        return
    for r in results:
        verdict = "significant" if r.p_value < 0.05 else "not significant"
        typer.echo(
            f"{r.metric}: A ({files[0]}) {r.score_a:.2f}  B ({files[1]}) {r.score_b:.2f} "
            f"(+/- {r.ci_b:.2f})  p = {r.p_value:.4f}: {verdict} at 0.05  [{r.signature}]"
        )


def _metric_names(models: list[str], known: Iterable[str]) -> bool:
    """Whether ``-m`` was given the metrics, as it once took them: one value, no such file, only metric names."""
    names = models[0].lower().split(",")
    return len(models) == 1 and not Path(models[0]).exists() and all(name.strip() in known for name in names)


def _forced(
    models: list[str],
    files: list[str],
    output_format: str,
    device: str,
    docids: str | None,
    direction: tuple[str | None, str | None] = (None, None),
) -> None:
    """``--model``: one line of scores per (source, hypothesis) pair, in order; with ``docids``, each pair in
    the context of its document's earlier pairs; ``direction`` (``--from``, ``--to``) for a multilingual model."""
    from ..decode.context import check_docids
    from ..decode.forced import forced_scores
    from ..decode.loading import load_ensemble
    from ..decode.targets import never_trained, route
    from ..score.metrics import check_aligned, read_lines

    if output_format not in ("jsonl", "tsv"):
        raise NmtError(f"--format: '{output_format}' is not jsonl or tsv")
    if len(files) != 2:
        raise NmtError(f"--model scores pairs: give SRC HYP (two files), not {len(files)}")
    stdin_text = sys.stdin.read() if "-" in files else None
    sources, hypotheses = (read_lines(f, stdin_text, _note) for f in files)
    check_aligned(hypotheses, files[1], [sources], [files[0]])
    target = resolve_device(device)
    loaded = load_ensemble(models, target)
    pairs = list(
        zip(
            loaded.src_vocab.encode([s.strip() for s in sources], out_type=int),
            loaded.tgt_vocab.encode([h.strip() for h in hypotheses], out_type=int),
        )
    )
    skips = None
    results = alone = None
    way = route(loaded.recipe.data, loaded.src_vocab, direction[1], str(models[0]), direction[0])
    if never_trained(loaded.recipe.data, *direction):
        _note(
            f"note: {direction[0]}-{direction[1]} was never trained: these are the scores of reading {direction[0]} "
            f"and writing {direction[1]} directly (zero-shot), not of the pivot nmt translate goes through"
        )
    if way.source_prefix:  # a multilingual model's tag, as translation puts it (decode/targets.py)
        pairs = [(list(way.source_prefix) + src, tgt) for src, tgt in pairs]
    if way.target_tag is not None:  # read by the decoder first, not scored
        pairs, skips = [(src, [way.target_tag, *tgt]) for src, tgt in pairs], [1] * len(pairs)
    if docids is not None:
        ids = read_lines(docids, stdin_text)
        check_docids(docids, len(ids), len(sources), files[0], loaded.recipe.model.reads_context)
        results = _in_documents(loaded, pairs, ids, target)
        alone = _in_documents(loaded, pairs, [str(i) for i in range(len(ids))], target)
    if results is None:
        results = forced_scores(loaded.model, pairs, loaded.recipe.decode, target, skips, loaded.unwritten)
    for number, result in enumerate(results):  # from 0, as nmt translate numbers its lines
        if output_format == "tsv":
            values = (result.total, result.per_token, result.normalised)
            typer.echo("\t".join("nan" if v is None else f"{v:.4f}" for v in values))
        else:
            record = {
                "line": number,
                "total": _rounded(result.total),
                "tokens": result.tokens,
                "per_token": _rounded(result.per_token),
                "normalised": _rounded(result.normalised),
            }
            if alone is not None:  # the same pair read without its context: CXMI's other half
                record["alone"] = _rounded(alone[number].total)
            typer.echo(json.dumps(record))
    if alone is not None:
        from ..score.cxmi import cxmi

        _note(cxmi(results, alone).summary())


def _in_documents(loaded, pairs, ids: list[str], device) -> list:
    """Forced scores of the pairs, each read after its document's earlier ones (``ids``: one per pair; a line
    whose id differs from the one before starts a document)."""
    from ..data.context import pairs_in_context
    from ..decode.context import document_starts
    from ..decode.forced import forced_scores, forced_scores_with_pasts

    starts = document_starts(ids)
    if loaded.recipe.model.recurrence:
        return forced_scores_with_pasts(loaded.model, pairs, starts, loaded.recipe.decode, device)
    in_context, skips = pairs_in_context(pairs, starts, loaded.recipe.model, loaded.src_vocab, loaded.tgt_vocab)
    return forced_scores(loaded.model, in_context, loaded.recipe.decode, device, skips, loaded.unwritten)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _note(message: str) -> None:
    console.print(message, soft_wrap=True)
