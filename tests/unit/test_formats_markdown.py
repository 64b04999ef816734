"""Markdown (``formats/markdown.py``): inline text translated, every other byte of the file kept.

The translators here upper-case (so what was translated shows), return the text unchanged (so the
document must come back byte for byte), or reorder words with an alignment (so the markup must follow).
"""

from __future__ import annotations

import pytest

pytest.importorskip("markdown_it", reason="markdown-it-py is in the files extra")

from nmt_cli.formats.markdown import translate_markdown  # noqa: E402
from nmt_cli.formats.segments import Sentences  # noqa: E402

DOCUMENT = """---
title: keep front matter
---
# Heading *one*

Some **bold** text with `code` and a [link](http://x.org/a_b "T") here.{two_spaces}
Hard break\\
and a soft
break. ![img](a.png) <kbd>K</kbd> ~~gone~~ <http://auto.org>

- item one
- item `two` with [ref link][r1]
  continued line

1. first
2. second

| a | b |
|---|---|
| cell *1* | cell 2 |

> quoted text
> over two lines

Setext heading
--------------

```python
code block stays
```

    indented code stays

<div>html block stays</div>

[r1]: http://example.org "Ref"
""".format(two_spaces="  ")  # a hard break (written so, as editors strip trailing spaces)


def upper(sentences: list[str]) -> list[str]:
    return [s.upper() for s in sentences]


def test_an_identity_translation_gives_the_document_back_byte_for_byte():
    out, count = translate_markdown(DOCUMENT, lambda xs: list(xs), "en", "de")
    assert out == DOCUMENT
    assert count == 12  # headings 2, paragraph, list items 4, table cells 4, quote


def test_text_is_translated_and_markup_code_and_prefixes_kept():
    out, _ = translate_markdown(DOCUMENT, upper, "en", "de")
    expected = (
        DOCUMENT.replace("# Heading *one*", "# HEADING *ONE*")
        .replace("Some **bold** text with `code` and a [link]", "SOME **BOLD** TEXT WITH `code` AND A [LINK]")
        .replace(" here.  \nHard break\\\nand a soft\nbreak.", " HERE.  \nHARD BREAK\\\nAND A SOFT\nBREAK.")
        .replace("~~gone~~", "~~GONE~~")
        .replace(
            "- item one\n- item `two` with [ref link][r1]\n  continued line",
            "- ITEM ONE\n- ITEM `two` WITH [REF LINK][r1]\n  CONTINUED LINE",
        )
        .replace("1. first\n2. second", "1. FIRST\n2. SECOND")
        .replace("| a | b |", "| A | B |")
        .replace("| cell *1* | cell 2 |", "| CELL *1* | CELL 2 |")
        .replace("> quoted text\n> over two lines", "> QUOTED TEXT\n> OVER TWO LINES")
        .replace("Setext heading\n", "SETEXT HEADING\n")
    )
    assert out == expected


def test_markup_follows_the_words_it_was_on():
    def align(sentences):
        assert sentences == ["the red car"]
        return [("la voiture rouge", [(0, 0), (2, 1), (1, 2)])]

    out, _ = translate_markdown("the **red** [car](/c)\n", Sentences(lambda xs: [], align), "en", "fr")
    assert out == "la [voiture](/c) **rouge**\n"


def test_a_longer_translation_is_wrapped_over_the_source_lines_and_markup_in_it_escaped():
    source = "> one two\n> three four\n"
    out, _ = translate_markdown(source, lambda xs: ["eins zwei drei * vier fünf sechs"], "en", "de")
    lines = out.splitlines()
    assert len(lines) == 2 and all(line.startswith("> ") for line in lines)
    assert " ".join(line[2:] for line in lines) == "eins zwei drei \\* vier fünf sechs"


