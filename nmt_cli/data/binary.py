"""The on-disk token arrays: ``SPLIT.LANG.bin`` (token ids) and ``SPLIT.LANG.idx`` (offsets).

``.bin`` holds the subword ids of all sentences back to back, as uint16 when the vocabulary
has at most 65,536 entries and uint32 otherwise (no BOS/EOS: they are added at batching).
``.idx`` holds ``n + 1`` little-endian int64 offsets, so sentence ``i`` is
``bin[idx[i]:idx[i+1]]`` and its length is ``idx[i+1] - idx[i]``: training reads lengths
for bucketing without touching the tokens. Both are read back through ``numpy.memmap``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import DataError
from ..utils.files import atomic_path

OFFSET_DTYPE = np.dtype("<i8")


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned dtype that holds every id of the vocabulary."""
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


class TokenArrayWriter:
    """Appends encoded sentences to a ``.bin``/``.idx`` pair, streaming to disk.

    Offsets are written as they come, so memory does not grow with the corpus. Files
    appear under their final names only on :meth:`commit`.
    """

    def __init__(self, prefix: Path, dtype: np.dtype) -> None:
        self.prefix = prefix
        self.dtype = dtype
        self._bin_ctx = atomic_path(prefix.with_name(prefix.name + ".bin"))
        self._idx_ctx = atomic_path(prefix.with_name(prefix.name + ".idx"))
        self._bin = open(self._bin_ctx.__enter__(), "wb")
        self._idx = open(self._idx_ctx.__enter__(), "wb")
        self._offset = 0
        self.sentences = 0
        self.tokens = 0
        self._idx.write(np.zeros(1, OFFSET_DTYPE).tobytes())

    def append(self, tokens: np.ndarray, lengths: np.ndarray) -> None:
        """Add a chunk: ``tokens`` concatenated, ``lengths`` one per sentence."""
        self._bin.write(np.ascontiguousarray(tokens, dtype=self.dtype).tobytes())
        offsets = self._offset + np.cumsum(lengths, dtype=OFFSET_DTYPE)
        self._idx.write(offsets.astype(OFFSET_DTYPE).tobytes())
        if len(offsets):
            self._offset = int(offsets[-1])
        self.sentences += len(lengths)
        self.tokens += int(np.sum(lengths))

    def commit(self) -> None:
        """Close both files and move them to their final names."""
        self._bin.close()
        self._idx.close()
        self._bin_ctx.__exit__(None, None, None)
        self._idx_ctx.__exit__(None, None, None)

    def abort(self) -> None:
        """Close and delete the temporary files (the final names are untouched)."""
        self._bin.close()
        self._idx.close()
        error = RuntimeError("aborted")
        for ctx in (self._bin_ctx, self._idx_ctx):
            try:
                ctx.__exit__(RuntimeError, error, None)
            except RuntimeError:
                pass


class TokenArray:
    """Read-only view of one ``.bin``/``.idx`` pair through ``numpy.memmap``."""

    def __init__(self, prefix: Path, dtype: np.dtype) -> None:
        bin_path, idx_path = prefix.with_name(prefix.name + ".bin"), prefix.with_name(prefix.name + ".idx")
        for path in (bin_path, idx_path):
            if not path.is_file():
                raise DataError(f"{path}: prepared data missing; run `nmt prepare` for this recipe")
        self.offsets = np.fromfile(idx_path, dtype=OFFSET_DTYPE)
        size = bin_path.stat().st_size // dtype.itemsize
        if len(self.offsets) == 0 or self.offsets[-1] != size:
            raise DataError(f"{bin_path}: does not match {idx_path.name} (truncated?); re-run `nmt prepare --force`")
        self.tokens = np.memmap(bin_path, dtype=dtype, mode="r") if size else np.zeros(0, dtype)
        self.lengths = np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]


class JoinedTokenArrays(TokenArray):
    """Several token arrays read as one (a multilingual dataset's directions, one after another)."""

    def __init__(self, parts: list[TokenArray]) -> None:  # noqa: D107 (no file of its own: the parts are read)
        self.parts = parts
        self.lengths = np.concatenate([part.lengths for part in parts]) if parts else np.zeros(0, np.int64)
        self.starts = np.cumsum([0] + [len(part) for part in parts])

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> np.ndarray:
        part = int(np.searchsorted(self.starts, i, side="right")) - 1
        return self.parts[part][i - int(self.starts[part])]
