"""What a document format is to the rest of nmt: one :class:`DocumentFormat` per format module, all with one
signature, listed once in ``formats/__init__.py`` (``DOCUMENT_FORMATS``).

Everything that names formats derives from that list: the extensions ``nmt translate -i`` recognises, the
choices and help of ``--file-format``, the server's ``supportedFilesFormat``, which formats put inline markup
back through word alignment and which can carry a confidence. A new format is a module with a function of the
:data:`TranslateDocument` signature and one line in that list. The line names the function as
``"module:function"``, imported when a document of the format is translated: ``nmt --help`` reads the list
without importing any format.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING

from .unpack import UnpackLimits

if TYPE_CHECKING:
    from .segments import Sentences, TranslateSentences


@dataclass(frozen=True)
class DocumentRequest:
    """How to translate one document, beside its bytes: the sentences' translator, the language pair, the
    document's name (for messages and for the formats that record it), and the options some formats read."""

    translate: TranslateSentences | Sentences
    source_language: str
    target_language: str
    name: Path
    fuzzy: bool = True  # gettext and XLIFF: mark new translations as needing review
    retranslate: bool = False  # gettext and XLIFF: translate entries already translated too
    fuzzy_below: float | None = None  # gettext: mark fuzzy only what is trusted less
    limits: UnpackLimits = field(default_factory=UnpackLimits)  # how far a compressed document may unpack
    keep_tags: frozenset[str] = frozenset()  # more elements kept as written, as code is


# A document's bytes translated into its format's bytes, and how many entries (or segments) were translated.
TranslateDocument = Callable[[bytes, DocumentRequest], tuple[bytes, int]]


@dataclass(frozen=True)
class DocumentFormat:
    """One document format: its name (``--file-format``), its extensions, what it is (for ``--help``), how it
    is translated, and what it can do."""

    name: str
    extensions: tuple[str, ...]
    description: str
    function: str  # "module:function" in nmt_cli/formats, of the TranslateDocument signature
    aligned: bool = False  # inline markup is put back through the model's word alignment
    assessable: bool = False  # a translation's confidence can be written into it (--confidence)
    binary: bool = False  # not text: written to a file (-o), never to the terminal

    def translate(self, data: bytes, request: DocumentRequest) -> tuple[bytes, int]:
        module, function = self.function.split(":")
        translate_document: TranslateDocument = getattr(import_module(f".{module}", __package__), function)
        return translate_document(data, request)


def text_document(
    data: bytes, request: DocumentRequest, translate_text: Callable[[str], tuple[str, int]]
) -> tuple[bytes, int]:
    """A text format's bytes translated by ``translate_text`` (text in, text and count out): decoded as
    ``TextFile`` reads text (a byte-order mark, else UTF-8, else one line-numbered error) and written back in
    the same encoding and line ends."""
    from .textfile import TextFile

    source = TextFile.decode(data, request.name)
    text, count = translate_text(source.text)
    return source.encode(text), count
