"""``nmt translate``'s options as one record, checked against each other before a model is loaded.

Every refusal is one line naming the option and the fix. What the options decide together (the file format,
whether tags need alignments, the shard to translate, the tags kept as code) comes back as a :class:`Plan`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..errors import NmtError

Engines = Literal["nmt", "ctranslate2"]
Precisions = Literal["fp32", "bf16", "fp16", "int8"]


@dataclass(frozen=True, kw_only=True)  # by name only: 30-odd options, many of one type, are easily swapped
class TranslateOptions:
    """What the command line gave (None: not given); ``decoding`` holds the ``decode.*`` overrides."""

    models: list[Path]
    input: Path | None
    output: Path | None
    nbest: int
    device: str
    threads: int
    dtype: Precisions | None
    engine: Engines
    prefix: Path | None
    docids: Path | None
    alignments: bool
    alignment_layer: int | None
    sampling: bool
    progress: bool | None
    chunk_lines: int
    shard: str | None
    restart: bool
    file_format: str | None
    fuzzy: bool
    retranslate: bool
    fuzzy_below: float
    keep_tags: str
    max_unpacked_mb: int
    max_unpack_ratio: float
    markup: bool
    confidence: bool
    output_format: str
    glossaries: list[Path]
    keep_terms: list[Path]
    glossary_mode: str
    protect: bool
    to: str | None
    source: str | None  # --from
    zero_shot: bool
    decoding: dict[str, Any]

    def checked(self) -> Plan:
        """Refuse what cannot go together, in one line, before a model is loaded; return what follows."""
        from ..config import DecodeConfig
        from ..decode.file_job import chosen_shard
        from ..formats import LINES, format_for, needs_alignment
        from ..utils.cpu import check_parallelism
        from .common import with_decoding

        with_decoding(DecodeConfig(), self.decoding)  # bad values fail now, as --set decode.X would
        kept = tag_names(self.keep_tags)
        sampling_options = {
            f"--{name.replace('_', '-')}": self.decoding[name] for name in ("temperature", "top_k", "top_p", "seed")
        }
        given = [flag for flag, value in sampling_options.items() if value is not None]
        if given and not self.sampling:
            raise NmtError(f"{given[0]} applies to sampling; add --sampling")
        given_files = [(self.prefix, "--prefix"), (self.docids, "--docids")]
        given_files += [(p, "--glossary") for p in self.glossaries] + [(p, "--keep-terms") for p in self.keep_terms]
        for path, flag in given_files:
            if path is not None and not path.is_file():
                if path.exists() and not path.is_dir():  # a pipe (bash's <(...)), read more than once below
                    raise NmtError(f"{flag} {path}: a pipe, not a file; write it to a file and give that")
                raise NmtError(f"{flag} {path}: file not found")
        self._check_glossary_options()
        if self.alignment_layer is not None and not self.alignments:
            raise NmtError("--alignment-layer applies to --alignments; add --alignments")
        if self.zero_shot and (self.source is None or self.to is None):
            raise NmtError("--zero-shot applies to a direction never trained: give it as --from LANG --to LANG")
        self._check_engine()
        if self.input is not None and (not self.input.exists() or self.input.is_dir()):
            raise NmtError(f"{self.input}: input file not found")
        self._check_output()
        check_parallelism(self.threads, "--threads")
        chosen = format_for(self.input, self.file_format)
        if chosen != LINES:
            self._check_document_options(chosen)
        if self.markup:
            self._check_markup_options(chosen, LINES)
        self._check_confidence_options(chosen)
        if self.source == "auto":
            self._check_auto_source(chosen, LINES)
        aligned = (self.markup or needs_alignment(chosen)) and self.engine != "ctranslate2"
        return Plan(chosen, chosen == LINES, aligned, kept, chosen_shard(self.shard, self.input, self.output))

    def _check_engine(self) -> None:
        """Refuse, in one line, the first thing asked for that the engine does not do (``ONLY``)."""
        stop = self.decoding.get("stop")
        asked = {
            "alignments": self.alignments,
            "prefix": self.prefix is not None,
            "ensemble": len(self.models) > 1,
            "sampling": self.sampling,
            "gnmt": self.decoding.get("length_penalty") == "gnmt",
            "stop": stop not in (None, "beam"),
            "confidence": self.confidence,
            "glossary": bool(self.glossaries or self.keep_terms),
        }
        for capability, wanted in asked.items():
            owner, refusal = ONLY[capability]
            if wanted and owner != self.engine:
                raise NmtError(refusal.format(stop=stop))

    def _check_output(self) -> None:
        """The output file never replaces the input being read or a model."""
        if self.output is None:
            return
        if self.output.is_dir():
            raise NmtError(f"{self.output}: is a folder; name the output file")
        target = self.output.resolve()
        read = [p for p in (self.input, self.prefix, self.docids, *self.glossaries, *self.keep_terms) if p is not None]
        for model in self.models:
            read += [model, model / "model.pt"] if model.is_dir() else [model]
        for path in read:
            if path.exists() and target == path.resolve():
                raise NmtError(f"{self.output}: is also what this command reads ({path}); write the output to another file")

    def _check_auto_source(self, chosen: str, lines: str) -> None:
        """``--from auto`` identifies each plain line's language; what reads lines as one text or needs one
        language pair is refused."""
        for given, what in (
            (chosen != lines, f"{self.input} is a {chosen} file, in one language: give it with --from LANG"),
            (self.markup, "--markup lines keep their tags by one language's sentence rules: give --from LANG"),
            (self.prefix is not None, "--prefix starts each translation in one direction: give --from LANG"),
            (self.docids is not None, "--docids reads a document in one language: give --from LANG"),
            (bool(self.glossaries or self.keep_terms), "a glossary is for one language pair: give --from LANG"),
            (self.zero_shot, "--zero-shot names one direction: give --from LANG"),
            (self.engine != "nmt", "--engine ctranslate2 would load the model once per language: drop --engine"),
        ):
            if given:
                raise NmtError(f"--from auto: {what}")
        from ..languages import LanguageDetector

        unavailable = LanguageDetector([]).unavailable
        if unavailable:
            raise NmtError(f"--from auto: {unavailable}")

    def _check_glossary_options(self) -> None:
        if self.glossary_mode not in ("hard", "soft"):
            raise NmtError(f"--glossary-mode {self.glossary_mode}: choose hard or soft")
        if not (self.glossaries or self.keep_terms):
            return
        if self.sampling:
            raise NmtError("--glossary and --keep-terms steer beam search; drop --sampling")

    def _check_document_options(self, chosen: str) -> None:
        """What line-by-line options mean nothing for a document."""
        if self.input is None:
            raise NmtError(f"--file-format {chosen}: give the file with -i (a document is read whole, not from stdin)")
        for given, flag in (
            (self.nbest > 1, "--nbest"),
            (self.alignments, "--alignments"),
            (self.prefix is not None, "--prefix"),
            (self.shard is not None, "--shard"),
            (self.sampling, "--sampling"),
            (self.docids is not None, "--docids"),
        ):
            if given:
                raise NmtError(f"{flag} applies to line-by-line translation; {self.input} is translated as a {chosen} file")

    def _check_markup_options(self, chosen: str, lines: str) -> None:
        if chosen != lines:
            raise NmtError(f"--markup reads lines; a {chosen} file is translated with its markup already")
        for given, flag in (
            (self.nbest > 1, "--nbest"),
            (self.alignments, "--alignments"),
            (self.prefix is not None, "--prefix"),
        ):
            if given:
                raise NmtError(f"{flag} does not go with --markup (the alignment places the tags); drop one of them")

    def _check_confidence_options(self, chosen: str) -> None:
        from ..formats import assessable_formats

        if self.output_format not in ("text", "jsonl", "tsv"):
            raise NmtError(f"--format {self.output_format}: choose text, jsonl or tsv")
        if not self.confidence:
            return
        if self.sampling:
            raise NmtError("--confidence assesses beam search or greedy outputs; drop --sampling")
        if self.markup:
            raise NmtError("--confidence does not go with --markup; drop one of them")
        if chosen not in assessable_formats():
            raise NmtError(
                f"--confidence applies to the formats that can carry it ({', '.join(assessable_formats())}), "
                f"not {chosen} documents; drop it"
            )

    def cpu_threads(self) -> int:
        """``--threads``, or this process's share of the cores (torchrun's processes split them)."""
        return self.threads or max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


@dataclass(frozen=True)
class Plan:
    """What the options decide together."""

    file_format: str
    line_by_line: bool
    aligned: bool  # tags are placed by word alignments (markup, documents with inline markup)
    kept_tags: frozenset[str]
    shard: Any  # decode.file_job.Shard, or None: the whole input


# What one engine does and the other does not, in one place: capability -> (the engine that has it, the refusal)
ONLY = {
    "alignments": ("nmt", "--alignments runs with --engine nmt only; drop --engine ctranslate2"),
    "prefix": ("nmt", "--prefix runs with --engine nmt only; drop --engine ctranslate2"),
    "ensemble": ("nmt", "ensembles (-m given more than once) run with --engine nmt only; drop --engine ctranslate2"),
    "sampling": ("nmt", "--sampling runs with --engine nmt only; drop --engine ctranslate2"),
    "confidence": ("nmt", "--confidence runs with --engine nmt only (it reads the model's attention); drop one of them"),
    "glossary": (
        "nmt",
        "--glossary and --keep-terms run with --engine nmt only (CTranslate2 has no constrained search); drop "
        "--engine ctranslate2",
    ),
    "gnmt": (
        "nmt",
        "--length-penalty gnmt: CTranslate2 normalises scores by |Y|^alpha only; use --length-penalty average "
        "or --engine nmt",
    ),
    "stop": (
        "nmt",
        "--stop {stop}: CTranslate2 always stops once a sentence has BEAM finished hypotheses; use --stop beam "
        "or leave --stop out",
    ),
}


def tag_names(text: str) -> frozenset[str]:
    """``--keep-tags a,b``: the element names, as the HTML tokenizer names them (lower case)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    bad = [name for name in names if not re.fullmatch(r"[A-Za-z][\w.:-]*", name)]
    if bad:
        raise NmtError(f"--keep-tags: '{bad[0]}' is not an element name; give names separated by commas, e.g. kbd,keyword")
    return frozenset(name.lower() for name in names) | frozenset(names)
