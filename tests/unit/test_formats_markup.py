"""Tag projection (``formats/markup.py``): tags come back once each, well-formed, on the aligned words.

The translator here is a table: each source sentence's translation and the word alignment a model would
give, so each case says exactly where the tags must land.
"""

from __future__ import annotations

import random
import re
from html.parser import HTMLParser

import pytest

from nmt_cli.formats.markup import strip, translate_fragments
from nmt_cli.formats.markup_tree import tag_tree
from nmt_cli.formats.segments import Sentences


def table(entries: dict[str, tuple[str, str]]) -> Sentences:
    """A translator from a table: source sentence -> (translation, Pharaoh links 'i-j ...')."""

    def align(sentences: list[str]):
        out = []
        for sentence in sentences:
            text, links = entries[sentence]
            out.append((text, [tuple(map(int, pair.split("-"))) for pair in links.split()]))
        return out

    return Sentences(lambda sentences: [t for t, _ in align(sentences)], align)


def one(fragment: str, translation: str, links: str, language: str | None = None) -> str:
    return translate_fragments([fragment], table({" ".join(strip(fragment).split()): (translation, links)}), language)[0]


class Balanced(HTMLParser):
    """Whether a fragment's non-void tags open and close in nested order."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.ok = True

    def handle_starttag(self, tag, attrs):
        if tag not in ("br", "img"):
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        pass

    def handle_endtag(self, tag):
        self.ok = self.ok and bool(self.stack) and self.stack.pop() == tag


def balanced(fragment: str) -> bool:
    parser = Balanced()
    parser.feed(fragment)
    return parser.ok and not parser.stack


def test_tags_follow_reordered_words():
    out = one("the <b>red</b> <i>car</i>", "la voiture rouge", "0-0 2-1 1-2")
    assert out == "la <i>voiture</i> <b>rouge</b>"


def test_nested_elements_keep_their_parent_and_attributes():
    source = 'Click <a href="/x?a=1&amp;b=2">this <b>link</b></a> now.'
    out = one(source, "Klicken Sie jetzt auf diesen Link.", "0-0 0-1 3-2 0-3 1-4 2-5")
    assert out == 'Klicken Sie jetzt auf <a href="/x?a=1&amp;b=2">diesen <b>Link</b></a>.'
    assert tag_tree(out) == tag_tree(source)


def test_noisy_alignment_still_gives_one_contiguous_element():
    # "important" aligned to two distant words: the element takes one contiguous range, never two copies
    source = "This is <b>very important</b> news for you"
    out = one(source, "Das sind sehr wichtige Nachrichten für dich", "0-0 1-1 2-2 3-3 4-4 5-5 3-6")
    assert out.count("<b>") == 1 and out.count("</b>") == 1
    assert tag_tree(out) == tag_tree(source) and balanced(out)
    assert "<b>sehr wichtige</b>" in out


def test_code_is_kept_as_written_and_entities_as_the_source_wrote_them():
    source = "Run <code>make&nbsp;all</code> &amp; wait&nbsp;now"
    out = one(source, "Führe %s aus & warte jetzt", "0-0 1-1 0-2 2-3 3-4 4-5")
    assert "<code>make&nbsp;all</code>" in out
    assert "&amp;" in out and "&" not in out.replace("&amp;", "").replace("&nbsp;", "")


def test_a_wordless_element_stays_beside_its_neighbour_word():
    out = one("First line<br/>second line", "Erste Zeile zweite Zeile", "0-0 1-1 2-2 3-3")
    assert out.startswith("Erste Zeile<br/>")
    assert tag_tree(out) == tag_tree("First line<br/>second line")


def test_punctuation_outside_the_tags_stays_outside():
    out = one('Go <a href="/">home</a>!', "Geh nach Hause!", "0-0 1-1 1-2")
    assert out == 'Geh <a href="/">nach Hause</a>!'


def test_a_placeholder_the_model_dropped_comes_back_and_the_tags_still_fit():
    source = "Delete <b>%s</b> now?"
    out = one(source, "Jetzt löschen?", "2-0 0-1")
    assert "%s" in out and tag_tree(out) == tag_tree(source)


def test_broken_markup_is_read_as_it_is_and_kept():
    for source in ("bad </b> end tag", "an <i>unclosed tag", "<b>overlap <i>wrong</b> order</i>"):
        words = strip(source).split()
        out = one(source, " ".join(w.upper() for w in words), " ".join(f"{i}-{i}" for i in range(len(words))))
        assert tag_tree(out) == tag_tree(source), (source, out)


def test_without_an_aligner_tags_follow_a_monotone_alignment():
    sentences = Sentences(lambda xs: [x.upper() for x in xs])
    out = translate_fragments(["one <b>two</b> three"], sentences, None)[0]
    assert out == "ONE <b>TWO</b> THREE"


def test_sentences_are_cut_only_where_no_element_spans_the_cut():
    calls: list[list[str]] = []

    def translate(xs: list[str]) -> list[str]:
        calls.append(xs)
        return [x.upper() for x in xs]

    source = "First one. <b>Second one. Still bold.</b> Last one."
    out = translate_fragments([source], Sentences(translate), "en")[0]
    assert calls == [["First one.", "Second one. Still bold.", "Last one."]]
    assert out == "FIRST ONE. <b>SECOND ONE. STILL BOLD.</b> LAST ONE."


@pytest.mark.parametrize("seed", range(20))
def test_any_alignment_gives_the_source_tag_tree(seed):
    """Random fragments, random translations and random (even absurd) alignments: every element comes
    back once, with its parent, well-formed."""
    rng = random.Random(seed)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()

    def fragment(depth: int) -> str:
        parts = []
        for _ in range(rng.randint(1, 4)):
            roll = rng.random()
            if roll < 0.25 and depth < 3:
                tag = rng.choice(["b", "i", "span", "a"])
                parts.append(f"<{tag}>{fragment(depth + 1)}</{tag}>")
            elif roll < 0.32:
                parts.append("<br/>")
            else:
                parts.append(" ".join(rng.sample(words, rng.randint(1, 3))))
        return " ".join(parts)

    source = fragment(0)
    n = len(strip(source).split())
    m = rng.randint(1, 2 * n + 1)
    links = " ".join(f"{rng.randrange(n)}-{j}" for j in range(m) if rng.random() < 0.8) if n else ""
    target = [f"w{chr(97 + j % 26)}{chr(97 + j // 26)}" for j in range(m)]  # letters only: nothing protected
    out = one(source, " ".join(target), links)
    assert tag_tree(out) == tag_tree(source), (source, out)
    assert balanced(out), out
    assert strip(out).split() == target or not n
    if m >= n:  # enough target words: every element that wrapped words wraps some
        assert "></" not in re.sub(r"<br/>", "", out) or "><" in re.sub(r"<br/>", "", source), (source, out)


def test_an_element_no_target_word_chose_still_gets_its_words():
    # the attention linked every target word to "select": both uicontrol elements would come back empty
    source = "select <menucascade><uicontrol>App Manager</uicontrol> <uicontrol>New App</uicontrol></menucascade>"
    out = one(source, "wählen Sie App-Manager Neue App", "0-0 0-1 0-2 0-3 0-4")
    assert tag_tree(out) == tag_tree(source)
    assert "<uicontrol></uicontrol>" not in out
    assert re.search(r"<uicontrol>[^<]*\w[^<]*</uicontrol> ?<uicontrol>[^<]*\w[^<]*</uicontrol>", out), out


def test_extra_links_say_where_an_unchosen_element_goes():
    # target word 2 chose "the"; the extra link 2-2 (the aligner's best word for "file") places <b>
    out = one("open the <b>file</b> now", "öffne jetzt die Datei", "0-0 3-1 1-2 1-3 2-3")
    assert out == "öffne jetzt die <b>Datei</b>"


def test_code_paths_and_numbers_are_never_shown_to_the_model():
    seen: list[str] = []

    def align(sentences):
        seen.extend(sentences)
        return [(s.replace("Edit", "Bearbeite"), [(i, i) for i in range(len(s.split()))]) for s in sentences]

    source = "Edit <tt>/etc/shadow</tt> or /etc/hosts on port 65535 with <kbd>Ctrl</kbd>+<kbd>S</kbd>."
    out = translate_fragments([source], Sentences(lambda xs: [t for t, _ in align(xs)], align), None)[0]
    assert not any(code in s for s in seen for code in ("/etc", "65535", "Ctrl", "shadow")), seen
    assert "<tt>/etc/shadow</tt>" in out and "/etc/hosts" in out and "65535" in out
    assert "<kbd>Ctrl</kbd>" in out and "<kbd>S</kbd>" in out and out.startswith("Bearbeite")


def test_end_tags_are_kept_byte_for_byte():
    source = "a <B>bold</B\n> word"
    assert one(source, "ein fettes Wort", "0-0 1-1 2-2") == "ein <B>fettes</B\n> Wort"


def test_siblings_written_without_a_space_are_two_words_to_the_model_and_stay_joined():
    source = "Select <menucascade><uicontrol>File</uicontrol><uicontrol>Open</uicontrol></menucascade> now."
    assert strip(source) == "Select File Open now."  # not "FileOpen": the model reads two words
    translated = table({"Select File Open now.": ("SELECT FILE OPEN NOW.", "0-0 1-1 2-2 3-3")})
    out = translate_fragments([source], translated, "en")[0]
    assert out == "SELECT <menucascade><uicontrol>FILE</uicontrol><uicontrol>OPEN</uicontrol></menucascade> NOW."
    # runs that carry their own spaces, and a tag inside a word, are read as written
    assert strip("<r>Click </r><r>this link</r><r> to go.</r>") == "Click this link to go."
    assert strip("<b>W</b>ord and <i>x</i><i>.</i>") == "Word and x."


def test_keep_tags_makes_more_elements_code():
    from nmt_cli.formats.markup_tree import kept_as_code

    source = "Press <keyword>Shift</keyword> and <b>go</b>."
    upper = Sentences(lambda xs: [x.upper() for x in xs])
    assert translate_fragments([source], upper, "en")[0] == "PRESS <keyword>SHIFT</keyword> AND <b>GO</b>."
    kept = translate_fragments([source], upper, "en", is_opaque=kept_as_code(frozenset({"keyword"})))[0]
    assert kept == "PRESS <keyword>Shift</keyword> AND <b>GO</b>."


@pytest.mark.parametrize(
    "fragment, kept",
    [
        ('Run <B CLASS="COMMAND">portmap</B> as root.', ['<B CLASS="COMMAND">portmap</B>']),
        ('Start <span class="application">Avahi</span> first.', ['<span class="application">Avahi</span>']),
        ('Use <ph keyref="product">the loader</ph> now.', ['<ph keyref="product">the loader</ph>']),
        ("Use <ph>Data Loader v.30</ph> now.", ["<ph>Data Loader v.30</ph>"]),
        ("<dt>www-data</dt>", ["<dt>www-data</dt>"]),
        ("<dt>bin</dt>", ["<dt>bin</dt>"]),
    ],
)
def test_elements_that_hold_names_come_back_as_written(fragment, kept):
    (out,) = translate_fragments([fragment], lambda lines: [line.upper() for line in lines], "en")
    for element in kept:
        assert element in out, out


@pytest.mark.parametrize(
    "fragment, translated", [("<dt>Apple</dt>", "<dt>APPLE</dt>"), ("Use <ph>the loader</ph>.", "USE <ph>THE LOADER</ph>.")]
)
def test_elements_of_words_are_translated(fragment, translated):
    assert translate_fragments([fragment], lambda lines: [line.upper() for line in lines], "en") == [translated]


def test_a_manual_pages_bold_words_are_kept():
    from nmt_cli.formats.protect import mask_line

    masked = mask_line("Run B<systemd-nspawn> with B<--boot> and I<file>.")
    assert sorted(masked.originals.values()) == ["B<--boot>", "B<systemd-nspawn>"]


def test_what_the_model_glued_onto_a_mask_in_markup_is_taken_off_and_a_credited_name_kept():
    seen: list[str] = []

    def align(sentences):
        seen.extend(sentences)
        # the model glues a word onto the option's mask and repeats the name's mask's letters
        out = [re.sub(r"(%\w)", r"\1Maschinen", s, count=1).replace("Written by", "Geschrieben von") for s in sentences]
        return [(t, [(i, i) for i in range(len(t.split()))]) for t in out]

    source = "<p>Use <b>--robot</b> or --fast. Written by Colin Watson &lt;cjwatson@debian.org&gt;.</p>"
    out = translate_fragments([source], Sentences(lambda xs: [t for t, _ in align(xs)], align), "en")[0]
    assert not any("Colin" in s or "--fast" in s for s in seen), seen
    assert "--robotMaschinen" not in out and "--robot Maschinen" in out, out
    assert "Colin Watson &lt;cjwatson@debian.org&gt;" in out, out
    assert out.startswith("<p>") and out.endswith("</p>") and "Geschrieben von" in out
