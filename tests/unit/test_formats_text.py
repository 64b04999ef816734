"""Plain text in paragraphs (``formats/text.py``): wrapped paragraphs joined, translated, wrapped back;
lists and short lines line by line; blank lines and indentation kept."""

from __future__ import annotations

from pathlib import Path

from nmt_cli.formats import translate_bytes
from nmt_cli.formats.text import translate_text

DOCUMENT = """  This is a long paragraph that was wrapped by an editor at some width so that
its lines are all about the same length. It has two sentences in it, and
they run over the lines.


- a list item
- another item

Dear Sir,
123 Main Street
"""


def test_wrapped_paragraphs_are_translated_whole_and_other_lines_one_by_one():
    calls: list[list[str]] = []

    def translate(sentences: list[str]) -> list[str]:
        calls.append(sentences)
        return [s.upper() for s in sentences]

    out, count = translate_text(DOCUMENT, translate, "en")
    assert count == 3
    assert calls[0][:2] == [
        "This is a long paragraph that was wrapped by an editor at some width so that its lines are all about "
        "the same length.",
        "It has two sentences in it, and they run over the lines.",
    ]
    width = max(len(line) for line in DOCUMENT.splitlines()[:3])
    paragraph, rest = out.split("\n\n\n", 1)
    assert paragraph.split() == DOCUMENT.upper().split("\n\n\n", 1)[0].split()
    assert paragraph.startswith("  THIS") and all(len(line) <= width for line in paragraph.splitlines())
    assert rest == DOCUMENT.upper().split("\n\n\n", 1)[1]  # lists and short lines as they were, blank lines kept


def test_text_is_read_only_when_asked_and_keeps_crlf():
    data = DOCUMENT.replace("\n", "\r\n").encode()
    out, _ = translate_bytes(data, Path("notes.txt"), lambda xs: [x.upper() for x in xs], "en", "de", file_format="text")
    assert out.decode().replace("\r\n", "\n").split() == DOCUMENT.upper().split()
    assert out.count(b"\r\n") == out.count(b"\n")
