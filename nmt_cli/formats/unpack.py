"""Limits on what a compressed document unpacks to, checked before anything is unpacked.

A ``.docx`` is a zip archive: 38 KB can declare a 2 GiB ``document.xml``, which python-docx would read whole
and lxml parse (gigabytes of memory, then a traceback). Python's zip reader returns no more than a member's
declared size but inflates a whole part in one call when asked for all of it, trusting that size; so the sizes
the archive declares are checked first: the XML parts a reader parses together must stay within ``max_bytes``,
and no sizeable member may unpack to more than ``max_ratio`` times its packed size (text compresses 3 to 10
times; a bomb, thousands), nor the archive as a whole (a thousand parts just under the size where a part's own
ratio counts). Then every part is inflated once, a chunk at a time, from its raw bytes, before any reader sees
it: a part that unpacks to more than it declares is refused as soon as it passes that size, with bounded memory,
whatever its checksum says.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib
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
    """Inflate ``member`` a chunk at a time from its raw bytes, counting what it really unpacks to: no more than it
    declares (a reader inflates a part in one call, trusting the declared size: a part that declares 1,000 bytes
    and holds 2 GiB would cost gigabytes there), and the checksum right."""
    if member.flag_bits & 1:
        raise NmtError(f"{name}: its part {member.filename} is encrypted; save the {kind} without a password")
    if member.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise NmtError(
            f"{name}: its part {member.filename} is compressed with method {member.compress_type} (a {kind} uses "
            "deflate or none); save it again from its editor"
        )
    raw = _raw_member(archive, member)
    inflate = zlib.decompressobj(-zlib.MAX_WBITS) if member.compress_type == zipfile.ZIP_DEFLATED else None
    unpacked, crc = 0, 0
    for at in range(0, max(len(raw), 1), _CHUNK):
        pending = raw[at : at + _CHUNK]
        while pending:
            piece = inflate.decompress(pending, _CHUNK) if inflate else pending
            pending = inflate.unconsumed_tail if inflate else b""
            unpacked += len(piece)
            if unpacked > member.file_size:
                raise NmtError(
                    f"{name}: its part {member.filename} unpacks to more than the {member.file_size:,} bytes it "
                    f"declares (a damaged archive or a decompression bomb); not a {kind} nmt can read"
                )
            crc = zlib.crc32(piece, crc)
            if inflate and not piece:
                break
    if inflate:
        rest = inflate.flush()
        unpacked, crc = unpacked + len(rest), zlib.crc32(rest, crc)
    if unpacked != member.file_size or crc != member.CRC:
        raise NmtError(
            f"{name}: its part {member.filename} is damaged (it unpacks to {unpacked:,} bytes, declares "
            f"{member.file_size:,}, or its checksum is wrong); not a {kind} nmt can read"
        )


def _raw_member(archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> bytes:
    """The packed bytes of ``member``, located through its local header (whose own name and extra lengths count)."""
    source = archive.fp
    if source is None:
        raise ValueError("the archive is closed")
    source.seek(member.header_offset)
    header = source.read(30)
    if len(header) < 30 or header[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"no local header for {member.filename}")
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    source.seek(member.header_offset + 30 + name_length + extra_length)
    raw = source.read(member.compress_size)
    if len(raw) != member.compress_size:
        raise zipfile.BadZipFile(f"{member.filename} is cut short")
    return raw


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
