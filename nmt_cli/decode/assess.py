"""How far to trust each translation: one teacher-forced pass over the search's hypotheses gives the
features of ``quality/features.py``; the model's calibration turns them into a confidence and flags.

Used by :class:`.translator.Translator` (``nmt translate --confidence``) and by the server's decoding
loop (``"confidence": true``), so both assess a translation the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sentencepiece as spm
import torch

from ..config import DecodeConfig
from ..model.transformer import Transformer
from ..quality.confidence_map import Calibration
from ..quality.features import Features, features, flags
from ..quality.flag_names import COPY_CEILING, UNTRANSLATED
from .attention_maps import alignment_layer, cross_attention
from .ensemble import Ensemble
from .search import Hypothesis, length_penalty

if TYPE_CHECKING:  # translator.py imports this module
    from .loading import LoadedModel


@dataclass(frozen=True)
class Assessment:
    """What ``quality/`` says of one translation: its features, its calibrated confidence (None when the
    model has no calibration), and its flags."""

    features: Features
    confidence: float | None
    flags: list[str]
    ceiling: float = 1.0  # the most it may be trusted whatever the model says (a copy of its source: COPY_CEILING)

    @property
    def shown_confidence(self) -> float:
        """The calibrated confidence, or without a calibration exp(mean token log-probability), in [0, 1] too."""
        found = self.confidence if self.confidence is not None else math.exp(self.features.mean_logprob)
        return min(found, self.ceiling)

    def fields(self) -> dict[str, Any]:
        """What a JSON answer (``--format jsonl``, the server) says of this translation's confidence."""
        calibrated = self.confidence is not None
        return {"confidence": round(self.shown_confidence, 4), "calibrated": calibrated, "flags": self.flags}

    @staticmethod
    def of_text(lines: Sequence[Assessment | None]) -> dict[str, Any]:
        """The same for a text of several lines (a server request's text; None: a line with nothing to judge):
        its least trusted line's confidence (a text is as good as its worst sentence), the flags of all its
        lines and, for a text of several lines, each line's own."""
        judged = [a for a in lines if a is not None]
        fields: dict[str, Any] = {
            "confidence": round(min((a.shown_confidence for a in judged), default=1.0), 4),
            "calibrated": all(a.confidence is not None for a in judged),
            "flags": sorted({flag for a in judged for flag in a.flags}),
        }
        if len(lines) > 1:
            fields["lines"] = [
                {"confidence": round(a.shown_confidence, 4), "flags": a.flags} if a is not None else None for a in lines
            ]
        return fields


@dataclass(frozen=True)
class Assessor:
    """Everything an assessment reads besides the sentences: the model (an ensemble's first member), the
    layer whose cross-attention is read, the search settings that made the hypotheses, the calibration."""

    model: Transformer
    layer: int
    config: DecodeConfig
    src_vocab: spm.SentencePieceProcessor
    max_positions: int
    calibration: Calibration | None
    joint: bool = False  # one vocabulary for both sides: a copy of the source is the same ids

    @classmethod
    def of(cls, loaded: LoadedModel, config: DecodeConfig, layer: int | None = None) -> Assessor:
        """The assessor of a loaded model: an ensemble's first member is read, at ``layer`` (default: the
        alignment layer)."""
        model = loaded.model.models[0] if isinstance(loaded.model, Ensemble) else loaded.model
        layer = alignment_layer(model, layer)
        joint = loaded.src_vocab.serialized_model_proto() == loaded.tgt_vocab.serialized_model_proto()
        return cls(model, layer, config, loaded.src_vocab, loaded.recipe.model.max_positions, loaded.calibration, joint)

    def nothing(self) -> Assessment:
        """An empty or blank line's: its empty translation is certainly right (confidence 1 where the model is
        calibrated, else the uncalibrated 1 of a zero log-probability; no flags)."""
        return Assessment(Features(0.0, 0.0, 0.0, 0.0, 0.0, 0.0), 1.0 if self.calibration is not None else None, [])

    def assess(
        self,
        sources: list[list[int]],
        found: list[list[Hypothesis]],
        memory: tuple[torch.Tensor, torch.Tensor] | None = None,
        first: int | None = None,
    ) -> list[list[Assessment]]:
        """Every hypothesis of ``found`` (per source sentence, its n-best list) assessed; ``memory`` is the
        search's encoder output for ``sources`` when the caller still has it (then it is not recomputed); ``first``
        as :meth:`.aligner.Aligner.align` takes it."""
        pairs_src, pairs_out, memory = teacher_forced(sources, found, memory)
        attention = iter(cross_attention(self.model, pairs_src, pairs_out, self.layer, memory, first=first))
        out = []
        for source, hyps in zip(sources, found):
            limit = int(self.config.max_len_a * len(source) + self.config.max_len_b)
            limit = max(1, min(limit, self.max_positions - 1))
            words = len(self.src_vocab.decode(source).split())
            out.append([self._one(source, h, next(attention), words, limit) for h in hyps])
        return out

    def _one(self, source: list[int], hyp: Hypothesis, weights: torch.Tensor, words: int, limit: int) -> Assessment:
        # the search's score is the summed log-probability over the length penalty
        total = hyp.score * float(length_penalty(float(len(hyp.tokens) + 1), self.config))
        found_features = features(total, weights, source, hyp.tokens)
        confidence, learnt = None, None
        if self.calibration is not None:
            confidence = self.calibration.confidence(found_features)
            learnt = self.calibration.flag_probabilities(found_features)
        raised = flags(found_features, hyp.tokens, words, len(hyp.tokens) >= limit, learnt)
        if self._copy_of(source, hyp.tokens):  # the source given back: a reader must look, however sure the model
            raised = raised if UNTRANSLATED in raised else [*raised, UNTRANSLATED]
            return Assessment(found_features, confidence, raised, COPY_CEILING)
        return Assessment(found_features, confidence, raised)

    def _copy_of(self, source: list[int], output: list[int]) -> bool:
        """Whether ``output`` is ``source``'s pieces (a language tag before them aside) and they hold a word: one
        vocabulary for both sides only (with two, the same text is other ids)."""
        if not output or len(source) - len(output) not in (0, 1) or source[len(source) - len(output) :] != output:
            return False
        return self.joint and any(ch.isalpha() for ch in self.src_vocab.decode(output))


def teacher_forced(
    sources: list[list[int]], found: list[list[Hypothesis]], memory: tuple[torch.Tensor, torch.Tensor] | None
) -> tuple[list[list[int]], list[list[int]], tuple[torch.Tensor, torch.Tensor] | None]:
    """The source and output of every hypothesis, and the encoder output with each sentence's row once per
    hypothesis: what a teacher-forced pass over a batch's results reads."""
    pairs_src = [source for source, hyps in zip(sources, found) for _ in hyps]
    pairs_out = [h.tokens for hyps in found for h in hyps]
    if memory is not None:
        rows = torch.tensor([n for n, hyps in enumerate(found) for _ in hyps], device=memory[0].device)
        memory = (memory[0][rows], memory[1][rows])
    return pairs_src, pairs_out, memory
