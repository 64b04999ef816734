"""The recipe's training section."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..utils.timefmt import parse_duration
from .fields import _opt


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation, batching, stopping, validation and checkpoints."""

    dir: str = _opt("", "run folder (default: runs/RECIPE_NAME)")
    init_from: str = _opt(
        "",
        "fine-tune: start this new run from a trained model's weights (a run folder, its "
        "model.pt or any checkpoint), with a fresh optimizer and schedule; prepare the data "
        "with vocab.from naming the same model",
    )
    init_optimizer: bool = _opt(
        False,
        "with train.init_from a run folder or a training checkpoint of the same parameters (stage 2 of document "
        "training: a context model has no weights of its own): also start from its Adam moments, the newest "
        "checkpoint's, instead of zero; the learning-rate schedule still starts afresh",
    )
    seed: int = _opt(1, "random seed (batches, dropout, initialisation)", ge=0, le=2**32 - 1)
    max_tokens: int | Literal["auto"] = _opt(
        4096,
        "tokens per batch per process, padding included; auto: the largest batch that fits in GPU memory "
        "(probed at start; 4096 on the CPU)",
        ge=1,
        le=100_000_000,
    )
    update_freq: int = _opt(1, "batches accumulated per update (per process)", ge=1, le=100_000)
    max_steps: int = _opt(100_000, "stop after this many updates (0: no limit)", ge=0, le=10**12)
    max_epochs: int = _opt(0, "stop after this many epochs (0: no limit)", ge=0, le=1_000_000)
    max_time: str = _opt("", "stop after this wall-clock time, e.g. 30m, 2h (empty: no limit)")
    lr_schedule: Literal["noam", "inverse_sqrt", "inverse_sqrt_nowarmup", "constant", "linear", "cosine"] = _opt(
        "noam",
        "noam: the paper's d^-0.5*min(s^-0.5, s*w^-1.5); inverse_sqrt: linear warm-up to lr, then "
        "lr*sqrt(w/s); inverse_sqrt_nowarmup: lr*sqrt(w/(w+s)) from the first update (T-Fixup; w = train.warmup); "
        "constant; linear / cosine: warm-up, then lr down to zero exactly at the budget's end (train.max_steps or "
        "train.max_time, whichever comes first; under a time budget the schedule follows the clock)",
    )
    lr: float = _opt(7e-4, "peak learning rate (inverse_sqrt, linear, cosine, constant)", gt=0, le=10)
    lr_scale: float = _opt(1.0, "factor on the noam schedule", gt=0, le=1000)
    warmup: int = _opt(4000, "warm-up updates", ge=0, le=10**9)
    warmup_fraction: float = _opt(
        0.0,
        "linear / cosine: the warm-up as a share of the budget, e.g. 0.1 (0: train.warmup updates)",
        ge=0,
        lt=1,
    )
    adam_beta1: float = _opt(0.9, "Adam beta1", ge=0, le=1)
    adam_beta2: float = _opt(0.98, "Adam beta2", ge=0, le=1)
    adam_eps: float = _opt(1e-9, "Adam epsilon", gt=0, le=1)
    weight_decay: float = _opt(0.0, "decoupled weight decay (AdamW) ", ge=0, le=10)
    clip_norm: float = _opt(0.0, "clip the gradient norm to this (0: off)", ge=0, le=1e6)
    label_smoothing: float = _opt(0.1, "label smoothing epsilon", ge=0, le=1)
    context_dropout: float = _opt(
        0.0,
        "with model.concat or model.recurrence: each source token of the sentence being translated is replaced by "
        "<unk> with this probability in training (its context's are kept; in a recurrence chain, where each sentence "
        "is the next one's past, every other sentence's), so that the model learns to read its context for what it "
        "lost (CoWord dropout, Fernandes et al. 2021); 0: off",
        ge=0,
        lt=1,
    )
    guided_alignment: float = _opt(
        0.0,
        "weight of the guided-alignment loss: one cross-attention head of the penultimate decoder layer learns "
        "the word alignments of data.align, and alignments come from it (0: off; fairseq's default weight is 0.05)",
        ge=0,
        le=100,
    )
    validate_every: int = _opt(1000, "validate every N updates (0: only at the end)", ge=0, le=10**12)
    valid_bleu: bool = _opt(True, "decode the validation set and report sacreBLEU")
    valid_beam: int = _opt(1, "beam size for validation BLEU (1: greedy)", ge=1, le=1024)
    valid_bleu_sentences: int = _opt(
        1000,
        "decode at most this many validation sentences for BLEU, a fixed sample spread over the set and shared "
        "evenly by a multilingual model's directions (0: all; a document model always decodes all); the loss is "
        "always over all",
        ge=0,
        le=10**9,
    )
    valid_share: float = _opt(
        0.1,
        "the most of the run's time validations may take: a scheduled validation is put off while validating "
        "would take more than this share of the time so far (0: no limit); the final one always runs",
        ge=0,
        le=1,
    )
    calibrate: bool = _opt(
        True,
        "at the end, fit the confidence of `nmt translate --confidence` on the validation set (100 pairs or more) "
        "and store it in model.pt",
    )
    calibrate_chrf: float = _opt(
        50.0, "the sentence chrF that counts as an acceptable translation for that calibration", ge=0, le=100
    )
    patience: int = _opt(0, "stop after N validations without improvement (0: off)", ge=0, le=1_000_000)
    save_every: int = _opt(1000, "write a checkpoint every N updates (0: off)", ge=0, le=10**12)
    save_minutes: float = _opt(0.0, "also write one every T minutes (the paper: 10)", ge=0, le=1_000_000)
    keep_last: int = _opt(5, "keep the last K step checkpoints (0: keep all)", ge=0, le=1_000_000)
    average_last: int = _opt(0, "average the last N checkpoints at the end (0: off)", ge=0, le=1_000_000)
    average_stretch: float = _opt(
        0.0,
        "average only checkpoints of the run's last stretch, this share of its updates (e.g. 0.25: the last quarter), "
        "and start the moving average (ema_decay) where the budget's last stretch starts (0: the last average_last "
        "checkpoints however early, the moving average from the first update)",
        ge=0,
        le=1,
    )
    ema_decay: float = _opt(
        0.0,
        "keep an exponential moving average of the weights with this decay, e.g. 0.9999, written as model.ema.pt (0: off)",
        ge=0,
        lt=1,
    )
    log_every: int = _opt(100, "log metrics every N updates", ge=1, le=10**12)
    tensorboard: bool = _opt(
        True,
        "also write the metrics as TensorBoard event files to RUN/tensorboard "
        "(when the tensorboard package is installed: pip install 'nmt-cli[tensorboard]')",
    )
    precision: Literal["fp32", "bf16", "fp16", "auto"] = _opt(
        "fp32",
        "fp32; bf16 autocast; fp16 with loss scaling (CUDA); auto: bf16 where the hardware computes it "
        "natively (CPUs with AVX512-BF16 or AMX, CUDA devices with bf16), else fp32",
    )
    compile: bool = _opt(
        False, "torch.compile each encoder and decoder layer (regional, shapes symbolic): fuses the element-wise work"
    )
    activation_checkpointing: bool = _opt(False, "recompute layer activations in backward (saves memory)")
    packed: bool = _opt(
        False,
        "padding-free batches: each batch's sentences laid end to end, attention kept within each (on CUDA in "
        "bf16/fp16 the variable-length flash-attention kernel; elsewhere the padded computation, slower); "
        "absolute positions, sentence-level models",
    )
    chain_tokens: int = _opt(
        128,
        "model.recurrence: the most tokens per side of a training row, a chain of consecutive pairs of one document "
        "read in one pass, each pair attending to its predecessors' keys/values (data/chains.py); longer rows cost "
        "more attention, shorter ones more pairs read only as the first pair's past",
        ge=8,
        le=1 << 20,
    )
    chain_leads: bool = _opt(
        False,
        "model.recurrence: a training chain that does not start its document first reads the pairs before it, "
        "unscored, so that its first pair has its past too (fewer pairs per second); "
        "false: that pair trains without a past. Validation always reads every pair after its past",
    )
    threads: int = _opt(0, "CPU threads per process (0: cores / processes)", ge=0, le=4096)
    device: Literal["auto", "cpu", "cuda"] = _opt("auto", "auto picks CUDA when available")
    dist_timeout_minutes: float = _opt(10.0, "give up when another process is silent this long", gt=0, le=10_080)

    @property
    def max_seconds(self) -> float:
        return parse_duration(self.max_time) if self.max_time else 0.0
