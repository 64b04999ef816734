"""Whether SentencePiece's unigram trainer will fit in memory, estimated before it starts.

A BPE vocabulary is learned from word counts (:mod:`.word_counts`); a unigram one from sentences
(from counts, 112 of 8,000 pieces came out different: its seed pieces come from a suffix array over
the text). SentencePiece holds a sample of up to ``vocab.input_sentence_size`` lines and builds that
suffix array over their characters: its peak memory grows with the sample's characters, whatever the number of
lines (``BYTES_PER_CHARACTER`` and ``FIXED_BYTES``; the measurements: docs/choices.md, "Memory"). The default
10M lines of WMT text would take about 30 GB, found out only when the process is killed after minutes of
loading. So the need is estimated from the files' sizes and their first megabytes, and a
sample that cannot fit stops before SentencePiece starts, naming the ``input_sentence_size`` that fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import DataError

BYTES_PER_CHARACTER = 21.9
FIXED_BYTES = 31 << 20
PROBE_BYTES = 4 << 20  # read from the start of each file to learn its bytes and characters per line
GIB = 1 << 30
SUGGESTION_SHARE = 0.9  # the advised input_sentence_size leaves a tenth of the free memory


@dataclass(frozen=True)
class UnigramSample:
    """The lines SentencePiece will hold: about ``lines`` in the inputs, ``sampled`` of them kept."""

    lines: int
    sampled: int
    characters_per_line: float

    def needed_bytes(self) -> int:
        return round(FIXED_BYTES + BYTES_PER_CHARACTER * self.characters_per_line * self.sampled)

    def lines_that_fit(self, available: int) -> int:
        """The sample size to advise for ``available`` bytes: within ``SUGGESTION_SHARE`` of them (free
        memory moves between runs), rounded down to two significant digits."""
        budget = SUGGESTION_SHARE * available - FIXED_BYTES
        lines = max(0, int(budget / (BYTES_PER_CHARACTER * max(self.characters_per_line, 1.0))))
        unit = 10 ** max(len(str(lines)) - 2, 0)
        return lines // unit * unit

    def summary(self) -> str:
        """One line for the log: what the vocabulary was learned from."""
        sample = f"a sample of {self.sampled:,} of " if self.sampled < self.lines else ""
        return f"{sample}about {self.lines:,} lines (SentencePiece's estimated memory: {_size(self.needed_bytes())})"


def estimate_sample(inputs: Sequence[Path], input_sentence_size: int) -> UnigramSample:
    """The sample SentencePiece will draw from ``inputs``, from their sizes and first ``PROBE_BYTES``."""
    lines, characters = 0.0, 0.0
    for path in inputs:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            probe = handle.read(PROBE_BYTES)
        if len(probe) < size:
            probe = probe[: probe.rfind(b"\n") + 1] or probe  # whole lines only
        probe_lines = max(probe.count(b"\n") + (0 if probe.endswith(b"\n") else 1), 1) if probe else 0
        if not probe_lines:
            continue
        file_lines = probe_lines * size / len(probe)
        lines += file_lines
        characters += file_lines * len(probe.decode("utf-8", errors="replace")) / probe_lines
    sampled = min(round(lines), input_sentence_size)
    return UnigramSample(round(lines), sampled, characters / lines if lines else 0.0)


def check_fits(sample: UnigramSample, inputs: Sequence[Path], available: int | None) -> None:
    """A one-line :class:`DataError` naming the ``input_sentence_size`` that fits, when ``sample`` does not
    fit in ``available`` bytes (None: unknown, not checked)."""
    if available is None or sample.needed_bytes() <= available:
        return
    fit = sample.lines_that_fit(available)
    fix = (
        f"set vocab.input_sentence_size to {fit:,} or less (--set vocab.input_sentence_size={fit}), or use "
        "vocab.type: bpe (learned from word counts, in far less memory)"
        if fit >= 1000
        else "free memory, or use vocab.type: bpe (learned from word counts, in far less memory)"
    )
    raise DataError(
        f"{Path(inputs[0]).parent}: a unigram vocabulary from {sample.sampled:,} lines needs about "
        f"{_size(sample.needed_bytes())} (SentencePiece holds the lines and a suffix array of about "
        f"{BYTES_PER_CHARACTER:.0f} bytes a character) but {_size(available)} is available; {fix}"
    )


def _size(count: int) -> str:
    return f"{count / GIB:.1f} GiB" if count >= GIB else f"{count / (1 << 20):.0f} MiB"
