"""TensorBoard event files beside ``metrics.jsonl``, when ``tensorboard`` is installed.

Every record the trainer writes to ``metrics.jsonl`` also becomes scalars in ``RUN/tensorboard``:
training records under ``train/`` (loss, nll, ppl, lr, tokens/s, gradient norm, padding share),
validation records under ``valid/`` (loss, nll, ppl, BLEU), each at its update. ``tensorboard`` is
an optional extra (``pip install 'nmt-cli[tensorboard]'``); without it training is unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SKIPPED_KEYS = ("step", "epoch")


class EventWriter:
    """Writes metric records as TensorBoard scalars; does nothing when TensorBoard is missing or off."""

    def __init__(self, folder: Path, enabled: bool) -> None:
        self.writer = None
        if not enabled:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # the optional extra is not installed
            return
        self.writer = SummaryWriter(log_dir=str(folder))

    @property
    def active(self) -> bool:
        return self.writer is not None

    def write(self, record: dict[str, Any]) -> None:
        if self.writer is None or "step" not in record:
            return
        for key, value in record.items():
            if key in SKIPPED_KEYS or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            tag = f"valid/{key.removeprefix('valid_')}" if key.startswith("valid_") else f"train/{key}"
            self.writer.add_scalar(tag, value, record["step"])
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


__all__ = ["EventWriter"]
