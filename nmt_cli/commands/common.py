"""Options and output helpers shared by the command modules."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from ..config import Recipe, load_recipe

console = Console(stderr=True, highlight=False)

RecipeArg = typer.Argument(..., help="Recipe YAML file.", show_default=False)
SetOption = typer.Option(
    [], "--set", "-s", metavar="KEY=VALUE", help="Override a recipe value, e.g. --set model.layers=3 (repeatable)."
)


def recipe_from_cli(path: Path, overrides: list[str]) -> Recipe:
    """Load the recipe named on the command line with its ``--set`` overrides."""
    return load_recipe(path, overrides)
