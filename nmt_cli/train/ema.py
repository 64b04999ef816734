"""An exponential moving average (EMA) of the model's weights, kept beside training.

After every applied update, ``shadow = decay * shadow + (1 - decay) * weights`` in fp32, one
fused operation over all parameters. Early on the decay is capped at ``(1 + s) / (10 + s)`` after
``s`` updates (TensorFlow's ``ExponentialMovingAverage`` with ``num_updates``): with a decay of
0.9999 and no cap, a run of a few thousand updates would still mostly hold the initial weights.
The average is saved in training checkpoints (resuming continues it exactly) and written as
``model.ema.pt`` at the end; validation and ``model.pt`` use the trained weights themselves.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class WeightAverage:
    """The EMA of ``model``'s parameters (tied parameters once)."""

    def __init__(self, model: nn.Module, decay: float, first_update: int = 0) -> None:
        """``first_update``: the updates done before this average began (its early cap counts from there)."""
        self.model, self.decay, self.first_update = model, decay, first_update
        self.names = [name for name, _ in model.named_parameters()]
        self.parameters = [p for _, p in model.named_parameters()]
        self.shadow = [p.detach().float().clone() for p in self.parameters]

    def decay_at(self, updates_done: int) -> float:
        averaged = max(updates_done - self.first_update, 0)
        return min(self.decay, (1 + averaged) / (10 + averaged))

    @torch.no_grad()
    def update(self, updates_done: int) -> None:
        """Fold in the weights after an update; ``updates_done`` counts the updates before it."""
        weights = [p.detach().float() for p in self.parameters]  # no copy for fp32 weights
        torch._foreach_lerp_(self.shadow, weights, 1.0 - self.decay_at(updates_done))

    def state_dict(self) -> dict[str, Tensor]:
        return dict(zip(self.names, self.shadow))

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        missing = sorted(set(self.names) - set(state))
        if missing:
            raise ValueError(f"EMA state without {', '.join(missing[:3])}")
        with torch.no_grad():
            for name, shadow in zip(self.names, self.shadow):
                shadow.copy_(state[name])

    def model_state_dict(self) -> dict[str, Tensor]:
        """The model's full state dict (buffers and tied names included) with the averaged weights."""
        averaged = {id(p): s for p, s in zip(self.parameters, self.shadow)}
        full = self.model.state_dict(keep_vars=True)
        return {key: averaged.get(id(value), value).detach().to(value.dtype).clone() for key, value in full.items()}


__all__ = ["WeightAverage"]
