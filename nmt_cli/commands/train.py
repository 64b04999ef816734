"""``nmt train RECIPE``: train a Transformer (alone, or through torchrun with --nproc/--gpus)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from ..utils.allocator import TRAINING_KERNEL_CACHE_CAPACITY, bound_kernel_caches
from .common import RecipeArg, SetOption, console, deprecated, recipe_from_cli, styled, translate_hint


def run(
    recipe: Path = RecipeArg,
    overrides: list[str] = SetOption,
    resume: bool = typer.Option(
        None,
        "--resume/--no-resume",
        help="Continue from the newest checkpoint of the run folder.  [default: when one exists]",
        show_default=False,
    ),
    nproc: int = typer.Option(
        0, "--nproc", help="Launch N processes on this machine through torchrun (CPU: gloo).", min=0, max=4096
    ),
    gpus: int = typer.Option(0, "--gpus", help="Launch one process per GPU through torchrun (NCCL).", min=0, max=4096),
    start_from: str = typer.Option(
        None,
        "--resume-from",
        help="Resume from this checkpoint instead of the newest: a step number (1200) or a file.",
        show_default=False,
    ),
    start_from_old: str = typer.Option(None, "--from", hidden=True),  # --from is a language in every other command
) -> None:
    """Train the model the recipe describes; the run folder holds checkpoints, metrics and model.pt."""
    if start_from_old is not None:
        deprecated("nmt train --from", "--resume-from")
        start_from = start_from_old
    bound_kernel_caches(TRAINING_KERNEL_CACHE_CAPACITY)  # updates reuse their shapes more than decoding (utils/allocator.py)
    from ..utils.cpu import check_parallelism

    resolved = recipe_from_cli(recipe, overrides)  # validate before launching anything
    if nproc:
        check_parallelism(nproc, "--nproc")
    processes = gpus or nproc
    if gpus:
        _check_gpus(gpus)
    # --gpus always goes through torchrun (NCCL), one GPU included; CPU processes only when several.
    if (gpus or processes > 1) and "WORLD_SIZE" not in os.environ:
        from ..train.distributed import launch

        args = [str(recipe), *[a for item in overrides for a in ("--set", item)]]
        if resume is not None:
            args.append("--resume" if resume else "--no-resume")
        if start_from is not None:
            args += ["--resume-from", start_from]
        if gpus:
            args += ["--set", "train.device=cuda"]
        console.print(f"launching {processes} processes through torchrun")
        raise typer.Exit(launch(processes, args))
    from ..train.loop import train

    run_dir = train(resolved, resume=resume, start_from=start_from, log=lambda msg: console.print(msg, soft_wrap=True))
    if int(os.environ.get("RANK", "0")) == 0:
        sources, targets = zip(*resolved.directions)
        console.print(
            styled("done: try it: ", (translate_hint(run_dir, list(sources), list(targets)), "bold")), soft_wrap=True
        )
    sys.stdout.flush()


def _check_gpus(gpus: int) -> None:
    import torch

    from ..errors import NmtError

    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus > found:
        raise NmtError(
            f"--gpus {gpus}: this machine has {found} CUDA device(s); "
            + ("use --gpus " + str(found) if found else "train on the CPU with --nproc N or no option")
        )
