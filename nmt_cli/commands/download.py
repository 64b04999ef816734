"""``nmt download RECIPE``: fetch, verify and unpack the corpora the recipe names."""

from __future__ import annotations

from pathlib import Path

import typer

from .common import RecipeArg, SetOption, command_line, console, overrides_args, recipe_from_cli


def run(
    recipe: Path = RecipeArg,
    overrides: list[str] = SetOption,
    cache: Path = typer.Option(
        None, "--cache-dir", help="Where archives are kept (default: $NMT_CACHE or ~/.cache/nmt).", show_default=False
    ),
) -> None:
    """Download the recipe's corpora (resuming partial files, checking SHA-256) into data.root."""
    from ..data.download import download_all

    resolved = recipe_from_cli(recipe, overrides)
    written = download_all(resolved, log=lambda msg: console.print(msg), cache=cache / "downloads" if cache else None)
    next_step = command_line("nmt", "prepare", recipe, *overrides_args(overrides))
    console.print(f"{len(written)} file(s) ready in {resolved.data.root}; next: {next_step}", soft_wrap=True)
