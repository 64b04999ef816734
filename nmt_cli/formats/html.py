"""HTML pages (``.html``, ``.htm``, ``.xhtml``): text and the translatable attributes, nothing else.

The page is read with the standard library's HTML tokenizer (it reads broken markup the forgiving way
browsers do and tells where each tag starts), and only these parts of the file change:

- every *segment*, a run of text and inline elements (``<a>``, ``<b>``, ``<span>``...) between two block
  boundaries (``<p>``, ``<li>``, ``<td>``, ``<h1>``, ``<br>`` does not end one): translated sentence by
  sentence with its inline tags put back by ``markup.py`` (the model's word alignment);
- the values of ``alt``, ``title``, ``placeholder`` and ``aria-label``;
- ``lang`` (and ``xml:lang`` where the page has it) on ``<html>``: the target language.

Left exactly as written: everything inside ``<script>``, ``<style>``, ``<pre>``, ``<code>``, ``<kbd>``,
``<samp>``, ``<textarea>``, ``<svg>``, ``<math>``, ``<template>`` and any element with ``translate="no"`` or
``class="notranslate"``; comments, the doctype, other attributes and whitespace between blocks.
"""

from __future__ import annotations

import dataclasses
import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser

from .document import DocumentRequest
from .markup import holds_a_name, translate_fragments
from .markup_tree import CODE, VOID, html_opaque, kept_as_code
from .segments import Sentences, TranslateSentences, as_sentences, translate_texts
from .textfile import TextFile

# Elements that do not start a new line of text: their content belongs to the sentence around them.
INLINE = frozenset(
    """a abbr acronym b bdi bdo big br cite code data del dfn em font i img input ins kbd label mark q
    ruby rp rt s samp small span strike strong sub sup time tt u var wbr""".split()
)
# Elements whose whole content is kept as written (besides code, translate="no", class="notranslate").
UNTOUCHED = CODE | frozenset("textarea template noscript".split())
ATTRIBUTES = ("alt", "title", "placeholder", "aria-label")
ATTRIBUTE = re.compile(
    r"""(?P<lead>\s(?P<name>alt|title|placeholder|aria-label)\s*=\s*)"""
    r"""(?:"(?P<double>[^"]*)"|'(?P<single>[^']*)'|(?P<bare>[^\s"'=<>`]+))""",
    re.IGNORECASE,
)
META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


def declared_charset(data: bytes) -> str | None:
    """The encoding a page declares in its first 1,024 bytes (``<meta charset>`` or http-equiv), as browsers read it."""
    match = META_CHARSET.search(data[:1024])
    if match is None:
        return None
    declared = match.group(1).decode("ascii").lower()
    # A <meta> readable as ASCII cannot be UTF-16: the HTML standard's encoding sniffing reads such a page as
    # UTF-8 (and x-user-defined as windows-1252). A real UTF-16 page starts with its byte-order mark, read first.
    if declared.replace("_", "-").startswith(("utf-16", "utf16", "ucs-2", "unicode")):
        return "utf-8"
    return "windows-1252" if declared == "x-user-defined" else declared


_TAG = re.compile(r"<[^<>]*>")


@dataclass
class _Page:
    """What the scan found: segments and start tags with translatable attributes, as (start, end) offsets."""

    segments: list[tuple[int, int]] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)  # per segment, the block element it is the text of ("dt", "p")
    tags: list[tuple[int, int]] = field(default_factory=list)
    html_tag: tuple[int, int] | None = None


class _Scanner(HTMLParser):
    """Finds the segments of a page: runs of text and inline markup between block boundaries."""

    def __init__(self, source: str, is_code: Callable[[str, dict[str, str | None]], bool] = html_opaque) -> None:
        super().__init__(convert_charrefs=False)
        self.source = source
        self.is_code = is_code
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", source)]
        self.page = _Page()
        self.start: int | None = None  # where the open segment starts
        self.has_text = False
        self.kept: list[str] = []  # the element names of the untouched elements we are inside
        self.block = ""  # the block element whose text the open segment is

    def _offset(self) -> int:
        line, column = self.getpos()
        return self.line_starts[line - 1] + column

    def _boundary(self, at: int) -> None:
        if self.start is not None and self.has_text:
            self.page.segments.append((self.start, at))
            self.page.blocks.append(self.block)
        self.start, self.has_text = None, False

    def _content(self, at: int, text: bool) -> None:
        if self.start is None:
            self.start = at
        self.has_text = self.has_text or text

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        at, raw = self._offset(), self.get_starttag_text() or ""
        if self.kept:
            if tag == self.kept[-1] and tag not in VOID:
                self.kept.append(tag)
            return
        if tag == "html":
            self.page.html_tag = (at, at + len(raw))
        if any(name in ATTRIBUTES for name, _ in attrs):
            self.page.tags.append((at, at + len(raw)))
        inline = tag in INLINE or ("-" in tag)  # custom elements are inline, as browsers lay them out
        kept = tag in UNTOUCHED or self.is_code(tag, dict(attrs))
        if inline:
            self._content(at, False)  # an inline element kept as written goes into its sentence, unchanged
            return
        self._boundary(at)
        self.block = tag
        if kept and tag not in VOID:
            self.kept.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.kept:
            return
        at, raw = self._offset(), self.get_starttag_text() or ""
        if any(name in ATTRIBUTES for name, _ in attrs):
            self.page.tags.append((at, at + len(raw)))
        if tag in INLINE or "-" in tag:
            self._content(at, False)
        else:
            self._boundary(at)

    def handle_endtag(self, tag: str) -> None:
        at = self._offset()
        if self.kept:
            if tag == self.kept[-1]:
                self.kept.pop()
            if self.kept:
                return
            self.start = None  # the untouched block ends: the next segment starts after it
            return
        if tag in INLINE or "-" in tag:
            self._content(at, False)
        else:
            self._boundary(at)
            self.block = ""  # text after a block's end belongs to its parent, whose name is not kept

    def handle_data(self, data: str) -> None:
        if not self.kept:
            self._content(self._offset(), bool(data.strip()))

    def handle_entityref(self, name: str) -> None:
        self.handle_data("&")

    def handle_charref(self, name: str) -> None:
        self.handle_data("&")

    def handle_comment(self, data: str) -> None:
        if not self.kept and self.start is not None:
            self._content(self._offset(), False)

    def finish(self) -> _Page:
        self.close()
        self._boundary(len(self.source))
        return self.page


