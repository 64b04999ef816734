"""``nmt distill RECIPE``: train the recipe's model (a student) on what a teacher translates (nmt_cli/distill/)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from ..errors import NmtError
from .common import RecipeArg, SetOption, ThreadsOption, console, device_option, recipe_from_cli, translate_hint


def run(
    recipe: Path = RecipeArg,
    overrides: list[str] = SetOption,
    teacher: list[str] = typer.Option(
        [],
        "--teacher",
        metavar="MODEL",
        help="The teacher model (repeat for an ensemble), in place of the recipe's teacher.",
        show_default=False,
    ),
    endpoint: str = typer.Option(
        None,
        "--endpoint",
        metavar="URL",
        help="A LibreTranslate-compatible server as the teacher (http://host:port), in place of the recipe's.",
        show_default=False,
    ),
    restart: bool = typer.Option(False, "--restart", help="Ask the teacher again from the first line."),
    report: bool = typer.Option(True, "--report/--no-report", help="Measure teacher and student at the end."),
    device: str = device_option("cpu"),
    threads: int = ThreadsOption,
) -> None:
    """Distil a teacher into the recipe's model: translate the training sources with the teacher, keep what it got
    right, prepare and train the student on that, then compare the two (a killed run goes on where it stopped)."""
    import torch

    from ..distill.pipeline import distill
    from ..distill.report import report as measure
    from ..distill.report import table
    from ..distill.teachers import teacher_of
    from ..utils.cpu import check_parallelism
    from .lines_io import with_progress

    check_parallelism(threads, "--threads")
    torch.set_num_threads(threads or os.cpu_count() or 1)
    if teacher and endpoint:
        raise NmtError("--teacher and --endpoint are two teachers; give one")
    # either option names the teacher, in place of whichever the recipe names
    given = [f"distill.teacher=[{', '.join(teacher)}]", "distill.endpoint="] if teacher else []
    given += ["distill.endpoint=" + endpoint, "distill.teacher=[]"] if endpoint else []
    resolved = recipe_from_cli(recipe, [*overrides, *given])
    chosen = teacher_of(resolved, device)
    done = distill(
        resolved,
        log=lambda message: console.print(message),
        progress=lambda items, done, total: with_progress(items, True, done, total, "teacher"),
        restart=restart,
        device=device,
        teacher=chosen,
    )
    if report:
        console.print("measuring the teacher and the student on the test sets ...")
        for line in table(measure(done.student, chosen, done.folder, done.seconds)):
            console.print(line)
        console.print(f"report written to {done.folder / 'report.json'}")
    src, tgt = done.student.data.src_lang, done.student.data.tgt_lang
    console.print(f"student: {done.student.run_dir}; try it: {translate_hint(done.student.run_dir, [src], [tgt])}")
