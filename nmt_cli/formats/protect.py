"""Text the model must not translate: masked before it reads a sentence, put back exactly after.

A model trained on prose "translates" whatever it reads: ``/etc/shadow`` becomes ``/etc/shlag``, ``65535``
becomes ``15535353``, a user name ``bin`` becomes ``binäre Suche``. What a reader must find unchanged is
therefore never shown to it. Each protected span of a sentence -- the text of a code element, a path, a
URL, an e-mail address, a command option, an identifier, a number -- is replaced by a *mask*, a numbered
placeholder of the kind the model has learnt to copy (``%s``, ``%d``, ``%u``...). The
translation gets its masks checked like every placeholder (``placeholders.repair``: a lost one is put
back at its place, an invented one removed), then each mask is replaced by the span it stands for, byte
for byte. So the multiset of numbers, paths and code in a translated sentence is the source's, whatever
the model did.

Placeholders themselves (``%s``, ``{name}``...) are not masked: models trained on software messages
copy them and place them well; ``repair`` keeps them exact.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from .placeholders import PLACEHOLDER, TEXT_PLACEHOLDER, adjacent_in_order, repair

_EXTENSIONS = (
    "c|h|cc|cpp|hpp|py|pyc|js|ts|rs|go|java|rb|pl|php|sh|bash|zsh|json|yaml|yml|toml|xml|html|htm|css|md|rst|txt|"
    "conf|cfg|ini|log|po|pot|mo|so|dll|exe|deb|rpm|tar|gz|bz2|xz|zip|png|jpg|jpeg|gif|svg|pdf|desktop|service|"
    "socket|timer|mount|lock|pid|csv|tsv|db|sql|iso|img|bin|o|a|ko"
)
# Each kind of protected span, with what may not stand right before it (a span starts at a word's edge: "and/or",
# "e-mail" and "v2" hold none); the first alternative that matches at a place wins, so the longer forms come first.
# Brackets, braces and punctuation before a span are never part of a word: "[--user name]", "{--verbose}",
# "module[^python]", "GID=-1", ".5s" and "Unknown-15" keep theirs.
_NOT_IN_A_WORD = r"(?<![\w/\\.@$%-])"
_NAME_WORD = r"[^\W\d_a-z](?:\.|[^\W\d_]*(?:['-][^\W\d_]+)*)"  # "Colin", "O'Neil", "Jean-Luc", "J."
# Capitalised words that open a credit at a sentence's start ("By Jane Doe <...>"), not part of the name
_CREDIT_OPENERS = (
    r"(?:By|From|To|For|And|Or|See|Contact|Mail|E-?mail|Write|Send|Ask|Report|Please|Thanks|Written|Maintained)\b"
)
_CREDITED = (
    rf"(?<![\w-])(?!{_CREDIT_OPENERS}){_NAME_WORD}(?: (?:(?:van|von|de|der|da|di|du|le|la) )?{_NAME_WORD}){{1,3}}"
    r"(?= ?[<(][\w.+-]+@[\w-]+(?:\.[\w-]+)+[>)])"
)
_KINDS = {
    "footnote": ("", r"\[\^[^\]\s]+\]"),  # a Markdown footnote reference "[^1]", glued to its word or not
    # a manual page's bold or code word, POD's B<ls> and C<errno>: a command, an option, a constant
    "pod": (r"(?<![\w<])", r"[BC]<[^<>\s]+>"),
    # an address in angle brackets ("<ftpmaster@ubuntu.com>", "<https://...>"): text, not a tag
    "angled": ("", r"<(?:[\w.+-]+@[\w-]+(?:\.[\w-]+)+|[A-Za-z][A-Za-z0-9+.-]*://[^\s<>]+)>"),
    # a person's name written before their address, as authors, maintainers and translators are credited
    # ("Colin Watson <cjwatson@debian.org>", "Jane Doe (jane@example.org)"): a name, which is never translated
    "credited": ("", _CREDITED),
    # "© 2001-2004 Colin Watson", "(C) 1999, 2003 Free Software Foundation": the sign, the years and the holder
    "copyright": (
        "",
        rf"(?:©|\([Cc]\)) ?\d{{4}}(?: ?[-–,] ?\d{{4}})*,? {_NAME_WORD}"
        rf"(?: (?:(?:van|von|de|der|du|le) )?{_NAME_WORD}){{0,3}}",
    ),
    "url": (_NOT_IN_A_WORD, r"(?:[A-Za-z][A-Za-z0-9+.-]*://|www\.)[^\s<>\"'`]+"),
    "email": (_NOT_IN_A_WORD, r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"),
    # a Windows path's folders may hold spaces ("C:\Program Files\App\app.exe"); its file name, not
    "windows": (_NOT_IN_A_WORD, r"[A-Za-z]:\\(?:[\w.+~@%()-]+(?: [\w.+~@%()-]+)*\\)*[\w.+~@%-]*"),
    "path": (
        _NOT_IN_A_WORD,
        r"(?:~|\.{1,2}|[A-Za-z]:)?(?:/|\\)[\w.+~@%-]+(?:[/\\][\w.+~@%*-]*)*"
        r"|[\w.+-]+/(?:[\w.+-]+/)*[\w.+-]*\.(?:" + _EXTENSIONS + r")\b"
        r"|\w[\w-]*\.(?:" + _EXTENSIONS + r")\b",
    ),
    "option": (_NOT_IN_A_WORD, r"--?[A-Za-z][\w-]*(?:=[^\s,;\])}]+)?"),
    "variable": (_NOT_IN_A_WORD, r"\$[A-Za-z_]\w*|\$\([A-Za-z_]\w*\)"),
    # (a word with GTK's access-key underscore, "C_onnect", is a word, not snake_case)
    "identifier": (
        _NOT_IN_A_WORD,
        r"\w+(?:::\w+)+|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\(\)|(?![A-Z][a-z]*_[a-z]+\b)[A-Za-z][A-Za-z0-9]*_\w+"
        r"|[a-z]+[A-Z][A-Za-z0-9]*|[A-Z][a-z]+[A-Z][A-Za-z0-9]*|[a-z_]\w*(?:\.[a-z_]\w*){2,}",
    ),
    "percent": (_NOT_IN_A_WORD, r"%\d+\b"),  # "%0", a code no placeholder pattern knows: kept whole, not its digits
    # 42, -1, .5s, #11, 1,024, v2.1, X.509, UTF-8, x86_64, IPv6; a word before a number is not part of it
    # ("Unknown-15"), a sign, a leading dot or "#" is, where no word stands before it ("GID=-1", ".5s")
    "number": (
        "",
        r"(?<![\w/\\@$%.#-])(?:[-.#](?=\d)|[A-Za-z]{1,4}[-_.]?|[A-Z]+[-_.]?)?\d[\w.,:/+%-]*"
        r"|(?<=[-.])\d[\w.,:/+%-]*",
    ),
}
_PROTECTED = re.compile(
    "|".join(f"(?P<{kind}>{guard}(?:{pattern}))" for kind, (guard, pattern) in _KINDS.items() if kind == "angled")
    + rf"|(?P<placeholder>{PLACEHOLDER.pattern})|"
    + "|".join(f"{guard}(?:{pattern})" for kind, (guard, pattern) in _KINDS.items() if kind != "angled")
)
_LAYOUT = re.compile(r"(?<![\n\r\t\v\f])[\t\v\f]+(?![\n\r\t\v\f])")
# Sentence punctuation after a span is the sentence's: "see /etc/hosts." keeps its full stop outside.
_TRAILING = re.compile(r"[.,:;!?'\"]+$")


def protected_spans(text: str) -> list[tuple[int, int]]:
    """The (start, end) offsets of the spans of ``text`` the model must not translate (placeholders, tags and
    entities excluded: ``repair`` keeps those)."""
    spans = []
    for match in _PROTECTED.finditer(text):
        if match.group("placeholder") is not None:
            continue
        start, end = match.span()
        trailing = _TRAILING.search(match.group(0))
        end -= len(trailing.group(0)) if trailing else 0
        if text[start:end].count(")") > text[start:end].count("("):  # "(see /etc/hosts)": the ")" is prose
            end = start + text[start:end].rfind(")") if not text[start:end].endswith("()") else end
        if end > start:
            spans.append((start, end))
    # Tabs inside a line lay out columns (a catalogue's "Name:\tValue"); the model would read them as spaces.
    # (After or before a line break they are indentation, which markup formats do not keep anyway.)
    for match in _LAYOUT.finditer(text.strip()):
        start = match.start() + len(text) - len(text.lstrip())
        if not any(a < start + len(match.group(0)) and start < b for a, b in spans):
            spans.append((start, start + len(match.group(0))))
    return sorted(spans)


@dataclass(frozen=True)
class Masked:
    """A sentence as the model reads it, and what each of its masks stands for."""

    text: str
    originals: dict[str, str]  # mask -> the text it replaced

    @property
    def translatable(self) -> bool:
        """Whether anything is left for the model once placeholders and masks are set aside."""
        return has_words(self.text)

    def restore(self, translation: str, pattern: re.Pattern[str] = TEXT_PLACEHOLDER) -> str:
        """The model's translation of :attr:`text` with every placeholder and mask present exactly once
        (``repair`` by ``pattern``) and each mask replaced by its original."""
        mended = adjacent_in_order(self.text, repair(self.text, translation, pattern), pattern)
        return unmask(unglued(mended, self.text, pattern, self.originals), self.originals)


# What a model glues onto a kept span: letters, digits and the characters of codes, with no space before them
_GLUE = re.compile(r"-?[^\W_][\w()<>.-]*")
# Spans that are code (options, paths, URLs, addresses, variables, placeholders): nothing is ever compounded on them
_CODE = re.compile(r"^[-/~.\\]|://|[@%${}\\]")


def unglued(translation: str, source: str, pattern: re.Pattern[str], originals: dict[str, str]) -> str:
    """``translation`` with what the model glued onto a placeholder or mask that ``source`` stands apart (a space,
    punctuation or the end after it) taken off: a run that repeats the span's own characters (``%(current)li`` +
    ``urrent(lili)``, ``%<PRIu64>`` + ``64PRIP>``) is removed; a word is set apart by a space (``--robot-Maschinen``,
    ``X.509zertifikat``), but for a hyphenated compound after a number or a name (``X.509-Zertifikat``)."""
    apart = {m.group(0) for m in pattern.finditer(source) if not _GLUE.match(source, m.end())}
    out, at = [], 0
    for match in pattern.finditer(translation):
        token = match.group(0)
        span = originals.get(token, token)
        glue = _GLUE.match(translation, match.end()) if token in apart and not span.isspace() else None
        if glue is None or (glue.group(0).startswith("-") and not _CODE.search(span)):
            continue
        run = glue.group(0)
        out += [translation[at : match.end()], "" if _echoes(run, span) else " " + run.lstrip("-")]
        at = glue.end()
    return "".join(out) + translation[at:]


def keeps_spans(source: str, translation: str) -> bool:
    """Whether ``translation`` holds each protected span of ``source`` exactly as often as ``source`` does, and
    none with a word glued on that ``source`` stands apart: a translation that needed no masks."""
    spans = {source[start:end] for start, end in protected_spans(source)}
    for span in spans:
        if translation.count(span) != source.count(span):
            return False
        if span.isspace():
            continue
        apart = all(not _GLUE.match(source, at + len(span)) for at in _occurrences(source, span))
        if apart and any(_GLUE.match(translation, at + len(span)) for at in _occurrences(translation, span)):
            return False
    return True


def _occurrences(text: str, span: str) -> Iterable[int]:
    at = text.find(span)
    while at != -1:
        yield at
        at = text.find(span, at + 1)


def _echoes(run: str, span: str) -> bool:
    """Whether ``run`` is mostly the span's own character pairs (the model repeating what it copied)."""
    pairs = [run[i : i + 2].lower() for i in range(len(run) - 1)]
    own = {span[i : i + 2].lower() for i in range(len(span) - 1)}
    return bool(pairs) and sum(pair in own for pair in pairs) / len(pairs) >= 0.5


