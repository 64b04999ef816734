"""``nmt config RECIPE``: print the fully resolved recipe (after inheritance and --set)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from ..config import dump_recipe, field_help
from .common import RecipeArg, SetOption, console, recipe_from_cli


def run(
    recipe: Path = RecipeArg,
    overrides: list[str] = SetOption,
    explain: bool = typer.Option(False, "--explain", help="List every key with its default and meaning."),
) -> None:
    """Print the fully resolved recipe as YAML."""
    resolved = recipe_from_cli(recipe, overrides)
    if explain:
        table = Table("key", "default", "meaning", title="recipe keys")
        for key, default, text in field_help():
            table.add_row(key, default, text)
        console.print(table)
        return
    typer.echo(dump_recipe(resolved), nl=False)
