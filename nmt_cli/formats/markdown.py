"""Markdown (``.md``): paragraphs, headings, list items, table cells and quotes translated, markup kept.

Read with markdown-it-py (the CommonMark parser, with GFM tables and strikethrough, and from mdit-py-plugins
YAML front matter, MyST's ``:::`` fences and ``$``/``$$`` math). Only the text of its *inline* blocks changes; code
blocks, fenced code, math, HTML blocks, front matter, link destinations, reference definitions and every line
prefix (``#``, ``-``, ``>``, ``|``, indentation) are kept byte for byte. A ``:::`` fence's lines and its options
are kept; the content of an admonition (``:::{note}``, ``{warning}``...) is Markdown and is translated, that of
any other directive kept.

An inline block's source is walked token by token to find the raw markup of each: emphasis
delimiters, code spans, links (``[text](url "title")``, ``[text][ref]``), images, autolinks, raw HTML
and line breaks. It becomes an HTML fragment (``<em>``, ``<code>``, ``<a>``...), which ``markup.py``
translates as sentences and puts back through the model's alignment; each element is then written in
the raw markup it came from. Text in the translation that Markdown would read as markup (``*``, ``_``,
`````, ``[``...) is escaped. A paragraph that ran over several lines is wrapped back over as many lines,
each with its own prefix. A block whose source does not match its tokens (rare: entity references in
text) is left as it was and counted.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from ..errors import NmtError
from .document import DocumentRequest, text_document
from .markup import translate_fragments
from .markup_tree import kept_as_code
from .segments import Sentences, TranslateSentences, as_sentences

# Characters in the translation's text that Markdown would read as markup (an underscore only at a word's edge).
_SPECIAL = re.compile(r"\\(?=[!-/:-@\[-`{-~])|[`*\[\]<|]|(?<!\w)_|_(?!\w)")
_LINK_TAIL = re.compile(
    r"""\]\(\s*(?:<[^<>\n]*>|(?:[^()\s]|\([^()\s]*\))*)(?:\s+(?:"[^"]*"|'[^']*'|\([^()]*\)))?\s*\)"""
    r"""|\]\[[^\[\]]*\]|\]"""
)
_MYST_TARGET = re.compile(r"^\([^()\s]+\)=\s*$")
_MYST_ROLE = re.compile(r"\{[A-Za-z][\w:.+-]*\}$")  # a role right before its code span: {ref}`label`
_IMAGE = re.compile(r"!\[(?:[^\[\]]|\[[^\[\]]*\])*(?:" + _LINK_TAIL.pattern + ")")


def _parser():
    try:
        from markdown_it import MarkdownIt
        from mdit_py_plugins.colon_fence import colon_fence_plugin
        from mdit_py_plugins.dollarmath import dollarmath_plugin
        from mdit_py_plugins.front_matter import front_matter_plugin
    except ImportError:
        raise NmtError("Markdown files need markdown-it-py and mdit-py-plugins: pip install 'nmt-cli[files]'") from None
    md = MarkdownIt("commonmark").enable("table").enable("strikethrough").use(front_matter_plugin)
    # $x$ only where it cannot be prose: no space inside the dollars, no digit beside them ("$5 and $10" is money)
    md.use(colon_fence_plugin).use(dollarmath_plugin, allow_space=False, allow_digits=False, double_inline=True)
    md.normalizeLink = lambda url: url  # keep destinations as written
    return md


@dataclass
class _Block:
    """One inline block: where its source lines are, and its raw markup as fragment pieces."""

    lines: list[tuple[int, int, int]]  # (line number, start column, end column) of each content line
    fragment: str = ""
    markups: list[tuple[str, str]] = field(default_factory=list)  # element i's raw (open, close) markup
    segment_lines: list[int] = field(default_factory=lambda: [1])  # source lines between hard breaks
    spelling: _Spelling = field(default_factory=lambda: _Spelling(set(), {}))
    paragraph: bool = True  # a paragraph's lines (not a heading's or a table cell's) could start a block


@dataclass
class _Spelling:
    """How the block's source text wrote the characters Markdown cares about, to write the translation alike:
    the special characters it had unescaped (safe there: "[ ] task", "sort|uniq"), and those it wrote as entities."""

    literal: set[str]
    entities: dict[str, str]

    def write(self, text: str) -> str:
        special = {m.start() for m in _SPECIAL.finditer(text) if m.group(0) not in self.literal}
        out = []
        for at, char in enumerate(text):
            if char in self.entities:
                out.append(self.entities[char])
            else:
                out.append("\\" + char if at in special else char)
        return "".join(out)

    def learn(self, raw: str) -> None:
        for entity in re.finditer(r"&#?\w+;", raw):
            self.entities.setdefault(html.unescape(entity.group(0)), entity.group(0))
        for special in re.finditer(r"(?<!\\)([`*\[\]<|_])", raw):
            self.literal.add(special.group(1))


class _Unmatched(Exception):
    """The tokens do not account for the raw source: the block stays as it was."""


def _consume(raw: str, at: int, piece: str) -> int:
    if not raw.startswith(piece, at):
        raise _Unmatched
    return at + len(piece)


def _text_pattern(text: str) -> re.Pattern[str]:
    """The raw forms of a text token: each character as itself, backslash-escaped, or as an entity."""
    parts = []
    for char in text:
        if char == " ":
            parts.append(r"[ \t]")
        elif not char.isalnum():
            parts.append(rf"(?:\\?{re.escape(char)}|&#?\w+;)")
        else:
            parts.append(rf"(?:{re.escape(char)}|&#?\w+;)")
    return re.compile("".join(parts))


def _fragment(children, raw: str, spelling: _Spelling) -> tuple[str, list[tuple[str, str]], list[int]]:
    """An inline block's tokens as an HTML fragment, each element's raw (open, close) markup, and how many
    source lines each run between hard breaks has."""
    fragment = _Fragment(raw, spelling)
    skip = 0
    for n, token in enumerate(children):
        if skip:
            skip -= 1
            continue
        write = _WRITERS.get(token.type)
        if write is None:
            raise _Unmatched
        skip = write(fragment, token, children, n) or 0
    if raw[fragment.at :].strip():
        raise _Unmatched
    return "".join(fragment.out), fragment.markups, fragment.segment_lines


class _Fragment:
    """The fragment :func:`_fragment` writes, token by token: one method per kind of token, each reading the
    token's markup from ``raw`` where it stands (``at``) and writing its element; a method returns how many of the
    tokens after it it consumed."""

    def __init__(self, raw: str, spelling: _Spelling) -> None:
        self.raw, self.spelling = raw, spelling
        self.segment_lines = [1]
        self.out: list[str] = []
        self.markups: list[tuple[str, str]] = []
        self.stack: list[int] = []
        self.links: list[tuple[int, int]] = []  # per open link: where its raw source starts, and its place in out
        self.at = 0

    def _match(self, pattern: re.Pattern[str]) -> re.Match[str]:
        match = pattern.match(self.raw, self.at)
        if not match:
            raise _Unmatched
        self.at = match.end()
        return match

    def _markup(self, opening: str, element: str) -> int:
        """A new element's markup (its opening; the closing comes later where it has one) and its element."""
        self.markups.append((opening, ""))
        index = len(self.markups) - 1
        self.out.append(element.format(index))
        return index

    def _code(self, markup: str, text: str) -> None:
        """An element the translation keeps as written: a code span to it, a word of its own."""
        self.markups.append((markup, ""))
        self.out.append(f'<code data-i="{len(self.markups) - 1}">{html.escape(text, quote=False)}</code>')

    def text(self, token, children, n: int) -> None:  # type: ignore[no-untyped-def]
        match = self._match(_text_pattern(token.content))
        self.spelling.learn(match.group(0))
        self.out.append(html.escape(token.content, quote=False))

    def line_break(self, token, children, n: int) -> None:  # type: ignore[no-untyped-def]
        hard = token.type == "hardbreak"
        match = self._match(re.compile(r"(?: {2,}|\\)?[ \t]*\n" if hard else r"[ \t]*\n"))
        if not hard:
            self.out.append(" ")
            self.segment_lines[-1] += 1
            return
        self.segment_lines.append(1)
        self._markup(match.group(0), '<br data-i="{}"/>')

    def emphasis_open(self, token, children, n: int) -> None:  # type: ignore[no-untyped-def]
        self.at = _consume(self.raw, self.at, token.markup)
        self.stack.append(self._markup(token.markup, f'<{token.tag} data-i="{{}}">'))

    def emphasis_close(self, token, children, n: int) -> None:  # type: ignore[no-untyped-def]
        self.at = _consume(self.raw, self.at, token.markup)
        index = self.stack.pop()
        self.markups[index] = (self.markups[index][0], token.markup)
        self.out.append(f"</{token.tag}>")

    def math(self, token, children, n: int) -> None:  # type: ignore[no-untyped-def]
        fence = re.escape(token.markup)
        match = self._match(re.compile(rf"{fence}(.*?){fence}", re.DOTALL))
        self._code(match.group(0), match.group(1))  # a formula is kept as a code span is

    def code(self, token, children, n: int) -> None:  # type: ignore[no-untyped-def]
        start = self.at
        match = self._match(re.compile(rf"{token.markup}(?!`)(.*?)(?<!`){token.markup}(?!`)", re.DOTALL))
        role = _MYST_ROLE.search(self.raw, 0, start)
        written = html.escape(role.group(0), quote=False) if role else ""
        if role and self.out and self.out[-1].endswith(written):  # MyST's {ref}`target`: one span, never apart
            self.out[-1] = self.out[-1][: len(self.out[-1]) - len(written)]
            self._code(role.group(0) + match.group(0), role.group(0) + token.content)
            return
        self._code(match.group(0), token.content)

    def link_open(self, token, children, n: int) -> int:  # type: ignore[no-untyped-def]
        if token.markup in ("autolink", "linkify"):
            end = self.raw.find(">", self.at) + 1 if self.raw.startswith("<", self.at) else 0
            if not end:
                raise _Unmatched
            self._code(self.raw[self.at : end], self.raw[self.at : end])
            self.at = end
            return _autolink_length(children, n)
        self.links.append((self.at, len(self.out)))
        self.at = _consume(self.raw, self.at, "[")
        self.stack.append(self._markup("[", '<a data-i="{}">'))
        return 0

    def link_close(self, token, children, n: int) -> None:  # type: ignore[no-untyped-def]
        match = self._match(_LINK_TAIL)
        index = self.stack.pop()
        start, written = self.links.pop()
        if match.group(0) in ("]", "][]"):  # [label] or [label][]: the text is the label, kept as written
            whole = self.raw[start : self.at]
            self.markups[index] = (whole, "")
            del self.out[written:]
            self.out.append(f'<code data-i="{index}">{html.escape(whole, quote=False)}</code>')
            return
        self.markups[index] = ("[", match.group(0))
        self.out.append("</a>")

    def image(self, token, children, n: int) -> None:  # type: ignore[no-untyped-def]
        self._markup(self._match(_IMAGE).group(0), '<x-md data-i="{}"/>')

    def html_inline(self, token, children, n: int) -> None:  # type: ignore[no-untyped-def]
        self.at = _consume(self.raw, self.at, token.content)
        self._markup(token.content, '<x-md data-i="{}"/>')


_WRITERS = {
    "text": _Fragment.text,
    "softbreak": _Fragment.line_break,
    "hardbreak": _Fragment.line_break,
    **dict.fromkeys(("em_open", "strong_open", "s_open"), _Fragment.emphasis_open),
    **dict.fromkeys(("em_close", "strong_close", "s_close"), _Fragment.emphasis_close),
    "math_inline": _Fragment.math,
    "math_inline_double": _Fragment.math,
    "code_inline": _Fragment.code,
    "link_open": _Fragment.link_open,
    "link_close": _Fragment.link_close,
    "image": _Fragment.image,
    "html_inline": _Fragment.html_inline,
}


def _autolink_length(children, n: int) -> int:
    """How many tokens after an autolink's open token belong to it (its text and its close)."""
    k = n + 1
    while k < len(children) and children[k].type != "link_close":
        k += 1
    return k - n


_OUR_TAG = re.compile(r'<(/?)([a-z-]+)(?: data-i="(\d+)")?\s*(/?)>')


def _to_markdown(translated: str, markups: list[tuple[str, str]], spelling: _Spelling) -> tuple[str, list[int]]:
    """A translated fragment written back as Markdown, and the offsets of the spaces it may wrap at."""
    out: list[str] = []
    length = 0
    breaks: list[int] = []
    stack: list[int] = []
    at = 0
    for match in _OUR_TAG.finditer(translated):
        if match.start() < at:  # inside a code span already written
            continue
        text = html.unescape(translated[at : match.start()])
        escaped = spelling.write(text)
        breaks.extend(length + i for i, char in enumerate(escaped) if char == " ")
        out.append(escaped)
        length += len(escaped)
        closing, name, index, lone = match.groups()
        if closing:
            piece = markups[stack.pop()][1]
        elif name == "code":  # its content follows up to </code>: the code span as written
            piece = markups[int(index)][0]
            end = translated.index("</code>", match.end())
            at = end + len("</code>")
            out.append(piece)
            length += len(piece)
            continue
        else:
            piece = markups[int(index)][0]
            if not lone and name not in ("br", "x-md"):
                stack.append(int(index))
        out.append(piece)
        length += len(piece)
        at = match.end()
    text = html.unescape(translated[at:])
    escaped = spelling.write(text)
    breaks.extend(length + i for i, char in enumerate(escaped) if char == " ")
    out.append(escaped)
    return "".join(out), breaks


def translate_markdown(
    text: str,
    translate: TranslateSentences | Sentences,
    source_language: str,
    target_language: str,
    keep_tags: frozenset[str] = frozenset(),
) -> tuple[str, int]:
    """A Markdown document translated (the module's docstring); returns it and how many blocks changed."""
    sentences = as_sentences(translate)
    lines = text.split("\n")
    blocks = _blocks(text, lines)
    fragments = [b.fragment for b in blocks]
    translated = translate_fragments(fragments, sentences, source_language, is_opaque=kept_as_code(keep_tags))
    edits: dict[int, list[tuple[int, int, str | None]]] = {}  # per line: (start, end, new text or None)
    for block, fragment in zip(blocks, translated):
        markdown, spaces = _to_markdown(fragment, block.markups, block.spelling)
        for (number, start, end), piece in zip(block.lines, _wrap(markdown, spaces, block)):
            edits.setdefault(number, []).append((start, end, piece))
    out = []
    for number, line in enumerate(lines):
        changes = edits.get(number, [])
        if changes and all(piece is None for _, _, piece in changes) and not line[: changes[0][0]].strip(" >"):
            continue  # a paragraph's line the translation did not need (only its prefix would be left)
        for start, end, piece in sorted(changes, reverse=True):
            line = line[:start] + (piece or "") + line[end:]
        out.append(line)
    return "\n".join(out), len(blocks)


def _blocks(text: str, lines: list[str]) -> list[_Block]:
    """The document's inline blocks whose raw markup could be followed token by token."""
    blocks = []
    cursor: dict[int, int] = {}  # per line, where the last block found on it ended (table cells share a line)
    opened = ""
    for token in _parser().parse(text):
        if token.type == "colon_fence" and token.map is not None and _ADMONITION.match(token.info):
            blocks += _admonition_blocks(token.map, lines)
            continue
        if token.type != "inline" or token.map is None or not token.content.strip():
            opened = token.type
            continue
        if _MYST_TARGET.match(token.content):
            continue  # a MyST label "(name)=" is a name, not prose
        block = _locate(token, lines, cursor)
        if block is None:
            continue
        block.paragraph = opened == "paragraph_open"
        try:
            block.fragment, block.markups, block.segment_lines = _fragment(
                token.children or [], token.content, block.spelling
            )
        except _Unmatched:
            continue
        blocks.append(block)
    return blocks


# MyST's admonitions, whose content is Markdown (other directives hold code, tables of options, figures...)
_ADMONITION = re.compile(
    r"\{(?:admonition|attention|caution|danger|error|hint|important|note|seealso|tip|warning|dropdown|topic|sidebar)\}"
)
_DIRECTIVE_OPTION = re.compile(r"^\s*:[\w-]+:")


def _admonition_blocks(span: list[int], lines: list[str]) -> list[_Block]:
    """The blocks of an admonition's content (between its fence lines, after its ``:option:`` lines), read as
    a document of their own and placed at their lines."""
    start, end = span[0] + 1, span[1] - 1  # the opening and closing fence lines are kept
    while start < end and _DIRECTIVE_OPTION.match(lines[start]):
        start += 1
    inner = lines[start:end]
    blocks = _blocks("\n".join(inner), inner)
    for block in blocks:
        block.lines = [(number + start, first, last) for number, first, last in block.lines]
    return blocks


def _locate(token, lines: list[str], cursor: dict[int, int]) -> _Block | None:
    """Where each line of an inline block's content is in the source lines."""
    located = []
    for k, content_line in enumerate(token.content.split("\n")):
        number = token.map[0] + k
        if number >= len(lines):
            return None
        start = lines[number].find(content_line, cursor.get(number, 0))
        if start < 0 or not content_line:
            return None
        located.append((number, start, start + len(content_line)))
    for number, _, end in located:
        cursor[number] = end
    return _Block(located)


def _wrap(markdown: str, spaces: list[int], block: _Block) -> list[str | None]:
    """The translated block over the block's source lines: a line ends at each hard break, as in the source,
    and the lines between two hard breaks are cut at spaces near each source line's share of the text; a
    source line with nothing left is dropped (None)."""
    pieces = markdown.split("\n")
    if len(pieces) != len(block.segment_lines):  # a code span ran over lines: one line, the others dropped
        return [markdown, *[None] * (len(block.lines) - 1)]
    out: list[str | None] = []
    base = 0
    for piece, count in zip(pieces, block.segment_lines):
        local = [s - base for s in spaces if base <= s < base + len(piece)]
        widths = [end - start for _, start, end in block.lines[len(out) : len(out) + count]]
        out.extend(_cut(piece, local, widths))
        base += len(piece) + 1
    lines = [out[0], *(p.lstrip() if p is not None else None for p in out[1:])]
    return [_safe_start(line) if line is not None and block.paragraph else line for line in lines]


# What would turn a line of text into a list item, heading, quote or rule if a line started with it.
_BLOCK_START = re.compile(r"^(\d{1,9})[.)](?=\s|$)|^(?:[-+*>]|#{1,6})(?=\s|$)|^([-=_*])\2+\s*$")


def _safe_start(line: str) -> str:
    """A line of translated text that Markdown cannot read as a block marker ("30. Juni" -> "30\\. Juni")."""
    match = _BLOCK_START.match(line)
    if not match:
        return line
    if match.group(1):
        return f"{match.group(1)}\\{line[len(match.group(1)) :]}"
    return "\\" + line


def _cut(text: str, spaces: list[int], widths: list[int]) -> list[str | None]:
    """``text`` over ``len(widths)`` lines, cut at ``spaces`` nearest each line's share of the source."""
    total = sum(widths) or 1
    cuts: list[int] = []
    goal = 0.0
    for width in widths[:-1]:
        goal += width / total * len(text)
        choices = [s for s in spaces if not cuts or s > cuts[-1]]
        if not choices:
            break
        cuts.append(min(choices, key=lambda s: abs(s - goal)))
    out: list[str | None] = []
    start = 0
    for cut in cuts:
        out.append(text[start:cut])
        start = cut + 1
    out.append(text[start:])
    return out + [None] * (len(widths) - len(out))


def translate_document(data: bytes, request: DocumentRequest) -> tuple[bytes, int]:
    def translate(text: str) -> tuple[str, int]:
        return translate_markdown(
            text, request.translate, request.source_language, request.target_language, request.keep_tags
        )

    return text_document(data, request, translate)
