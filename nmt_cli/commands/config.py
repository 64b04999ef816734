"""``nmt config RECIPE``: print the fully resolved recipe (after inheritance and --set)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from ..config import dump_recipe, field_help
from .common import RecipeArg, SetOption, recipe_from_cli


def run(
    recipe: Path = RecipeArg,
    overrides: list[str] = SetOption,
    explain: bool = typer.Option(False, "--explain", help="List every key with its default and meaning."),
) -> None:
    """Print the fully resolved recipe as YAML."""
    resolved = recipe_from_cli(recipe, overrides)
    if explain:
        _explain()
        return
    typer.echo(dump_recipe(resolved), nl=False)


def _explain() -> None:
    """Every key with its default and meaning, on standard output: a table on a terminal, one tab-separated line a
    key through a pipe (``nmt config R --explain | grep max_len``), every hint's extra as written."""
    out = Console(highlight=False, markup=False, emoji=False)
    if not out.is_terminal:
        for row in field_help():
            typer.echo("\t".join(row))
        return
    table = Table("key", "default", "meaning", title="recipe keys")
    for key, default, text in field_help():
        table.add_row(key, default, text)
    out.print(table)
