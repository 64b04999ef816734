"""Lines in and out of ``nmt translate``: input read as checked UTF-8 (a byte-order mark dropped, a bad byte one
line naming the file and line), output written atomically, a progress bar, and the closing report."""

from __future__ import annotations

import codecs
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ..errors import NmtError
from .common import console, count


@contextlib.contextmanager
def input_lines(path: Path | None) -> Iterator[Iterator[str]]:
    """The lines of ``path`` (None: stdin), decoded as they are read."""
    if path is None:
        yield checked_utf8(sys.stdin.buffer, "<stdin>")
        return
    with open(path, "rb") as handle:
        yield checked_utf8(handle, str(path))


def checked_utf8(handle: IO[bytes], name: str) -> Iterator[str]:
    """Each line of ``handle`` as text; invalid UTF-8 is one line naming ``name`` and the line."""
    for number, raw in enumerate(handle, start=1):
        if number == 1 and raw.startswith(codecs.BOM_UTF8):
            console.print(f"{name}: removed the UTF-8 byte-order mark at the start")
            raw = raw[len(codecs.BOM_UTF8) :]
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError:
            raise NmtError(f"{name}:{number}: invalid UTF-8; convert the input to UTF-8") from None


@contextlib.contextmanager
def output_sink(path: Path | None) -> Iterator[IO[str]]:
    """Stdout, or ``path`` written to a temporary file renamed over it on success."""
    if path is None:
        yield sys.stdout
        sys.stdout.flush()
        return
    from ..utils.files import atomic_open

    with atomic_open(path, "w", encoding="utf-8") as handle:
        yield handle


def with_progress(items: Iterator, show: bool, done: int = 0, total: int | None = None, desc: str = "translate") -> Iterator:
    """``items``, with a progress bar on stderr when ``show``."""
    if not show:
        yield from items
        return
    from tqdm import tqdm

    from ..utils.signals import signals_held

    with signals_held():  # a stop signal during its construction would leave a bar that fails at exit
        bar = tqdm(items, desc=desc, unit=" sent", file=sys.stderr, initial=done, total=total)
    yield from bar


def report_stats(stats, seconds: float, show: bool, max_positions: int) -> None:  # type: ignore[no-untyped-def]
    """What translation counted: control characters replaced, lines truncated, and the speed when ``show``."""
    if stats.control_lines:
        console.print(
            f"note: {stats.control_lines:,} input line(s) held control characters (NUL, escape, ...), each "
            "translated as a space",
            soft_wrap=True,
        )
    if stats.truncated:
        console.print(
            f"warning: {stats.truncated} input line(s) longer than the model's {max_positions - 1} "
            f"tokens (model.max_positions {max_positions}, EOS included) were truncated",
            soft_wrap=True,
        )
    failures = stats.term_failures
    if failures:
        shown = ", ".join(map(str, failures[:10])) + (", ..." if len(failures) > 10 else "")
        console.print(
            f"warning: {len(failures):,} of the {stats.term_lines:,} line(s) with glossary terms came out without "
            f"one of them (lines {shown}): no translation holding every term fitted the length limit "
            "(--format jsonl lists each line's missing_terms)",
            soft_wrap=True,
        )
    if show:
        rate = stats.sentences / max(seconds, 1e-9)
        console.print(
            f"translated {count(stats.sentences, 'line')} in {seconds:.1f} s ({rate:.1f} sentences/s, "
            f"{stats.output_tokens / max(seconds, 1e-9):.0f} target tokens/s)",
        )
