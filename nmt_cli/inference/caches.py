"""What incremental decoding keeps between steps: one :class:`LayerCache` per decoder layer.

Self-attention caches come in three kinds, each answering one question, ``extend``: given this
step's keys and values (N, H, 1, d_k), which keys, values and visibility mask does the new query
attend over?

- :class:`GrowingKeysValues`: one column more per step (beam search, sampling);
- :class:`PastKeysValues`: growing after the previous sentences' keys/values (``model.recurrence``);
- :class:`JoinableKeysValues`: growing, and rows may join a running batch, each seeing only the
  columns from its own first step on (continuous batching, ``decode/continuous.py``);
- :class:`StaticKeysValues`: slots preallocated for the longest output, written at the step's
  position, so a CUDA graph can replay the step (``decode/static_steps.py``).

Cross-attention keys and values of the encoder output are computed once per sentence
(:class:`MemoryKeysValues`) and shared by the sentence's hypotheses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor
from torch.nn import functional as F

from ..model.recurrence import Past


class KeysValues(Protocol):
    """A self-attention cache."""

    def extend(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        """Keep this step's keys/values (N, H, 1, d_k); return every key and value the step's query
        attends over (N, H, T, d_k) and the mask of those it may see (broadcast to (N, H, 1, T);
        None: all)."""
        ...


@dataclass
class GrowingKeysValues:
    """Keys/values of the steps so far, one row per hypothesis (N = sentences x beam)."""

    keys: Tensor | None = None  # (N, H, T, d_k); None before the first step
    values: Tensor | None = None  # (N, H, T, d_k)

    def extend(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        if self.keys is not None and self.values is not None:
            keys = torch.cat([self.keys, keys], dim=2)
            values = torch.cat([self.values, values], dim=2)
        self.keys, self.values = keys, values
        return keys, values, None

    def select(self, rows: Tensor, sentences: Tensor | None = None) -> None:
        """Keep and reorder hypothesis ``rows`` (``sentences``: the sentences still open, where some left)."""
        if self.keys is not None and self.values is not None:
            self.keys, self.values = self.keys.index_select(0, rows), self.values.index_select(0, rows)


@dataclass
class PastKeysValues(GrowingKeysValues):
    """Growing keys/values of the steps so far (one row per hypothesis) after a past: the previous sentences'
    keys/values of one layer (segment-level recurrence, ``model/recurrence.py``), one row per *sentence*,
    right-aligned, ``visible`` where real. A sentence's hypotheses share its past as they share its encoder
    keys/values: it is neither copied per hypothesis nor grown nor reordered at a step, only kept per sentence
    when sentences leave (:func:`~..model.attention.attention_after_past` attends over both parts)."""

    past: Past | None = None

    def select(self, rows: Tensor, sentences: Tensor | None = None) -> None:
        super().select(rows)
        if sentences is not None and self.past is not None:
            self.past = self.past.rows(sentences)


@dataclass
class JoinableKeysValues(GrowingKeysValues):
    """Growing keys/values of a batch that rows join between steps. All rows share one time axis;
    ``visible`` (N, 1, 1, T), set by the stepper before each step, hides from a row the columns
    before it joined. None: every row sees every column."""

    visible: Tensor | None = None

    def extend(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        keys, values, _ = super().extend(keys, values)
        return keys, values, self.visible

    def add_rows(self, count: int) -> None:
        """Append ``count`` rows of zeros (rows joining; their past columns stay hidden)."""
        if self.keys is not None and self.values is not None:
            self.keys = torch.cat([self.keys, self.keys.new_zeros((count, *self.keys.shape[1:]))])
            self.values = torch.cat([self.values, self.values.new_zeros((count, *self.values.shape[1:]))])

    def drop_columns(self, count: int) -> None:
        """Forget the ``count`` oldest steps (columns no open row can see)."""
        if self.keys is not None and self.values is not None:
            self.keys, self.values = self.keys[:, :, count:], self.values[:, :, count:]


@dataclass
class StaticKeysValues:
    """Keys/values preallocated for the longest output: fixed shapes for CUDA graphs. The step writes
    at ``position`` (a one-element device tensor) and attends to every slot, ``visible`` hiding the
    slots not yet written."""

    keys: Tensor  # (N, H, T_max, d_k)
    values: Tensor  # (N, H, T_max, d_k)
    position: Tensor  # (1,) int64
    visible: Tensor  # (1, 1, 1, T_max) bool: slots 0 .. position

    @staticmethod
    def buffers(layers: int, rows: int, heads: int, d_model: int, max_steps: int, like: Tensor) -> tuple[Tensor, Tensor]:
        """Every layer's keys and values in one buffer each, (layers, N, H, T_max, d_k), zeros of ``like``'s dtype
        and device: one copy moves every layer's cache."""
        shape = (layers, rows, heads, max_steps, d_model // heads)
        return like.new_zeros(shape), like.new_zeros(shape)

    def extend(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        self.keys.index_copy_(2, self.position, keys)
        self.values.index_copy_(2, self.position, values)
        return self.keys, self.values, self.visible


@dataclass
class MemoryKeysValues:
    """Cross-attention keys/values of the encoder output, one row per sentence: each (B, H, S, d_k).

    Copied out of the projection's strided output once per batch: every step then reads them in place
    (written-out attention would otherwise copy them at every step; docs/choices.md)."""

    keys: Tensor
    values: Tensor

    def __post_init__(self) -> None:
        self.keys, self.values = self.keys.contiguous(), self.values.contiguous()

    def select(self, sentences: Tensor) -> None:
        self.keys, self.values = self.keys.index_select(0, sentences), self.values.index_select(0, sentences)

    def join(self, other: MemoryKeysValues, width: int) -> None:
        """``other``'s sentences appended (a running batch that sentences join), both padded with zeros to
        ``width`` source positions (the padding is masked: never attended to)."""

        def padded(tensor: Tensor) -> Tensor:
            return F.pad(tensor, (0, 0, 0, width - tensor.size(2)))

        self.keys = torch.cat([padded(self.keys), padded(other.keys)])
        self.values = torch.cat([padded(self.values), padded(other.values)])


@dataclass
class LayerCache:
    """One decoder layer's cache."""

    self_attention: KeysValues
    cross_attention: MemoryKeysValues


@dataclass
class DecoderState:
    """What incremental decoding keeps between steps.

    Self-attention caches have one row per hypothesis (N = sentences x beam); the encoder-side
    tensors (cross-attention keys/values, source mask) have one row per sentence and are shared
    by that sentence's hypotheses.
    """

    src_mask: Tensor  # (B, 1, 1, S), True where the source token is real
    caches: list[LayerCache] = field(default_factory=list)
    step: int = 0
    # (N,) each row's own step, when rows joined the batch at different steps (JoinableKeysValues)
    row_steps: Tensor | None = None
    # cross_attention_mask()'s answer and the src_mask it was computed for
    _cross_mask: Tensor | None = field(default=None, repr=False)
    _cross_mask_of: Tensor | None = field(default=None, repr=False)

    def cross_attention_mask(self) -> Tensor | None:
        """``src_mask``, or None on a CPU when no source is padded (batch 1, equal lengths): attention
        without a mask skips a conversion of the mask per layer and step. On a GPU the check would make
        the host wait, so the mask stays."""
        if self.src_mask.device.type != "cpu":
            return self.src_mask
        if self._cross_mask_of is not self.src_mask:  # new or changed by select() / a join
            self._cross_mask_of = self.src_mask
            self._cross_mask = None if bool(self.src_mask.all()) else self.src_mask
        return self._cross_mask

    def select(self, rows: Tensor, sentences: Tensor | None = None) -> None:
        """Keep and reorder hypothesis ``rows``; if sentences left the batch, keep ``sentences``."""
        if self.row_steps is not None:
            self.row_steps = self.row_steps.index_select(0, rows)
        for layer in self.caches:
            assert isinstance(layer.self_attention, GrowingKeysValues)  # static slots are moved by their stepper
            layer.self_attention.select(rows, sentences)
            if sentences is not None:
                layer.cross_attention.select(sentences)
        if sentences is not None:
            self.src_mask = self.src_mask.index_select(0, sentences)


__all__ = [
    "KeysValues",
    "GrowingKeysValues",
    "PastKeysValues",
    "JoinableKeysValues",
    "StaticKeysValues",
    "MemoryKeysValues",
    "LayerCache",
    "DecoderState",
]
