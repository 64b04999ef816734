"""Translating files and documents, keeping their format: one module per format.

A format needs only a function that translates sentences (``segments.TranslateSentences``), never the
model: ``nmt translate`` passes its translator's, the Python API any other. ``nmt translate -i FILE``
picks the format from FILE's extension (``--file-format`` forces one); other files, and stdin, are
translated line by line as before.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import NmtError
from .segments import TranslateSentences, translate_texts
from .textfile import TextFile

LINES = "lines"  # today's behaviour: one output line per input line
EXTENSIONS = {".po": "po", ".pot": "po"}
FORMATS = (LINES, "po")


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
    translate: TranslateSentences,
    source_language: str,
    target_language: str,
    file_format: str | None = None,
    fuzzy: bool = True,
    retranslate: bool = False,
) -> int:
    """Translate the file at ``path`` into ``output`` (stdout when None) in its own format; returns the number
    of entries (or segments) translated. The input is only read; the output is written atomically."""
    chosen = format_for(path, file_format)
    if chosen == "po":
        from .gettext import declared_charset, translate_po

        source = TextFile.read(path, declared_charset)
        text, count = translate_po(source, translate, source_language, target_language, fuzzy, retranslate)
        source.write(output, text)
        return count
    raise NmtError(f"{path}: {chosen} files are translated line by line; call nmt translate without --file-format")


__all__ = ["FORMATS", "TranslateSentences", "format_for", "translate_file", "translate_texts"]
