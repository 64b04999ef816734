"""Documents in a corpus: which pairs belong together, in their order.

A corpus marks its documents with a ``PREFIX.docids`` file (or ``.docids.gz``) beside ``PREFIX.SRC`` and
``PREFIX.TGT``: one id per line, line N naming the document of pair N, consecutive lines with the same id one
document, as WMT's document-level test sets and ``../shared/data/manpages`` have them. A corpus without one holds
documents of one pair each: sentence-level corpora are read as before, and a split may mix both.

``nmt prepare`` keeps the pairs in corpus order and writes, per split, ``SPLIT.docs.npy``: the document number
of each kept pair (0, 0, 0, 1, 1, 2 ...). A pair the cleaning drops leaves its document whole.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import DataError
from ..utils.files import atomic_path

DOCIDS = "docids"  # the suffix of a corpus's document-id file


def docids_path(base: Path) -> Path | None:
    """``PREFIX.docids`` or ``PREFIX.docids.gz`` beside the corpus prefix ``base``, if there is one."""
    for candidate in (base.with_name(f"{base.name}.{DOCIDS}"), base.with_name(f"{base.name}.{DOCIDS}.gz")):
        if candidate.is_file():
            return candidate
    return None


class DocumentNumbers:
    """The document number of each kept pair, in order: a new number wherever the document id changes (ids of
    different corpora never join), and for every pair of a corpus without ids."""

    def __init__(self) -> None:
        self.numbers: list[int] = []
        self._last: object = None

    def add(self, key: object | None) -> None:
        """One kept pair; ``key`` identifies its document (None: a document of its own)."""
        if key is None or key != self._last or not self.numbers:
            number = self.numbers[-1] + 1 if self.numbers else 0
        else:
            number = self.numbers[-1]
        self.numbers.append(number)
        self._last = key

    @property
    def count(self) -> int:
        return self.numbers[-1] + 1 if self.numbers else 0


def documents_file(prefix: Path) -> Path:
    return prefix.with_name(prefix.name + ".docs.npy")


def document_ids_file(prefix: Path) -> Path:
    return prefix.with_name(prefix.name + ".docs.txt")


def save_documents(prefix: Path, numbers: list[int]) -> None:
    """``PREFIX.docs.npy``, written atomically; where some document holds several pairs, also ``PREFIX
    .docs.txt`` (the same numbers as text, one a line, for ``nmt translate --docids`` and ``nmt score --docids``)."""
    with atomic_path(documents_file(prefix)) as tmp, open(tmp, "wb") as handle:
        np.save(handle, np.asarray(numbers, dtype=np.int64))
    text = document_ids_file(prefix)
    if numbers and numbers[-1] + 1 < len(numbers):
        with atomic_path(text) as tmp:
            tmp.write_text("".join(f"{n}\n" for n in numbers), encoding="utf-8")
    else:
        text.unlink(missing_ok=True)


def load_documents(prefix: Path, pairs: int) -> np.ndarray:
    """The document number of each pair of a prepared split, checked against its number of pairs."""
    path = documents_file(prefix)
    try:
        numbers = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        raise DataError(f"{path}: missing or unreadable; re-run `nmt prepare --force`") from None
    if numbers.ndim != 1 or len(numbers) != pairs or (len(numbers) and (np.diff(numbers) < 0).any()):
        raise DataError(f"{path}: does not match the split's {pairs:,} pairs; re-run `nmt prepare --force`")
    return numbers
