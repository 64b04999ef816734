"""Reading parallel text and cleaning it, one pair at a time (constant memory).

Corpus files are named by prefix, as in fairseq: ``PREFIX.en`` and ``PREFIX.de``, each
plain or gzip-compressed (``PREFIX.en.gz``). Lines are decoded strictly as UTF-8 so that
a broken file is reported with its line number instead of silently damaged.
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, NoReturn

from ..config import CleanConfig
from ..errors import DataError, TooLarge
from ..utils.files import open_binary
from ..utils.text import has_control_characters, replace_control_characters
from .documents import docids_path

MAX_LINE_BYTES = 1 << 20  # data.max_line_bytes's default


@dataclass(frozen=True)
class CorpusPair:
    """One parallel corpus: the source and target file of a prefix, and its document ids if it has them."""

    src: Path
    tgt: Path
    docids: Path | None = None  # PREFIX.docids: the document of each pair (data/documents.py)


def resolve_corpus(root: str | Path, prefix: str, src_lang: str, tgt_lang: str) -> CorpusPair:
    """Find ``PREFIX.LANG`` or ``PREFIX.LANG.gz`` for both languages under ``root``."""
    base = Path(root) / prefix
    return CorpusPair(_find(base, src_lang), _find(base, tgt_lang), docids_path(base))


def _find(base: Path, lang: str) -> Path:
    for candidate in (base.with_name(f"{base.name}.{lang}"), base.with_name(f"{base.name}.{lang}.gz")):
        if candidate.is_file():
            return candidate
    raise DataError(
        f"{base}.{lang}: file not found (also tried {base}.{lang}.gz); check data.root and the corpus prefixes in the recipe"
    )


class HashingReader:
    """Iterates the lines of a file as ``str`` while hashing the raw bytes read.

    Lines split on ``\\n`` only (as sacreBLEU and the Unix tools count them). Each line comes
    without its line end; a UTF-8 byte-order mark at the start of the file is dropped, and a lone
    CR inside a line (which other tools would take for a line break) becomes a space. The
    counters say how often each happened, so the caller can report it.
    """

    def __init__(self, path: Path, errors: str, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.path = path
        self.errors = errors
        self.max_line_bytes = max_line_bytes
        self.sha256 = hashlib.sha256()
        self.lines = 0
        self.bom_removed = False
        self.lone_cr_lines = 0
        self.replaced_lines = 0  # lines with invalid UTF-8 replaced (--encoding-errors replace)
        self.control_lines = 0  # lines with control characters (NUL, escape, ...), each replaced by a space

    def __iter__(self) -> Iterator[str]:
        with open_binary(self.path) as handle:
            for raw in _guard_gzip(self._bounded_lines(handle), self):
                self.lines += 1
                self.sha256.update(raw)
                if self.lines == 1 and raw.startswith(codecs.BOM_UTF8):
                    raw = raw[len(codecs.BOM_UTF8) :]
                    self.bom_removed = True
                yield self._clean(self._decode(raw))

    def _bounded_lines(self, handle: IO[bytes]) -> Iterator[bytes]:
        """The raw lines, none held whole in memory past ``max_line_bytes`` (a gzip bomb is one endless line)."""
        while raw := handle.readline(self.max_line_bytes + 1):
            if len(raw) > self.max_line_bytes:
                raise TooLarge(
                    f"{self.path}:{self.lines + 1}: a line longer than {self.max_line_bytes:,} bytes (a decompression "
                    "bomb, or not one sentence per line); data.max_line_bytes raises the limit"
                )
            yield raw

    def _clean(self, line: str) -> str:
        line = line.removesuffix("\n").removesuffix("\r")
        if "\r" in line:
            self.lone_cr_lines += 1
            line = line.replace("\r", " ")
        if has_control_characters(line):
            self.control_lines += 1
            line = replace_control_characters(line)
        return line

    def _decode(self, raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as err:
            if self.errors == "strict":
                raise DataError(
                    f"{self.path}:{self.lines}: invalid UTF-8 at byte {err.start}; "
                    "fix the file or pass --encoding-errors replace"
                ) from None
        self.replaced_lines += 1
        return raw.decode("utf-8", errors=self.errors)

    def notes(self) -> list[str]:
        """What was changed while reading, for the log (empty when nothing was)."""
        notes = []
        if self.bom_removed:
            notes.append(f"{self.path}: removed the UTF-8 byte-order mark at the start")
        if self.lone_cr_lines:
            notes.append(
                f"{self.path}: {self.lone_cr_lines:,} line(s) held a lone carriage return (CR), replaced by a space"
            )
        if self.replaced_lines:
            notes.append(f"{self.path}: {self.replaced_lines:,} line(s) had invalid UTF-8, replaced by U+FFFD")
        if self.control_lines:
            notes.append(
                f"{self.path}: {self.control_lines:,} line(s) held control characters (NUL, escape, ...), each "
                "replaced by a space"
            )
        return notes


def _guard_gzip(handle: Iterator[bytes], reader: HashingReader) -> Iterator[bytes]:
    """Iterate ``handle``, turning a corrupt or truncated gzip stream into a one-line error."""
    try:
        yield from handle
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        cause = (
            "truncated: the file ends before the compressed data does"
            if isinstance(err, EOFError)
            else (f"not valid gzip data ({err})")
        )
        raise DataError(f"{reader.path}: {cause}, after {reader.lines:,} lines; download or compress it again") from None


class ParallelReader:
    """Yields (source, target) line pairs, line ends removed, and hashes both files as it reads.

    Raises :class:`DataError` naming both line counts when the files differ in length.
    """

    def __init__(self, pair: CorpusPair, errors: str = "strict", max_line_bytes: int = 0) -> None:
        self.pair = pair
        self._src = HashingReader(pair.src, errors, max_line_bytes or MAX_LINE_BYTES)
        self._tgt = HashingReader(pair.tgt, errors, max_line_bytes or MAX_LINE_BYTES)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        src_iter, tgt_iter = iter(self._src), iter(self._tgt)
        for src_line in src_iter:
            tgt_line = next(tgt_iter, None)
            if tgt_line is None:
                for _ in src_iter:  # count the rest: the reader's counter advances
                    pass
                _mismatch(self.pair, self._src.lines, self._tgt.lines)
            yield src_line, tgt_line
        if next(tgt_iter, None) is not None:
            for _ in tgt_iter:
                pass
            _mismatch(self.pair, self._src.lines, self._tgt.lines)

    @property
    def lines(self) -> int:
        """Pairs read so far."""
        return self._src.lines

    def notes(self) -> list[str]:
        """What was changed while reading either file (byte-order marks, lone CRs, replaced bytes)."""
        return self._src.notes() + self._tgt.notes()

    @property
    def hashes(self) -> dict[str, str]:
        """SHA-256 of both files' bytes; complete once iteration has finished."""
        return {str(self.pair.src): self._src.sha256.hexdigest(), str(self.pair.tgt): self._tgt.sha256.hexdigest()}


