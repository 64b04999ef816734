"""File helpers: atomic writes and transparent gzip reading.

Every file nmt writes goes through :func:`atomic_path` so that a killed process never
leaves a half-written file that looks complete.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO, cast

from ..errors import NmtError
from .process import pid_alive

# The temporary files of atomic_path: ".NAME.tmpPID".
TEMP_PATTERN = re.compile(r"^\..+\.tmp(\d+)$")

# A write that failed for want of room: the disk is full, the user's quota is used up, or the file
# passed the size limit (``ulimit -f``; Python ignores SIGXFSZ, so the write fails with EFBIG).
NO_ROOM = frozenset(code for code in (errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", None)) if code is not None)


def describe_os_error(err: OSError, path: str | os.PathLike[str] | None = None) -> str:
    """One line for a failed file operation: the path, what failed and, when there was no room, the
    free space on that disk and what to do."""
    where = path if path is not None else err.filename
    prefix = f"{where}: " if where else ""
    if err.errno not in NO_ROOM:
        return f"{prefix}{err.strerror or err}"
    room = f"{_human(free_space(where))} free on its disk" if where else "no room left"
    if err.errno == errno.EFBIG:
        room += "; the file passed the size limit (ulimit -f) or the file system's largest file"
    return (
        f"{prefix}cannot be written ({err.strerror}; {room}); free some space or write elsewhere and run the same "
        "command again: the files written before are untouched"
    )


def free_space(path: str | os.PathLike[str]) -> int:
    """Bytes free to this user on the disk holding ``path`` (or its nearest existing parent)."""
    folder = Path(path).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return 0


def _human(size: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,} {unit}" if unit == "bytes" else f"{size:,.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    return str(size)


class WriteFailed(NmtError):
    """A file could not be written for want of room (disk full, quota, size limit)."""


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` only on success.

    The temporary file lives in the same folder so the final ``os.replace`` is atomic.
    On any exception the temporary file is removed and ``path`` is left untouched.
    """
    final = Path(path)
    ensure_writable_dir(final.parent)
    tmp = final.with_name(f".{final.name}.tmp{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, final)
    except OSError as err:
        if err.errno in NO_ROOM:
            raise WriteFailed(describe_os_error(err, final)) from None
        raise
    finally:
        if tmp.exists():
            tmp.unlink()


def remove_stale_temps(folder: str | os.PathLike[str]) -> list[Path]:
    """Delete the temporary files that killed processes left in ``folder`` (their PID is gone)."""
    removed: list[Path] = []
    folder = Path(folder)
    if not folder.is_dir():
        return removed
    for path in folder.iterdir():
        match = TEMP_PATTERN.match(path.name)
        if match and path.is_file() and not pid_alive(int(match.group(1))):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", **kwargs) -> Iterator[IO]:
    """Open a temporary file for writing that replaces ``path`` only when closed cleanly."""
    with atomic_path(path) as tmp, open(tmp, mode, **kwargs) as handle:
        yield handle


def append_line(path: str | os.PathLike[str], line: str) -> None:
    """Append ``line`` and a newline to a text file; a failed write (disk full) is undone, so the file
    never ends in half a line that would spoil the next one appended."""
    data = (line + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            write_all(fd, data)
        except OSError as err:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            if err.errno in NO_ROOM:
                raise WriteFailed(describe_os_error(err, path)) from None
            raise
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """``os.write`` until every byte is written: a short write (the disk filling up) is followed by
    one that fails with the reason, instead of passing unnoticed."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def ensure_writable_dir(folder: str | os.PathLike[str]) -> Path:
    """Create ``folder`` if needed and check that files can be written in it."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise NmtError(
            f"{folder}: cannot create the output folder ({err.strerror}); choose a folder you can write to"
        ) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise NmtError(
            f"{folder}: the output folder is not writable; choose a folder you can write to or fix its permissions"
        )
    return folder


def open_binary(path: str | os.PathLike[str]) -> IO[bytes]:
    """Open a file for binary reading, decompressing ``.gz`` transparently."""
    path = Path(path)
    if not path.is_file():
        raise NmtError(f"{path}: file not found; check the path (and data.root in the recipe)")
    if path.suffix == ".gz":
        return cast(IO[bytes], gzip.open(path, "rb"))
    return open(path, "rb")


def sha256_file(path: str | os.PathLike[str], block: int = 1 << 20) -> str:
    """Hex SHA-256 of a file's bytes, read in blocks (constant memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def split_lines(text: str) -> list[str]:
    """Lines as sacreBLEU and the Unix tools count them: split on ``\\n`` only.

    ``str.splitlines`` also splits on U+2028, U+0085, form feed, lone CR and more, which appear inside
    real sentences and would silently shift every following line against its reference. A CR
    before the ``\\n`` (Windows line ends) and a UTF-8 byte-order mark at the start are dropped.
    """
    text = text.removeprefix("\ufeff")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start another
    return [line.removesuffix("\r") for line in lines]
