"""What incremental decoding keeps between steps: one :class:`LayerCache` per decoder layer.

Self-attention keys and values grow by one column per step (:class:`GrowingKeysValues`), or sit
in buffers preallocated for the longest output (:class:`StaticKeysValues`, for CUDA graphs).
Cross-attention keys and values of the encoder output are computed once per sentence
(:class:`MemoryKeysValues`) and shared by the sentence's hypotheses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class GrowingKeysValues:
    """Self-attention keys/values of the steps so far, one row per hypothesis (N = sentences x beam)."""

    keys: Tensor | None = None  # (N, H, T, d_k); None before the first step
    values: Tensor | None = None  # (N, H, T, d_k)
    # (N, 1, 1, T) when rows joined a running batch at different steps (decode/continuous.py): the
    # columns before a row joined are hidden from it. None: every row sees every column.
    visible: Tensor | None = None

    def append(self, keys: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """Add this step's keys/values (N, H, 1, d_k); returns all of them (N, H, T + 1, d_k)."""
        if self.keys is not None and self.values is not None:
            keys = torch.cat([self.keys, keys], dim=2)
            values = torch.cat([self.values, values], dim=2)
        self.keys, self.values = keys, values
        return keys, values

    def select(self, rows: Tensor) -> None:
        """Keep and reorder hypothesis ``rows``."""
        if self.keys is not None and self.values is not None:
            self.keys, self.values = self.keys.index_select(0, rows), self.values.index_select(0, rows)

    def add_rows(self, count: int) -> None:
        """Append ``count`` rows of zeros (rows joining a running batch; their past columns stay hidden)."""
        if self.keys is not None and self.values is not None:
            self.keys = torch.cat([self.keys, self.keys.new_zeros((count, *self.keys.shape[1:]))])
            self.values = torch.cat([self.values, self.values.new_zeros((count, *self.values.shape[1:]))])

    def drop_columns(self, count: int) -> None:
        """Forget the ``count`` oldest steps (columns no open row can see)."""
        if self.keys is not None and self.values is not None:
            self.keys, self.values = self.keys[:, :, count:], self.values[:, :, count:]


@dataclass
class StaticKeysValues:
    """Self-attention keys/values preallocated for the longest output: fixed shapes for CUDA graphs.

    The step's keys and values are written at ``position`` (a one-element device tensor) and the
    query attends to every slot, with ``visible`` hiding the slots not yet written.
    """

    keys: Tensor  # (N, H, T_max, d_k)
    values: Tensor  # (N, H, T_max, d_k)
    position: Tensor  # (1,) int64
    visible: Tensor  # (1, 1, 1, T_max) bool: slots 0 .. position


@dataclass
class MemoryKeysValues:
    """Cross-attention keys/values of the encoder output, one row per sentence: each (B, H, S, d_k)."""

    keys: Tensor
    values: Tensor

    def select(self, sentences: Tensor) -> None:
        self.keys, self.values = self.keys.index_select(0, sentences), self.values.index_select(0, sentences)

    def contiguous(self) -> MemoryKeysValues:
        """These keys/values copied out of the projection's strided output, once per batch: every step
        then reads them in place (written-out attention would otherwise copy them at every step, which
        cost up to twice the call: docs/choices.md)."""
        return MemoryKeysValues(self.keys.contiguous(), self.values.contiguous())


@dataclass
class LayerCache:
    """One decoder layer's cache."""

    self_attention: GrowingKeysValues | StaticKeysValues
    cross_attention: MemoryKeysValues


LayersStep = Callable[[Tensor, Tensor | None, list[LayerCache]], Tensor]


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
    # (N,) each row's own step, when rows joined the batch at different steps (decode/continuous.py);
    # their self-attention caches then carry a ``visible`` mask as well
    row_steps: Tensor | None = None
    # cross_attention_mask()'s answer and the src_mask it was computed for
    _cross_mask: Tensor | None = field(default=None, repr=False)
    _cross_mask_of: Tensor | None = field(default=None, repr=False)
    # The decoder layers as one function of (embeddings (N, D), cross-attention mask, caches) -> hidden
    # states (N, D) (:class:`.decoder_step.FlatDecoderStep`); None: step through the layers' modules
    layers_step: LayersStep | None = field(default=None, repr=False)

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
            assert isinstance(layer.self_attention, GrowingKeysValues)
            layer.self_attention.select(rows)
            if sentences is not None:
                layer.cross_attention.select(sentences)
        if sentences is not None:
            self.src_mask = self.src_mask.index_select(0, sentences)


__all__ = ["GrowingKeysValues", "StaticKeysValues", "MemoryKeysValues", "LayerCache", "LayersStep", "DecoderState"]
