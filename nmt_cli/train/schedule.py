"""Learning-rate schedules, as functions of the update number (1-based)."""

from __future__ import annotations

from collections.abc import Callable

from ..config import TrainConfig


def noam(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """The paper's schedule (eq. 3): d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)."""
    step = max(step, 1)
    if warmup == 0:
        return scale * d_model**-0.5 * step**-0.5
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def inverse_sqrt(step: int, peak: float, warmup: int) -> float:
    """fairseq's inverse_sqrt: linear warm-up to ``peak``, then peak * sqrt(warmup / step)."""
    step = max(step, 1)
    if warmup == 0:
        return peak * step**-0.5
    if step < warmup:
        return peak * step / warmup
    return peak * (warmup / step) ** 0.5


def inverse_sqrt_nowarmup(step: int, peak: float, pivot: int) -> float:
    """No warm-up, the schedule T-Fixup trains with (its official code): peak * sqrt(P / (P + step))."""
    return peak * (pivot / (pivot + max(step, 1))) ** 0.5


def learning_rate(config: TrainConfig, d_model: int) -> Callable[[int], float]:
    """The schedule the recipe asks for, as ``step -> learning rate``."""
    if config.lr_schedule == "noam":
        return lambda step: noam(step, d_model, config.warmup, config.lr_scale)
    if config.lr_schedule == "inverse_sqrt":
        return lambda step: inverse_sqrt(step, config.lr, config.warmup)
    if config.lr_schedule == "inverse_sqrt_nowarmup":
        return lambda step: inverse_sqrt_nowarmup(step, config.lr, config.warmup)
    return lambda step: config.lr
