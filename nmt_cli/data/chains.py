"""Training rows of a recurrent model (``model.recurrence``): chains of consecutive pairs of one document.

Transformer-XL trains on consecutive segments whose memory is the states the previous segment already computed,
with no gradient through them (Dai et al. 2019, section 3.2): nothing is computed twice. Here a training row is a
*chain*: consecutive pairs of one document laid end to end (each source followed by EOS, each target read after
BOS), read in one pass in which every sentence attends to its own tokens and, without gradient, to the keys and
values its layer computed for the N sentences before it (``model/recurrence.py``: :class:`SentenceBlocks`). Every
pair is trained once, with the past it has at translation (its predecessors' keys/values, computed with their own
pasts), and no pair is run a second time to make another's memory.

A chain holds pairs until the next would take a side past ``train.chain_tokens``. One that does not start its
document may begin with the N pairs before it (*leads*), read for their keys/values and not scored, so that its
first scored pair has its past too: validation always reads them; training does where ``train.chain_leads`` says
(off by default: they are computed through but never scored, and lost on validation in a short budget,
docs/benchmarks.md; a chain's first pair then trains without a past, as a document's first does). Chains are
fixed by the data (deterministic, so validation and exact resume need nothing new); epochs shuffle them as they
shuffle sentence-level rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .binary import TokenArray
from .vocab import BOS_ID, EOS_ID, PAD_ID

# The block number of padding: further from every real block than any past reaches, so no real position attends
# to padding, and padding attends only to padding (model/recurrence.py).
PAD_BLOCK = 1 << 20


@dataclass(frozen=True)
class Chains:
    """The chains of one split: chain c reads pairs ``first[c] .. end[c] - 1`` and scores those from ``scored[c]``."""

    first: np.ndarray
    scored: np.ndarray
    end: np.ndarray
    document_starts: np.ndarray  # per pair, whether it begins its document (translation in document order)

    def __len__(self) -> int:
        return len(self.first)

    @classmethod
    def of(cls, documents: np.ndarray, widths: np.ndarray, sentences: int, row_tokens: int) -> Chains:
        """Chains over pairs whose document numbers are ``documents`` (non-decreasing) and whose widths (tokens of
        the wider side, EOS included) are ``widths``; each scored run at most ``row_tokens`` wide unless one pair
        alone is wider; ``sentences`` leads before a run that does not start its document."""
        starts = np.ones(len(documents), dtype=bool)
        starts[1:] = documents[1:] != documents[:-1]
        first, scored, end = [], [], []
        i, count, document_start = 0, len(documents), 0
        while i < count:
            if starts[i]:
                document_start = i
            j, used = i + 1, int(widths[i])
            while j < count and not starts[j] and used + int(widths[j]) <= row_tokens:
                used += int(widths[j])
                j += 1
            first.append(max(i - sentences, document_start))
            scored.append(i)
            end.append(j)
            i = j
        as_array = lambda values: np.asarray(values, dtype=np.int64)  # noqa: E731
        return cls(as_array(first), as_array(scored), as_array(end), starts)

    def widths(self, src_lengths: np.ndarray, tgt_lengths: np.ndarray) -> np.ndarray:
        """Each chain's padded width: its wider side's tokens (every sentence with its EOS or BOS)."""
        src = np.concatenate([[0], np.cumsum(src_lengths.astype(np.int64) + 1)])
        tgt = np.concatenate([[0], np.cumsum(tgt_lengths.astype(np.int64) + 1)])
        return np.maximum(src[self.end] - src[self.first], tgt[self.end] - tgt[self.first])

    def scored_tokens(self, tgt_lengths: np.ndarray, rows: np.ndarray) -> int:
        """Target tokens (with EOS) the chains ``rows`` score: their pairs after the leads."""
        ends = np.concatenate([[0], np.cumsum(tgt_lengths.astype(np.int64) + 1)])
        return int((ends[self.end[rows]] - ends[self.scored[rows]]).sum())


@dataclass(frozen=True)
class ChainBatch:
    """Padded chains: src (B, S), tgt_in (B, T), tgt_out (B, T: PAD where a lead's target is read, not scored),
    and each position's sentence number in its chain (PAD_BLOCK where padding): src_blocks (B, S), tgt_blocks (B, T)."""

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    src_blocks: torch.Tensor
    tgt_blocks: torch.Tensor
    target_tokens: int
    source_tokens: int


def collate_chains(src: TokenArray, tgt: TokenArray, chains: Chains, rows: np.ndarray) -> ChainBatch:
    """The chains ``rows`` as one padded batch."""
    sources, blocks_s, targets_in, targets_out, blocks_t = [], [], [], [], []
    for c in rows:
        first, scored, end = int(chains.first[c]), int(chains.scored[c]), int(chains.end[c])
        pairs = range(first, end)
        sources.append(np.concatenate([np.append(src[i], EOS_ID) for i in pairs]))
        targets_in.append(np.concatenate([np.insert(tgt[i], 0, BOS_ID) for i in pairs]))
        targets_out.append(
            np.concatenate([np.append(tgt[i], EOS_ID) if i >= scored else np.full(len(tgt[i]) + 1, PAD_ID) for i in pairs])
        )
        blocks_s.append(np.concatenate([np.full(len(src[i]) + 1, n) for n, i in enumerate(pairs)]))
        blocks_t.append(np.concatenate([np.full(len(tgt[i]) + 1, n) for n, i in enumerate(pairs)]))
    tgt_out = _padded(targets_out, PAD_ID)
    return ChainBatch(
        _padded(sources, PAD_ID),
        _padded(targets_in, PAD_ID),
        tgt_out,
        _padded(blocks_s, PAD_BLOCK),
        _padded(blocks_t, PAD_BLOCK),
        int((tgt_out != PAD_ID).sum()),
        int(sum(len(s) for s in sources)),
    )


def _padded(rows: list[np.ndarray], fill: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width), fill, dtype=np.int64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return torch.from_numpy(out)
