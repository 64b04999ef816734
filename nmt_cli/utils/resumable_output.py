"""An output file written over several runs: the lines done survive a kill, and a run started again
with the same arguments continues where the last one stopped.

Beside ``OUT`` lie ``OUT.partial`` (the lines so far) and ``OUT.partial.json`` (what they are: the
job's identity, and how many lines and bytes of the partial file are complete). Lines are added in
blocks; after each block the partial file's bytes are forced to disk and only then is the record
replaced (atomically), so the record never claims more than the disk holds. Bytes written after the
last record (a kill in the middle of a block) are cut off when the job continues. A record of
another job (a changed input, model or setting) is refused, naming what changed; ``restart`` starts
over. When the job ends, the partial file is renamed to ``OUT`` and the record removed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import NmtError
from .files import NO_ROOM, WriteFailed, atomic_open, describe_os_error, ensure_writable_dir, write_all

RECORD_VERSION = 1


class ResumableOutput:
    """``OUT`` written in committed blocks; :meth:`open` says how many lines an earlier run completed."""

    def __init__(self, path: Path, identity: dict[str, Any], partial_suffix: str = ".partial") -> None:
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + partial_suffix)
        self.record = self.partial.with_name(self.partial.name + ".json")
        self.identity = identity
        self.lines = 0  # lines committed
        self.bytes = 0  # their size in the partial file
        self.complete = False
        self._pending: list[bytes] = []
        self._pending_lines = 0
        self._fd: int | None = None

    # ------------------------------------------------------------------ start

    def open(self, restart: bool = False) -> int:
        """Open the partial file, continuing an earlier run of this job; return the lines it completed."""
        ensure_writable_dir(self.partial.parent)
        if restart:
            self.discard()
        stored = self.read_record() if self.record.exists() else None
        if stored is not None:
            self._check_same_job(stored)
            self.lines, self.bytes, self.complete = stored["lines"], stored["bytes"], stored["complete"]
            size = self.partial.stat().st_size if self.partial.exists() else -1
            if size < self.bytes:
                raise NmtError(
                    f"{self.partial}: holds {max(size, 0):,} bytes, but {self.record} records {self.bytes:,}; the "
                    "partial output was changed or lost. Add --restart to translate from the start"
                )
        self._fd = os.open(self.partial, os.O_WRONLY | os.O_CREAT, 0o644)
        os.ftruncate(self._fd, self.bytes)  # drop what a killed run wrote after its last record
        os.lseek(self._fd, self.bytes, os.SEEK_SET)
        if stored is None:
            self._write_record()  # the job's identity is on disk before its first line
        return self.lines

    def read_record(self) -> dict[str, Any]:
        """The record on disk, checked; a damaged one is a one-line error that names --restart."""
        try:
            stored = json.loads(self.record.read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError) as err:
            raise NmtError(
                f"{self.record}: unreadable progress record ({type(err).__name__}); add --restart to start over"
            ) from None
        valid = (
            isinstance(stored, dict)
            and stored.get("version") == RECORD_VERSION
            and isinstance(stored.get("identity"), dict)
            and all(isinstance(stored.get(key), int) and stored[key] >= 0 for key in ("lines", "bytes"))
            and isinstance(stored.get("complete"), bool)
        )
        if not valid:
            raise NmtError(f"{self.record}: not a progress record of this nmt version; add --restart to translate anew")
        return stored

    def _check_same_job(self, stored: dict[str, Any]) -> None:
        differs = _first_difference(stored["identity"], self.identity)
        if differs is not None:
            key, then, now = differs
            raise NmtError(
                f"{self.record}: an interrupted translation ({stored['lines']:,} lines done) was made with another "
                f"{key} ({_short(then)} then, {_short(now)} now); run it as it was to continue, or add --restart to "
                "start over"
            )

    # ------------------------------------------------------------------ writing

    def add(self, text: str) -> None:
        """Queue one output line (or several, for an n-best list) of the next input line."""
        self._pending.append(text.encode("utf-8"))
        self._pending_lines += 1

    def commit(self, complete: bool = False) -> None:
        """Write the queued lines, force them to disk, then record them."""
        if self._fd is None:
            raise RuntimeError("ResumableOutput.commit before open")
        data = b"".join(self._pending)
        try:
            write_all(self._fd, data)
            os.fsync(self._fd)
        except OSError as err:
            os.ftruncate(self._fd, self.bytes)
            os.lseek(self._fd, self.bytes, os.SEEK_SET)
            if err.errno in NO_ROOM:
                raise WriteFailed(describe_os_error(err, self.partial)) from None
            raise
        self.bytes += len(data)
        self.lines += self._pending_lines
        self._pending, self._pending_lines = [], 0
        self.complete = complete
        self._write_record()

    def _write_record(self) -> None:
        record = {
            "version": RECORD_VERSION,
            "output": self.path.name,
            "identity": self.identity,
            "lines": self.lines,
            "bytes": self.bytes,
            "complete": self.complete,
        }
        with atomic_open(self.record, "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=1)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # ------------------------------------------------------------------ end

    def finish(self) -> None:
        """The job is done: the partial file becomes ``OUT``, the record goes."""
        self.commit(complete=True)
        self.close()
        os.replace(self.partial, self.path)
        self.record.unlink(missing_ok=True)

    def discard(self) -> None:
        """Forget an earlier run of this job (``--restart``)."""
        self.close()
        self.partial.unlink(missing_ok=True)
        self.record.unlink(missing_ok=True)


def _first_difference(then: Any, now: Any, key: str = "") -> tuple[str, Any, Any] | None:
    """The first leaf (dotted key, then, now) where two identities differ, or None."""
    if isinstance(then, dict) and isinstance(now, dict):
        for name in sorted(set(then) | set(now)):
            found = _first_difference(then.get(name), now.get(name), name)
            if found is not None:
                return found
        return None
    return None if then == now else (key.replace("_", " ") or "job", then, now)


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:16] + "..." + text[-8:]
