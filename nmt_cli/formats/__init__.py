"""Translating files and documents, keeping their format: one module per format.

A format needs only a function that translates sentences (``segments.TranslateSentences``), never the
model: ``nmt translate`` passes its translator's, the Python API any other. ``nmt translate -i FILE``
picks the format from FILE's extension (``--file-format`` forces one); other files, and stdin, are
translated line by line as before.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import NmtError
from .document import DocumentFormat, DocumentRequest
from .unpack import UnpackLimits

if TYPE_CHECKING:
    from .segments import Aligned, Sentences, TextConfidence, TranslateSentences, as_sentences, translate_texts

# Every document format nmt reads, one line each (``document.py`` says what a format declares).
_FORMATS = (
    # no extension: a .txt file is read line by line unless --file-format text says it holds paragraphs
    DocumentFormat("text", (), "paragraphs", "text:translate_document"),
    DocumentFormat("po", (".po", ".pot"), "gettext catalogues", "gettext:translate_document", assessable=True),
    DocumentFormat("html", (".html", ".htm", ".xhtml"), "web pages", "html:translate_document", aligned=True),
    DocumentFormat("markdown", (".md", ".markdown"), "CommonMark", "markdown:translate_document", aligned=True),
    DocumentFormat("srt", (".srt",), "SubRip subtitles", "subtitles:translate_srt_document", aligned=True),
    DocumentFormat("vtt", (".vtt",), "WebVTT subtitles", "subtitles:translate_vtt_document", aligned=True),
    DocumentFormat("xliff", (".xlf", ".xliff"), "XLIFF 1.2 and 2.x", "xliff:translate_document", aligned=True),
    DocumentFormat("docx", (".docx",), "Word documents", "docx:translate_document", aligned=True, binary=True),
)
DOCUMENT_FORMATS: dict[str, DocumentFormat] = {form.name: form for form in _FORMATS}
LINES = "lines"  # not a document: one output line per input line (stdin, and files of other extensions)
FORMATS = (LINES, *DOCUMENT_FORMATS)
EXTENSIONS = {extension: form.name for form in DOCUMENT_FORMATS.values() for extension in form.extensions}


def needs_alignment(file_format: str) -> bool:
    """Whether the format puts inline markup back through the model's word alignment."""
    return file_format in DOCUMENT_FORMATS and DOCUMENT_FORMATS[file_format].aligned


def assessable_formats() -> list[str]:
    """The formats ``--confidence`` writes into (lines, and documents that can carry a confidence)."""
    return [LINES, *(name for name, form in DOCUMENT_FORMATS.items() if form.assessable)]


def file_format_help() -> str:
    """``--file-format``'s help, each format with its extensions."""
    described = [f"{LINES} (one output line per input line, the default for stdin and unknown extensions)"]
    for form in DOCUMENT_FORMATS.values():
        extensions = f": {', '.join(form.extensions)}" if form.extensions else ""
        described.append(f"{form.name} ({form.description}{extensions})")
    return f"Translate -i as this format instead of the one its extension says: {', '.join(described)}."


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
    **options: Any,
) -> int:
    """Translate the file at ``path`` into ``output`` (stdout when None) in its own format; returns the number
    of entries (or segments) translated. The input is only read; the output is written atomically.
    ``options``: those of :class:`DocumentRequest` (fuzzy, retranslate, fuzzy_below, limits, keep_tags)."""
    chosen = format_for(path, file_format)
    if chosen == LINES:
        raise NmtError(f"{path}: {chosen} files are translated line by line; call nmt translate without --file-format")
    if DOCUMENT_FORMATS[chosen].binary and output is None:
        raise NmtError(f"{path}: {DOCUMENT_FORMATS[chosen].description} are binary; give the output file with -o")
    from .textfile import TextFile

    request = DocumentRequest(translate, source_language, target_language, path, **options)
    data, count = translate_document(path.read_bytes(), request, chosen)
    TextFile.write_bytes(output, data)
    return count


def translate_bytes(
    data: bytes,
    name: Path,
    translate: TranslateSentences | Sentences,
    source_language: str,
    target_language: str,
    file_format: str | None = None,
    **options: Any,
) -> tuple[bytes, int]:
    """A document's bytes translated in its format (chosen by ``name``'s extension unless given), as bytes in
    the input's encoding and line ends, and the number of entries translated. ``options``: as
    :func:`translate_file`'s."""
    request = DocumentRequest(translate, source_language, target_language, name, **options)
    return translate_document(data, request, file_format)


def translate_document(data: bytes, request: DocumentRequest, file_format: str | None = None) -> tuple[bytes, int]:
    """A document's bytes translated by its format (``file_format``, else the request's name's extension)."""
    chosen = format_for(request.name, file_format)
    if chosen not in DOCUMENT_FORMATS:
        raise NmtError(f"{request.name}: not a document format nmt reads; documents: {', '.join(sorted(EXTENSIONS))}")
    return DOCUMENT_FORMATS[chosen].translate(data, request)


def __getattr__(name: str) -> Any:
    """The sentence-level names (``segments.py``) on first use (PEP 562): reading the list of formats, as
    ``nmt --help`` does, compiles none of their patterns."""
    if name in ("Aligned", "Sentences", "TranslateSentences", "TextConfidence", "as_sentences", "translate_texts"):
        return getattr(import_module(".segments", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Aligned",
    "DOCUMENT_FORMATS",
    "DocumentFormat",
    "DocumentRequest",
    "UnpackLimits",
    "assessable_formats",
    "file_format_help",
    "EXTENSIONS",
    "Sentences",
    "TextConfidence",
    "as_sentences",
    "needs_alignment",
    "FORMATS",
    "TranslateSentences",
    "format_for",
    "translate_bytes",
    "translate_document",
    "translate_file",
    "translate_texts",
]
