"""``nmt average``: average the parameters of several checkpoints into one model file."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import NmtError
from ..utils.run_folder import STEP_PATTERN, refuse_output_inside_runs, run_holding
from .common import console, deprecated


def run(
    inputs: list[Path] = typer.Argument(..., help="Checkpoint files, or one run folder (with --last)."),
    output: Path = typer.Option(..., "--output", "-o", help="The averaged model file to write."),
    last: int = typer.Option(0, "--last", min=0, max=1_000_000, help="Average the last N step checkpoints of a run folder."),
    last_old: int = typer.Option(None, "-n", min=0, max=1_000_000, hidden=True),  # -n means --nbest in translate
) -> None:
    """Average model parameters (float64 accumulation); refuses mismatched architectures."""
    from ..train.checkpoint import average_checkpoints, select_checkpoints

    if last_old is not None:
        deprecated("nmt average -n", "--last")
        last = last or last_old

    paths = select_checkpoints(inputs, last)
    _check_output(output, paths)
    average_checkpoints(paths, output)
    console.print(f"averaged {len(paths)} checkpoints into {output}:")
    for path in paths:
        console.print(f"  {path}")


def _check_output(output: Path, inputs: list[Path]) -> None:
    """The averaged file never replaces what it reads, nor a training checkpoint; every refusal suggests a
    file that passes these same checks."""
    if output.is_dir():
        raise NmtError(f"{output}: is a folder; name the model file to write, e.g. {_elsewhere(output, inputs)}")
    if any(output.resolve() == path.resolve() for path in inputs):
        raise NmtError(
            f"{output}: is one of the checkpoints being averaged; write the average to another file, e.g. "
            f"{_elsewhere(output.parent, inputs)}"
        )
    if STEP_PATTERN.match(output.name):
        raise NmtError(
            f"{output}: a step_N.pt name is kept for training checkpoints; choose another name, e.g. "
            f"{_elsewhere(output.parent, inputs)}"
        )
    refuse_output_inside_runs(output, "an averaged model", lambda run: _elsewhere(run, inputs))


def _elsewhere(folder: Path, inputs: list[Path]) -> Path:
    """A file name for the average in ``folder`` (or beside the run whose checkpoints it is) that is none of
    the inputs and not inside a run's checkpoints."""
    folder = run_holding(folder / "x") or folder
    taken = {path.resolve() for path in inputs}
    for n in range(1000):
        candidate = folder / ("averaged.pt" if n == 0 else f"averaged.{n}.pt")
        if candidate.resolve() not in taken and not candidate.is_dir():
            return candidate
    return folder / "averaged.pt"
