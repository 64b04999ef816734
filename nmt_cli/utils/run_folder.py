"""The run folder (``runs/NAME/``): its layout, its lock and what may be written into it.

Every command that reads or writes a run goes through :class:`RunFolder`, so the layout is
spelled out here once (``docs/run-folder.md`` describes each file):

    recipe.yaml            the resolved recipe the run trains       (train writes; train, translate read)
    spm.src.model, spm.tgt.model   the vocabularies, as prepared    (train writes)
    checkpoints/step_*.pt  training checkpoints, the last K kept    (train writes, resume reads)
    best.pt                weights of the best validation score     (train writes)
    model.pt               the final (or averaged) weights          (train, average -o write; translate reads)
    metrics.jsonl          one JSON line per log / validation event (train appends)
    .lock                  PID and host of the `nmt train` that owns the folder
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import NmtError
from .files import atomic_open, remove_stale_temps
from .process import pid_alive

RECIPE_FILE = "recipe.yaml"
SPM_FILES = {"src": "spm.src.model", "tgt": "spm.tgt.model"}
CHECKPOINT_DIR = "checkpoints"
BEST_FILE = "best.pt"
MODEL_FILE = "model.pt"
EMA_FILE = "model.ema.pt"  # the weights' exponential moving average (train.ema_decay)
TENSORBOARD_DIR = "tensorboard"  # event files, when tensorboard is installed
METRICS_FILE = "metrics.jsonl"
LOCK_FILE = ".lock"

STEP_PATTERN = re.compile(r"^step_(\d+)\.pt$")


class RunFolder:
    """One training run's folder; paths, checkpoints, the lock and leftovers."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    # ------------------------------------------------------------------ layout

    @property
    def recipe_file(self) -> Path:
        return self.path / RECIPE_FILE

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / CHECKPOINT_DIR

    @property
    def best_file(self) -> Path:
        return self.path / BEST_FILE

    @property
    def model_file(self) -> Path:
        return self.path / MODEL_FILE

    @property
    def ema_file(self) -> Path:
        return self.path / EMA_FILE

    @property
    def tensorboard_dir(self) -> Path:
        return self.path / TENSORBOARD_DIR

    @property
    def metrics_file(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def lock_file(self) -> Path:
        return self.path / LOCK_FILE

    def spm_file(self, side: str) -> Path:
        return self.path / SPM_FILES[side]

    def step_path(self, step: int) -> Path:
        return self.checkpoint_dir / f"step_{step:08d}.pt"

    def step_checkpoints(self) -> list[Path]:
        """The step checkpoints, oldest first."""
        if not self.checkpoint_dir.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.checkpoint_dir.iterdir() if (m := STEP_PATTERN.match(p.name))]
        return [p for _, p in sorted(found)]

    @staticmethod
    def step_of(checkpoint: Path) -> int:
        """The update a step checkpoint was written after, from its name."""
        found = STEP_PATTERN.match(checkpoint.name)
        if found is None:
            raise ValueError(f"{checkpoint}: not a step checkpoint's name (step_NNNNNNNN.pt)")
        return int(found.group(1))

    def prune(self, keep_last: int) -> None:
        """Delete all but the newest ``keep_last`` step checkpoints (0 keeps everything)."""
        if keep_last <= 0:
            return
        for old in self.step_checkpoints()[:-keep_last]:
            old.unlink(missing_ok=True)

    def find_checkpoint(self, choice: str) -> Path:
        """``--resume-from``: a step number (``1200``) or a path (absolute, or relative to the run folder)."""
        if choice.isdigit():
            path = self.step_path(int(choice))
            if not path.is_file():
                kept = ", ".join(str(int(m.group(1))) for p in self.step_checkpoints() if (m := STEP_PATTERN.match(p.name)))
                raise NmtError(f"--resume-from {choice}: {path} does not exist; kept steps: {kept or 'none'}")
            return path
        path = Path(choice)
        for candidate in (path, self.path / path, self.checkpoint_dir / path):
            if candidate.is_file():
                return candidate
        raise NmtError(f"--resume-from {choice}: no such checkpoint file (nor under {self.path}); name a step or a file")

    # ------------------------------------------------------------------ ownership

    @contextlib.contextmanager
    def locked(
        self, log: Callable[[str], None], holder: str = "nmt train", elsewhere: str = "train into another train.dir"
    ) -> Iterator[None]:
        """Hold the folder's lock; a second ``holder`` is refused (``elsewhere`` says where it could go instead), a
        dead holder's lock is taken over. A folder made here and left empty (a run refused before it wrote
        anything) is removed again."""
        made = not self.path.exists()
        self.path.mkdir(parents=True, exist_ok=True)
        mine = f"{os.getpid()} {socket.gethostname()}\n"
        while True:
            try:
                fd = os.open(self.lock_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                pid, host = _read_lock(self.lock_file)
                if pid is not None and not _holder_is_dead(pid, host):
                    raise NmtError(
                        f"{self.path}: in use by another `{holder}` (PID {pid} on {host}); wait for it "
                        f"to finish or stop it, or {elsewhere}"
                    ) from None
                log(f"{self.lock_file}: taking over the lock of a run that is no longer running (PID {pid} on {host})")
                self.lock_file.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as handle:
                handle.write(mine)
            break
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                if self.lock_file.read_text() == mine:
                    self.lock_file.unlink()
            if made:
                with contextlib.suppress(OSError):  # not empty: the run wrote something, which stays
                    self.path.rmdir()

    def remove_stale_temps(self) -> list[Path]:
        """Delete the temporary files that killed processes left behind (their PID is gone)."""
        return [*remove_stale_temps(self.path), *remove_stale_temps(self.checkpoint_dir)]

    def write_inputs(self, recipe_text: str, spm_models: dict[str, bytes]) -> list[Path]:
        """Make the folder and write what a run reads back (its recipe, its SentencePiece models by side),
        each file whole or not at all; returns the stale temporary files it removed first."""
        removed = self.remove_stale_temps()
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        with atomic_open(self.recipe_file, "w", encoding="utf-8") as handle:
            handle.write(recipe_text)
        for side, blob in spm_models.items():
            with atomic_open(self.spm_file(side), "wb") as handle:
                handle.write(blob)
        return removed

    # ------------------------------------------------------------------ what others may write

    @staticmethod
    def looks_like_run(path: Path) -> bool:
        """A folder that ``nmt train`` made (or is making)."""
        return (
            (path / CHECKPOINT_DIR).is_dir()
            or (path / LOCK_FILE).exists()
            or ((path / RECIPE_FILE).is_file() and (path / MODEL_FILE).is_file())
        )


def run_holding(output: Path) -> Path | None:
    """The run folder whose ``checkpoints/`` holds ``output`` (at any depth), or None."""
    resolved = output.resolve()
    for folder in (resolved, *resolved.parents):
        if folder.name == CHECKPOINT_DIR and RunFolder.looks_like_run(folder.parent):
            return folder.parent
    return None


def refuse_output_inside_runs(output: Path, what: str, elsewhere: Callable[[Path], Path]) -> None:
    """``nmt average -o`` / ``nmt export``: never into a run's ``checkpoints/``. ``elsewhere(run)`` is the
    place the message suggests instead: the caller's, so that it passes the caller's own checks too."""
    run = run_holding(output)
    if run is not None:
        raise NmtError(
            f"{output}: is inside the training checkpoints of {run}; {what} would be taken for a training "
            f"checkpoint there. Write it elsewhere, e.g. {elsewhere(run)}"
        )


def _read_lock(path: Path) -> tuple[int | None, str]:
    try:
        pid, host = path.read_text().split()
        return int(pid), host
    except (OSError, ValueError):
        return None, "?"  # unreadable or half-written: its writer died before finishing it


def _holder_is_dead(pid: int, host: str) -> bool:
    if host != socket.gethostname():
        return False  # a process on another machine (shared disk) cannot be checked; assume alive
    return not pid_alive(pid)
