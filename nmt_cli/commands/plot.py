"""``nmt plot RUN [RUN ...] -o curves.png``: training and validation curves, several runs overlaid."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import typer

from ..errors import NmtError
from .common import console


def run(
    runs: list[Path] = typer.Argument(..., help="Run folders (or their metrics.jsonl files)."),
    output: Path = typer.Option(..., "--output", "-o", help="The PNG file to write."),
    x: Literal["updates", "hours"] = typer.Option("updates", "--x", help="updates, or hours (training time)."),
) -> None:
    """Plot loss, perplexity, BLEU and learning rate of one or several runs (needs matplotlib)."""
    from ..curves import plot_runs, read_run, run_names

    if x not in ("updates", "hours"):
        raise NmtError(f"--x: '{x}' is not updates or hours")
    if output.suffix.lower() != ".png":
        raise NmtError(f"{output}: nmt plot writes PNG; name a .png file")
    if output.is_dir():
        raise NmtError(f"{output}: is a folder; name the .png file to write")
    curves = [read_run(folder, name) for folder, name in zip(runs, run_names(runs))]
    plot_runs(curves, output, x)  # type: ignore[arg-type]
    console.print(f"curves of {len(curves)} run(s) written to {output}")
