"""The one policy for control characters inside a line of text, in every command that reads text.

A NUL, an escape, a backspace or any other C0/C1 control character (and DEL) inside a sentence is
never language: it comes from binary junk, terminal captures or broken converters. SentencePiece
would learn it as a piece or map it to <unk>, and it would pass silently into translations and
scores. ``nmt prepare``, ``translate``, ``score`` and ``serve`` all replace each one by a space (as a
lone CR already is), count the lines that held them and say so. The tab is kept (it separates fields
in tab-separated files); line ends are handled where lines are split; U+2028 and other Unicode line
and paragraph separators are text and kept.
"""

from __future__ import annotations

import re

# C0 but tab, LF and CR (line ends are handled where lines are split), DEL, and C1.
CONTROL_CHARACTERS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def replace_control_characters(text: str) -> str:
    """``text`` with each control character replaced by a space."""
    return CONTROL_CHARACTERS.sub(" ", text)


# What breaks a line or a TSV field: a translation is written as one line, whatever pieces a model produced
# (byte-fallback pieces can spell "\n"; an untrained or confused model writes them)
LINE_BREAKS = re.compile("[\t\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


def as_one_line(text: str) -> str:
    """``text`` with each line break, tab and control character replaced by a space."""
    return replace_control_characters(LINE_BREAKS.sub(" ", text))


def has_control_characters(text: str) -> bool:
    return CONTROL_CHARACTERS.search(text) is not None
