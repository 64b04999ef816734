"""Word counts of a text: what a BPE vocabulary is learned from, in memory that grows with words, not lines.

SentencePiece splits every sentence at whitespace and learns BPE merges from the counts of the
distinct words (``split_by_whitespace``, its default), so a file of ``word<TAB>count`` lines gives it
the same statistics as the sentences themselves: the learned model is identical. Given sentences,
though, it first holds its whole sample of them in memory (gigabytes for a WMT-size sample); the
counts of a WMT corpus are a few million entries. They are gathered here in one streaming pass.
Unigram models are still learned from sentences: their seed pieces come from substrings of the
text, which the counts do not reproduce exactly.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# At most this many distinct words are counted (a few hundred MB in Python). Past it the rarest
# are dropped, with a floor that rises each time (word2vec's ReduceVocab rule): a word seen that
# rarely cannot win a BPE merge of a 32k-sized vocabulary anyway.
MAX_DISTINCT_WORDS = 4_000_000
_BATCH_BYTES = 1 << 18  # lines read at a time, split and counted together in C (larger: more memory, no faster)


@dataclass
class WordCounts:
    """The counts and how they were taken (for the log)."""

    counts: Counter[str] = field(default_factory=Counter)
    lines: int = 0  # lines of the inputs
    counted: int = 0  # lines counted (all of them, or an evenly spaced sample)
    pruned_below: int = 0  # words seen fewer times than this were dropped (0: none were)
    distinct: int = 0  # distinct words counted (kept when the counts are released)

    def prune(self) -> None:
        """Drop the rarest words until at most 3/4 of MAX_DISTINCT_WORDS remain."""
        while len(self.counts) > MAX_DISTINCT_WORDS * 3 // 4:
            self.pruned_below += 1
            self.counts = Counter({w: n for w, n in self.counts.items() if n >= self.pruned_below + 1})

    def summary(self) -> str:
        """One line for the log: what the vocabulary was learned from."""
        sample = f"{self.counted:,} of {self.lines:,} lines" if self.counted < self.lines else f"{self.lines:,} lines"
        pruned = f"; words seen fewer than {self.pruned_below + 1} times dropped" if self.pruned_below else ""
        return f"{self.distinct:,} distinct words in {sample}{pruned}"

    def write_tsv(self, path: Path) -> None:
        """Write ``word<TAB>count`` lines, SentencePiece's ``input_format=tsv``."""
        with open(path, "w", encoding="utf-8") as handle:
            items = iter(self.counts.items())
            while batch := list(itertools.islice(items, 100_000)):
                handle.write("".join(f"{word}\t{n}\n" for word, n in batch))


def count_words(paths: Sequence[Path], max_lines: int) -> WordCounts:
    """Count the whitespace-separated words of the text files ``paths``.

    At most ``max_lines`` lines are counted: with more, every k-th line of each file (an evenly
    spaced sample over the whole corpus, not its first part). Files are read as UTF-8, lines
    split at ``\\n`` only; whitespace separates words (the cleaned text has single spaces).
    """
    result = WordCounts(lines=sum(_count_lines(p) for p in paths))
    step = max(1, math.ceil(result.lines / max_lines))
    for path in paths:
        for batch in _line_batches(path, step):
            result.counted += len(batch)
            result.counts.update("".join(batch).split())
            if len(result.counts) > MAX_DISTINCT_WORDS:
                result.prune()
    result.distinct = len(result.counts)
    return result


def _count_lines(path: Path) -> int:
    lines = 0
    last = b"\n"
    with open(path, "rb") as handle:
        while block := handle.read(1 << 24):
            lines += block.count(b"\n")
            last = block[-1:]
    return lines + (last != b"\n")  # a last line without its line end still counts


def _line_batches(path: Path, step: int) -> Iterator[list[str]]:
    """Batches of lines (each with its line end, but for a file's last): every ``step``-th line."""
    with open(path, encoding="utf-8", newline="\n") as handle:
        if step == 1:
            while batch := handle.readlines(_BATCH_BYTES):
                yield batch
        else:
            sample = itertools.islice(handle, 0, None, step)
            while batch := list(itertools.islice(sample, 4_000)):
                yield batch
