"""Inline markup: a fragment's tags taken off, its text translated as plain sentences, the tags put back.

This is how Bergamot (Firefox's translator) handles HTML, with one difference that matters to users:
every element comes back exactly once, well-formed, with the same parent, so the output has the
source's tag tree (Bergamot may split one tag over two places, or put one inside a word).

1. ``parse`` (``markup_tree.py``): the fragment (an HTML or XML snippet) becomes its plain text (entities decoded) and a tree
   of elements, each covering a range of that text. Elements whose content must not be translated
   (``<code>``, ``translate="no"``, XLIFF's inline codes...) are *opaque*: the model sees their text, the
   output gets their original markup back in its place.
2. The plain text is cut into sentences where no element runs across the cut, and each sentence is
   translated with its word alignment (source word -> target word, from the model's cross-attention).
3. ``project``: each element gets a contiguous range of target words inside its parent's range. The
   children of one element are laid out in the order their aligned words suggest, and where the
   alignment is noisy the range that disagrees with the fewest aligned words wins (a small dynamic
   programme), so a tag never lands inside a word and never overlaps a sibling. An element with no
   words (``<br/>``, an empty ``<span>``) stays next to the word it was next to in the source.
4. ``render``: the target words with the elements' tags around their ranges; characters the source
   wrote as entities are written as the same entities, ``&``, ``<`` and ``>`` are escaped.
"""

from __future__ import annotations

import dataclasses
import difflib
import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .markup_tree import (
    LEADING_PUNCTUATION,
    TRAILING_PUNCTUATION,
    Element,
    Fragment,
    html_opaque,
    mark_edges,
    parse,
)
from .placeholders import TEXT_PLACEHOLDER, adjacent_in_order, placeholders, repair
from .protect import has_words, masks, protected_spans, unglued, unmask
from .segments import Aligned, Sentences, TranslateSentences, as_sentences, split_sentences

WORD = re.compile(r"\S+")
ENTITY_AT_END = re.compile(r"&#?\w+;$")


# -- protection --------------------------------------------------------------------------------------


def mask_fragment(
    fragment: Fragment, kept: Callable[[str], list[tuple[int, int]]] | None = None
) -> tuple[Fragment, dict[str, str]]:
    """The fragment as the model reads it: the text of each code element, and each path, number or other
    protected span of its text (``protect.py``) that no element boundary cuts, replaced by a mask; and the
    markup each mask stands for. A masked code element leaves the tree: its mask is its place."""
    text = fragment.text
    opaque = [e for e in _topmost_opaque(fragment.root) if text[e.start : e.end].strip()]
    spans = {(e.start, e.end): e for e in opaque}
    edges = {o for e in fragment.root.walk() if e is not fragment.root and e not in spans.values() for o in (e.start, e.end)}
    names = kept(text) if kept is not None else []  # --keep-terms: come back whole, end where they end
    for start, end in [*names, *_names(fragment.root, text), *protected_spans(text)]:
        crossed = any(start < o < end for o in edges) or any(start < o < end for o in fragment.breaks)
        if not crossed and not any(a < end and start < b for a, b in spans):
            spans[(start, end)] = None
    if not spans:
        return fragment, {}
    fresh = iter(masks(text))
    moved: dict[int, int] = {}  # old offset -> new offset, for offsets outside the masked spans
    out, replacements, at, shift = [], {}, 0, 0
    for (start, end), element in sorted(spans.items()):
        token = next(fresh)
        replacements[token] = element.opaque or "" if element is not None else _escape(text[start:end], fragment.entities)
        out.append(text[at:start] + token)
        for offset in range(at, start + 1):
            moved[offset] = offset + shift
        shift += len(token) - (end - start)
        at = end
    out.append(text[at:])
    for offset in range(at, len(text) + 1):
        moved[offset] = offset + shift
    new_text = "".join(out)
    # No element edge or break is inside a masked span (a code element's own edges go with it).
    removed = {id(e) for e in opaque}
    root = _remapped(fragment.root, moved.__getitem__, removed)
    mark_edges(root, new_text)
    return Fragment(new_text, root, fragment.entities, frozenset(moved[b] for b in fragment.breaks)), replacements


