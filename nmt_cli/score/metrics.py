"""sacreBLEU metrics with their signatures, the paper-style tokenized BLEU, and paired tests.

Numbers and signatures are sacreBLEU's own: nothing here re-implements a metric. The
"paper BLEU" (Moses-tokenized, hyphenated compounds split, as the tensor2tensor
``get_ende_bleu.sh`` script scored the paper's outputs) is computed by sacreBLEU too, on
text tokenized with ``sacremoses``; it is always reported beside the sacreBLEU figure.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.metrics.base import Metric

if TYPE_CHECKING:
    from sacrebleu.significance import Result

from ..errors import DataError
from ..utils.files import split_lines
from ..utils.text import has_control_characters, replace_control_characters

METRICS = ("bleu", "chrf", "ter")


@dataclass(frozen=True)
class MetricResult:
    """A metric's score, its formatted line (as the sacrebleu command prints it) and signature."""

    name: str
    score: float
    signature: str
    line: str


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[Sequence[str]]):
    """sacreBLEU corpus BLEU with default settings (used by validation during training)."""
    return BLEU().corpus_score(list(hypotheses), [list(r) for r in references])


BLEU_TOKENIZERS = tuple(BLEU.TOKENIZERS)  # sacreBLEU's names for --tokenize


def make_metric(name: str, tokenize: str | None = None, lowercase: bool = False) -> Metric:
    """A sacreBLEU metric object configured like the sacrebleu command's options."""
    if name == "bleu":
        return BLEU(lowercase=lowercase, tokenize=tokenize or None)  # None: sacreBLEU's default (13a)
    if name == "chrf":
        return CHRF(lowercase=lowercase)
    if name == "ter":
        return TER()  # case-insensitive by default, as in the sacrebleu command
    raise DataError(f"unknown metric '{name}'; choose from {', '.join(METRICS)}")


def score(
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    metrics: Sequence[str] = ("bleu",),
    tokenize: str | None = None,
    lowercase: bool = False,
    width: int = 1,
) -> list[MetricResult]:
    """Score ``hypotheses`` against one or more reference streams with each metric.

    ``width`` is the number of decimals in the formatted line (the sacrebleu command's -w, default 1).
    """
    results = []
    for name in metrics:
        metric = make_metric(name, tokenize, lowercase)
        value = metric.corpus_score(list(hypotheses), [list(r) for r in references])
        signature = str(metric.get_signature())
        results.append(MetricResult(value.name, value.score, signature, value.format(width=width, signature=signature)))
    return results


def paper_bleu(hypotheses: Sequence[str], references: Sequence[Sequence[str]], lang: str) -> MetricResult:
    """Tokenized BLEU with compounds split, as the paper's numbers were computed. Not comparable to sacreBLEU."""
    from sacremoses import MosesTokenizer

    tokenizer = MosesTokenizer(lang=lang)

    def prepare(line: str) -> str:
        text = tokenizer.tokenize(line, return_str=True, escape=False)
        return re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", text)

    metric = BLEU(tokenize="none", force=True)
    value = metric.corpus_score([prepare(h) for h in hypotheses], [[prepare(r) for r in ref] for ref in references])
    label = f"paper-style tokenized BLEU (Moses tokenizer lang:{lang}, compounds split; not sacreBLEU)"
    return MetricResult("BLEU (tokenized)", value.score, label, f"{label} = {value.score:.2f}")


@dataclass(frozen=True)
class Comparison:
    """Paired bootstrap resampling of system B against baseline A for one metric."""

    metric: str
    score_a: float
    score_b: float
    p_value: float
    ci_b: float
    signature: str


def compare(
    hyp_a: Sequence[str],
    hyp_b: Sequence[str],
    references: Sequence[Sequence[str]],
    metrics: Sequence[str] = ("bleu",),
    samples: int = 1000,
) -> list[Comparison]:
    """sacreBLEU's paired bootstrap test: is B's score different from A's?"""
    from sacrebleu.significance import PairedTest

    refs = [list(r) for r in references]
    objects = {name.upper(): _with_references(name, refs) for name in metrics}
    test = PairedTest([("A", list(hyp_a)), ("B", list(hyp_b))], objects, references=None, test_type="bs", n_samples=samples)
    signatures, results = test()
    out = []
    for label in signatures:  # sacreBLEU names them itself (BLEU, chrF2, TER)
        base, other = cast("tuple[Result, Result]", results[label])  # the scores, not the signature strings
        assert other.p_value is not None and other.ci is not None  # set for every system but the baseline
        out.append(Comparison(label, base.score, other.score, float(other.p_value), float(other.ci), str(signatures[label])))
    return out


def _with_references(name: str, refs: list[list[str]]) -> Metric:
    cls = {"bleu": BLEU, "chrf": CHRF, "ter": TER}.get(name)
    if cls is None:
        raise DataError(f"unknown metric '{name}'; choose from {', '.join(METRICS)}")
    return cls(references=refs)


def read_lines(path: str | Path, stdin_text: str | None = None, note: Callable[[str], None] | None = None) -> list[str]:
    """Lines of a UTF-8 text file (``-`` reads the given stdin text), with one-line errors. Control
    characters inside a line become spaces (``utils/text.py``); ``note`` hears how many lines held them."""
    lines = _read_raw_lines(path, stdin_text)
    held = [i for i, line in enumerate(lines) if has_control_characters(line)]
    for i in held:
        lines[i] = replace_control_characters(lines[i])
    if held and note is not None:
        note(
            f"{path}: {len(held):,} line(s) held control characters (NUL, escape, ...), each replaced by a space "
            f"(first: line {held[0] + 1})"
        )
    return lines


def _read_raw_lines(path: str | Path, stdin_text: str | None) -> list[str]:
    if str(path) == "-":
        return split_lines(stdin_text or "")
    path = Path(path)
    if not path.exists() or path.is_dir():  # exists(), not is_file(): pipes such as <(zcat ref.gz) are fine
        raise DataError(f"{path}: file not found; check the path")
    data = path.read_bytes()
    if path.suffix == ".gz" or data[:2] == b"\x1f\x8b":  # a gzip file: read what it holds
        data = _gunzip(data, path)
    try:
        return split_lines(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: invalid UTF-8; save the file as UTF-8") from None


def _gunzip(data: bytes, path: Path) -> bytes:
    try:
        return gzip.decompress(data)
    except EOFError:
        raise DataError(
            f"{path}: truncated gzip file (it ends before the compressed data does); download or compress it again"
        ) from None
    except (gzip.BadGzipFile, zlib.error) as err:
        raise DataError(f"{path}: not valid gzip data ({err}); decompress it by hand or fix the file") from None


def check_aligned(
    hypotheses: Sequence[str], hyp_name: str, references: Sequence[Sequence[str]], ref_names: Sequence[str]
) -> None:
    """One-line errors for empty inputs and line-count mismatches."""
    if not hypotheses:
        raise DataError(f"{hyp_name}: empty; it must hold one translation per line")
    for ref, name in zip(references, ref_names):
        if not ref:
            raise DataError(f"{name}: empty; it must hold one reference per line")
        if len(ref) != len(hypotheses):
            raise DataError(
                f"{hyp_name} has {len(hypotheses)} lines but {name} has {len(ref)}; "
                "hypotheses and references must be line-aligned"
            )
