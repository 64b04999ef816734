"""The decoder steppers a search runs: each call takes one new token per open row and gives the next token's
logits; ``select`` keeps the rows the search goes on with.

:class:`CachedSteps` decodes incrementally (a key/value cache for self-attention, encoder keys/values computed
once); :class:`UncachedSteps` recomputes the whole prefix every step and exists as the reference the cache is
tested against; on a GPU a recorded CUDA graph (``static_steps.py``), and an ensemble runs one stepper per model
(``ensemble.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import torch
from torch import Tensor

from ..config import DecodeConfig
from ..inference.caches import GrowingKeysValues
from ..inference.step import IncrementalDecoder
from ..model.recurrence import Past
from ..model.transformer import Transformer
from .ensemble import Ensemble, EnsembleSteps
from .static_steps import StaticSteps, supports_static_steps


class Encoded(NamedTuple):
    """A batch's source as a search reads it: the encoder output (one per model of an ensemble), the source key
    mask, and for a model with segment-level recurrence the decoder's past (``model.recurrence``: the previous
    sentences' keys/values, which every self-attention layer attends to before the sentence's own)."""

    memory: Tensor | list[Tensor]
    src_mask: Tensor
    past: list[Past] | None = None


class Stepper(Protocol):
    """What a search loop steps: the next token's logits of every open row, and the rows that go on."""

    def __call__(self, tokens: Tensor) -> Tensor:
        """The logits (N, V) after each row's new token ``tokens`` (N,)."""
        ...

    def select(self, rows: Tensor, sentences: Tensor | None) -> None:
        """Keep and reorder ``rows``; where sentences left, ``sentences`` are those that stay."""
        ...


class CachedSteps:
    """Incremental decoding: one new token per row per call, past keys/values cached."""

    def __init__(self, model: Transformer, memory: Tensor, src_mask: Tensor, past: list[Past] | None = None) -> None:
        self.model = model
        self.decoder = IncrementalDecoder(model)
        self.state = self.decoder.start(memory, src_mask, past=past)  # beams share their sentence's row

    def __call__(self, tokens: Tensor) -> Tensor:
        return self.decoder.logits(tokens, self.state).float()  # (N, V) logits

    def row_logits(self, tokens: Tensor) -> RowLogits:
        """This step's logits, to be made a block of rows at a time (see :class:`RowLogits`)."""
        return RowLogits(self.model, self.decoder.hidden(tokens, self.state))

    def select(self, rows: Tensor, sentences: Tensor | None) -> None:
        self.state.select(rows, sentences)

    def present(self, rows: Tensor, lengths: Sequence[int]) -> list[list[tuple[Tensor, Tensor]]]:
        """Per row of this step (``rows``), each decoder layer's self-attention keys/values of its first
        ``lengths`` inputs, (H, length, d_k) each, copied out of the cache: a finished hypothesis's, which a
        recurrent model's sentence leaves the next (``model.recurrence``) without reading its translation again."""
        caches = [layer.self_attention for layer in self.state.caches]
        kept = []
        for row, length in zip(rows.tolist(), lengths):
            layers = []
            for cache in caches:
                assert isinstance(cache, GrowingKeysValues) and cache.keys is not None and cache.values is not None
                layers.append((cache.keys[row, :, :length].clone(), cache.values[row, :, :length].clone()))
            kept.append(layers)
        return kept


@dataclass(frozen=True)
class RowLogits:
    """A decoder step's logits (N, V), made a block of rows at a time as the search ranks them.

    At the hundreds of rows of default-batched beam search the whole matrix (77 MB at 600 x 32,000)
    leaves the processor's cache between the output projection and the log-softmax; a block of 128
    rows stays in it (the measurement: docs/choices.md, "Decoding").
    """

    model: Transformer
    hidden: Tensor  # (N, D), the decoder's last hidden states

    def size(self, dim: int) -> int:
        return self.hidden.size(0) if dim == 0 else self.model.output.out_features

    @property
    def device(self) -> torch.device:
        return self.hidden.device

    def __getitem__(self, rows: slice) -> Tensor:
        n = len(self.hidden)
        hidden = self.hidden if rows.indices(n) == (0, n, 1) else self.hidden[rows]  # all rows: no slicing call
        logits = self.model.logits(hidden)
        return logits if logits.dtype == torch.float32 else logits.float()


def step_logits(steps: Stepper, tokens: Tensor) -> Tensor | RowLogits:
    """A step's logits for the search: on the CPU made a block at a time (:class:`RowLogits`), else whole."""
    if isinstance(steps, CachedSteps) and tokens.device.type == "cpu":
        return steps.row_logits(tokens)
    return steps(tokens)


class UncachedSteps:
    """Reference decoding: re-runs the decoder over the whole prefix at every step.

    Keeps one copy of the encoder output per hypothesis (the plain way: ``select`` copies a
    sentence's rows for each of its hypotheses), so it also checks the cached path's sharing
    of encoder keys between a sentence's hypotheses.
    """

    def __init__(self, model: Transformer, memory: Tensor, src_mask: Tensor) -> None:
        self.model = model
        self.memory, self.src_mask = memory, src_mask
        self.prefix = memory.new_zeros((memory.size(0), 0), dtype=torch.long)

    def __call__(self, tokens: Tensor) -> Tensor:
        self.prefix = torch.cat([self.prefix, tokens[:, None]], dim=1)  # (N, t + 1)
        hidden = self.model.decode(self.prefix, self.memory, self.src_mask)[:, -1]  # (N, D)
        return self.model.logits(hidden).float()

    def select(self, rows: Tensor, sentences: Tensor | None) -> None:
        self.prefix = self.prefix.index_select(0, rows)
        self.memory = self.memory.index_select(0, rows)
        self.src_mask = self.src_mask.index_select(0, rows)


def decoder_steps(
    model: Transformer | Ensemble,
    memory: Tensor | list[Tensor],
    src_mask: Tensor,
    config: DecodeConfig,
    cached: bool,
    rows_per_sentence: int,
    max_steps: int,
) -> CachedSteps | UncachedSteps | StaticSteps | EnsembleSteps:
    """The stepper a search runs: on a GPU a recorded CUDA graph (``decode.cuda_graphs``), else cached;
    for an ensemble, one per model."""
    if isinstance(model, Ensemble):
        return EnsembleSteps(
            [
                decoder_steps(one, memory_of_one, src_mask, config, cached, rows_per_sentence, max_steps)
                for one, memory_of_one in zip(model.models, memory)
            ]
        )
    assert isinstance(memory, Tensor)  # one model: one encoder output
    if not cached:
        return UncachedSteps(model, memory, src_mask)
    if config.cuda_graphs and memory.device.type == "cuda" and supports_static_steps(model):
        return StaticSteps(model, memory, src_mask, rows_per_sentence, max_steps, use_graph=True)
    return CachedSteps(model, memory, src_mask)


def search_steps(
    model: Transformer | Ensemble, encoded: Encoded, config: DecodeConfig, cached: bool, rows_per_sentence: int,
    max_steps: int,
) -> CachedSteps | UncachedSteps | StaticSteps | EnsembleSteps:  # fmt: skip
    """:func:`decoder_steps`, or with a decoder past (``model.recurrence``: one model, no graph) cached steps that
    start from it."""
    memory, src_mask, past = encoded
    if past is not None:
        assert isinstance(model, Transformer) and isinstance(memory, Tensor)  # one model reads a past
        return CachedSteps(model, memory, src_mask, past)
    return decoder_steps(model, memory, src_mask, config, cached, rows_per_sentence, max_steps)