# A definition term of one identifier (a user name "bin", "www-data", a command in a list of commands)
_IDENTIFIER = re.compile(r"[a-z0-9_][\w.+@-]*|[\w.+@-]*[\d_][\w.+@-]*")
# A DITA phrase of capitalised words and versions ("Data Loader v.30", "Salesforce"): a product name
_PRODUCT = re.compile(r"(?:[A-Z0-9][\w.+&'-]*)(?:\s+[A-Z0-9v][\w.+&'-]*)*")


def holds_a_name(element: str, text: str) -> bool:
    """Whether an element named ``element`` whose text is ``text`` holds a name (kept as written): a ``<dt>`` of
    one identifier, a ``<ph>`` of capitalised words. One rule for tagged lines and whole pages."""
    core, element = text.strip(), element.lower()
    return bool((element == "dt" and _IDENTIFIER.fullmatch(core)) or (element == "ph" and _PRODUCT.fullmatch(core)))


def _names(root: Element, text: str) -> list[tuple[int, int]]:
    """The text of elements that hold a name by what they hold: a ``<dt>`` of one identifier, a ``<ph>`` of
    capitalised words. Masked like a path, so they come back as written."""
    spans = []
    for element in root.walk():
        content = text[element.start : element.end]
        name = element.name.lower()
        if element.children or not content.strip():
            continue
        core = content.strip()
        if holds_a_name(name, core):
            start = element.start + len(content) - len(content.lstrip())
            spans.append((start, start + len(core)))
    return spans


def _topmost_opaque(element: Element):
    for child in element.children:
        if child.opaque is not None:
            yield child
        else:
            yield from _topmost_opaque(child)


def _remapped(element: Element, place: Callable[[int], int], removed: set[int]) -> Element:
    children = [_remapped(c, place, removed) for c in element.children if id(c) not in removed]
    return dataclasses.replace(element, start=place(element.start), end=place(element.end), children=children)


# -- sentences ---------------------------------------------------------------------------------------


def _cuts(fragment: Fragment, language: str | None) -> list[int]:
    """Plain-text offsets where the fragment may be cut into sentences: sentence ends no element spans
    (no cuts when ``language`` is None: the fragment is one sentence)."""
    if language is None:
        return [0, len(fragment.text)]
    spans = [(e.start, e.end) for e in fragment.root.walk() if e is not fragment.root]
    cuts, at = [0], 0
    pieces = split_sentences(fragment.text, language)
    for piece in pieces[:-1]:
        at += len(piece)
        if not any(start < at < end for start, end in spans):
            cuts.append(at)
    cuts.append(len(fragment.text))
    return cuts


@dataclass
class _Unit:
    """One sentence of a fragment: the plain text from ``start`` to ``end`` and the elements in it."""

    start: int
    end: int
    elements: list[Element]


def _units(fragment: Fragment, language: str | None) -> list[_Unit]:
    cuts = _cuts(fragment, language)
    units = [_Unit(start, end, []) for start, end in zip(cuts, cuts[1:])]
    for child in fragment.root.children:
        for k, unit in enumerate(units):
            last = k == len(units) - 1
            if unit.start <= child.start and (child.end <= unit.end) and (child.start < unit.end or last):
                unit.elements.append(child)
                break
    return units


# -- projection --------------------------------------------------------------------------------------


@dataclass
class _Words:
    """A text cut into words (runs of non-space), each with its offsets."""

    text: str
    spans: list[tuple[int, int]]

    @staticmethod
    def of(text: str) -> _Words:
        return _Words(text, [m.span() for m in WORD.finditer(text)])

    def covering(self, start: int, end: int) -> range:
        """The words that overlap ``start``..``end`` (an empty range for an empty span)."""
        if start >= end:
            return range(0)
        inside = [i for i, (a, b) in enumerate(self.spans) if a < end and b > start]
        return range(inside[0], inside[-1] + 1) if inside else range(0)

    def before(self, offset: int) -> int:
        """How many words start before ``offset``."""
        return sum(1 for a, _ in self.spans if a < offset)

    def cut_at(self, offsets: set[int]) -> _Words:
        """The words cut into pieces at ``offsets`` inside them (where an element starts or ends in a word)."""
        pieces: list[tuple[int, int]] = []
        for a, b in self.spans:
            cuts = [a, *sorted(o for o in offsets if a < o < b), b]
            pieces.extend(zip(cuts, cuts[1:]))
        return _Words(self.text, pieces)


