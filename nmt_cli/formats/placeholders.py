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

# The kinds of placeholder, each a regular expression; markup (tags, entities) last. Order matters where two
# could match at one place: the longer, more specific form first.
# No space flag: "50% done" is prose far more often than "% d" is a directive.
_PRINTF_FLAGS = r"[-+0#']*"
_PRINTF_WIDTH = r"(?:\d+|\*(?:\d+\$)?)?(?:\.(?:\d+|\*(?:\d+\$)?)?)?"
_PRINTF_LENGTH = r"(?:hh|h|ll|l|L|q|j|z|Z|t|I64|I32|I)?"
_CODES = [
    r"%%",  # a literal percent sign in printf formats
    # C99 <inttypes.h> macros as gettext writes them: "%<PRIu32>", "%-8<PRId64>"
    rf"%(?:\d+\$)?{_PRINTF_FLAGS}{_PRINTF_WIDTH}<PRI[diouxX](?:8|16|32|64|MAX|PTR|LEAST\d+|FAST\d+)>",
    rf"%(?:\d+\$)?{_PRINTF_FLAGS}{_PRINTF_WIDTH}{_PRINTF_LENGTH}[diouxXeEfFgGaAcspnCS]",  # printf, positional too
    rf"%\([^()\s]*\){_PRINTF_FLAGS}{_PRINTF_WIDTH}[hlL]?[diouxXeEfFgGcrsa%]",  # Python's %(name)s, %(n)li
    r"%[-_0^#]?[aAbBcCdDeFgGhHIjklmMnprRsStTuUVwWxXyYzZ+]",  # strftime (%Y, %-d, %H)
    r"%L?[1-9]\d?(?![\d$])",  # Qt's %1 .. %99 (and %L1, localized numbers)
    r"\{\{[^{}]*\}\}",  # {{template}}
    # ICU MessageFormat: "{count, plural, one {# file} other {# files}}", kept whole (two levels of nesting)
    r"\{\s*\w+\s*,\s*(?:plural|select|selectordinal)\s*,(?:[^{}]|\{(?:[^{}]|\{[^{}]*\})*\})*\}",
    r"\{[A-Za-z0-9_.\[\]]*(?:![rsa])?(?::[^{}\s]*)?\}",  # {0}, {name}, {0:.2f}, {name!r:>10}
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
# What is left of a placeholder the model broke ("{countcount", "%.2l", "%(name"): never a word of a
# translation whose source has placeholders of that kind.
_FRAGMENTS = {
    "%": re.compile(r"%(?:\([^()\s]*\)?)?[-+0#'.\d*$]*[hlLqjzt]*[A-Za-z]?"),
    "{": re.compile(r"\{[A-Za-z0-9_.!:<>^=+\-#,\[\]]*\}?|\}"),
}


def placeholders(text: str, pattern: re.Pattern[str] = PLACEHOLDER) -> list[str]:
    """The placeholders of ``text``, in order."""
    return pattern.findall(text)


def adjacent_in_order(source: str, target: str, pattern: re.Pattern[str] = PLACEHOLDER) -> str:
    """``target`` with each run of placeholders that stand side by side in ``source`` (nothing but spaces between
    them: two code spans, "`a` `b`") in the source's order: a translation moves such a run, it does not shuffle
    it. Each placeholder keeps its place in ``target``; only which of the run's placeholders sits there changes."""
    runs: list[list[str]] = []
    previous_end = None
    for match in pattern.finditer(source):
        if previous_end is not None and not source[previous_end : match.start()].strip():
            runs[-1].append(match.group(0))
        else:
            runs.append([match.group(0)])
        previous_end = match.end()
    found = list(pattern.finditer(target))
    counts = Counter(m.group(0) for m in found)
    spans = {m.group(0): m.span() for m in found}
    moves: dict[tuple[int, int], str] = {}
    for run in runs:
        if len(run) < 2 or len(set(run)) < len(run) or any(counts[p] != 1 for p in run):
            continue  # only runs of distinct placeholders, each once in the translation
        places = sorted(spans[p] for p in run)
        moves.update(zip(places, run))
    out, at = [], 0
    for (start, end), placeholder in sorted(moves.items()):
        out.append(target[at:start] + placeholder)
        at = end
    return "".join(out) + target[at:]


def repair(source: str, target: str, pattern: re.Pattern[str] = PLACEHOLDER) -> str:
    """``target`` holding exactly the placeholders of ``source`` (as a multiset). A placeholder the model
    changed (``%(pkgnamename)s``, ``{countcount``) is replaced in place by the one it lacks of the same kind;
    other extra ones and broken fragments are removed, and what is still missing is inserted at its
    relative position in the source, at a word boundary."""
    wanted = Counter(placeholders(source, pattern))
    matches = list(pattern.finditer(target))
    excess = Counter(m.group(0) for m in matches) - wanted
    broken = _broken(source, target, matches)
    if not excess and not broken and Counter(m.group(0) for m in matches) == wanted:
        return target
    bad: list[tuple[int, int]] = [m.span() for m in broken]
    for match in reversed(matches):  # from the end: a repeated placeholder is more often the later copy
        if excess[match.group(0)] > 0:
            excess[match.group(0)] -= 1
            bad.append(match.span())
    bad.sort()
    lacking = wanted - Counter(m.group(0) for m in matches)
    missing: list[tuple[str, float]] = []  # in source order, with their relative place
    for match in pattern.finditer(source):
        if lacking[match.group(0)] > 0:
            lacking[match.group(0)] -= 1
            missing.append((match.group(0), match.start() / max(len(source), 1)))
    replacements: list[str] = []
    for a, b in bad:
        same = next((k for k, (token, _) in enumerate(missing) if _kind(token) == _kind(target[a:b])), None)
        replacements.append(missing.pop(same)[0] if same is not None else "")
    out = target
    for (a, b), new in reversed(list(zip(bad, replacements))):
        out = out[:a] + new + out[b + _left_tail(new, target[b:]) :]
    if "" in replacements:
        out = re.sub(r"  +", " ", out).strip()
    for token, where in missing:
        out = _insert(out, token, where, pattern)
    return out


def _left_tail(placeholder: str, after: str) -> int:
    """How much of ``after`` is what is left of ``placeholder`` beside a changed copy of it: the model wrote
    ``%d.2f`` for ``%2.2f`` (``.2f`` left over, taken out with the ``%d`` it follows)."""
    for k in range(min(len(placeholder) - 1, len(after)), 1, -1):
        tail = after[:k]
        if tail[0] in ".0123456789$" and placeholder.endswith(tail):
            return k
    return 0


def _kind(token: str) -> str:
    return "{" if token[:1] in "{}" else token[:1]


def _broken(source: str, target: str, matches: list[re.Match[str]]) -> list[re.Match[str]]:
    """Fragments of placeholders in ``target`` (outside its whole ones) of the kinds ``source`` uses."""
    kinds = {_kind(token) for token in TEXT_PLACEHOLDER.findall(source)}
    found = []
    for kind in kinds & _FRAGMENTS.keys():
        allowed = Counter(m.group(0) for m in _loose(_FRAGMENTS[kind], source, list(PLACEHOLDER.finditer(source))))
        for match in _loose(_FRAGMENTS[kind], target, matches):
            if allowed[match.group(0)] > 0:  # the source has the same fragment ("100%"): it is text
                allowed[match.group(0)] -= 1
            else:
                found.append(match)
    return found


def _loose(fragment: re.Pattern[str], text: str, matches: list[re.Match[str]]) -> list[re.Match[str]]:
    """The non-empty matches of ``fragment`` in ``text`` outside its whole placeholders ``matches``."""
    taken = [m.span() for m in matches]
    loose = [m for m in fragment.finditer(text) if m.start() < m.end()]
    return [m for m in loose if not any(x < m.end() and m.start() < y for x, y in taken)]


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
