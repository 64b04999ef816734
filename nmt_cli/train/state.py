"""Where a run stands: the counters a checkpoint must carry to resume exactly."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass
class TrainState:
    """Update count (applied updates only), data position (epoch and global batches consumed in it), validation history."""

    step: int = 0
    epoch: int = 1
    epoch_batches_done: int = 0
    best_score: float | None = None
    best_step: int = 0
    bad_validations: int = 0
    elapsed: float = 0.0
    max_tokens: int = 0  # the batch size in use (train.max_tokens: auto resolves once, then resumes keep it)
    skipped_updates: int = 0  # fp16 updates skipped because the scaled gradients overflowed
    validation_due: bool = False  # the validation of this update was abandoned (preemption): resuming runs it
    validation_seconds: float = 0.0  # wall-clock time the run's validations took (part of elapsed)
    validations_put_off: int = 0  # scheduled validations not run, to keep within train.valid_share

    def track_validation(self, score: float, patience: int) -> tuple[bool, bool]:
        """Count a validation score (higher is better) at this step: (it is the best so far, patience ran out)."""
        improved = self.best_score is None or score > self.best_score
        if improved:
            self.best_score, self.best_step, self.bad_validations = score, self.step, 0
        else:
            self.bad_validations += 1
        return improved, bool(patience) and self.bad_validations >= patience

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for f in fields(self):
            if f.name in state:
                setattr(self, f.name, state[f.name])