def _pieces(
    core: str, source_words: _Words, source: _Words, target_words: _Words, links: list[tuple[int, int]]
) -> tuple[_Words, list[tuple[int, int]]]:
    """The target cut like the source, and the links between pieces. Where the source has an element boundary
    inside a word ("std_<wbr>detect", "<a>Rust</a>1.95") and the model copied that word, the copy is cut
    at the same places, piece linked to piece, so the markup inside the word comes back exactly; any other
    target word is one piece, linked to the longest piece of its source word."""
    pieces_of = [
        [p for p, (a, b) in enumerate(source.spans) if start <= a and b <= end] for start, end in source_words.spans
    ]
    to_source = _first_links(links)
    spans: list[tuple[int, int]] = []
    linked: list[tuple[int, int]] = []
    first_piece: dict[int, int] = {}  # target word -> its first piece
    for j, (a, b) in enumerate(target_words.spans):
        first_piece[j] = len(spans)
        i = to_source.get(j)
        if i is None:
            spans.append((a, b))
            continue
        start, end = source_words.spans[i]
        if len(pieces_of[i]) > 1 and target_words.text[a:b] == core[start:end]:
            for p in pieces_of[i]:
                linked.append((p, len(spans)))
                spans.append((a + source.spans[p][0] - start, a + source.spans[p][1] - start))
            continue
        linked.append((_longest(pieces_of[i], source), len(spans)))
        spans.append((a, b))
    # the extra links (a source word no target word chose, linked to its best target word) follow
    linked += [(_longest(pieces_of[i], source), first_piece[j]) for i, j in links if to_source.get(j) != i]
    return _Words(target_words.text, spans), linked


def _longest(pieces: list[int], source: _Words) -> int:
    return max(pieces, key=lambda p: source.spans[p][1] - source.spans[p][0])


@dataclass
class _Placed:
    """An element and the target words it wraps, ``lo`` to ``hi`` (equal: no words, placed before word ``lo``)."""

    element: Element
    lo: int
    hi: int
    children: list[_Placed]


def project(element: Element, source: _Words, target: _Words, links: list[tuple[int, int]], lo: int, hi: int) -> _Placed:
    """``element`` over target words ``lo``..``hi``, its descendants placed inside (module docstring, step 3)."""
    to_source = _first_links(links)
    spans = [source.covering(c.start, c.end) for c in element.children]
    claims: list[int | None] = [None] * (hi - lo)  # per target word: the child that its aligned source word belongs to
    for j in range(lo, hi):
        i = to_source.get(j)
        if i is None:
            continue
        owner = next((k for k, span in enumerate(spans) if i in span), -1)
        claims[j - lo] = owner
    _no_element_left_empty(claims, element.children, spans, links, lo)
    claimed = {k: [j for j, owner in enumerate(claims) if owner == k] for k in range(len(spans))}
    ordered = sorted((k for k in claimed if claimed[k]), key=lambda k: sum(claimed[k]) / len(claimed[k]))
    ranges = _layout(claims, ordered) if len(ordered) <= hi - lo else {}
    _grown(ranges, {k: _leaves(child, spans[k]) for k, child in enumerate(element.children)}, hi - lo)
    placed: list[_Placed] = []
    for k, child in enumerate(element.children):
        if k in ranges:
            a, b = ranges[k]
            placed.append(project(child, source, target, links, lo + a, lo + b))
        else:
            at = _anchor(child, source, to_source, links, lo, hi)
            at = _outside(at, [(lo + a, lo + b) for a, b in ranges.values()])
            placed.append(_Placed(child, at, at, [project(c, source, target, links, at, at) for c in child.children]))
    placed.sort(key=lambda p: (p.lo, p.hi > p.lo))
    return _Placed(element, lo, hi, placed)


def _first_links(links: list[tuple[int, int]]) -> dict[int, int]:
    """Each target word's source word: its first link (an aligner lists each target word's best link first,
    then extra links for source words no target word chose)."""
    to_source: dict[int, int] = {}
    for i, j in links:
        to_source.setdefault(j, i)
    return to_source


