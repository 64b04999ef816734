"""Learning-rate schedules, as functions of the update number (1-based) and of how much of the run's budget
is spent.

The paper's schedules (``noam``, ``inverse_sqrt``) depend on the update number alone: they do not know when
the run ends, so a short run stops before they have decayed. The budget schedules (``linear``, ``cosine``)
reach zero exactly at the budget's end, ``train.max_steps`` or ``train.max_time`` (whichever comes first):
with a fixed budget, a rate that decays to zero at its end beats step and inverse-sqrt schedules at every
budget (Li, Yumer & Ramanan, "Budgeted Training", ICLR 2020). Under a time budget the share spent is the
time spent, so the number of updates the schedule spreads itself over is, in effect, estimated from the
pace so far and corrected with every update.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..config import TrainConfig

Schedule = Callable[[int, float], float]
"""``(update, budget spent before it) -> learning rate``; the update is 1-based, the share in [0, 1]."""

BUDGET_SCHEDULES = ("linear", "cosine")


@dataclass(frozen=True)
class Budget:
    """A run's budget: updates, seconds of training, or both (whichever runs out first); 0 is no limit."""

    max_steps: int = 0
    max_seconds: float = 0.0

    @classmethod
    def of(cls, config: TrainConfig) -> Budget:
        return cls(config.max_steps, config.max_seconds)

    @property
    def known(self) -> bool:
        return bool(self.max_steps or self.max_seconds)

    def spent_at(self, update: int, seconds: float) -> float:
        """The share of the budget spent at update ``update`` (1-based) begun ``seconds`` into the run, in [0, 1].

        An update counts from its middle, so that neither the first nor the last one runs at a rate of zero."""
        shares = [(update - 0.5) / self.max_steps if self.max_steps else 0.0]
        if self.max_seconds:
            shares.append(seconds / self.max_seconds)
        return min(max(shares), 1.0)


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


def to_zero(step: int, spent: float, peak: float, warmup: int, warmup_fraction: float, shape: str) -> float:
    """Warm-up, then ``peak`` down to zero at the budget's end, along a straight line or a half cosine.

    The warm-up is ``warmup_fraction`` of the budget, or ``warmup`` updates when that is 0 (the decay then
    runs over the whole budget, the warm-up cutting into its start)."""
    if warmup_fraction:
        ramp = spent / warmup_fraction
    else:
        ramp = step / warmup if warmup else 1.0
    left = max(0.0, min(1.0, (1.0 - spent) / (1.0 - warmup_fraction)))  # share of the decay still to go
    decay = left if shape == "linear" else 0.5 * (1.0 - math.cos(math.pi * left))
    return peak * min(ramp, decay)


def learning_rate(config: TrainConfig, d_model: int) -> Schedule:
    """The schedule the recipe asks for."""
    if config.lr_schedule == "noam":
        return lambda step, _spent: noam(step, d_model, config.warmup, config.lr_scale)
    if config.lr_schedule == "inverse_sqrt":
        return lambda step, _spent: inverse_sqrt(step, config.lr, config.warmup)
    if config.lr_schedule == "inverse_sqrt_nowarmup":
        return lambda step, _spent: inverse_sqrt_nowarmup(step, config.lr, config.warmup)
    if config.lr_schedule in BUDGET_SCHEDULES:
        shape = config.lr_schedule
        return lambda step, spent: to_zero(step, spent, config.lr, config.warmup, config.warmup_fraction, shape)
    return lambda _step, _spent: config.lr