def test_the_translation_is_written_as_the_source_spelled_it_and_never_starts_a_block():
    source = "* [ ] sort|uniq &amp; node\\_modules\n"
    out, _ = translate_markdown(source, lambda xs: list(xs), "en", "de")
    assert out == "* [ ] sort|uniq &amp; node_modules\n"  # literal where the source was; the entity kept
    wrapped = "A long line that the translation will wrap here\nand here.\n"
    out, _ = translate_markdown(wrapped, lambda xs: ["Eine Zeile, die umbricht, am 30. Juni 2026 - gewiss"], "en", "de")
    from markdown_it import MarkdownIt

    tokens = [t.type for t in MarkdownIt("commonmark").parse(out)]
    assert tokens == ["paragraph_open", "inline", "paragraph_close"], out  # still one paragraph, whatever the cut


def test_reference_labels_code_spans_footnotes_and_myst_targets_are_kept_exactly():
    from nmt_cli.formats.markdown import translate_markdown

    doc = (
        "(install-page)=\n# Install the tool\n\n"
        "See [the guide][guide] and [Pip][] or [setuptools] for `-z now` `--as-needed` flags.\n"
        "Read the note[^1] and use {mod}`os.path` with /etc/hosts on port 8080.\n\n"
        "[guide]: https://example.org/guide\n[Pip]: https://pip.pypa.io\n[setuptools]: https://setuptools.pypa.io\n"
    )
    seen: list[str] = []

    def shout(sentences: list[str]) -> list[str]:
        seen.extend(sentences)
        return [s.replace("See", "Siehe").replace("Read", "Lies") for s in sentences]

    out = translate_markdown(doc, shout, "en", "de")[0]
    assert out.startswith("(install-page)=\n")
    for kept in ("[the guide][guide]", "[Pip][]", "[setuptools]", "`-z now` `--as-needed`", "note[^1]", "{mod}`os.path`"):
        assert kept in out, (kept, out)
    assert "/etc/hosts" in out and "8080" in out and "Siehe" in out and "Lies" in out
    assert not any("os.path" in s or "Pip" in s or "setuptools" in s or "8080" in s for s in seen), seen


def test_myst_fences_and_math_are_kept_and_admonitions_translated():
    from nmt_cli.formats.markdown import translate_markdown

    text = (
        "Intro $x^2$ costs $5 and $10 here.\n\n:::{note}\n:class: tip\nThis is a note.\n:::\n\n"
        ':::{code-block} python\nprint("hello")\n:::\n\n$$\nE = mc^2\n$$\n'
    )
    out, _ = translate_markdown(text, lambda s: [x.upper() for x in s], "en", "de")
    assert out == (
        "INTRO $x^2$ COSTS $5 AND $10 HERE.\n\n:::{note}\n:class: tip\nTHIS IS A NOTE.\n:::\n\n"
        ':::{code-block} python\nprint("hello")\n:::\n\n$$\nE = mc^2\n$$\n'
    )


def test_adjacent_code_spans_keep_their_order_when_the_sentence_is_reordered():
    from nmt_cli.formats.markdown import translate_markdown

    def reverse(lines):
        return [" ".join(reversed(line.split())) for line in lines]

    out, _ = translate_markdown("Run `a` `b` now, then `c`.\n", reverse, "en", "de")
    assert "`a` `b`" in out and out.count("`c`") == 1


def test_a_myst_role_stays_with_its_target_and_footnotes_and_windows_paths_stay_whole():
    """A model that moves words about: "{ref}`label`" is one span (never "{ref}{doc}" then the targets), a
    footnote glued to its word and a Windows path with a space in a folder name come back whole, and a backslash
    that escapes nothing is written as the source wrote it."""
    from nmt_cli.formats.markdown import translate_markdown

    doc = "See {ref}`install` and {doc}`guide/setup` for the module[^python], or C:\\Program Files\\App\\app.exe.\n"
    seen: list[str] = []

    def reverse(lines: list[str]) -> list[str]:
        seen.extend(lines)
        return [" ".join(reversed(line.rstrip(".").split())) + "." for line in lines]

    out, _ = translate_markdown(doc, reverse, "en", "de")
    for kept in ("{ref}`install`", "{doc}`guide/setup`", "[^python]", "C:\\Program Files\\App\\app.exe"):
        assert out.count(kept) == 1, (kept, out)
    assert not any("{ref}" in s or "Program" in s or "python" in s for s in seen), seen
    assert translate_markdown(doc, lambda xs: list(xs), "en", "de")[0] == doc
