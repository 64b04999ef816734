"""Document context by concatenation (``model.concat``): a pair is read after the previous pairs of its document.

With ``model.concat: K`` the source of pair i is the sources of up to K pairs before it in the same document, each
followed by the piece ``<brk>``, then its own source (2-to-1: Tiedemann & Scherrer 2017; Junczys-Dowmunt 2019).
With ``model.concat_target`` the target is built the same way from the previous targets (2-to-2); the loss counts
the current sentence's tokens only, so losses and perplexities compare with a sentence-level model's, and
translation forces the model's own earlier translations where training read the references.

Training, validation, scoring and translation all build their rows here, so the model reads at translation
exactly what it was trained on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import sentencepiece as spm
import torch

from ..config import ModelConfig
from ..errors import NmtError
from .binary import TokenArray
from .vocab import DOC_BREAK, EOS_ID, UNK_ID


@dataclass(frozen=True)
class Context:
    """Which earlier pairs each pair of a split is read with, and the ``<brk>`` ids that end them."""

    first: np.ndarray  # per pair, the index of its first context pair (== its own index: none)
    src_break: int
    tgt_break: int | None  # None: the target has no context (2-to-1)

    @classmethod
    def of(cls, documents: np.ndarray, sentences: int, src_break: int, tgt_break: int | None) -> Context:
        """``documents`` gives each pair's document number (non-decreasing); ``sentences`` is K."""
        return cls(context_starts(documents, sentences), src_break, tgt_break)

    def widths(self, lengths: np.ndarray, with_break: bool = True) -> np.ndarray:
        """Tokens of each pair's context (its ``<brk>`` pieces included): from the pairs' own ``lengths``."""
        ends = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        index = np.arange(len(lengths))
        return ends[index] - ends[self.first] + (index - self.first) * int(with_break)


def context_word_dropout(
    src: torch.Tensor, p: float, src_break: int | None, blocks: torch.Tensor | None = None
) -> torch.Tensor:
    """CoWord dropout (Fernandes et al. 2021): each token of the sentence being translated replaced by ``<unk>``
    with probability ``p``, so that the model must read its context for what it lost; its context (a concatenated
    row's sentences up to its last ``src_break``) is kept, and so are PAD, EOS and the breaks. A recurrence chain
    (``blocks``: each source position's sentence number in its chain) has no breaks, and each of its sentences is
    the next one's past, computed in the same pass: dropping from all of them would take from the past what was
    taken from the sentence. So only every other sentence (the odd-numbered) loses tokens, each read after a whole
    past; the even ones read a past with holes, as any sentence may. Draws from torch's CPU generator, whose state
    a checkpoint keeps, so a resumed run drops the same tokens."""
    current = src > EOS_ID  # pieces, not PAD/UNK/BOS/EOS
    if src_break is not None:
        is_break = src == src_break
        current &= (is_break.flip(1).cumsum(1).flip(1) == 0) & ~is_break  # after the row's last break
    if blocks is not None:
        current &= blocks % 2 == 1
    dropped = current & (torch.rand(src.shape) < p)
    return src.masked_fill(dropped, UNK_ID)


def context_starts(documents: np.ndarray, sentences: int) -> np.ndarray:
    """Per pair, the first of the up to ``sentences`` pairs before it in its document."""
    index = np.arange(len(documents))
    if not len(documents):
        return index
    starts = np.concatenate([[0], np.flatnonzero(np.diff(documents)) + 1])
    document_start = starts[np.searchsorted(starts, index, side="right") - 1]
    return np.maximum(index - sentences, document_start)


def with_context(rows: TokenArray, first: int, last: int, piece: int) -> np.ndarray:
    """Rows ``first .. last - 1``, each followed by ``piece``, then row ``last``."""
    parts: list[np.ndarray] = []
    for j in range(first, last):
        parts.extend([rows[j], np.array([piece], dtype=np.int64)])
    parts.append(rows[last])
    return np.concatenate([p.astype(np.int64) for p in parts])


def join_context(history: Sequence[Sequence[int]], current: Sequence[int], piece: int, limit: int) -> tuple[list[int], int]:
    """``history`` (oldest first), each sentence followed by ``piece``, then ``current``: the ids and how many of
    them are context. Context goes first, oldest sentence first, when the whole would pass ``limit`` tokens;
    ``current`` itself is never cut here."""
    kept = list(history)
    while kept and sum(len(h) + 1 for h in kept) + len(current) > limit:
        kept.pop(0)
    ids: list[int] = []
    for sentence in kept:
        ids.extend(sentence)
        ids.append(piece)
    return ids + list(current), len(ids)


def break_id(vocab: spm.SentencePieceProcessor, what: str) -> int:
    """The id of ``<brk>`` in ``vocab``; ``what`` names the model or data that needs it, for the error."""
    piece = vocab.PieceToId(DOC_BREAK)
    if piece == UNK_ID or vocab.IdToPiece(piece) != DOC_BREAK:
        raise NmtError(
            f"{what} needs the piece {DOC_BREAK} in the vocabulary, which `nmt prepare` adds when the training "
            "corpus has documents: put a PREFIX.docids file beside it and re-run `nmt prepare --force`"
        )
    return piece


def pairs_in_context(
    pairs: Sequence[tuple[list[int], list[int]]],
    starts: Sequence[bool],
    model: ModelConfig,
    src_vocab: spm.SentencePieceProcessor,
    tgt_vocab: spm.SentencePieceProcessor,
) -> tuple[list[tuple[list[int], list[int]]], list[int]]:
    """(source, target) pairs of documents (``starts[i]``: pair i begins one) as a ``model.concat`` model reads
    them: each after up to K earlier pairs of its document, the target too for 2-to-2; and per pair how many
    target tokens are context (read, not scored). Forced scoring (``nmt score --model --docids``) reads them so."""
    what = "a model trained with model.concat"
    src_break = break_id(src_vocab, what)
    tgt_break = break_id(tgt_vocab, what) if model.concat_target else None
    limit = model.max_positions - 1
    out, skips = [], []
    history: list[tuple[list[int], list[int]]] = []
    for (source, target), start in zip(pairs, starts):
        if start:
            history = []
        row, _ = join_context([s for s, _ in history], source, src_break, limit)
        forced, skip = target, 0
        if tgt_break is not None:
            forced, skip = join_context([t for _, t in history], target, tgt_break, limit)
        out.append((row, forced))
        skips.append(skip)
        history = (history + [(source, target)])[-model.concat :]
    return out, skips
