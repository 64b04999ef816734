"""The k largest entries of every row of a wide score matrix (hypotheses x vocabulary), exactly.

A search step ranks each hypothesis's 2K best tokens out of the whole vocabulary. PyTorch's CPU
``topk`` selects within each row element by element; at the rows of batched beam search it took as
long as the log-softmax before it. In two stages it reads the row once with a vectorised maximum instead:

1. cut each row into chunks of ``CHUNK`` entries and take each chunk's maximum;
2. rank only the entries of the k chunks with the largest maxima.

That is exact: if an entry e is among a row's k largest, its chunk's maximum is at least e, which is
at least the row's k-th largest entry, which is at least the k-th largest chunk maximum (the k largest
chunk maxima are k distinct entries); so e's chunk is among the k chunks kept (among equal maxima
either may be kept; the values returned are the same). It wins at beam search's wide inputs and loses
at small ones, which keep ``topk`` (figures: docs/choices.md). On a GPU ``topk`` is fast and stays.
"""

from __future__ import annotations

import torch
from torch import Tensor

CHUNK = 64
# Inputs with fewer entries than this (rows x columns) go straight to ``topk`` (see the module's text).
TWO_STAGE_MIN_ENTRIES = 1 << 18


def top_k_rows(scores: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """``scores.topk(k, dim=1)``: values and column indices of each row's k largest entries, best first."""
    rows, columns = scores.shape
    if scores.device.type != "cpu" or rows * columns < TWO_STAGE_MIN_ENTRIES or columns < 2 * k * CHUNK:
        return scores.topk(k, dim=1)
    whole = columns // CHUNK * CHUNK  # the columns in whole chunks; the rest are ranked as they are
    chunks = scores[:, :whole].reshape(rows, -1, CHUNK)  # (rows, chunks, CHUNK)
    best_chunks = chunks.amax(dim=2).topk(k, dim=1, sorted=False).indices  # (rows, k)
    offsets = torch.arange(CHUNK, device=scores.device)
    values = chunks.gather(1, best_chunks[:, :, None].expand(rows, k, CHUNK)).view(rows, k * CHUNK)
    columns_of = (best_chunks[:, :, None] * CHUNK + offsets).view(rows, k * CHUNK)
    if whole < columns:
        values = torch.cat([values, scores[:, whole:]], dim=1)
        tail = torch.arange(whole, columns, device=scores.device).expand(rows, -1)
        columns_of = torch.cat([columns_of, tail], dim=1)
    top, where = values.topk(k, dim=1)
    return top, columns_of.gather(1, where)