def has_words(text: str) -> bool:
    """Whether ``text`` has a letter outside its placeholders (a sentence of only codes is not translated)."""
    return any(ch.isalpha() for ch in PLACEHOLDER.sub(" ", text))


# Masks in the order they are used: printf conversions (models trained on software messages copy them far
# more often than any numbered form: ``%s`` is in a quarter of the bundled corpus), each one once per
# sentence so that each stands for one span; then Qt's numbered ones.
_MASKS = ("%s", "%d", "%u", "%x", "%c", "%i", "%f", "%o", "%e", "%g", "%p", "%X", "%lu", "%ld", "%lx", "%zu")


def masks(taken: str) -> Iterable[str]:
    """Mask strings not found in ``taken`` (no mask is part of another)."""
    for mask in _MASKS:
        if mask not in taken:
            yield mask
    for n in range(1, 100):
        if f"%{n}" not in taken and f"%{n}" not in _MASKS:
            yield f"%{n}"
    braced = set(_BRACED.findall(taken))  # one pass: a line of thousands of spans asks for thousands of these
    for n in range(10_000):  # a line of hundreds of paths or numbers: brace-numbered ones after those
        if f"{{{n}}}" not in braced:
            yield f"{{{n}}}"


_BRACED = re.compile(r"\{\d+\}")
# A mask as the model may have written it back: the longest known mask at its start is the one (``%lu`` before
# ``%l``...); a tab's mask takes the spaces around it.
_WRITTEN_MASK = re.compile(r"( ?)(\{\d+\}|%\d+|%[A-Za-z]+)( ?)")


