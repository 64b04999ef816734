"""``nmt average``: average the parameters of several checkpoints into one model file."""

from __future__ import annotations

from pathlib import Path

import typer

from .common import console


def run(
    inputs: list[Path] = typer.Argument(..., help="Checkpoint files, or one run folder (with --last)."),
    output: Path = typer.Option(..., "--output", "-o", help="The averaged model file to write."),
    last: int = typer.Option(0, "--last", "-n", min=0, help="Average the last N step checkpoints of a run folder."),
) -> None:
    """Average model parameters (float64 accumulation); refuses mismatched architectures."""
    from ..train.checkpoint import average_checkpoints, select_checkpoints

    paths = select_checkpoints(inputs, last)
    average_checkpoints(paths, output)
    console.print(f"averaged {len(paths)} checkpoints into {output}:", markup=False)
    for path in paths:
        console.print(f"  {path}", markup=False)