def _no_element_left_empty(
    claims: list[int | None], children: list[Element], spans: list[range], links: list[tuple[int, int]], lo: int
) -> None:
    """Give each child that wraps source words as many target words as it has word-bearing leaves (at least
    one), so no element comes back empty: first the words its own source words link to (any link, the
    extra ones included), else those at its relative place, then their neighbours; taken from the parent's
    own text or from a child that keeps enough."""
    width = len(claims)
    n_source = max((span.stop for span in spans if span), default=1)
    needs = [_leaves(child, span) for child, span in zip(children, spans)]

    def free(j: int) -> bool:
        owner = claims[j]
        return owner is None or owner == -1 or claims.count(owner) > needs[owner]

    for k, span in enumerate(spans):
        if not span:
            continue
        linked = [j - lo for i, j in links if i in span and 0 <= j - lo < width]
        middle = (span.start + span.stop) / 2 / max(n_source, 1)
        goals = linked or [min(width - 1, int(middle * width))]
        while claims.count(k) < needs[k]:
            mine = [j for j in range(width) if claims[j] == k]
            choices = [j for j in range(width) if claims[j] != k and free(j)]
            if not choices:
                break
            near = mine or goals
            claims[min(choices, key=lambda j: (min(abs(j - g) for g in near), j))] = k


def _grown(ranges: dict[int, tuple[int, int]], needs: dict[int, int], width: int) -> None:
    """Each child's range grown over the parent's own words beside it until it has a word for each element
    inside it that has words (the layout may give a menu cascade one word for its two controls)."""
    for k, (a, b) in list(ranges.items()):
        taken = [r for other, r in ranges.items() if other != k]
        while b - a < needs.get(k, 1):
            if b < width and not any(x <= b < y for x, y in taken):
                b += 1
            elif a > 0 and not any(x <= a - 1 < y for x, y in taken):
                a -= 1
            else:
                break
        ranges[k] = (a, b)


def _leaves(element: Element, span: range) -> int:
    """How many target words an element needs so that it and every element inside it that has words get one."""
    if not span:
        return 0
    inner = [c for c in element.children if c.end > c.start]
    return max(1, sum(max(1, len(_plain_children(c))) for c in inner)) if inner else 1


def _plain_children(element: Element) -> list[Element]:
    return [c for c in element.children if c.end > c.start]