def _mismatch(pair: CorpusPair, n_src: int, n_tgt: int) -> NoReturn:
    raise DataError(
        f"{pair.src} has {n_src} lines but {pair.tgt} has {n_tgt}; "
        "the two sides must be line-aligned (one sentence per line)"
    )


class PairCleaner:
    """Applies the cleaning steps to pairs and counts how many each step drops.

    The order follows Moses ``clean-corpus-n``: strip, empty sides, length, ratio;
    de-duplication (optional) comes last so it counts only pairs that would otherwise be kept.
    """

    STEPS = ("empty", "length", "ratio", "duplicate")

    def __init__(self, config: CleanConfig) -> None:
        self.config = config
        self.dropped: Counter[str] = Counter()
        self.kept = 0
        self._seen: set[int] = set()

    def verdict(self, src: str, tgt: str) -> str | None:
        """Return the name of the step that drops the (stripped) pair, or None to keep it."""
        if not src or not tgt:
            return "empty"
        n_src, n_tgt = len(src.split()), len(tgt.split())
        c = self.config
        if min(n_src, n_tgt) < c.min_tokens or max(n_src, n_tgt) > c.max_tokens:
            return "length"
        if c.max_ratio and max(n_src, n_tgt) > c.max_ratio * min(n_src, n_tgt):
            return "ratio"
        if c.dedup:
            key = int.from_bytes(hashlib.blake2b(f"{src}\t{tgt}".encode(), digest_size=8).digest(), "little")
            if key in self._seen:
                return "duplicate"
            self._seen.add(key)
        return None

    def clean(self, pairs: Iterator[tuple[str, str]]) -> Iterator[tuple[str, str]]:
        """Yield the kept, stripped pairs; update the counters as a side effect."""
        for src, tgt in pairs:
            kept = self.keep(src, tgt)
            if kept is not None:
                yield kept

    def keep(self, src: str, tgt: str) -> tuple[str, str] | None:
        """The pair with its whitespace folded, or None where a step drops it (counted)."""
        src, tgt = " ".join(src.split()), " ".join(tgt.split())
        reason = self.verdict(src, tgt)
        if reason:
            self.dropped[reason] += 1
            return None
        self.kept += 1
        return src, tgt
