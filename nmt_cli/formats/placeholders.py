"""Placeholders and inline codes: found in a source segment, and kept exactly in its translation.

A translation must hold exactly the source segment's placeholders, no more, no fewer, each unchanged:
a printf directive lost or doubled crashes the program that formats the message (``msgfmt -c`` refuses
such a catalogue). The model usually copies them (it was trained on text that has them), but not
always, so :func:`repair` checks every output against its source and mends it: a placeholder the
model invented or doubled is removed, one it dropped is put back at the same relative place in the
sentence, between words, never inside one.
"""

from __future__ import annotations

import re
from collections import Counter

# The kinds of placeholder, each a regular expression; markup (tags, entities) last.
_CODES = [
    r"%%",  # a literal percent sign in printf formats
    r"%(?:\d+\$)?[-+ 0#']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t|I64|I32|I)?[diouxXeEfFgGaAcspn%]",
    r"%\([A-Za-z_][A-Za-z0-9_]*\)[-+ 0#]*\d*(?:\.\d+)?[diouxXeEfFgGcrsa]",  # %(name)s
    r"\{\{[^{}]*\}\}",  # {{template}}
    r"\{[A-Za-z0-9_.\[\]:!<>^=+\-#,]*\}",  # {0}, {name}, {0:.2f}
    r"#[A-Z]+\d*#",  # #URL1#
    r"\$\{[^{}]*\}",  # ${shell} / template literals
]
_MARKUP = [
    r"&(?:[A-Za-z][A-Za-z0-9]*|#\d+|#x[0-9A-Fa-f]+);",  # entities
    r"</?[A-Za-z][^<>]*>",  # tags
]
PLACEHOLDER = re.compile("|".join(_CODES + _MARKUP))
# In the text of markup (tags taken off, entities decoded) a "<name>" or "&amp;" is the document's text,
# not a code: there the placeholders are the others.
TEXT_PLACEHOLDER = re.compile("|".join(_CODES))


def placeholders(text: str, pattern: re.Pattern[str] = PLACEHOLDER) -> list[str]:
    """The placeholders of ``text``, in order."""
    return pattern.findall(text)


def repair(source: str, target: str, pattern: re.Pattern[str] = PLACEHOLDER) -> str:
    """``target`` holding exactly the placeholders of ``source`` (as a multiset): extra ones removed, missing
    ones inserted at their relative position in the source, at a word boundary."""
    wanted, found = Counter(placeholders(source, pattern)), Counter(placeholders(target, pattern))
    if wanted == found:
        return target
    excess = found - wanted
    if excess:
        target = _remove(target, excess, pattern)
    missing = wanted - Counter(placeholders(target, pattern))
    for match in pattern.finditer(source):
        token = match.group(0)
        if missing[token] > 0:
            missing[token] -= 1
            target = _insert(target, token, match.start() / max(len(source), 1), pattern)
    return target


def _remove(text: str, excess: Counter[str], pattern: re.Pattern[str]) -> str:
    left = Counter(excess)
    # From the end: the placeholders the model repeated are more often the later ones.
    pieces = list(pattern.finditer(text))
    out = text
    for match in reversed(pieces):
        if left[match.group(0)] > 0:
            left[match.group(0)] -= 1
            out = out[: match.start()] + out[match.end() :]
    return re.sub(r"  +", " ", out).strip() if out != text else out


def _insert(text: str, token: str, where: float, pattern: re.Pattern[str]) -> str:
    """``token`` put into ``text`` at about ``where`` (0..1 of its length), at the nearest space or end."""
    if not text:
        return token
    goal = round(where * len(text))
    inside = {i for match in pattern.finditer(text) for i in range(match.start(), match.end())}
    spaces = [0, *(i for i, ch in enumerate(text) if ch == " " and i not in inside), len(text)]
    cut = min(spaces, key=lambda i: abs(i - goal))
    if cut == 0:
        return f"{token} {text}"
    if cut == len(text):
        body = text.rstrip(".!?:;…。")  # before the closing punctuation: "Datei %s." rather than "Datei. %s"
        return f"{body} {token}{text[len(body) :]}" if body else f"{text} {token}"
    return f"{text[:cut]} {token}{text[cut:]}"
