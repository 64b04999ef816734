"""Translating files and documents, keeping their format: one module per format.

A format needs only a function that translates sentences (``segments.TranslateSentences``), never the
model: ``nmt translate`` passes its translator's, the Python API any other. ``nmt translate -i FILE``
picks the format from FILE's extension (``--file-format`` forces one); other files, and stdin, are
translated line by line as before.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..errors import NmtError
from .segments import Aligned, Sentences, TranslateSentences, Trust, as_sentences, translate_texts
from .textfile import TextFile
from .unpack import UnpackLimits

LINES = "lines"  # today's behaviour: one output line per input line
EXTENSIONS = {
    ".po": "po",
    ".pot": "po",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".md": "markdown",
    ".markdown": "markdown",
    ".srt": "srt",
    ".vtt": "vtt",
    ".xlf": "xliff",
    ".xliff": "xliff",
    ".docx": "docx",
}
FORMATS = (LINES, "text", "po", "html", "markdown", "srt", "vtt", "xliff", "docx")
# Formats whose inline markup is put back through the model's word alignment.
ALIGNED_FORMATS = frozenset({"html", "markdown", "srt", "vtt", "xliff", "docx"})


def needs_alignment(file_format: str) -> bool:
    return file_format in ALIGNED_FORMATS


def format_for(path: Path | None, forced: str | None) -> str:
    """The format to translate ``path`` as: ``forced`` when given, else by extension, else lines."""
    if forced is not None:
        if forced not in FORMATS:
            raise NmtError(f"--file-format {forced}: not a format nmt reads; choose from {', '.join(FORMATS)}")
        return forced
    if path is None:
        return LINES
    return EXTENSIONS.get(path.suffix.lower(), LINES)


def translate_file(
    path: Path,
    output: Path | None,
    translate: TranslateSentences | Sentences,
    source_language: str,
    target_language: str,
    file_format: str | None = None,
    fuzzy: bool = True,
    retranslate: bool = False,
    fuzzy_below: float | None = None,
    limits: UnpackLimits = UnpackLimits(),
    keep_tags: frozenset[str] = frozenset(),
) -> int:
    """Translate the file at ``path`` into ``output`` (stdout when None) in its own format; returns the number
    of entries (or segments) translated. The input is only read; the output is written atomically.
    ``limits``: how far a compressed document (.docx) may unpack; ``keep_tags``: more elements kept as written,
    as code is (HTML, Markdown, XLIFF)."""
    chosen = format_for(path, file_format)
    if chosen == LINES:
        raise NmtError(f"{path}: {chosen} files are translated line by line; call nmt translate without --file-format")
    if chosen == "docx" and output is None:
        raise NmtError(f"{path}: a Word document is binary; give the output file with -o")
    data, count = translate_bytes(
        path.read_bytes(), path, translate, source_language, target_language, chosen, fuzzy, retranslate, fuzzy_below,
        limits, keep_tags,
    )  # fmt: skip
    TextFile.write_bytes(output, data)
    return count


def translate_bytes(
    data: bytes,
    name: Path,
    translate: TranslateSentences | Sentences,
    source_language: str,
    target_language: str,
    file_format: str | None = None,
    fuzzy: bool = True,
    retranslate: bool = False,
    fuzzy_below: float | None = None,
    limits: UnpackLimits = UnpackLimits(),
    keep_tags: frozenset[str] = frozenset(),
) -> tuple[bytes, int]:
    """A document's bytes translated in its format (chosen by ``name``'s extension unless given), as bytes in
    the input's encoding and line ends, and the number of entries translated (the server's /translate_file)."""
    chosen = format_for(name, file_format)
    if chosen == "po":
        from .gettext import NEAREST_IN_PO, declared_charset, translate_po, with_utf8_charset

        source = TextFile.decode(data, name, declared_charset)
        text, count = translate_po(source, translate, source_language, target_language, fuzzy, retranslate, fuzzy_below)
        return source.encode(text, as_utf8=with_utf8_charset, nearest=NEAREST_IN_PO), count
    if chosen == "html":
        from .html import declared_charset as page_charset
        from .html import translate_html

        source = TextFile.decode(data, name, page_charset)
        text, count = translate_html(source.text, translate, source_language, target_language, keep_tags)
        if not source.bom and page_charset(data) is None and data.isascii():
            # no charset said: a browser may read UTF-8 bytes as windows-1252; an ASCII page stays ASCII
            source = dataclasses.replace(source, encoding="ascii")
        return source.encode(text, "xmlcharrefreplace"), count
    if chosen == "markdown":
        from .markdown import translate_markdown

        source = TextFile.decode(data, name)
        text, count = translate_markdown(source.text, translate, source_language, target_language, keep_tags)
        return source.encode(text), count
    if chosen == "docx":
        from .docx import translate_docx

        return translate_docx(data, translate, source_language, target_language, str(name), limits)
    if chosen == "xliff":
        from .xliff import translate_xliff

        return translate_xliff(data, translate, source_language, target_language, str(name), fuzzy, retranslate, keep_tags)
    if chosen == "text":
        from .text import translate_text

        source = TextFile.decode(data, name)
        text, count = translate_text(source.text, translate, source_language)
        return source.encode(text), count
    if chosen in ("srt", "vtt"):
        from .subtitles import translate_srt, translate_vtt

        source = TextFile.decode(data, name)
        read = translate_srt if chosen == "srt" else translate_vtt
        text, count = read(source.text, translate, source_language, str(name))
        return source.encode(text), count
    raise NmtError(f"{name}: not a document format nmt reads; documents: {', '.join(sorted(EXTENSIONS))}")


__all__ = [
    "Aligned",
    "EXTENSIONS",
    "Sentences",
    "Trust",
    "as_sentences",
    "needs_alignment",
    "FORMATS",
    "TranslateSentences",
    "format_for",
    "translate_bytes",
    "translate_file",
    "translate_texts",
]
