"""``nmt average``: average the parameters of several checkpoints into one model file."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import NmtError
from ..utils.run_folder import STEP_PATTERN, refuse_output_inside_runs
from .common import console


def run(
    inputs: list[Path] = typer.Argument(..., help="Checkpoint files, or one run folder (with --last)."),
    output: Path = typer.Option(..., "--output", "-o", help="The averaged model file to write."),
    last: int = typer.Option(0, "--last", "-n", min=0, help="Average the last N step checkpoints of a run folder."),
) -> None:
    """Average model parameters (float64 accumulation); refuses mismatched architectures."""
    from ..train.checkpoint import average_checkpoints, select_checkpoints

    paths = select_checkpoints(inputs, last)
    _check_output(output, paths)
    average_checkpoints(paths, output)
    console.print(f"averaged {len(paths)} checkpoints into {output}:", markup=False)
    for path in paths:
        console.print(f"  {path}", markup=False)


def _check_output(output: Path, inputs: list[Path]) -> None:
    """The averaged file never replaces what it reads, nor a training checkpoint."""
    if output.is_dir():
        raise NmtError(f"{output}: is a folder; name the model file to write, e.g. {output / 'model.pt'}")
    if any(output.resolve() == path.resolve() for path in inputs):
        raise NmtError(f"{output}: is one of the checkpoints being averaged; write the average to another file")
    if STEP_PATTERN.match(output.name):
        raise NmtError(f"{output}: a step_N.pt name is kept for training checkpoints; choose another name")
    refuse_output_inside_runs(output, "an averaged model")
