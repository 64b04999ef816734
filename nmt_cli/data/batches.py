"""Token-based, length-bucketed batches over a prepared dataset.

A batch holds sentences of neighbouring lengths, as many as fit in ``max_tokens`` counting
padding. The order is a pure function of (seed, epoch): every process of a distributed
run computes the same list and takes its own share, and a resumed run finds its place by
counting batches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .binary import TokenArray
from .chains import Chains, collate_chains
from .context import Context, with_context
from .vocab import BOS_ID, EOS_ID, PAD_ID


@dataclass
class ParallelData:
    """The source and target token arrays of one split, their word alignments where training is guided, and
    the earlier pairs each pair is read with where the model reads document context (``data/context.py``; a
    recurrent model's rows are chains of pairs, ``data/chains.py``)."""

    src: TokenArray  # a JoinedTokenArrays for a multilingual dataset
    tgt: TokenArray
    links: TokenArray | None = None  # per pair, (source piece, target piece) positions flattened (data/align.py)
    context: Context | None = None
    # model.recurrence: the rows are chains of consecutive pairs of a document; batches then index chains, not pairs
    chains: Chains | None = None
    # data.pairs: per pair, its direction's number and its target language's tag (read first by the encoder, or
    # by the decoder after BOS, as data.language_tag says: a tag the decoder reads is never scored)
    directions: np.ndarray | None = None
    tags: np.ndarray | None = None
    tag_side: str = "source"

    @classmethod
    def load(cls, data_dir: Path, split: str, src_lang: str, tgt_lang: str, dtypes: tuple[str, str]) -> ParallelData:
        return cls(
            TokenArray(data_dir / f"{split}.{src_lang}", np.dtype(dtypes[0])),
            TokenArray(data_dir / f"{split}.{tgt_lang}", np.dtype(dtypes[1])),
        )

    def __len__(self) -> int:
        return len(self.src)

    @property
    def pair_lengths(self) -> np.ndarray:
        """max(src, tgt) + 1 (EOS) per row, its context included: the padded width a row needs. A row is a pair,
        or under ``model.recurrence`` a chain of pairs (:attr:`chains`)."""
        src, tgt = self.src.lengths.astype(np.int64), self.tgt.lengths.astype(np.int64)
        if self.chains is not None:
            return self.chains.widths(src, tgt)
        if self.context is not None:
            src = src + self.context.widths(src)
            if self.context.tgt_break is not None:
                tgt = tgt + self.context.widths(tgt)
        if self.tags is not None:
            src, tgt = (src + 1, tgt) if self.tag_side == "source" else (src, tgt + 1)
        return np.maximum(src, tgt) + 1

    def source(self, i: int) -> np.ndarray:
        """Pair ``i``'s source as the model reads it (its tag and its context first, where it has them)."""
        source = (
            self.src[i]
            if self.context is None
            else with_context(self.src, int(self.context.first[i]), i, self.context.src_break)
        )
        if self.tags is not None and self.tag_side == "source":
            return np.concatenate([self.tags[i : i + 1].astype(source.dtype), source])
        return source

    def target(self, i: int) -> tuple[np.ndarray, int]:
        """Pair ``i``'s target as the decoder reads it, and how many of its first tokens are read, not scored
        (its context, and its tag where the decoder reads the tag)."""
        if self.context is None or self.context.tgt_break is None:
            full = self.tgt[i]
        else:
            full = with_context(self.tgt, int(self.context.first[i]), i, self.context.tgt_break)
        if self.tags is not None and self.tag_side == "target":
            full = np.concatenate([self.tags[i : i + 1].astype(full.dtype), full])
        return full, len(full) - len(self.tgt[i])


@dataclass(frozen=True)
class Batch:
    """Padded tensors of one batch: src (B, S), tgt_in (B, T) = BOS y, tgt_out (B, T) = y EOS; with guided
    alignment, ``alignment`` (L, 3): each link's (row, target position, source position), where the decoder's
    row for target position t is the one that predicts tgt_out[t]. Under ``model.recurrence`` the rows are chains
    of sentences and ``blocks`` gives each position's sentence number in its chain (source, target):
    ``data/chains.py``."""

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    target_tokens: int
    source_tokens: int = 0
    alignment: torch.Tensor | None = None
    blocks: tuple[torch.Tensor, torch.Tensor] | None = None

    def to(self, device: torch.device | str) -> Batch:
        device = torch.device(device)

        def move(tensor: torch.Tensor) -> torch.Tensor:
            # From pinned memory the copy runs asynchronously; from pageable memory it would block.
            source = tensor.pin_memory() if device.type == "cuda" else tensor
            return source.to(device, non_blocking=True)

        alignment = move(self.alignment) if self.alignment is not None else None
        blocks = (move(self.blocks[0]), move(self.blocks[1])) if self.blocks is not None else None
        return Batch(
            move(self.src), move(self.tgt_in), move(self.tgt_out), self.target_tokens, self.source_tokens, alignment,
            blocks,
        )  # fmt: skip


def make_batches(
    pair_lengths: np.ndarray,
    max_tokens: int,
    max_positions: int,
    seed: int | None,
    epoch: int = 0,
    pool: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Group pair indices into batches of at most ``max_tokens`` padded tokens per side.

    Pairs longer than ``max_positions`` are left out. Pairs are sorted by length and cut into
    batches in that order, so padding stays low and every batch but the longest is full: a
    batch cut short at a length-bucket boundary would hold a few sentences yet take an
    optimizer step as large as a full one (Adam normalises the gradient's size), a noisy step
    that earlier versions took about 12 times an epoch on Multi30k. With ``seed=None`` the
    order is sorted (for evaluation); otherwise pairs of equal length are shuffled and the
    batches are shuffled, deterministically for (seed, epoch). ``pool`` gives the pairs to batch (a pair may come
    more than once: a multilingual epoch's draw, ``data/mixing.py``); by default, every pair once.
    """
    if pool is None:
        indices = np.flatnonzero(pair_lengths <= max_positions)
    else:
        indices = pool[pair_lengths[pool] <= max_positions]
    rng = np.random.default_rng([seed, epoch]) if seed is not None else None
    if rng is not None:
        indices = rng.permutation(indices)
    # Stable sort by length: the shuffle decides ties.
    indices = indices[np.argsort(pair_lengths[indices], kind="stable")]
    batches = _pack(indices, pair_lengths, max_tokens) if len(indices) else []
    if rng is not None:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def _pack(members: np.ndarray, pair_lengths: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """Cut a length-sorted bucket into batches whose padded size stays within max_tokens."""
    batches, start = [], 0
    lengths = pair_lengths[members]
    while start < len(members):
        # Sorted ascending, so the widest pair of a batch is its last one.
        end = start + 1
        while end < len(members) and (end - start + 1) * lengths[end] <= max_tokens:
            end += 1
        batches.append(members[start:end])
        start = end
    return batches


def collate(data: ParallelData, indices: np.ndarray) -> Batch:
    """Pad the rows ``indices`` into a :class:`Batch` (EOS after the source, BOS/EOS around the target)."""
    if data.chains is not None:
        chains = collate_chains(data.src, data.tgt, data.chains, indices)
        blocks = (chains.src_blocks, chains.tgt_blocks)
        return Batch(chains.src, chains.tgt_in, chains.tgt_out, chains.target_tokens, chains.source_tokens, None, blocks)
    srcs = [data.source(i) for i in indices]
    tgts, skips = zip(*(data.target(i) for i in indices)) if len(indices) else ((), ())
    src = pad_rows([np.append(s, EOS_ID) for s in srcs])
    tgt_in = pad_rows([np.insert(t, 0, BOS_ID) for t in tgts])
    # Context tokens of the target (2-to-2) are read, never scored: PAD leaves them out of the loss.
    tgt_out = pad_rows([np.append(np.where(np.arange(len(t)) < k, PAD_ID, t), EOS_ID) for t, k in zip(tgts, skips)])
    scored = int(sum(len(t) + 1 - k for t, k in zip(tgts, skips)))
    alignment = None
    if data.links is not None:
        offsets = [(len(s) - len(data.src[i]), k) for s, i, k in zip(srcs, indices, skips)]
        alignment = _alignment(data.links, indices, offsets)
    return Batch(src, tgt_in, tgt_out, scored, int(sum(len(s) + 1 for s in srcs)), alignment)


def _alignment(links: TokenArray, indices: np.ndarray, offsets: list[tuple[int, int]]) -> torch.Tensor:
    """The links of pairs ``indices`` as (row, target position, source position) rows: (L, 3) int64; each
    pair's positions moved past its context (``offsets``: source and target context lengths)."""
    rows = []
    for row, (i, (src_skip, tgt_skip)) in enumerate(zip(indices, offsets)):
        pairs = links[i].astype(np.int64).reshape(-1, 2)  # (source, target)
        rows.append(np.column_stack([np.full(len(pairs), row), pairs[:, 1] + tgt_skip, pairs[:, 0] + src_skip]))
    return torch.from_numpy(np.concatenate(rows) if rows else np.zeros((0, 3), np.int64))


def pad_rows(rows: Sequence[np.ndarray | list[int]]) -> torch.Tensor:
    """Token id rows as one int64 tensor, right-padded with PAD_ID (training, validation and decoding)."""
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width), PAD_ID, dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return torch.from_numpy(out)


def target_tokens(data: ParallelData, indices: np.ndarray) -> int:
    """Scored target tokens (with EOS) of a training batch, from the stored lengths alone: concatenated context is
    never scored, nor are the leads of a recurrent model's chains."""
    if data.chains is not None:
        return data.chains.scored_tokens(data.tgt.lengths, indices)
    return int(data.tgt.lengths[indices].sum() + len(indices))


def decoding_batches(widths: Sequence[int], todo: Sequence[int], batch_size: int, batch_tokens: int) -> Iterator[list[int]]:
    """Batches for translation: the lines ``todo`` (indices into ``widths``, each line's tokens with its
    EOS), longest first, each batch at most ``batch_size`` lines (0: no limit) and at most
    ``batch_tokens`` tokens counting padding to its first (longest) line. Both engines of ``nmt
    translate`` batch this way."""
    batch: list[int] = []
    for i in sorted(todo, key=lambda i: widths[i], reverse=True):
        too_many = batch_size and len(batch) >= batch_size
        if batch and (too_many or (len(batch) + 1) * widths[batch[0]] > batch_tokens):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch
