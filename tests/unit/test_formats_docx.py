"""Word documents (``formats/docx.py``): paragraph text translated, each run keeping its formatting."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

docx = pytest.importorskip("docx", reason="python-docx is in the docx extra")

from nmt_cli.errors import NmtError  # noqa: E402
from nmt_cli.formats import translate_bytes  # noqa: E402
from nmt_cli.formats.segments import Sentences  # noqa: E402


def document() -> bytes:
    d = docx.Document()
    d.add_heading("A title here", 1)
    p = d.add_paragraph("Click ")
    bold = p.add_run("this link")
    bold.bold = True
    p.add_run(" to continue.")
    split = d.add_paragraph()
    for piece in ("Word splits ", "runs ", "for spelling."):  # same formatting: one text for the model
        split.add_run(piece).italic = True
    table = d.add_table(rows=1, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "cell one", "cell two"
    d.sections[0].header.paragraphs[0].text = "Header text"
    buffer = io.BytesIO()
    d.save(buffer)
    return buffer.getvalue()


def runs(data: bytes) -> list[list[tuple[str, bool | None, bool | None]]]:
    return [[(r.text, r.bold, r.italic) for r in p.runs] for p in docx.Document(io.BytesIO(data)).paragraphs]


def test_each_run_keeps_its_formatting_and_every_part_is_translated():
    out, count = translate_bytes(document(), Path("a.docx"), lambda xs: [x.upper() for x in xs], "en", "de")
    assert count == 6  # heading, two paragraphs, two cells, the header
    assert runs(out)[:2] == [
        [("A TITLE HERE", None, None)],
        [("CLICK ", None, None), ("THIS LINK", True, None), (" TO CONTINUE.", None, None)],
    ]
    assert [text for text, _, italic in runs(out)[2] if italic] == ["WORD SPLITS RUNS FOR SPELLING.", "", ""]
    translated = docx.Document(io.BytesIO(out))
    assert [c.text for c in translated.tables[0].rows[0].cells] == ["CELL ONE", "CELL TWO"]
    assert translated.sections[0].header.paragraphs[0].text == "HEADER TEXT"
    assert translated.core_properties.language == "de"


def test_runs_move_with_their_words():
    def align(sentences: list[str]):
        return [
            ("Klicken Sie auf diesen Link, um fortzufahren.", [(0, 0), (0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 6)])
            if s.startswith("Click")
            else (s, [(i, i) for i in range(len(s.split()))])
            for s in sentences
        ]

    out, _ = translate_bytes(document(), Path("a.docx"), Sentences(lambda xs: [], align), "en", "de")
    assert runs(out)[1] == [
        ("Klicken Sie auf ", None, None),
        ("diesen Link", True, None),
        (", um fortzufahren.", None, None),
    ]


def test_not_a_docx_or_no_python_docx_is_one_line(monkeypatch):
    with pytest.raises(NmtError, match="not a Word"):
        translate_bytes(b"plain text", Path("a.docx"), lambda xs: xs, "en", "de")
    monkeypatch.setitem(sys.modules, "docx", None)
    with pytest.raises(NmtError, match=r"pip install 'nmt-cli\[docx\]'"):
        translate_bytes(document.__code__.co_code, Path("a.docx"), lambda xs: xs, "en", "de")


def bomb(member_bytes: int, real_document: bytes | None = None) -> bytes:
    """A .docx whose word/document.xml unpacks to ``member_bytes`` of one repeated paragraph (packs ~1000x)."""
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        if real_document is not None:
            with zipfile.ZipFile(io.BytesIO(real_document)) as real:
                for item in real.infolist():
                    if item.filename != "word/document.xml":
                        archive.writestr(item, real.read(item))
        paragraph = b"<w:p><w:r><w:t>boom</w:t></w:r></w:p>"
        with archive.open("word/document.xml", "w", force_zip64=True) as member:
            for _ in range(member_bytes // len(paragraph)):
                member.write(paragraph)
    return buffer.getvalue()


def test_a_decompression_bomb_is_refused_before_anything_is_unpacked():
    import tracemalloc

    from nmt_cli.errors import TooLarge
    from nmt_cli.formats.unpack import UnpackLimits

    data = bomb(64 << 20, document())  # 64 MiB that packs to about 200 KB
    assert len(data) < 1 << 20
    tracemalloc.start()
    with pytest.raises(TooLarge, match=r"unpacks to [\d,]+ times its packed size .*--max-unpack-ratio"):
        translate_bytes(data, Path("bomb.docx"), lambda s: s, "en", "de")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 8 * len(data)  # the archive's bytes and its directory, never the unpacked part
    # a ratio allowed, a size not: the XML parts' cap
    with pytest.raises(TooLarge, match=r"XML parts unpack to more than 1 MiB .*--max-unpacked-mb"):
        translate_bytes(data, Path("bomb.docx"), lambda s: s, "en", "de", limits=UnpackLimits(1 << 20, 1e6))
    # a real document is far under both limits, even tight ones
    tight = UnpackLimits(1 << 20, 20)
    out, count = translate_bytes(document(), Path("ok.docx"), lambda s: [t.upper() for t in s], "en", "de", limits=tight)
    assert count > 0 and docx.Document(io.BytesIO(out)).paragraphs[0].text == "A TITLE HERE"


def _declaring(data: bytes, member: str, size: int) -> bytes:
    """``data`` (a zip) with ``member``'s declared unpacked size changed to ``size`` in both of its headers, and its
    checksum to that of its first ``size`` bytes (so that a reader stopping at the declared size finds it right)."""
    import struct
    import zipfile
    import zlib

    with zipfile.ZipFile(io.BytesIO(data)) as archive, archive.open(member) as part:
        crc = zlib.crc32(part.read(size))
    out = bytearray(data)
    name = member.encode()
    for signature, crc_at, name_at in ((b"PK\x03\x04", 14, 30), (b"PK\x01\x02", 16, 46)):
        at = out.find(signature)
        while at != -1:
            if out[at + name_at : at + name_at + len(name)] == name:
                out[at + crc_at : at + crc_at + 4] = struct.pack("<I", crc)
                out[at + crc_at + 8 : at + crc_at + 12] = struct.pack("<I", size)
            at = out.find(signature, at + 4)
    return bytes(out)


def test_a_part_that_unpacks_past_what_it_declares_is_refused_with_bounded_memory():
    """The declared size and the checksum of what fits in it lie alike: the part is refused as its real inflated
    size passes the declared one (a reader asking for the whole part would inflate all of it in one call)."""
    import tracemalloc

    lying = _declaring(bomb(32 << 20, document()), "word/document.xml", 4096)  # 32 MiB declared as 4 KiB
    tracemalloc.start()
    with pytest.raises(NmtError, match=r"its part word/document.xml unpacks to more than the 4,096 bytes it declares"):
        translate_bytes(lying, Path("lying.docx"), lambda s: s, "en", "de")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 << 20  # chunks of the part, never the part inflated in one call
    with pytest.raises(NmtError, match=r"its part word/document.xml is damaged"):
        translate_bytes(_declaring(document(), "word/document.xml", 1 << 16), Path("short.docx"), str, "en", "de")


def test_many_small_parts_that_unpack_to_a_bomb_together_are_refused():
    import zipfile

    from nmt_cli.errors import TooLarge

    buffer = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(document())) as real, zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as out:
        for item in real.infolist():
            out.writestr(item, real.read(item))
        for n in range(40):  # each just under the size where a part's own ratio counts
            out.writestr(f"word/media/image{n}.bin", bytes((1 << 20) - 1))
    with pytest.raises(TooLarge, match=r"lots.docx: unpacks to [\d,]+ times its size .*--max-unpack-ratio"):
        translate_bytes(buffer.getvalue(), Path("lots.docx"), lambda s: s, "en", "de")


def test_a_run_moved_before_the_run_it_followed_keeps_every_run():
    """The model moves a bold word to the front ("Cannot open **file**." -> "**Datei** kann nicht geöffnet
    werden."): the runs are put back in the translation's order, none lost (this once raised from lxml)."""
    d = docx.Document()
    p = d.add_paragraph("Cannot open ")
    p.add_run("file").bold = True
    p.add_run(".")
    buffer = io.BytesIO()
    d.save(buffer)

    def align(sentences: list[str]):
        return [("Datei kann nicht geöffnet werden.", [(2, 0), (0, 1), (0, 2), (1, 3), (1, 4)]) for _ in sentences]

    out, _ = translate_bytes(buffer.getvalue(), Path("moved.docx"), Sentences(lambda xs: [], align), "en", "de")
    paragraph = runs(out)[0]
    assert paragraph[0][0].strip() == "Datei" and paragraph[0][1] is True
    assert "".join(text for text, _, _ in paragraph) == "Datei kann nicht geöffnet werden."