def _layout(claims: list[int | None], ordered: list[int]) -> dict[int, tuple[int, int]]:
    """Contiguous, ordered, non-empty word ranges for the children ``ordered`` that disagree with the fewest
    claims (a word claimed by child k, or by the parent's own text as -1; None claims nothing)."""
    n, k = len(claims), len(ordered)
    if k == 0:
        return {}
    states = 2 * k + 1  # even s: the gap after child s // 2 (the parent's own text); odd s: inside child s // 2
    big = n + 1

    def cost(word: int, state: int) -> int:
        claim = claims[word]
        if claim is None:
            return 0
        wanted = ordered[state // 2] if state % 2 else -1
        return 0 if claim == wanted else 1

    best = [[big] * states for _ in range(n)]
    came = [[0] * states for _ in range(n)]
    for s in (0, 1):
        best[0][s] = cost(0, s)
    for word in range(1, n):
        for s in range(states):
            options = [s - 1, s] + ([s - 2] if s % 2 else [])  # a child may follow the previous one directly
            prev = min((p for p in options if p >= 0), key=lambda p: best[word - 1][p])
            if best[word - 1][prev] < big:
                best[word][s] = best[word - 1][prev] + cost(word, s)
                came[word][s] = prev
    end = min((states - 1, states - 2), key=lambda s: best[n - 1][s])
    ranges: dict[int, list[int]] = {}
    state = end
    for word in range(n - 1, -1, -1):
        if state % 2:
            ranges.setdefault(ordered[state // 2], []).append(word)
        state = came[word][state] if word else state
    return {child: (min(words), max(words) + 1) for child, words in ranges.items()}


def _anchor(child: Element, source: _Words, to_source: dict[int, int], links, lo: int, hi: int) -> int:
    """Where an element with no aligned words goes: after the target words aligned to the source word
    before it, else before those aligned to the word after it, else at the same relative place."""
    before = source.before(child.start)
    after_previous = [j for i, j in links if i == before - 1 and lo <= j < hi]
    if child.glued_left and after_previous:
        return max(after_previous) + 1
    following = [j for i, j in links if i == before and lo <= j < hi]
    if following:
        return min(following)
    if after_previous:
        return max(after_previous) + 1
    share = before / max(len(source.spans), 1)
    return lo + round(share * (hi - lo))


def _outside(at: int, taken: list[tuple[int, int]]) -> int:
    """``at`` moved out of any sibling's range, to that range's nearer edge."""
    for a, b in taken:
        if a < at < b:
            return a if at - a <= b - at else b
    return at


# -- rendering ---------------------------------------------------------------------------------------


def _escape(text: str, entities: dict[str, str]) -> str:
    out = []
    for char in text:
        if char in entities:
            out.append(entities[char])
        elif char in "&<>":
            out.append(html.escape(char, quote=False))
        else:
            out.append(char)
    return "".join(out)


def render(placed: _Placed, target: _Words, entities: dict[str, str]) -> str:
    """An element over its target words, its tags around them (an opaque one as the source wrote it)."""
    element = placed.element
    inner = _render_level(placed, target, entities)
    before = after = ""
    if element.punctuation_outside[1] and not ENTITY_AT_END.search(inner):
        cut = TRAILING_PUNCTUATION.search(inner)
        if cut and cut.start() > 0:
            inner, after = inner[: cut.start()], inner[cut.start() :]
    if element.punctuation_outside[0]:
        cut = LEADING_PUNCTUATION.match(inner)
        if cut and cut.end() < len(inner):
            before, inner = inner[: cut.end()], inner[cut.end() :]
    if element.opaque is not None:  # kept as written, in place of its words (the punctuation around them stays)
        return before + element.opaque + after
    return before + element.open + inner + element.close + after


def _render_level(placed: _Placed, target: _Words, entities: dict[str, str]) -> str:
    """The words ``placed.lo``..``placed.hi`` and the children placed over them, with the target's spacing.

    The space after a word belongs to the level that holds both words around it, so a closing tag
    comes right after its last word and an opening tag right before its first. An element with no
    words goes on the side of the space it was on in the source."""
    spanning = {child.lo: child for child in placed.children if child.hi > child.lo}
    empty: dict[int, list[_Placed]] = {}
    for child in placed.children:
        if child.hi == child.lo:
            empty.setdefault(child.lo, []).append(child)
    out: list[str] = []
    at = placed.lo
    element_ended = -1  # where the last element written ended (a joined sibling right after it takes no space)
    while True:
        gap = target.text[target.spans[at - 1][1] : target.spans[at][0]] if placed.lo < at < placed.hi else ""
        if at == element_ended and at in spanning and spanning[at].element.joined and gap.isspace():
            gap = ""
        wordless = empty.get(at, [])
        out.extend(render(c, target, entities) for c in wordless if c.element.glued_left)
        out.append(_escape(gap, entities))
        for child in wordless:
            if not child.element.glued_left:
                out.append(render(child, target, entities))
                if gap and not child.element.glued_right:
                    out.append(" ")
        if at >= placed.hi:
            return "".join(out)
        if at in spanning:
            out.append(render(spanning[at], target, entities))
            at = element_ended = spanning[at].hi
        else:
            a, b = target.spans[at]
            out.append(_escape(target.text[a:b], entities))
            at += 1


# -- the whole thing ---------------------------------------------------------------------------------


def _relinked(source: str, before: str, after: str, links: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Alignment links moved from the words of ``before`` to those of ``after`` (a placeholder repair
    inserted or removed words); a word the repair put in is linked to the source word holding the same
    placeholder, so it lands inside the same element."""
    old, new, words = before.split(), after.split(), source.split()
    moved: dict[int, int] = {}
    for block in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_matching_blocks():
        for offset in range(block.size):
            moved[block.a + offset] = block.b + offset
    relinked = [(i, moved[j]) for i, j in links if j in moved]
    used: set[int] = set()
    for j in sorted(set(range(len(new))) - set(moved.values())):
        codes = placeholders(new[j], TEXT_PLACEHOLDER)
        holders = [i for i, word in enumerate(words) if codes and codes[0] in word and i not in used]
        if holders:
            used.add(holders[0])
            relinked.append((holders[0], j))
    return relinked


def _pinned(source: str, target: str, links: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The links with each target word that holds a placeholder linked to the source word holding the same
    one (a placeholder is where it is, whatever the attention says), so a masked code span lands inside
    the element that held it."""
    words = source.split()
    holders: dict[str, int] = {}
    for i, word in enumerate(words):
        for code in placeholders(word, TEXT_PLACEHOLDER):
            holders.setdefault(code, i)
    pinned = {}
    for j, word in enumerate(target.split()):
        codes = [c for c in placeholders(word, TEXT_PLACEHOLDER) if c in holders]
        if codes:
            pinned[j] = holders[codes[0]]
    if not pinned:
        return links
    return [(i, j) for j, i in pinned.items()] + [(i, j) for i, j in links if j not in pinned]


def translate_fragments(
    fragments: Sequence[str],
    sentences: Sentences | TranslateSentences,
    language: str | None,
    xml: bool = False,
    is_opaque: Callable[[str, dict[str, str | None]], bool] = html_opaque,
    hidden: frozenset[str] = frozenset(),
) -> list[str]:
    """Each fragment translated with its markup kept (the module's docstring); all sentences of all
    fragments go to the translator in one call. ``language`` (the source's) splits a fragment into
    sentences; None keeps each fragment one sentence."""
    sentences = as_sentences(sentences)
    parsed = [mask_fragment(parse(f, is_opaque, xml, hidden), sentences.kept) for f in fragments]
    plans = [(fragment, replacements, _units(fragment, language)) for fragment, replacements in parsed]
    # The model reads each sentence on one line, spaces collapsed; its words are the same.
    texts = [" ".join(fragment.text[u.start : u.end].split()) for fragment, _, units in plans for u in units]
    todo = [t for t in texts if has_words(t)]
    done = iter(sentences.aligned(todo) if todo else [])
    translated: list[Aligned | None] = [
        next(done) if has_words(text) else (text, [(i, i) for i in range(len(text.split()))]) if text else None
        for text in texts
    ]
    out, at = [], 0
    for fragment, replacements, units in plans:
        pieces = []
        for unit in units:
            pieces.append(_unit_markup(fragment, unit, translated[at], replacements))
            at += 1
        out.append(unmask("".join(pieces), replacements))
    return out


def _unit_markup(fragment: Fragment, unit: _Unit, translated: Aligned | None, originals: dict[str, str]) -> str:
    """One sentence of a fragment, translated, with its elements put back (``originals``: what each mask stands
    for, to take off what the model glued onto it)."""
    text = fragment.text[unit.start : unit.end]
    core_start = unit.start + len(text) - len(text.lstrip())
    core = text.strip()
    core_end = core_start + len(core)
    # Elements in the whitespace around the sentence (an image before a caption) stay outside it.
    before = [e for e in unit.elements if e.end <= core_start and (core or e.start < unit.end)]
    after = [e for e in unit.elements if e.start >= core_end and e not in before]
    inside = [e for e in unit.elements if e not in before and e not in after]
    root = Element("", "", "", unit.start, unit.end, children=_shifted(inside, core_start))
    target_text, links = translated if translated is not None else ("", [])
    mended = adjacent_in_order(core, repair(core, target_text, TEXT_PLACEHOLDER), TEXT_PLACEHOLDER)
    mended = unglued(mended, core, TEXT_PLACEHOLDER, originals)
    if mended != target_text:
        links = _relinked(core, target_text, mended, links)
    links = _pinned(core, mended, links)
    source_words, target_words = _Words.of(core), _Words.of(mended)
    links = [(i, j) for i, j in links if i < len(source_words.spans) and j < len(target_words.spans)]
    boundaries = {offset for e in _walk_all(root.children) for offset in (e.start, e.end)}
    source = source_words.cut_at(boundaries)
    target, links = _pieces(core, source_words, source, target_words, links)
    placed = project(root, source, target, links, 0, len(target.spans))

    def edge(elements: list[Element], start: int, end: int) -> str:
        """Whitespace around the sentence with the elements in it, each at its place."""
        out = []
        for offset in range(start, end + 1):
            for element in elements:
                if element.start == offset or (offset == start and element.start < start):
                    out.append(render(project(element, source, target, [], 0, 0), target, fragment.entities))
            if offset < end and offset not in fragment.breaks:
                out.append(_escape(fragment.text[offset], fragment.entities))
        return "".join(out)

    return (
        edge(before, unit.start, core_start)
        + _render_level(placed, target, fragment.entities)
        + edge(after, core_end, unit.end if core else core_end)
    )


def _walk_all(elements: list[Element]):
    for element in elements:
        yield from element.walk()


def _shifted(elements: list[Element], by: int) -> list[Element]:
    """Copies of ``elements`` (and their descendants) with offsets relative to ``by``."""
    return [
        dataclasses.replace(e, start=max(e.start - by, 0), end=max(e.end - by, 0), children=_shifted(e.children, by))
        for e in elements
    ]


def strip(fragment: str, xml: bool = False) -> str:
    """A fragment's plain text (tags removed, entities decoded, code and other protected spans masked): what
    the model reads."""
    return mask_fragment(parse(fragment, html_opaque, xml))[0].text