def mask(text: str, spans: Iterable[tuple[int, int]] | None = None, avoid: str = "") -> Masked:
    """``text`` with each span (by default :func:`protected_spans`) replaced by a mask not in ``text`` or ``avoid``."""
    chosen = sorted(protected_spans(text) if spans is None else spans)
    if not chosen:
        return Masked(text, {})
    fresh = iter(masks(text + avoid))
    out, originals, at = [], {}, 0
    for start, end in chosen:
        if start < at:
            continue
        token = next(fresh, None)
        if token is None:  # more spans than masks (a list of a hundred paths): the rest is read as it is
            break
        originals[token] = text[start:end]
        out.append(text[at:start])
        out.append(f" {token} " if text[start:end].isspace() else token)  # a tab's mask is a word of its own
        at = end
    out.append(text[at:])
    return Masked("".join(out), originals)


def mask_line(text: str, keep: Iterable[tuple[int, int]] = (), free: Iterable[tuple[int, int]] = ()) -> Masked:
    """A plain line (``nmt translate``'s lines, the server's text) with its protected spans masked, and the
    ``keep`` spans too (names to copy); a span that overlaps one of ``free`` (glossary terms, which the search
    must see to translate) is left as it is. Tabs stay as they are: in a plain line a word's position is what
    alignments count, and a mask never holds a space."""
    keep, free = list(keep), list(free)
    spans = [(a, b) for a, b in protected_spans(text) if not text[a:b].isspace() and not _overlaps(a, b, free + keep)]
    return mask(text, sorted(spans + [(a, b) for a, b in keep if b > a]))


def _overlaps(start: int, end: int, spans: list[tuple[int, int]]) -> bool:
    return any(start < b and a < end for a, b in spans)


def unmask(text: str, originals: dict[str, str]) -> str:
    """``text`` with each mask replaced by its original (the longest mask first: ``%lu`` before ``%u``); one pass
    whatever the number of masks."""
    if not originals:
        return text
    longest = max(map(len, originals))

    def original(match: re.Match[str]) -> str:
        lead, written, trail = match.groups()
        mask = next((written[:k] for k in range(min(len(written), longest), 1, -1) if written[:k] in originals), None)
        if mask is None:
            return match.group(0)
        span, rest = originals[mask], written[len(mask) :]
        if span.isspace():  # a tab's mask takes the spaces the model put around it: they stood for the tab
            return span + rest + (trail if rest else "")
        return lead + span + rest + trail

    return _WRITTEN_MASK.sub(original, text)


__all__ = ["Masked", "has_words", "mask", "mask_line", "masks", "protected_spans", "unmask"]
