"""The recipe's distillation section: where a student's training targets come from (``nmt distill``)."""

from __future__ import annotations

from dataclasses import dataclass

from .fields import _opt


@dataclass(frozen=True)
class DistillConfig:
    """Sequence-level knowledge distillation (Kim & Rush 2016): ``nmt distill RECIPE`` translates the training
    sources with a teacher, keeps what it got right, and trains this recipe's model (the student) on that."""

    teacher: tuple[str, ...] = _opt(
        (), "the teacher: one nmt model folder (an imported OPUS-MT or fairseq model too), or several (an ensemble)"
    )
    endpoint: str = _opt(
        "",
        "the teacher as a LibreTranslate-compatible server instead (http://host:port, as nmt serve or "
        "LibreTranslate answer): its /translate is asked for every training source",
    )
    beam: int = _opt(4, "the teacher's beam (a local teacher; a server searches as it is set up)", ge=1, le=1024)
    dir: str = _opt("", "where the teacher's translations and the distilled corpus go (default: RUN_DIR/distill)")
    keep_original: bool = _opt(
        False, "train on the original pairs too, beside the distilled ones (false: the distilled corpus alone)"
    )
    max_ratio: float = _opt(
        2.5,
        "drop a pair whose teacher output is this many times longer or shorter (in words) than its source",
        gt=1,
        le=1000,
    )
    min_confidence: float = _opt(
        0.0,
        "drop a pair whose teacher translation's confidence is below this (0: keep all; the teacher must give one: "
        "a local model, or nmt serve)",
        ge=0,
        le=1,
    )
    batch_lines: int = _opt(64, "a server teacher: lines per request", ge=1, le=10_000)
    requests_per_second: float = _opt(
        0.0, "a server teacher: at most this many requests a second (0: no limit)", ge=0, le=100_000
    )
    retries: int = _opt(5, "a server teacher: tries of a failed request before giving up (backing off)", ge=0, le=100)
    timeout_seconds: float = _opt(120.0, "a server teacher: how long one request may take", gt=0, le=86_400)
    chunk_lines: int = _opt(
        2000,
        "the teacher's translations are kept on disk every this many lines (a killed run goes on from there)",
        ge=1,
        le=10_000_000,
    )
