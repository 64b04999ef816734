"""``nmt quickstart``: the whole job on the bundled sample corpus, with a summary a person can judge."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import typer
from rich.table import Table

from ..utils.allocator import bound_kernel_caches
from ..utils.run_folder import RunFolder
from .common import SetOption, command_line, console, styled, translate_hint


def run(
    pair: Literal["en-de", "en-fr", "en-de,en-fr"] = typer.Option(
        "en-de", "--pair", help="en-de, en-fr, or en-de,en-fr: one model of both (bundled software messages)."
    ),
    minutes: float = typer.Option(10.0, "--minutes", min=0.1, max=10_080, help="Training time budget on this machine."),
    workdir: Path = typer.Option(Path("nmt-quickstart"), "--dir", help="Where data, model and outputs go."),
    overrides: list[str] = SetOption,
) -> None:
    """Prepare, train, average, translate and score on a bundled real corpus (CPU, offline)."""
    bound_kernel_caches()  # a laptop's run: memory before the last percent of speed (utils/allocator.py)
    from ..pipeline import quickstart_recipe, run_quickstart

    recipe = quickstart_recipe(pair, workdir, minutes, overrides)
    plan = f": {pair}, about {minutes:g} minutes of training; working in {workdir}/"
    console.print(styled(("nmt quickstart", "bold"), plan))
    if not recipe.data.align:
        console.print(
            "note: without guided alignment (pip install 'nmt-cli[align]' adds it): documents' tags follow raw attention",
            soft_wrap=True,
        )
    result = run_quickstart(recipe, log=lambda msg: console.print(msg, soft_wrap=True))
    _summary(result, pair)


def _summary(result, pair: str) -> None:
    for test in result.tests:
        scores = Table("metric", "model", "copy-the-source baseline", title=f"held-out test set ({test.direction})")
        for ours, base in zip(test.scores, test.baseline):
            scores.add_row(ours.name, f"{ours.score:.1f}", f"{base.score:.1f}")
        console.print(scores)
    console.print(styled((result.scores[0].signature, "dim")), soft_wrap=True)
    examples = Table("source", "reference", "nmt output", title="examples", show_lines=True)
    for test in result.tests:
        for row in test.examples[: 5 // len(result.tests) + 1]:
            examples.add_row(*row)
    console.print(examples)
    r = result.recipe
    recipe_file = RunFolder(r.run_dir).recipe_file
    timing = ", ".join(f"{k} {v / 60:.1f} min" for k, v in result.seconds.items())
    # Plain lines, not a panel: a panel would cut long paths, and these are meant to be copied.
    console.print(styled("\n", ("model folder:", "bold"), f" {result.run_dir}   ({timing})"), soft_wrap=True)
    sources, targets = zip(*r.directions)
    try_it = translate_hint(result.run_dir, list(sources), list(targets))
    console.print(styled(("try it:", "bold"), f" {try_it}"), soft_wrap=True)
    console.print(styled(("each step by hand:", "bold")))
    to = ["--to", r.directions[0][1]] if r.multilingual else []
    for command in (
        command_line("nmt", "prepare", recipe_file),
        command_line("nmt", "train", recipe_file),
        command_line("nmt", "average", result.run_dir, "--last", 5, "-o", result.run_dir / "model.pt"),
        command_line("nmt", "translate", "-m", result.run_dir, *to, "-i", result.test_source, "-o", result.hypotheses),
        command_line("nmt", "score", result.hypotheses, result.test_reference, "--metrics", "bleu,chrf"),
    ):
        console.print(f"  {command}", soft_wrap=True)
