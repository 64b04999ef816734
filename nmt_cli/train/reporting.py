"""What a run tells its user: the log lines, the progress bar, ``metrics.jsonl`` and TensorBoard events. Only
the main process of a group writes."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from ..config import Recipe
from ..model.transformer import count_parameters
from ..utils.files import append_line, atomic_open
from ..utils.run_folder import RunFolder
from .distributed import DistInfo
from .events import EventWriter
from .state import TrainState
from .validate import ValidationResult

Log = Callable[[str], None]


class Reporter:
    """The run's voice: ``update`` and ``validation`` speak for the loop, ``write`` adds a metrics record."""

    def __init__(self, folder: RunFolder, tensorboard: bool, info: DistInfo, log: Log) -> None:
        self.folder, self.tensorboard, self.info, self.log = folder, tensorboard, info, log
        self.events: EventWriter | None = None  # TensorBoard, opened with the first record
        self.window = Window()
        self.warned_truncation = False

    def start(
        self, model: torch.nn.Module, recipe: Recipe, train_pairs: np.ndarray, precision: str, pairs: int | None = None
    ) -> None:
        """The run's first lines: the model, data, processes and precision; pairs too long to train on.
        ``train_pairs``: each training row's width; ``pairs``: the pairs in them where a row is a chain of pairs."""
        info, config = self.info, recipe.train
        if not info.is_main:
            return
        rows = (
            f"{len(train_pairs):,} training pairs"
            if pairs is None
            else f"{pairs:,} training pairs in {len(train_pairs):,} chains"
        )
        self.log(
            f"model: {count_parameters(model):,} parameters; {rows}; "
            f"{info.world_size} process(es) x update_freq {config.update_freq}; device {info.device}"
            + (f" ({torch.distributed.get_backend()})" if info.distributed else "")
            + "; "
            f"precision {precision}" + (" (auto)" if config.precision == "auto" else "")
        )
        too_long = int((train_pairs > recipe.model.max_positions).sum())
        if too_long:
            self.log(
                f"{too_long:,} training {'pairs' if pairs is None else 'chains'} longer than model.max_positions "
                f"({recipe.model.max_positions}) are left out; raise it or lower data.clean.max_tokens"
            )

    def update(self, bar: Any, state: TrainState, lr: float, scaler: torch.amp.GradScaler) -> None:
        """The log line, progress bar and metrics record of the updates since the last one."""
        stats = self.window.flush(self.info.world_size)
        record = {
            "step": state.step,
            "epoch": state.epoch,
            **stats,
            "lr": lr,
            "elapsed": round(state.elapsed, 1),
        }
        if self.info.device.type == "cuda":
            record["max_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
        if scaler.is_enabled():
            record["loss_scale"] = scaler.get_scale()
            record["skipped_updates"] = state.skipped_updates
        bar.set_postfix(
            loss=f"{stats['loss']:.3f}",
            ppl=f"{stats['ppl']:.1f}",
            lr=f"{record['lr']:.2e}",
            tok_s=f"{stats['tgt_tokens_per_s']:.0f}",
        )
        if bar.disable and self.info.is_main:
            self.log(
                f"update {state.step:,} | loss {stats['loss']:.3f} | nll {stats['nll']:.3f} | "
                f"ppl {stats['ppl']:.2f} | lr {record['lr']:.2e} | gnorm {stats['grad_norm']:.2f} | "
                f"{stats['tgt_tokens_per_s']:,.0f} tgt tok/s"
            )
        self.write(record)

    def validation(self, step: int, result: ValidationResult, max_positions: int, seconds: float) -> None:
        """The validation's metrics record and log line (with the ``seconds`` it took); once per run, a warning
        about truncated sources."""
        self.write({"step": step, **result.as_dict(), "valid_seconds": round(seconds, 1)})
        self.log(f"{describe_validation(step, result)} | {seconds:.1f} s")
        if result.truncated and not self.warned_truncation:
            self.warned_truncation = True
            self.log(
                f"warning: {result.truncated:,} validation source(s) are longer than model.max_positions "
                f"({max_positions}) and were truncated for validation BLEU; raise model.max_positions or "
                "shorten those sentences"
            )

    def write(self, record: dict[str, Any]) -> None:
        """One line of metrics.jsonl and its TensorBoard events (the main process only)."""
        if self.info.is_main:
            append_line(self.folder.metrics_file, json.dumps(record))
            if self.events is None:
                self.events = EventWriter(self.folder.tensorboard_dir, self.tensorboard)
            self.events.write(record)

    def resumed_at(self, step: int, validation_due: bool) -> None:
        """Forget the records of updates after ``step``, the checkpoint a run resumes from: a run stopped after
        its last save (a failed or interrupted save) wrote them, and the resumed run writes them again.
        Where that update's validation is to run again, its record goes too."""
        path = self.folder.metrics_file
        if not self.info.is_main or not path.is_file():
            return
        lines = path.read_text(encoding="utf-8").splitlines()
        kept = [line for line in lines if _kept(line, step, validation_due)]
        if len(kept) < len(lines):
            with atomic_open(path, "w", encoding="utf-8") as handle:
                handle.write("".join(line + "\n" for line in kept))

    def progress(self, max_steps: int, step: int) -> tqdm:
        total = max_steps or None
        return tqdm(
            total=total,
            initial=step,
            desc="train",
            unit=" updates",
            dynamic_ncols=True,
            disable=None if self.info.is_main else True,
        )

    def close(self) -> None:
        if self.events is not None:
            self.events.close()


def _kept(line: str, step: int, validation_due: bool) -> bool:
    try:
        record = json.loads(line)
    except ValueError:
        return False  # a line cut by a kill mid-write
    if not isinstance(record, dict) or not isinstance(record.get("step"), int):
        return True
    if record["step"] > step:
        return False
    return not (validation_due and record["step"] == step and "lr" not in record)  # "lr": an update's record


class Window:
    """Sums over the updates since the last log line (time spent in updates only, so
    validation and checkpoint writing do not lower the reported throughput)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}

    def add(self, sums: dict[str, Any]) -> None:
        """Add one update's sums; loss and NLL may be device tensors, read only at :meth:`flush`."""
        for key, value in sums.items():
            self.sums[key] = self.sums.get(key, 0.0) + value

    def flush(self, world_size: int) -> dict[str, float]:
        self.sums = {key: float(value) for key, value in self.sums.items()}
        seconds = max(self.sums.get("seconds", 0.0), 1e-9)
        tokens = max(self.sums.get("tokens", 0.0), 1.0)
        nll = self.sums.get("nll", 0.0) / tokens
        real = tokens + self.sums.get("src_tokens", 0.0)
        stats = {
            "loss": self.sums.get("loss", 0.0) / tokens,
            "nll": nll,
            "ppl": math.exp(min(nll, 50.0)),
            "grad_norm": self.sums.get("grad_norm", 0.0) / max(self.sums.get("updates", 0.0), 1.0),
            "pad_share": 1.0 - real / max(self.sums.get("slots", 0.0), real, 1.0),
            "tgt_tokens": int(self.sums.get("tokens", 0.0)),
            # This process's tokens times the world size: ranks get batches of equal size on average.
            "tgt_tokens_per_s": world_size * tokens / seconds,
            "tgt_tokens_per_s_per_process": tokens / seconds,
            "src_tgt_tokens_per_s": world_size * (tokens + self.sums.get("src_tokens", 0.0)) / seconds,
        }
        self.sums = {}
        return stats


def describe_validation_time(state: TrainState) -> str:
    """What validating cost the run: its seconds, their share of the run's time, validations put off."""
    share = state.validation_seconds / state.elapsed if state.elapsed else 0.0
    put_off = state.validations_put_off
    kept = f"; {put_off:,} put off to keep within train.valid_share" if put_off else ""
    return f"validation took {state.validation_seconds:.0f} s of the run's {state.elapsed:.0f} s ({share:.0%}){kept}"


def describe_validation(step: int, result: ValidationResult) -> str:
    bleu = f" | BLEU {result.bleu:.2f}" if result.bleu is not None else ""
    heads = f" | heads alike {result.head_similarity:.2f}" if result.head_similarity is not None else ""
    directions = "".join(
        f" | {name} " + (f"BLEU {values['bleu']:.2f}" if values.get("bleu") is not None else f"loss {values['loss']:.3f}")
        for name, values in result.directions.items()
    )
    return (
        f"validation at update {step:,} | loss {result.loss:.3f} | nll {result.nll:.3f} | ppl {result.ppl:.2f}{bleu}"
        f"{directions}{heads}"
    )
