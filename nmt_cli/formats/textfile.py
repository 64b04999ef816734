"""A text file's bytes as text, and back to bytes the way it was: encoding, byte-order mark, line ends.

The encoding is, in this order: the one a byte-order mark says (UTF-8, UTF-16 LE/BE, UTF-32), the one
the file declares (a catalogue's ``charset=``, given by the format), else UTF-8. The translation is
written in the same encoding, with the same mark and the same line ends (LF or CRLF), so a tool that
read the input reads the output.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import NmtError
from ..utils.files import atomic_open

BOMS = (  # longest first: the UTF-32 LE mark starts with the UTF-16 LE one
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


@dataclass(frozen=True)
class TextFile:
    """A file's text (LF line ends) and how to write text back like it."""

    path: Path
    text: str
    encoding: str
    bom: bytes
    crlf: bool

    @staticmethod
    def read(path: Path, declared: Callable[[bytes], str | None] = lambda _data: None) -> TextFile:
        return TextFile.decode(path.read_bytes(), path, declared)

    @staticmethod
    def decode(data: bytes, path: Path, declared: Callable[[bytes], str | None] = lambda _data: None) -> TextFile:
        """``data`` (the bytes of a file named ``path``) as text; errors name ``path``."""
        bom, encoding = next(((mark, name) for mark, name in BOMS if data.startswith(mark)), (b"", ""))
        said = encoding or declared(data)
        encoding = said or "utf-8"
        try:
            text = data[len(bom) :].decode(encoding)
        except LookupError:
            raise NmtError(f"{path}: declares the unknown encoding '{encoding}'; save it as UTF-8") from None
        except UnicodeDecodeError as err:
            line = data[: err.start].count(b"\n") + 1
            if said is None:  # nothing said which encoding: UTF-8 was assumed
                raise NmtError(
                    f"{path}:{line}: not valid UTF-8 and the file declares no encoding; convert it to UTF-8 "
                    f"(iconv -f ITS-ENCODING -t UTF-8 {path.name} > {path.stem}.utf8{path.suffix})"
                ) from None
            raise NmtError(f"{path}:{line}: not valid {encoding}; save the file in the encoding it declares") from None
        crlf = "\r\n" in text
        return TextFile(path, text.replace("\r\n", "\n"), encoding, bom, crlf)

    def encode(self, text: str, errors: str = "strict") -> bytes:
        """``text`` as this file's bytes; a character its encoding cannot hold is a one-line error (or, with
        ``errors="xmlcharrefreplace"``, for markup, a numeric character reference)."""
        if self.crlf:
            text = text.replace("\n", "\r\n")
        try:
            return self.bom + text.encode(self.encoding, errors)
        except UnicodeEncodeError as err:
            raise NmtError(
                f"{self.path}: the translation holds '{err.object[err.start : err.end]}', which {self.encoding} "
                "cannot encode; convert the file to UTF-8 (and its charset declaration) first"
            ) from None

    def write(self, output: Path | None, text: str) -> None:
        """Write ``text`` like this file to ``output`` (atomically), or to stdout."""
        TextFile.write_bytes(output, self.encode(text))

    @staticmethod
    def write_bytes(output: Path | None, data: bytes) -> None:
        """``data`` to ``output`` (atomically), or to stdout."""
        if output is None:
            import sys

            sys.stdout.buffer.write(data)
            sys.stdout.flush()
            return
        with atomic_open(output, "wb") as handle:
            handle.write(data)
