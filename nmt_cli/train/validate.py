"""Validation during training: loss over the validation pairs and sacreBLEU of decoded output."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import sentencepiece as spm
import torch

from ..config import Recipe
from ..data.batches import ParallelData, collate, make_batches
from ..data.vocab import EOS_ID
from ..decode.search import search
from ..model.transformer import Transformer
from ..score.metrics import corpus_bleu
from .memory import CPU_MAX_TOKENS


@dataclass(frozen=True)
class ValidationResult:
    loss: float
    nll: float
    ppl: float
    bleu: float | None

    def as_dict(self) -> dict[str, float | None]:
        return {"valid_loss": self.loss, "valid_nll": self.nll, "valid_ppl": self.ppl, "valid_bleu": self.bleu}


@torch.inference_mode()
def validation_loss(model: Transformer, data: ParallelData, recipe: Recipe, device: torch.device) -> tuple[float, float]:
    """Per-token label-smoothed loss and NLL over the whole validation set (nats)."""
    # Inference needs less memory than training: a fixed size serves when training sizes its own (auto).
    max_tokens = recipe.train.max_tokens if isinstance(recipe.train.max_tokens, int) else CPU_MAX_TOKENS
    batches = make_batches(data.pair_lengths, max_tokens, recipe.model.max_positions, seed=None)
    total_loss = total_nll = 0.0
    tokens = 0
    for indices in batches:
        batch = collate(data, indices).to(device)
        loss, nll, n = model.loss(batch.src, batch.tgt_in, batch.tgt_out, recipe.train.label_smoothing)
        total_loss += float(loss)
        total_nll += float(nll)
        tokens += n
    return total_loss / max(tokens, 1), total_nll / max(tokens, 1)


@torch.inference_mode()
def validation_bleu(model: Transformer, data: ParallelData, references: Path, tgt_vocab: spm.SentencePieceProcessor,
                    recipe: Recipe, device: torch.device) -> float:
    """sacreBLEU of the decoded validation sources against the (cleaned) reference text."""
    config = replace(recipe.decode, beam=recipe.train.valid_beam)
    lengths = data.src.lengths + 1
    order = np.argsort(-lengths, kind="stable")
    outputs: list[str] = [""] * len(data)
    start = 0
    while start < len(order):
        width = int(lengths[order[start]])
        size = max(1, config.batch_tokens // width)
        rows = order[start: start + size]
        src = torch.nn.utils.rnn.pad_sequence(
            [torch.from_numpy(np.append(data.src[i].astype(np.int64), EOS_ID)) for i in rows],
            batch_first=True, padding_value=0).to(device)
        for i, hyps in zip(rows, search(model, src, config)):
            outputs[i] = tgt_vocab.decode(hyps[0].tokens) if hyps else ""
        start += size
    with open(references, encoding="utf-8") as handle:
        refs = [line.rstrip("\n") for line in handle]
    return corpus_bleu(outputs, [refs]).score


def validate(model: Transformer, data: ParallelData, references: Path, tgt_vocab: spm.SentencePieceProcessor,
             recipe: Recipe, device: torch.device) -> ValidationResult:
    """Loss, NLL, perplexity and (if the recipe asks) BLEU on the validation set."""
    was_training = model.training
    model.eval()
    try:
        loss, nll = validation_loss(model, data, recipe, device)
        bleu = validation_bleu(model, data, references, tgt_vocab, recipe, device) if recipe.train.valid_bleu else None
    finally:
        model.train(was_training)
    return ValidationResult(loss, nll, math.exp(min(nll, 50.0)), bleu)
