"""HTML pages (``formats/html.py``): text and translatable attributes change, nothing else does.

The translator upper-cases (with a monotone alignment), so what was translated is visible and what was
not stays lower-case.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nmt_cli.errors import NmtError
from nmt_cli.formats import translate_bytes
from nmt_cli.formats.html import translate_html
from nmt_cli.formats.markup_tree import tag_tree

PAGE = """<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>open a file</title>
<style>p { content: "keep style"; }</style>
<script>var s = "keep script";</script></head>
<body>
<h1>cannot open file</h1>
<p>click <a href="/help" title="get help">this <b>link</b></a> to continue. the file was gone.</p>
<img src="x.png" alt="a dog">
<ul><li>first item</li><li>second <em>item</em></li></ul>
<pre>keep pre</pre>
<p translate="no">keep brand</p>
<div class="x notranslate">keep div <b>too</b></div>
<p>run <code>keep code</code> &amp; wait.<br>then restart</p>
<input placeholder='search files' value="keep value">
<!-- keep comment -->
<table><tr><td>cell one</td><td>cell <span>two</span></td></tr></table>
<div>unclosed <b>bold
<p>broken paragraph
</body></html>
"""


def upper(sentences: list[str]) -> list[str]:
    return [s.upper() for s in sentences]


def test_text_and_attributes_are_translated_and_nothing_else():
    out, count = translate_html(PAGE, upper, "en", "de")
    assert '<html lang="de">' in out
    assert "<title>OPEN A FILE</title>" in out and "<h1>CANNOT OPEN FILE</h1>" in out
    assert '<p>CLICK <a href="/help" title="GET HELP">THIS <b>LINK</b></a> TO CONTINUE. THE FILE WAS GONE.</p>' in out
    assert 'alt="A DOG"' in out and "placeholder='SEARCH FILES'" in out and 'value="keep value"' in out
    assert "<li>FIRST ITEM</li><li>SECOND <em>ITEM</em></li>" in out
    assert "<td>CELL ONE</td><td>CELL <span>TWO</span></td>" in out
    assert "<code>keep code</code> &amp; WAIT.<br>THEN RESTART" in out.replace("RUN ", "")
    for kept in ("keep style", "keep script", "keep pre", "keep brand", "keep div <b>too</b>", "<!-- keep comment -->"):
        assert kept in out, kept
    assert "UNCLOSED <b>BOLD" in out and "BROKEN PARAGRAPH" in out
    assert count == 10  # title, h1, p, 2 li, p, 2 td, div, p
    # the page's markup is the source's, tag for tag, attribute for attribute (translated values aside)
    assert tag_tree(out.upper()) == tag_tree(PAGE.upper().replace('LANG="EN"', 'LANG="DE"'))


def test_a_page_keeps_its_encoding_and_unencodable_characters_become_references(tmp_path: Path):
    page = '<html><head><meta charset="iso-8859-1"></head><body><p>caf\xe9 ol\xe9</p></body></html>\r\n'
    data = page.encode("iso-8859-1")
    out, _ = translate_bytes(data, Path("p.html"), lambda xs: [x + " \u2713" for x in xs], "en", "de")
    text = out.decode("iso-8859-1")
    assert "caf\xe9 ol\xe9 &#10003;" in text and text.endswith("</html>\r\n") and '<html lang="de">' in text

    wide = "\ufeff<p>hello</p>\n".encode("utf-16-le")
    out, _ = translate_bytes(b"\xff\xfe" + "<p>hello</p>\n".encode("utf-16-le"), Path("w.htm"), upper, "en", "de")
    assert out.startswith(b"\xff\xfe") and out[2:].decode("utf-16-le") == "<p>HELLO</p>\n"
    assert wide  # (the BOM-less form is read as UTF-8 and refused below)


def test_an_undecodable_page_is_one_line():
    with pytest.raises(NmtError, match=r"p.html:1: not valid UTF-8 and the file declares no encoding; convert it"):
        translate_bytes(b"<p>caf\xe9</p>", Path("p.html"), upper, "en", "de")


def test_a_page_declaring_utf16_in_ascii_bytes_is_read_as_utf8_as_browsers_do():
    page = '<html><head><meta charset="UTF-16"><title>Über uns</title></head><body><p>Hello <b>world</b>.</p></body></html>'
    out, count = translate_bytes(page.encode("utf-8"), Path("p.html"), lambda s: [x.upper() for x in s], "en", "de")
    text = out.decode("utf-8")
    assert count == 2 and "<title>ÜBER UNS</title>" in text and "<p>HELLO <b>WORLD</b>.</p>" in text
    # a real UTF-16 page starts with its byte-order mark and stays UTF-16
    real, _ = translate_bytes(page.encode("utf-16"), Path("p.html"), lambda s: [x.upper() for x in s], "en", "de")
    assert "<title>ÜBER UNS</title>" in real.decode("utf-16")


def test_a_definition_term_of_one_identifier_is_kept_in_a_page_as_in_a_tagged_line():
    """A page's `<dt>bin</dt>` is a user name, as it is in a `--markup` line: never shown to the model (it became
    "binären"); a `<dt>` of words is translated."""
    from nmt_cli.formats.html import translate_html

    page = "<dl><dt>bin</dt><dd>The bin user.</dd><dt>www-data</dt><dd>Web server.</dd><dt>Main menu</dt></dl>"
    seen: list[str] = []

    def shout(sentences: list[str]) -> list[str]:
        seen.extend(sentences)
        return [s.upper() for s in sentences]

    out, _ = translate_html(page, shout, "en", "de")
    assert "<dt>bin</dt>" in out and "<dt>www-data</dt>" in out and "<dt>MAIN MENU</dt>" in out
    assert "bin" not in seen and "www-data" not in seen and "THE BIN USER." in out
