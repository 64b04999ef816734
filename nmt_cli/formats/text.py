"""Plain text in paragraphs (``--file-format text``): blank lines and indentation kept, sentences joined back.

A paragraph is a run of non-blank lines. A hard-wrapped paragraph (at least 40 columns wide, every line
but the last reaches most of that width, and none starts a list item) is one text: its lines are joined, cut into
sentences, translated, and wrapped back to the same width with the standard library's textwrap. Any
other paragraph (a list, an address, verse) is translated line by line, each line's sentences joined
back on that line. Blank lines, the first line's indentation and trailing spaces stay as they were.
"""

from __future__ import annotations

import re
import textwrap

from .document import DocumentRequest, text_document
from .segments import Sentences, TranslateSentences, translate_texts

LIST_ITEM = re.compile(r"^\s*(?:[-*+\u2022\u2013]|\d+[.)]|[A-Za-z][.)])\s")
WRAPPED_SHARE = 0.6  # a line this long, of the paragraph's longest, was cut by a wrapping editor
MIN_WRAP_WIDTH = 40  # editors wrap at 60-80 columns; shorter lines were ended by hand


def translate_text(text: str, translate: TranslateSentences | Sentences, source_language: str) -> tuple[str, int]:
    """A plain-text document translated (the module's docstring); returns it and how many paragraphs."""
    lines = text.split("\n")
    paragraphs = _paragraphs(lines)
    units: list[str] = []  # what is translated: a wrapped paragraph joined, or one line
    plans: list[tuple[int, int, bool]] = []  # (first line, end line, wrapped)
    for start, end in paragraphs:
        wrapped = _is_wrapped(lines[start:end])
        plans.append((start, end, wrapped))
        if wrapped:
            units.append(" ".join(line.strip() for line in lines[start:end]))
        else:
            units.extend(lines[start:end])
    done = iter(translate_texts(units, translate, source_language))
    out = list(lines)
    for start, end, wrapped in plans:
        if wrapped:
            indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
            width = max(len(line) for line in lines[start:end])
            filled = textwrap.wrap(
                next(done), width=width, initial_indent=indent, break_long_words=False, break_on_hyphens=False
            ) or [""]
            out[start:end] = filled + [None] * (end - start - len(filled))  # type: ignore[list-item]
        else:
            for number in range(start, end):
                out[number] = next(done)
    return "\n".join(line for line in out if line is not None), len(paragraphs)


def _paragraphs(lines: list[str]) -> list[tuple[int, int]]:
    """(first, end) line numbers of each run of non-blank lines."""
    runs, start = [], None
    for number, line in enumerate([*lines, ""]):
        if line.strip() and start is None:
            start = number
        elif not line.strip() and start is not None:
            runs.append((start, number))
            start = None
    return runs


def _is_wrapped(lines: list[str]) -> bool:
    if len(lines) < 2 or any(LIST_ITEM.match(line) for line in lines):
        return False
    width = max(len(line.rstrip()) for line in lines)
    if width < MIN_WRAP_WIDTH:
        return False
    return all(len(line.rstrip()) >= WRAPPED_SHARE * width for line in lines[:-1])


def translate_document(data: bytes, request: DocumentRequest) -> tuple[bytes, int]:
    return text_document(data, request, lambda text: translate_text(text, request.translate, request.source_language))
