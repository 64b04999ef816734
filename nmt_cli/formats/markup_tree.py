"""Inline markup read: a fragment (an HTML or XML snippet) becomes its plain text (entities decoded) and a tree
of elements, each covering a range of that text (``parse``), read by ``html.parser``, the standard library's
forgiving tokenizer. Elements whose content must not be translated (code, ``translate="no"``, XLIFF's inline
codes) are *opaque*. ``markup.py`` translates the text and puts the tree back around it.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser

# HTML elements that never have an end tag.
VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
# Elements whose content is code, not prose: kept as written (HTML's, and the inline code elements of DITA
# and DocBook, as HTML's tokenizer names them: lower case).
CODE = frozenset(
    """code kbd samp var pre script style math svg tt codeph codeblock filepath cmdname varname apiname userinput
    systemitem literal command option parmname msgnum synph screen computeroutput envar filename classname
    function parameter replaceable""".split()
)
# Punctuation at the edge of an element's target words goes outside its tags unless the element's source
# text had it there too: "go <a>home</a>!" -> "nach <a>Hause</a>!", not "nach <a>Hause!</a>".
TRAILING_PUNCTUATION = re.compile(r"[.,;:!?\u2026)\]}\"'\u00bb\u201d\u2019\u300d\u300f\u3002\u3001\uff01\uff1f]+$")
LEADING_PUNCTUATION = re.compile(r"^[(\[{\"'\u00ab\u201c\u2018\u300c\u300e\u00bf\u00a1]+")
FIRST_CHARACTER_AFTER_TAGS = re.compile(r"(?:<[^>]*>)*(.)", re.DOTALL)
# Elements that stand for a break between words: the text on either side is not one word.
BREAKS = frozenset("br hr".split())


@dataclass
class Element:
    """A tag pair (or a lone tag) and the plain-text range it covers, ``start`` to ``end``."""

    name: str
    open: str  # the start tag as written ('' for the root)
    close: str  # the end tag as written ('' when the source had none)
    start: int = 0
    end: int = 0
    opaque: str | None = None  # the original markup of an element kept as written (its tags included)
    children: list[Element] = field(default_factory=list)
    glued_left: bool = False  # no space between this element and the text before it
    glued_right: bool = False  # ... and the text after it
    # The source wrote it right after a sibling element, no space between ("<uicontrol>File</uicontrol>
    # <uicontrol>Open</uicontrol>" without the space: DITA's menus): the model reads a space there, the output
    # writes none.
    joined: bool = False
    # (before, after): the element's source text neither starts (ends) with punctuation
    punctuation_outside: tuple[bool, bool] = (False, False)

    def walk(self):
        yield self
        for child in self.children:
            yield from child.walk()


@dataclass
class Fragment:
    """A fragment parsed: its plain text, the element tree over it, and how the source wrote entities."""

    text: str
    root: Element
    entities: dict[str, str]  # character -> the entity the source wrote it as
    breaks: frozenset[int] = frozenset()  # offsets of the spaces that stand for a <br> (not written back)


class _Parser(HTMLParser):
    """Events of ``html.parser`` (the standard library's forgiving HTML tokenizer) into an element tree."""

    def __init__(
        self, source: str, is_opaque: Callable[[str, dict[str, str | None]], bool], xml: bool, hidden: frozenset[str]
    ) -> None:
        super().__init__(convert_charrefs=False)
        self.source = source
        self.is_opaque = is_opaque
        self.hidden = hidden
        self.hiding = False  # inside a hidden element: its text is code, not read by the model
        self.xml = xml
        self.text: list[str] = []
        self.length = 0
        self.root = Element("", "", "")
        self.stack = [self.root]
        self.entities: dict[str, str] = {}
        self.opaque_depth = 0  # > 0 inside an opaque element: its markup is recorded, not parsed into elements
        self.opaque_raw: list[str] = []
        self.breaks: set[int] = set()
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", source)]

    def _end_tag_text(self, tag: str) -> str:
        """The end tag being read, as the source wrote it ("</B\n>" stays so: every byte outside the text is kept)."""
        line, column = self.getpos()
        match = re.compile(r"</[^>]*>").match(self.source, self.line_starts[line - 1] + column)
        return match.group(0) if match else f"</{tag}>"

    def _word_follows(self, start_tag: str) -> bool:
        """Whether the text after the start tag being read (and any tags right after it) starts with a letter
        or digit."""
        line, column = self.getpos()
        after = self.line_starts[line - 1] + column + len(start_tag)
        first = FIRST_CHARACTER_AFTER_TAGS.match(self.source, after)
        return first is not None and first.group(1).isalnum()

    # -- text ---------------------------------------------------------------------------------------
    def _add_text(self, text: str, raw: str) -> None:
        if self.opaque_depth:
            self.opaque_raw.append(raw)
            if self.hiding:
                return
        self.text.append(text)
        self.length += len(text)

    def handle_data(self, data: str) -> None:
        self._add_text(data, data)

    def handle_entityref(self, name: str) -> None:
        raw = f"&{name};"
        char = html.unescape(raw)
        if char == raw:  # not an entity html knows: keep it as it is
            self._add_text(raw, raw)
            return
        self.entities.setdefault(char, raw)
        self._add_text(char, raw)

    def handle_charref(self, name: str) -> None:
        raw = f"&#{name};"
        char = html.unescape(raw)
        self.entities.setdefault(char, raw)
        self._add_text(char, raw)

    # -- tags ---------------------------------------------------------------------------------------
    def _raw_name(self, raw: str, fallback: str) -> str:
        match = re.match(r"</?\s*([^\s/>]+)", raw)
        return match.group(1) if match else fallback

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        raw = self.get_starttag_text() or f"<{tag}>"
        name = self._raw_name(raw, tag)
        if self.opaque_depth:
            self.opaque_raw.append(raw)
            if (name if self.xml else tag) == self.stack[-1].name:
                self.opaque_depth += 1
            return
        void = not self.xml and tag in VOID
        siblings = self.stack[-1].children
        joined = (
            bool(siblings)
            and siblings[-1].start < siblings[-1].end == self.length
            and not void
            and self.text[-1][-1:].isalnum()
            and self._word_follows(raw)
        )
        if joined:
            self._separate()
        element = Element(name if self.xml else tag, raw, "", start=self.length, end=self.length, joined=joined)
        if tag in BREAKS and not self.xml:
            self._separate()
        self.stack[-1].children.append(element)
        if void:
            return
        self.stack.append(element)
        if tag in self.hidden or self.is_opaque(tag, dict(attrs)):
            self.opaque_depth = 1
            self.opaque_raw = [raw]
            self.hiding = tag in self.hidden

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        raw = self.get_starttag_text() or f"<{tag}/>"
        if self.opaque_depth:
            self.opaque_raw.append(raw)
            return
        element = Element(self._raw_name(raw, tag), raw, "", start=self.length, end=self.length)
        self.stack[-1].children.append(element)
        if tag in BREAKS and not self.xml:
            self._separate()

    def handle_endtag(self, tag: str) -> None:
        names = [e.name.lower() if not self.xml else e.name for e in self.stack[1:]]
        wanted = tag if not self.xml else None
        if self.opaque_depth:
            top = self.stack[-1]
            raw = self._end_tag_text(tag)
            self.opaque_raw.append(raw)
            if top.name.lower() == tag:
                self.opaque_depth -= 1
                if not self.opaque_depth:
                    self.hiding = False
                    top.opaque = "".join(self.opaque_raw)
                    top.close = raw
                    top.end = self.length
                    self.stack.pop()
            return
        key = wanted if wanted is not None else tag
        matches = [i for i, name in enumerate(names) if name.lower() == key.lower()]
        raw = self._end_tag_text(tag)
        if not matches:  # an end tag nothing opened: kept where it was, as a lone tag
            self.stack[-1].children.append(Element(tag, raw, "", start=self.length, end=self.length))
            return
        depth = matches[-1] + 1
        while len(self.stack) > depth + 1:  # elements left open inside it end here, as browsers end them
            self._end(self.stack.pop(), "")
        element = self.stack.pop()
        self._end(element, raw)

    def _end(self, element: Element, close: str) -> None:
        element.close = close
        element.end = self.length

    def _separate(self) -> None:
        """A line break between two words: the plain text gets a space there."""
        if self.text and not self.text[-1][-1:].isspace():
            self.breaks.add(self.length)
            self.text.append(" ")
            self.length += 1

    def handle_comment(self, data: str) -> None:
        self._lone(f"<!--{data}-->")

    def handle_decl(self, decl: str) -> None:
        self._lone(f"<!{decl}>")

    def handle_pi(self, data: str) -> None:
        self._lone(f"<?{data}>")

    def unknown_decl(self, data: str) -> None:
        if data.startswith("CDATA["):
            self._add_text(data[len("CDATA[") :], f"<![{data}]]>")
            return
        self._lone(f"<![{data}]>")

    def _lone(self, raw: str) -> None:
        if self.opaque_depth:
            self.opaque_raw.append(raw)
            return
        self.stack[-1].children.append(Element("", raw, "", start=self.length, end=self.length))

    def finish(self) -> Fragment:
        self.close()
        while len(self.stack) > 1:  # left open at the end of the fragment: ends there (no end tag added)
            element = self.stack.pop()
            if self.opaque_depth and element.opaque is None:
                element.opaque = "".join(self.opaque_raw)
                self.opaque_depth = 0
            self._end(element, "")
        self.root.end = self.length
        text = "".join(self.text)
        for element in self.root.walk():
            own = text[element.start : element.end].strip()
            if own:
                element.punctuation_outside = (not LEADING_PUNCTUATION.search(own), not TRAILING_PUNCTUATION.search(own))
        mark_edges(self.root, text)
        return Fragment(text, self.root, self.entities, frozenset(self.breaks))


def mark_edges(root: Element, text: str) -> None:
    """Which side of a space each element sits on."""
    for element in root.walk():
        element.glued_left = element.start > 0 and not text[element.start - 1].isspace()
        element.glued_right = element.end < len(text) and not text[element.end].isspace()


# Classes that say an element holds a name or code: DocBook's HTML writes its markup as classes
# (<B CLASS="COMMAND">portmap</B>, <SPAN CLASS="APPLICATION">), as do many generators.
NAME_CLASSES = CODE | frozenset("notranslate application productname".split())
# DITA elements whose content comes from a key or another topic: a product name, kept as written.
_KEYED = ("keyref", "conkeyref", "conref")


def html_opaque(tag: str, attrs: dict[str, str | None]) -> bool:
    """Whether an HTML element's content is kept as written: code, ``translate="no"``, a class that names code
    or a name (``class="notranslate"``, DocBook's ``CLASS="COMMAND"``), a DITA element filled from a key."""
    if tag in CODE:
        return True
    if (attrs.get("translate") or "").strip().lower() == "no":
        return True
    if any(attrs.get(key) for key in _KEYED):
        return True
    return bool(NAME_CLASSES & set((attrs.get("class") or "").lower().split()))


def kept_as_code(names: frozenset[str]) -> Callable[[str, dict[str, str | None]], bool]:
    """:func:`html_opaque`, with the elements ``names`` (``--keep-tags``) kept as written too."""
    if not names:
        return html_opaque
    return lambda tag, attrs: tag in names or html_opaque(tag, attrs)


def parse(source: str, is_opaque=html_opaque, xml: bool = False, hidden: frozenset[str] = frozenset()) -> Fragment:
    """A fragment's plain text and element tree (see the module's docstring); the content of ``hidden``
    elements is code the model never reads (XLIFF's native codes), kept as written."""
    parser = _Parser(source, is_opaque, xml, hidden)
    try:
        parser.feed(source)
        return parser.finish()
    except (AssertionError, ValueError):  # html.parser gives up on some broken declarations ("<![x")
        # then the fragment is text: translated, and its "<" written as "&lt;"
        return Fragment(source, Element("", "", "", 0, len(source)), {})


def tag_tree(fragment: str, xml: bool = False) -> list:
    """A fragment's elements as a nested structure, children in sorted order (a translation may move
    siblings, never change parents): equal for two fragments with the same tags."""

    def shape(element: Element) -> tuple:
        return (element.open, element.close, element.opaque, tuple(sorted((shape(c) for c in element.children), key=repr)))

    root = parse(fragment, html_opaque, xml).root
    return sorted((shape(c) for c in root.children), key=repr)
