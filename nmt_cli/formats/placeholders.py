"""Placeholders and inline codes: found in a source segment, and kept exactly in its translation.

A translation must hold exactly the source segment's placeholders, no more, no fewer, each unchanged:
a printf directive lost or doubled crashes the program that formats the message (``msgfmt -c`` refuses
such a catalogue). The model usually copies them (it was trained on text that has them), but not
always, so :func:`repair` checks every output against its source and mends it: a placeholder the
model invented or doubled is removed, one it dropped is put back at the same relative place in the
sentence, between words, never inside one.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter, deque

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
    replacements = _same_kind_replacements([target[a:b] for a, b in bad], missing)
    pieces, at = [], 0
    for (a, b), new in zip(bad, replacements):
        if a < at:  # overlapping spans: the first one took this one out; what should replace it goes back in
            missing += [(new, a / max(len(target), 1))] if new else []
            continue
        pieces += [target[at:a], new]
        at = b + _left_tail(new, target[b:])
    out = "".join(pieces) + target[at:]
    if "" in replacements:
        out = re.sub(r"  +", " ", out).strip()
    return _insert_all(out, missing, pattern)


def _same_kind_replacements(bad: list[str], missing: list[tuple[str, float]]) -> list[str]:
    """For each bad token in order, the first missing placeholder of its kind (taken out of ``missing``), or ""."""
    by_kind: dict[str, deque[int]] = {}
    for k, (token, _) in enumerate(missing):
        by_kind.setdefault(_kind(token), deque()).append(k)
    used, replacements = set(), []
    for token in bad:
        same = by_kind.get(_kind(token))
        replacements.append(missing[same[0]][0] if same else "")
        if same:
            used.add(same.popleft())
    missing[:] = [item for k, item in enumerate(missing) if k not in used]
    return replacements


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
    starts, ends = [m.start() for m in matches], [m.end() for m in matches]  # in order, never overlapping
    loose = []
    for m in fragment.finditer(text):
        k = bisect.bisect_right(starts, m.start()) - 1  # the last placeholder starting at or before m
        inside = (k >= 0 and ends[k] > m.start()) or (k + 1 < len(starts) and starts[k + 1] < m.end())
        if m.start() < m.end() and not inside:
            loose.append(m)
    return loose


def _insert_all(text: str, missing: list[tuple[str, float]], pattern: re.Pattern[str]) -> str:
    """Each missing ``(token, where)`` put into ``text`` at about ``where`` (0..1 of its length), in order, at
    the nearest space or end; one pass over ``text`` whatever their number (a line of thousands of masks the
    model dropped costs no more than reading it)."""
    if not missing or not text:
        return " ".join([text] * bool(text) + [token for token, _ in missing])
    if len(missing) <= _ONE_BY_ONE:
        for token, where in missing:
            text = _insert(text, token, where, pattern)
        return text
    cuts = _spaces(text, pattern)
    placed: dict[int, list[str]] = {}
    for token, where in missing:
        goal = round(where * len(text))
        k = min(bisect.bisect_left(cuts, goal), len(cuts) - 1)
        cut = cuts[k] if k == 0 or cuts[k] - goal < goal - cuts[k - 1] else cuts[k - 1]
        placed.setdefault(cut, []).append(token)
    end = placed.pop(len(text), None)
    if end:  # before the closing punctuation, as one by one
        body = len(text.rstrip(".!?:;…。")) or len(text)
        placed.setdefault(body, []).extend(end)
    pieces, at = [], 0
    for cut in sorted(placed):
        tokens = " ".join(placed[cut])
        pieces += [text[at:cut], f"{tokens} " if cut == 0 else f" {tokens}"]
        at = cut
    return "".join(pieces) + text[at:]


# Up to this many missing placeholders are put back one by one, each after the ones before it (the exact places
# a short sentence needs); more, in one pass at places found in the text as the model wrote it.
_ONE_BY_ONE = 16


def _spaces(text: str, pattern: re.Pattern[str]) -> list[int]:
    """The offsets where a placeholder may go: the text's ends and its spaces outside placeholders."""
    inside = [False] * (len(text) + 1)
    for match in pattern.finditer(text):
        inside[match.start() : match.end()] = [True] * (match.end() - match.start())
    return [0, *(i for i, ch in enumerate(text) if ch == " " and not inside[i]), len(text)]


def _insert(text: str, token: str, where: float, pattern: re.Pattern[str]) -> str:
    """``token`` put into ``text`` at about ``where`` (0..1 of its length), at the nearest space or end."""
    if not text:
        return token
    goal = round(where * len(text))
    cut = min(_spaces(text, pattern), key=lambda i: abs(i - goal))
    if cut == 0:
        return f"{token} {text}"
    if cut == len(text):
        body = text.rstrip(".!?:;…。")  # before the closing punctuation: "Datei %s." rather than "Datei. %s"
        return f"{body} {token}{text[len(body) :]}" if body else f"{text} {token}"
    return f"{text[:cut]} {token}{text[cut:]}"
