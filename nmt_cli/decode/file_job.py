"""Translating a file as a job: resumable after a kill, and split into shards across processes.

The input is cut into chunks of ``chunk_lines`` lines, the unit the translator sorts and batches
(``decode/translator.py``). Every cut this module makes falls between chunks, so each chunk is
translated exactly as in one uninterrupted run of one process, whatever the number of processes
or restarts: the output is the same file, byte for byte.

- **Resuming**: with ``-o``, the lines done are committed chunk by chunk beside the output
  (``utils/resumable_output.py``); the same command started again continues after the last
  committed chunk.
- **Shards**: shard ``I`` of ``N`` takes the I-th of N runs of consecutive chunks, so the shards'
  outputs concatenated in order are the whole output (``--shard I/N``, for array jobs).
- **torchrun**: each process translates the shard of its rank into its own partial file; rank 0
  waits for all of them and joins them into ``OUT``. Processes share no collective: a rank that
  fails makes torchrun stop the others, and a slow shard cannot run into a collective's timeout.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import NmtError
from ..utils.files import atomic_open
from ..utils.resumable_output import ResumableOutput

# A function from (input lines, the global index of the first) to each line's output text.
Translate = Callable[[Iterator[str], int], Iterator[str]]
Progress = Callable[[Iterator[str], int, int], Iterator[str]]  # (items, lines already done, lines in all)

WAIT_SECONDS = 1.0  # how often rank 0 looks whether the other ranks' shards are done


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (0-based) of ``count``."""

    index: int = 0
    count: int = 1

    @staticmethod
    def parse(text: str) -> Shard:
        """``--shard I/N``: shard I of N, counted from 0."""
        try:
            index, count = (int(part) for part in text.split("/"))
        except ValueError:
            raise NmtError(f"--shard {text}: write I/N, e.g. --shard 0/4 for the first of four shards") from None
        if count < 1 or not 0 <= index < count:
            raise NmtError(f"--shard {text}: shards are numbered 0 to N-1 (e.g. 0/{max(count, 1)})")
        return Shard(index, count)

    @staticmethod
    def of_torchrun() -> Shard | None:
        """This process's shard when torchrun started it (its rank of the world), else None."""
        if "WORLD_SIZE" not in os.environ:
            return None
        return Shard(int(os.environ.get("RANK", "0")), int(os.environ["WORLD_SIZE"]))

    def lines(self, total: int, chunk_lines: int) -> range:
        """The input lines of this shard: whole chunks, consecutive."""
        chunks = -(-total // chunk_lines)
        first, end = self.index * chunks // self.count, (self.index + 1) * chunks // self.count
        return range(min(first * chunk_lines, total), min(end * chunk_lines, total))


@dataclass(frozen=True)
class InputFile:
    """An input file's line count and SHA-256, read in one pass (it identifies a job's input)."""

    path: Path
    lines: int
    sha256: str

    @staticmethod
    def scan(path: Path) -> InputFile:
        digest, lines, last = hashlib.sha256(), 0, b"\n"
        with open(path, "rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
                lines += block.count(b"\n")
                last = block[-1:]
        return InputFile(path, lines + (last != b"\n"), digest.hexdigest())


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class FileJob:
    """Translate ``lines`` of an input file into ``output`` (resumable), or to a stream when there is no output."""

    source: InputFile
    shard: Shard
    chunk_lines: int
    identity: dict[str, Any]
    output: Path | None
    launched: bool = False  # one of torchrun's processes: rank 0 joins the shards into the output
    kept: int = 0  # lines of this shard on disk, committed (what an interrupted run leaves to continue from)
    shard_size: int = 0

    def run(
        self, lines: Iterable[str], translate: Translate, write: Callable[[str], object], restart: bool, progress: Progress
    ) -> int:
        """Translate this process's shard; return the lines translated by this run."""
        todo = self.shard.lines(self.source.lines, self.chunk_lines)
        self.shard_size = len(todo)
        if self.output is None:
            source = itertools.islice(lines, todo.start, todo.stop)
            count = 0
            for text in progress(translate(source, todo.start), 0, len(todo)):
                write(text)
                count += 1
            return count
        part = ResumableOutput(
            self.output, {**self.identity, "shard": [self.shard.index, self.shard.count]}, self._partial_suffix()
        )
        try:
            done = part.open(restart)
            count = 0 if part.complete else self._translate_into(part, lines, todo, done, translate, progress)
            if self.launched:
                part.commit(complete=True)
            else:
                part.finish()
        finally:
            part.close()
        if self.launched and self.shard.index == 0:
            self._join_shards()
        return count

    def _partial_suffix(self) -> str:
        return f".rank{self.shard.index}of{self.shard.count}.partial" if self.launched else ".partial"

    def _translate_into(
        self, part: ResumableOutput, lines: Iterable[str], todo: range, done: int, translate: Translate, progress: Progress
    ) -> int:
        first = todo.start + done  # a chunk boundary: records are written only there
        source = itertools.islice(lines, first, todo.stop)
        count = 0
        self.kept = done
        for text in progress(translate(source, first), done, len(todo)):
            part.add(text)
            count += 1
            if (first + count - todo.start) % self.chunk_lines == 0:
                part.commit()
                self.kept = part.lines
        return count

    def _join_shards(self) -> None:
        """Rank 0: wait until every rank's partial file is complete, then join them into the output."""
        assert self.output is not None
        parts = [
            ResumableOutput(
                self.output, {**self.identity, "shard": [rank, self.shard.count]}, f".rank{rank}of{self.shard.count}.partial"
            )
            for rank in range(self.shard.count)
        ]
        while not all(_is_complete(part) for part in parts):
            time.sleep(WAIT_SECONDS)
        with atomic_open(self.output, "wb") as joined:
            for part in parts:
                with open(part.partial, "rb") as handle:
                    remaining = part.bytes
                    while remaining and (block := handle.read(min(remaining, 1 << 20))):
                        joined.write(block)
                        remaining -= len(block)
        for part in parts:
            part.discard()


def _is_complete(part: ResumableOutput) -> bool:
    """Whether another rank finished its shard (its record says so, for this very job)."""
    if not part.record.exists():
        return False
    try:
        stored = part.read_record()
    except NmtError:
        return False  # being replaced at this moment
    if stored["identity"] != part.identity:
        return False
    part.bytes = stored["bytes"]
    return bool(stored["complete"])


def chosen_shard(shard: str | None, input: Path | None, output: Path | None) -> Shard | None:
    """The shard this process translates: ``--shard``, torchrun's rank, or None for the whole input."""
    launched = Shard.of_torchrun()
    if shard is not None and launched is not None:
        raise NmtError("--shard: under torchrun each process takes the shard of its rank; drop --shard")
    chosen = Shard.parse(shard) if shard is not None else launched
    if chosen is not None and input is None:
        raise NmtError("sharding reads the input twice (lines are counted first); give it with -i FILE, not on stdin")
    if launched is not None and output is None:
        raise NmtError("under torchrun the processes' shards are joined into one file: give it with -o FILE")
    return chosen


def job_identity(
    config: Any,
    models: list[Path],
    engine: str,
    dtype: str | None,
    nbest: int,
    alignments: bool,
    alignment_layer: int | None,
    prefix: Path | None,
    chunk_lines: int,
) -> dict[str, Any]:
    """What makes a resumed translation the same job: the models' bytes and every setting that shapes the
    output (threads, workers and the device do not: they change how fast, not what)."""
    from dataclasses import asdict

    files = [m / ("model.bin" if engine == "ctranslate2" else "model.pt") if m.is_dir() else m for m in models]
    settings = {k: v for k, v in asdict(config).items() if k not in ("workers", "cuda_graphs")}
    return {
        "model": [file_sha256(path) for path in files],
        "settings": {
            **settings,
            "engine": engine,
            "dtype": dtype,
            "nbest": nbest,
            "alignments": alignments,
            "alignment_layer": alignment_layer,
            "chunk_lines": chunk_lines,
        },
        "prefix": file_sha256(prefix) if prefix is not None else None,
    }
