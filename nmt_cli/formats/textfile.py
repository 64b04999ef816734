"""A text file's bytes as text, and back to bytes the way it was: encoding, byte-order mark, line ends.

The encoding is, in this order: the one a byte-order mark says (UTF-8, UTF-16 LE/BE, UTF-32), the one
the file declares (a catalogue's ``charset=``, given by the format), else UTF-8. The translation is
written in the same encoding, with the same mark and the same line ends (LF or CRLF), so a tool that
read the input reads the output.
"""

from __future__ import annotations

import codecs
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import NmtError
from ..utils.files import atomic_open

log = logging.getLogger(__name__)
# The nearest form of a typographic character in a single-byte charset that lacks it (ISO-8859-1 has no „).
NEAREST = {
    "\u201e": '"', "\u201c": '"', "\u201d": '"', "\u201f": '"', "\u2033": '"',
    "\u201a": "'", "\u2018": "'", "\u2019": "'", "\u201b": "'", "\u2032": "'",
    "\u2039": "<", "\u203a": ">", "\u00ab": "<<", "\u00bb": ">>",
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2015": "-", "\u2212": "-",
    "\u2026": "...", "\u00a0": " ", "\u202f": " ", "\u2009": " ", "\u2007": " ", "\u200b": "",
    "\u2022": "*", "\u00b7": ".",
}  # fmt: skip


def _encodable(char: str, encoding: str) -> bool:
    try:
        char.encode(encoding)
    except UnicodeEncodeError:
        return False
    return True


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

    def encode(
        self,
        text: str,
        errors: str = "strict",
        as_utf8: Callable[[str], str] | None = None,
        nearest: Mapping[str, str] = NEAREST,
    ) -> bytes:
        """``text`` as this file's bytes. A typographic character its encoding cannot hold (quotes, dashes,
        ellipsis) is written in its nearest form there (said on stderr, counted); anything else makes the
        file UTF-8, its declaration changed by ``as_utf8`` (said on stderr), or, without one, is a one-line
        error. With ``errors="xmlcharrefreplace"`` (markup) a numeric character reference is written instead.
        ``nearest``: the nearest forms as the file's syntax writes them (a catalogue escapes its quotes)."""
        if self.crlf:
            text = text.replace("\n", "\r\n")
        try:
            return self.bom + text.encode(self.encoding, errors)
        except UnicodeEncodeError:
            pass
        unfit = sorted({ch for ch in text if not _encodable(ch, self.encoding)})
        near = {ch: nearest[ch] for ch in unfit if ch in nearest}
        if len(near) == len(unfit):
            count = sum(text.count(ch) for ch in near)
            shown = ", ".join(f"{ch} -> {NEAREST[ch]}" for ch in near)
            log.warning(f"{self.path}: {count:,} characters {self.encoding} lacks written in their nearest form ({shown})")
            return self.bom + "".join(near.get(ch, ch) for ch in text).encode(self.encoding)
        lacking = "".join(ch for ch in unfit if ch not in nearest)[:10]
        if as_utf8 is None:
            raise NmtError(
                f"{self.path}: the translation holds '{lacking}', which {self.encoding} cannot encode; convert the "
                "file to UTF-8 (and its charset declaration) first"
            )
        log.warning(
            f"{self.path}: the translation holds '{lacking}', which {self.encoding} cannot hold: written as UTF-8, "
            "its charset declaration changed to UTF-8"
        )
        return as_utf8(text).encode("utf-8")

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
