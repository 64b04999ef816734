"""A gettext catalogue's lines checked against the grammar ``msgfmt`` reads, before polib parses it.

polib is lenient where msgfmt is not: an unterminated string (``msgid "Unterminated entry``), one at the end of
the file or an invalid escape (``\\q``) is read, silently cut or changed, and the translated catalogue no
longer says what the source said. Here every line is a comment, a blank line, a keyword with its string, or a
continuation string, and every string is closed and uses only C's escapes, as in GNU gettext's ``po-lex.c``;
anything else is refused with the file, the line and what to fix.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import NmtError

_KEYWORD = re.compile(r"(?:msgctxt|msgid_plural|msgid|msgstr(?:\[\d+\])?)(?=\s|\"|$)")
# After a backslash: C's simple escapes, an octal number or \x and hex digits (po-lex.c's control_sequence).
_ESCAPE = re.compile(r"""[ntbrfva\\"'?]|[0-7]{1,3}|x[0-9A-Fa-f]+""")


def check_po_grammar(text: str, path: Path | str) -> None:
    """Refuse ``text`` (a catalogue's contents) where msgfmt would: the first bad line, as ``path:line``."""
    for number, line in enumerate(text.splitlines(), start=1):
        problem = _line_problem(line)
        if problem:
            raise NmtError(f"{path}:{number}: {problem}; msgfmt refuses it too: correct the line and run again")


def _line_problem(line: str) -> str | None:
    body = line.strip()
    if body.startswith("#~") or body.startswith("#|"):  # an obsolete or previous entry: its strings count
        body = body[2:].lstrip("|").strip()
    elif body.startswith("#") or not body:
        return None
    if not body:
        return None
    keyword = _KEYWORD.match(body)
    if keyword:
        body = body[keyword.end() :].strip()
        if not body:
            return f'"{keyword.group(0)}" without its string (write {keyword.group(0)} "")'
    elif not body.startswith('"'):
        return f"unexpected text {body[:30]!r} (a line holds a comment, a keyword and its string, or a string)"
    return _strings_problem(body)


def _strings_problem(body: str) -> str | None:
    """What is wrong with ``body``, one or more C strings separated by blanks, if anything."""
    at = 0
    while at < len(body):
        if body[at] != '"':
            return f"unexpected text {body[at : at + 30]!r} after a string"
        at += 1
        while True:
            if at >= len(body):
                return "unterminated string (it has no closing quote)"
            char = body[at]
            if char == '"':
                at += 1
                break
            if char == "\\":
                escape = _ESCAPE.match(body, at + 1)
                if not escape:
                    return f"invalid escape sequence \\{body[at + 1 : at + 2]} (write \\\\ for a backslash)"
                at = escape.end()
                continue
            at += 1
        while at < len(body) and body[at] in " \t":
            at += 1
    return None


__all__ = ["check_po_grammar"]