def translate_html(
    text: str,
    translate: TranslateSentences | Sentences,
    source_language: str,
    target_language: str,
    keep_tags: frozenset[str] = frozenset(),
) -> tuple[str, int]:
    """A page's text translated (the module's docstring); returns the page and how many segments changed."""
    sentences = as_sentences(translate)
    is_code = kept_as_code(keep_tags)
    scanner = _Scanner(text, is_code)
    scanner.feed(text)
    page = scanner.finish()
    segments = [text[a:b] for a, b in page.segments]
    # a segment that is a name by the element that holds it (a <dt> of one identifier) is kept, as in tagged lines
    named = [holds_a_name(block, html.unescape(_TAG.sub("", s))) for block, s in zip(page.blocks, segments)]
    asked = [s for s, name in zip(segments, named) if not name]
    answers = iter(translate_fragments(asked, sentences, source_language, is_opaque=is_code))
    translated = [s if name else next(answers) for s, name in zip(segments, named)]
    tags = {text[a:b]: None for a, b in page.tags}
    values = [(tag, m) for tag in tags for m in ATTRIBUTE.finditer(tag)]
    plain = [html.unescape(_value(m)) for _, m in values]
    done = iter(translate_texts(plain, sentences, source_language))
    rewritten = {tag: tag for tag in tags}
    for tag, match in values:
        rewritten[tag] = rewritten[tag].replace(match.group(0), _attribute(match, next(done)), 1)

    edits = [(a, b, _with_tags(t, rewritten)) for (a, b), t in zip(page.segments, translated)]
    inside = [(a, b) for a, b, _ in edits]
    edits += [(a, b, rewritten[text[a:b]]) for a, b in page.tags if not any(s <= a < e for s, e in inside)]
    if page.html_tag is not None:
        a, b = page.html_tag
        edits.append((a, b, _with_lang(rewritten.get(text[a:b], text[a:b]), target_language)))
    out, at = [], 0
    for a, b, new in sorted(edits):
        out.append(text[at:a])
        out.append(new)
        at = b
    out.append(text[at:])
    return "".join(out), len(segments)


def _value(match: re.Match[str]) -> str:
    return next(v for v in (match.group("double"), match.group("single"), match.group("bare")) if v is not None)


def _attribute(match: re.Match[str], value: str) -> str:
    """An attribute written back with its translated value, quoted as the source quoted it."""
    if match.group("single") is not None:
        return f"{match.group('lead')}'{html.escape(value, quote=False).replace(chr(39), '&#x27;')}'"
    return f'{match.group("lead")}"{html.escape(value, quote=False).replace(chr(34), "&quot;")}"'


def _with_tags(segment: str, rewritten: dict[str, str]) -> str:
    """A translated segment with its start tags' attributes translated too."""
    for raw, new in rewritten.items():
        if raw != new and raw in segment:
            segment = segment.replace(raw, new)
    return segment


LANG = re.compile(r"""(\s(?:xml:)?lang\s*=\s*)(?:"[^"]*"|'[^']*'|[^\s>]+)""", re.IGNORECASE)


def _with_lang(tag: str, language: str) -> str:
    """``<html>`` saying the target language: its ``lang`` (and ``xml:lang``) set, or ``lang`` added."""
    if LANG.search(tag):
        return LANG.sub(lambda m: f'{m.group(1)}"{language}"', tag)
    end = len(tag) - (2 if tag.endswith("/>") else 1)
    return f'{tag[:end]} lang="{language}"{tag[end:]}'


def translate_document(data: bytes, request: DocumentRequest) -> tuple[bytes, int]:
    """A page's bytes translated, in the encoding it declares; characters it cannot hold as references."""
    source = TextFile.decode(data, request.name, declared_charset)
    text, count = translate_html(
        source.text, request.translate, request.source_language, request.target_language, request.keep_tags
    )
    if not source.bom and declared_charset(data) is None and data.isascii():
        # no charset said: a browser may read UTF-8 bytes as windows-1252; an ASCII page stays ASCII
        source = dataclasses.replace(source, encoding="ascii")
    return source.encode(text, "xmlcharrefreplace"), count
