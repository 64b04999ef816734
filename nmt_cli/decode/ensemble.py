"""Ensembles: several models with one vocabulary, decoded as one (``nmt translate -m A -m B``).

At every step each model scores the next token and the ensemble takes the mean of their
log-probabilities, renormalised (a product of experts: the geometric mean of the models'
distributions). Each model keeps its own encoder output and decoder cache, so beam search,
sampling, CUDA graphs and forced scores work unchanged. An ensemble of a model with itself is
that model.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Protocol

import torch
from torch import Tensor

from ..model.transformer import Transformer


class Ensemble:
    """The models of an ensemble, with what the searches ask of a model (``encode``, ``config``)."""

    def __init__(self, models: list[Transformer]) -> None:
        self.models = models
        self.config = replace(models[0].config, max_positions=min(m.config.max_positions for m in models))

    def parameters(self) -> Iterator[torch.nn.Parameter]:
        """Every model's parameters (their device, their size), as a module's."""
        for model in self.models:
            yield from model.parameters()

    def encode(self, src: Tensor) -> tuple[list[Tensor], Tensor]:
        """Each model's encoder output, and the source key mask (the same for all)."""
        encoded = [model.encode(src) for model in self.models]
        return [memory for memory, _ in encoded], encoded[0][1]

    def log_probs(self, tgt_in: Tensor, memories: list[Tensor], src_mask: Tensor) -> Tensor:
        """Teacher-forced log-probabilities (B, T, V) of the ensemble (forced scores)."""
        each = [
            model.logits(model.decode(tgt_in, memory, src_mask)).float().log_softmax(dim=-1)
            for model, memory in zip(self.models, memories)
        ]
        return torch.stack(each).mean(dim=0).log_softmax(dim=-1)

    def eval(self) -> Ensemble:
        for model in self.models:
            model.eval()
        return self


class Steps(Protocol):
    """What a search asks of a decoder stepper: scores of the next token for every open row, and
    keeping or reordering rows between steps."""

    def __call__(self, tokens: Tensor) -> Tensor: ...

    def select(self, rows: Tensor, sentences: Tensor | None) -> None: ...


class EnsembleSteps:
    """One decoder stepper per model; each step returns the mean of their log-probabilities (N, V)."""

    def __init__(self, steppers: list[Steps]) -> None:
        self.steppers = steppers

    def __call__(self, tokens: Tensor) -> Tensor:
        return torch.stack([step(tokens).log_softmax(dim=-1) for step in self.steppers]).mean(dim=0)

    def select(self, rows: Tensor, sentences: Tensor | None) -> None:
        for step in self.steppers:
            step.select(rows, sentences)


__all__ = ["Ensemble", "EnsembleSteps", "Steps"]
