"""The distilled corpus: the training sources, their teacher's translations, and the pairs kept.

In the distillation's folder (``distill.dir``, by default ``RUN_DIR/distill``), never over the original corpus:

- ``source.SRC`` and ``original.TGT``: the recipe's training pairs as read (every ``data.train`` corpus in order);
- ``teacher.tsv``: per source line, the teacher's confidence (empty where it gives none), a tab, its translation;
  written in blocks that survive a kill (``utils/resumable_output.py``): a distillation started again asks the
  teacher only for the lines after the last block (the same teacher and sources, else it says what changed);
- ``distilled.SRC`` and ``distilled.TGT``: the pairs kept, and ``filtered.json``: how many each rule dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from ..config import DistillConfig, Recipe
from ..data.corpus import ParallelReader, resolve_corpus
from ..data.prepare import pair_root
from ..decode.file_job import InputFile
from ..errors import NmtError
from ..utils.files import atomic_open
from ..utils.resumable_output import ResumableOutput
from ..utils.text import as_one_line
from .teachers import Teacher

Progress = Callable[[Iterator[str], int, int], Iterator[str]]  # (items, lines already done, lines in all)


@dataclass(frozen=True)
class Filtered:
    """What the filter kept, and what each rule dropped (a pair counts under the first rule it fails)."""

    pairs: int
    kept: int
    empty: int = 0  # the teacher gave nothing (or the source is empty)
    copied: int = 0  # the teacher gave the source back (a word in it, untranslated)
    ratio: int = 0  # the translation is distill.max_ratio times longer or shorter than its source, in words (4+)
    doubted: int = 0  # the teacher's confidence is below distill.min_confidence

    def summary(self) -> str:
        dropped = ", ".join(f"{n:,} {why}" for why, n in asdict(self).items() if why not in ("pairs", "kept") and n)
        return f"kept {self.kept:,} of {self.pairs:,} pairs" + (f" (dropped: {dropped})" if dropped else "")


def _written_names(src: str, tgt: str) -> tuple[str, ...]:
    return (f"source.{src}", f"original.{tgt}", "teacher.tsv", f"distilled.{src}", f"distilled.{tgt}")


def work_dir(recipe: Recipe) -> Path:
    return Path(recipe.distill.dir or recipe.run_dir / "distill")


def gather_sources(recipe: Recipe, folder: Path) -> int:
    """``source.SRC`` and ``original.TGT``: every training corpus's pairs in order; how many pairs."""
    src, tgt = recipe.data.src_lang, recipe.data.tgt_lang
    pairs = [resolve_corpus(pair_root(recipe, src, tgt), prefix, src, tgt) for prefix in recipe.data.train]
    written = {(folder / name).resolve() for name in _written_names(src, tgt)}
    for pair in pairs:  # nothing a command reads is ever written over
        for path in (pair.src, pair.tgt):
            if path.resolve() in written:
                raise NmtError(f"{path}: a training corpus inside distill.dir ({folder}), where the distillation writes "
                               "files of that name; set distill.dir to another folder")  # fmt: skip
    count = 0
    with atomic_open(folder / f"source.{src}", "w") as sources, atomic_open(folder / f"original.{tgt}", "w") as targets:
        for pair in pairs:
            for source, target in ParallelReader(pair):
                sources.write(as_one_line(source) + "\n")
                targets.write(as_one_line(target) + "\n")
                count += 1
    return count


def teach(
    teacher: Teacher, sources: Path, output: Path, config: DistillConfig, progress: Progress, restart: bool = False
) -> int:
    """``output`` (teacher.tsv): every line of ``sources`` translated by ``teacher``, resumable; the lines this run
    translated. A finished output is kept with its identity beside it (``teacher.tsv.json``): the same teacher
    and sources again ask the teacher nothing; another teacher's output is never taken for this one's."""
    scanned = InputFile.scan(sources)
    identity = {"teacher": teacher.identity, "sources": scanned.sha256, "lines": scanned.lines}
    finished = output.with_name(output.name + ".json")
    if restart:
        output.unlink(missing_ok=True)
        finished.unlink(missing_ok=True)
    if output.exists():
        if finished.exists() and json.loads(finished.read_text(encoding="utf-8")) == identity:
            return 0
        raise NmtError(
            f"{output}: holds the translations of another teacher or of other sources; add --restart to ask this "
            "teacher again (or set distill.dir to another folder to keep both)"
        )
    part = ResumableOutput(output, identity)
    try:
        done = part.open(restart)
        count = 0
        if not part.complete:
            with open(sources, encoding="utf-8") as handle:
                lines = (line.rstrip("\n") for k, line in enumerate(handle) if k >= done)
                rows = (f"{'' if c is None else f'{c:.4f}'}\t{as_one_line(t)}" for t, c in teacher.translate(lines))
                for row in progress(rows, done, scanned.lines):
                    part.add(row + "\n")
                    count += 1
                    if (done + count) % config.chunk_lines == 0:
                        part.commit()
        part.finish()
    finally:
        part.close()
    with atomic_open(finished, "w") as handle:
        json.dump(identity, handle)
    return count


def keep_taught(sources: Path, taught: Path, folder: Path, src: str, tgt: str, config: DistillConfig) -> Filtered:
    """``distilled.SRC``/``.TGT``: the pairs of ``sources`` and their teacher's translations that pass the filter."""
    counts = dict.fromkeys(("pairs", "kept", "empty", "copied", "ratio", "doubted"), 0)
    with (
        open(sources, encoding="utf-8") as source_lines,
        open(taught, encoding="utf-8") as taught_lines,
        atomic_open(folder / f"distilled.{src}", "w") as kept_sources,
        atomic_open(folder / f"distilled.{tgt}", "w") as kept_targets,
    ):
        for source, row in zip(source_lines, taught_lines):
            confidence, _, translation = row.rstrip("\n").partition("\t")
            source = source.rstrip("\n")
            counts["pairs"] += 1
            why = _dropped(source, translation, float(confidence) if confidence else None, config)
            if why:
                counts[why] += 1
                continue
            counts["kept"] += 1
            kept_sources.write(source + "\n")
            kept_targets.write(translation + "\n")
    filtered = Filtered(**counts)
    with atomic_open(folder / "filtered.json", "w") as handle:
        json.dump(asdict(filtered), handle, indent=2)
    return filtered


def _dropped(source: str, translation: str, confidence: float | None, config: DistillConfig) -> str | None:
    """Why the pair (source, the teacher's translation) is not kept, or None."""
    if not source.strip() or not translation.strip():
        return "empty"
    if " ".join(source.split()) == " ".join(translation.split()) and any(ch.isalpha() for ch in source):
        return "copied"
    words, translated = len(source.split()), len(translation.split())
    if max(words, translated) > 3 and max(words, translated) > config.max_ratio * min(words, translated):  # short: no
        return "ratio"
    if config.min_confidence > 0 and (confidence is None or confidence < config.min_confidence):
        return "doubted"
    return None


__all__ = ["Filtered", "gather_sources", "keep_taught", "teach", "work_dir"]
