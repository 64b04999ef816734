"""Limits on what a compressed document unpacks to, checked before anything is unpacked.

A ``.docx`` is a zip archive: 38 KB can declare a 2 GiB ``document.xml``, which python-docx would read whole
and lxml parse (gigabytes of memory, then a traceback). Python's zip reader never returns more than a
member's declared size, so the sizes the archive declares are checked first: the XML parts a reader parses
together must stay within ``max_bytes``, and no sizeable member may unpack to more than ``max_ratio`` times
its packed size (text compresses 3 to 10 times; a bomb, thousands), nor the archive as a whole (a thousand
parts just under the size where a part's own ratio counts). Then every part is read through once, a chunk at a
time, before any reader sees it: a part whose data unpacks to more than it declares fails its checksum there,
with bounded memory, instead of inside a reader that inflates it in one call (gigabytes, then a CRC error).
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass

from ..errors import NmtError, TooLarge

MIB = 1 << 20
RATIO_FROM_BYTES = MIB  # a small member's ratio says nothing (an empty part packs to a few bytes)
_CHUNK = MIB  # what one read of a part may inflate to


@dataclass(frozen=True)
class UnpackLimits:
    """How far a compressed document may unpack: its parsed (XML) parts together, and any member's ratio."""

    max_bytes: int = 100 * MIB
    max_ratio: float = 100.0


def check_zip(data: bytes, name: str, limits: UnpackLimits, kind: str = "document") -> None:
    """Refuse the zip archive ``data`` (with :class:`TooLarge`) where it unpacks past ``limits``; refuse what is
    not a zip archive at all (:class:`NmtError`)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
            _check_declared(members, name, limits, len(data))
            for member in members:
                _read_through(archive, member, name, kind)
    except (zipfile.BadZipFile, ValueError, OSError) as err:
        raise NmtError(f"{name}: not a {kind} (not a zip archive: {err})") from None


def _read_through(archive: zipfile.ZipFile, member: zipfile.ZipInfo, name: str, kind: str) -> None:
    """Read ``member`` a chunk at a time: its data must unpack to what it declares (the checksum says so)."""
    try:
        with archive.open(member) as part:
            while part.read(_CHUNK):
                pass
    except (zipfile.BadZipFile, EOFError, NotImplementedError, RuntimeError) as err:
        raise NmtError(f"{name}: its part {member.filename} is damaged ({err}); not a {kind} nmt can read") from None


def _check_declared(members: list[zipfile.ZipInfo], name: str, limits: UnpackLimits, packed: int) -> None:
    parsed = 0
    for member in members:
        if member.file_size >= RATIO_FROM_BYTES and member.file_size > limits.max_ratio * max(member.compress_size, 1):
            ratio = member.file_size / max(member.compress_size, 1)
            raise TooLarge(
                f"{name}: its part {member.filename} unpacks to {ratio:,.0f} times its packed size (the limit is "
                f"{limits.max_ratio:g}: a decompression bomb?); --max-unpack-ratio raises the limit"
            )
        if member.filename.endswith((".xml", ".rels")):
            parsed += member.file_size
            if parsed > limits.max_bytes:
                raise TooLarge(
                    f"{name}: its XML parts unpack to more than {limits.max_bytes // MIB:,} MiB (the limit); "
                    "--max-unpacked-mb raises it"
                )
    # many parts, each too small for its own ratio to count, can still make a bomb together
    total = sum(member.file_size for member in members)
    if total >= RATIO_FROM_BYTES and total > limits.max_ratio * max(packed, 1):
        raise TooLarge(
            f"{name}: unpacks to {total / max(packed, 1):,.0f} times its size (the limit is {limits.max_ratio:g}: a "
            "decompression bomb?); --max-unpack-ratio raises the limit"
        )


__all__ = ["UnpackLimits", "check_zip"]
