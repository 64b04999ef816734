"""The recipe's decoding section."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .fields import _opt


@dataclass(frozen=True)
class DecodeConfig:
    """Beam search defaults used by validation and ``nmt translate``."""

    beam: int = _opt(4, "beam size (1: greedy)", ge=1, le=1024)
    alpha: float = _opt(0.6, "length penalty exponent (0: none)", ge=0, le=10)
    length_penalty: Literal["gnmt", "average"] = _opt(
        "gnmt", "gnmt: ((5+|Y|)/6)^alpha (the paper); average: |Y|^alpha (fairseq, Marian, CTranslate2)"
    )
    stop: Literal["beam", "top", "bound"] = _opt(
        "beam",
        "when a sentence's search ends — beam: once it has `beam` finished hypotheses (fairseq, CTranslate2); "
        "top: as soon as its best candidate ends (OpenNMT-py); bound: once no open hypothesis "
        "can still beat them (slowest, exhaustive within the length limit)",
    )
    max_len_a: float = _opt(1.0, "maximum output length is a * source length + b", ge=0, le=100)
    max_len_b: int = _opt(50, "see max_len_a", ge=0, le=100_000)
    batch_tokens: int = _opt(6000, "source tokens per decoding batch", ge=1, le=100_000_000)
    batch_size: int = _opt(0, "sentences per decoding batch (0: no limit)", ge=0, le=10_000_000)
    context_segment: int = _opt(
        8,
        "a model that reads document context and its own earlier translations (model.recurrence, model.concat with "
        "concat_target) translates each document in segments of this many sentences side by side, each segment "
        "first translating again the sentences its first one reads (0: each document in order, a sentence at a "
        "time: the slowest, no sentence translated twice)",
        ge=0,
        le=10_000_000,
    )
    workers: int = _opt(
        0,
        "on the CPU, batches translated at once, each on threads / workers of the threads (0: one per "
        "thread when a text makes many batches of at most 256 sentences x beam, else 1; 1: one batch at a "
        "time on every thread, the lowest latency)",
        ge=0,
        le=256,
    )
    cuda_graphs: bool = _opt(
        True,
        "on a GPU, record each batch's decoder step as a CUDA graph and replay it "
        "(fixed shapes: finished sentences keep their slots); false: launch step by step",
    )
    sampling: bool = _opt(
        False,
        "sample each output token instead of searching (back-translation, diverse "
        "n-best lists); with nbest K, up to K distinct samples per line",
    )
    temperature: float = _opt(1.0, "sampling: divide the logits by this (below 1: sharper, above 1: flatter)", gt=0, le=100)
    top_k: int = _opt(0, "sampling: draw from the K most probable tokens only (0: all)", ge=0, le=10_000_000)
    top_p: float = _opt(
        1.0,
        "sampling: draw from the smallest set of tokens whose probability reaches P (nucleus sampling; 1: all)",
        gt=0,
        le=1,
    )
    seed: int = _opt(
        0, "sampling: random seed (the same seed, input and batching give the same samples)", ge=0, le=2**63 - 1
    )
