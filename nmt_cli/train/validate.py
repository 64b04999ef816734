"""Validation during training: loss over the validation pairs and sacreBLEU of decoded output."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..config import Recipe
from ..data.batches import ParallelData, collate, make_batches
from ..decode.context import Chunk
from ..decode.loading import LoadedModel, unwritten_tags
from ..decode.translator import Translator
from ..model.transformer import Transformer
from ..score.metrics import corpus_bleu
from ..utils.files import split_lines
from .memory import CPU_MAX_TOKENS
from .repulsive import head_similarity

if TYPE_CHECKING:
    from .dataset import Direction, Vocabularies

HEAD_SIMILARITY_PAIRS = 16  # validation pairs whose attention maps measure how alike the heads are


@dataclass(frozen=True)
class ValidationResult:
    loss: float
    nll: float
    ppl: float
    bleu: float | None
    truncated: int = 0  # validation sources cut to model.max_positions for decoding
    head_similarity: float | None = None  # mean cosine similarity of heads' attention maps (repulsive.py)
    # a multilingual model: each direction's loss and BLEU ("en-de": {"loss": ..., "bleu": ...}); bleu is their mean
    directions: dict[str, dict[str, float | None]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, float | None]:
        per_direction = {
            f"valid_{metric}.{name}": value for name, values in self.directions.items() for metric, value in values.items()
        }
        return {
            "valid_loss": self.loss,
            "valid_nll": self.nll,
            "valid_ppl": self.ppl,
            "valid_bleu": self.bleu,
            "valid_head_similarity": self.head_similarity,
            **per_direction,
        }


@torch.inference_mode()
def validation_loss(
    model: Transformer, data: ParallelData, recipe: Recipe, device: torch.device, rows: range | None = None
) -> tuple[float, float]:
    """Per-token label-smoothed loss and NLL over the whole validation set, or its ``rows`` (nats)."""
    return _LossSums.over(model, data, recipe, device, rows).per_token


@dataclass(frozen=True)
class _LossSums:
    """Summed loss and NLL over some validation pairs, and their target tokens: parts add up to the whole."""

    loss: float = 0.0
    nll: float = 0.0
    tokens: int = 0

    def __add__(self, other: _LossSums) -> _LossSums:
        return _LossSums(self.loss + other.loss, self.nll + other.nll, self.tokens + other.tokens)

    @property
    def per_token(self) -> tuple[float, float]:
        if not self.tokens:  # every pair longer than model.max_positions: no loss to report
            return math.nan, math.nan
        return self.loss / self.tokens, self.nll / self.tokens

    @staticmethod
    @torch.inference_mode()
    def over(
        model: Transformer, data: ParallelData, recipe: Recipe, device: torch.device, rows: range | None = None
    ) -> _LossSums:
        # Inference needs less memory than training: a fixed size serves when training sizes its own (auto).
        max_tokens = recipe.train.max_tokens if isinstance(recipe.train.max_tokens, int) else CPU_MAX_TOKENS
        pool = np.arange(rows.start, rows.stop) if rows is not None else None
        batches = make_batches(data.pair_lengths, max_tokens, recipe.model.max_positions, seed=None, pool=pool)
        total = _LossSums()
        for indices in batches:
            batch = collate(data, indices).to(device)
            loss, nll, n = model.loss(
                batch.src,
                batch.tgt_in,
                batch.tgt_out,
                recipe.train.label_smoothing,
                batch.target_tokens,
                blocks=batch.blocks,
            )
            total += _LossSums(float(loss), float(nll), n)
        return total


def bleu_sample(size: int, most: int) -> list[int]:
    """Which of ``size`` validation sentences to decode for BLEU when at most ``most`` may be (0: all): a fixed
    sample spread evenly over the set, so that every validation of a run scores the same sentences."""
    if not most or most >= size:
        return list(range(size))
    return [i * size // most for i in range(most)]


@torch.inference_mode()
def validation_bleu(
    model: Transformer,
    data: ParallelData,
    references: Path,
    vocabs: Vocabularies,
    recipe: Recipe,
    device: torch.device,
    direction: Direction | None = None,
    most: int = 0,
) -> tuple[float, int]:
    """sacreBLEU of the decoded validation sources (of one ``direction`` of a multilingual model; at most
    ``most`` of them, 0: all) against the (cleaned) reference text, and how many sources were truncated to
    ``model.max_positions``; decoding goes through :class:`Translator`, as ``nmt translate`` does."""
    unwritten = unwritten_tags(recipe, vocabs.src)  # as translation leaves them out (the loss never reads it)
    loaded = LoadedModel(model, recipe, vocabs.src, vocabs.tgt, Path("(validation)"), unwritten=unwritten)
    config = replace(recipe.decode, beam=recipe.train.valid_beam)
    refs = split_lines(references.read_text(encoding="utf-8"))
    if direction is not None:  # the source carries its tag (data.source), or the decoder is given it
        target_tag = direction.tag if recipe.data.language_tag == "target" else None
        translator = Translator(loaded, config, device, target_tag=target_tag)
        sample = bleu_sample(len(direction.rows), most)
        found = translator.translate_encoded([data.source(direction.rows[i]).tolist() for i in sample])
        outputs = [hyps[0].text for hyps in found]
        return corpus_bleu(outputs, [[refs[i] for i in sample]]).score, translator.stats.truncated
    translator = Translator(loaded, config, device)
    starts = _document_starts(data)
    if translator.document is not None and starts is not None:  # document context: in document order, in context
        sources = [data.src[i].tolist() for i in range(len(data))]
        found = translator.document.translate(translator, Chunk(sources, None, starts))
        return corpus_bleu([hyps[0].text for hyps in found], [refs]).score, translator.stats.truncated
    sample = bleu_sample(len(data), most)
    found = translator.translate_encoded([data.src[i].tolist() for i in sample])
    outputs = [hyps[0].text for hyps in found]
    return corpus_bleu(outputs, [[refs[i] for i in sample]]).score, translator.stats.truncated


def _document_starts(data: ParallelData) -> list[bool] | None:
    """Per pair, whether it begins a document, where the model reads context (None: it does not)."""
    if data.context is not None:
        return (data.context.first == np.arange(len(data))).tolist()
    if data.chains is not None:
        return data.chains.document_starts.tolist()
    return None


def validate(
    model: Transformer,
    data: ParallelData,
    references: Path | None,
    vocabs: Vocabularies,
    recipe: Recipe,
    device: torch.device,
    directions: Sequence[Direction] = (),
) -> ValidationResult:
    """Loss, NLL, perplexity and (if the recipe asks) BLEU on the validation set; a multilingual model's also
    per direction, its BLEU the mean of its directions'."""
    was_training = model.training
    model.eval()
    bleu, truncated = None, 0
    per_direction: dict[str, dict[str, float | None]] = {}
    most = recipe.train.valid_bleu_sentences
    try:
        # a multilingual model's loss is its directions' together: each pair is scored once
        parts = [_LossSums.over(model, data, recipe, device, d.rows) for d in directions]
        loss, nll = (sum(parts, _LossSums()) if parts else _LossSums.over(model, data, recipe, device)).per_token
        for direction, part in zip(directions, parts):
            per_direction[direction.name] = {"loss": part.per_token[0]}
            if recipe.train.valid_bleu and direction.references is not None:
                share = -(-most // len(directions)) if most else 0  # the sample shared evenly (rounded up)
                score, cut = validation_bleu(model, data, direction.references, vocabs, recipe, device, direction, share)
                per_direction[direction.name]["bleu"], truncated = score, truncated + cut
        if directions and recipe.train.valid_bleu:
            scores = [values["bleu"] for values in per_direction.values() if values.get("bleu") is not None]
            bleu = sum(scores) / len(scores) if scores else None  # type: ignore[arg-type]
        elif recipe.train.valid_bleu and references is not None:
            bleu, truncated = validation_bleu(model, data, references, vocabs, recipe, device, most=most)
        limit = recipe.model.max_positions - 1
        sample = [
            (data.src[i].tolist()[:limit], data.tgt[i].tolist()[:limit])
            for i in range(min(HEAD_SIMILARITY_PAIRS, len(data)))
        ]
        similarity = head_similarity(model, sample)
    finally:
        model.train(was_training)
    return ValidationResult(loss, nll, math.exp(min(nll, 50.0)), bleu, truncated, similarity, per_direction)
