"""``nmt prepare RECIPE``: clean, learn the vocabulary, encode, bucket."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import typer
from rich.table import Table

from ..data.prepare import prepare
from .common import RecipeArg, SetOption, console, recipe_from_cli, styled


def run(
    recipe: Path = RecipeArg,
    overrides: list[str] = SetOption,
    force: bool = typer.Option(False, "--force", help="Redo every step, even those up to date."),
    encoding_errors: Literal["strict", "replace"] = typer.Option(
        None, "--encoding-errors", help="On invalid UTF-8: strict (stop) or replace (go on).", show_default=False
    ),
    download: bool = typer.Option(False, "--download", help="First fetch the corpora the recipe names (nmt download)."),
) -> None:
    """Clean the corpora, learn a SentencePiece vocabulary, encode every split to binary arrays."""
    if encoding_errors:
        overrides = [*overrides, f"data.encoding_errors={encoding_errors}"]
    resolved = recipe_from_cli(recipe, overrides)
    if download:
        from ..data.download import download_all

        download_all(resolved, log=lambda msg: console.print(msg))
    meta = prepare(resolved, force=force, log=lambda msg: console.print(msg))
    _print_summary(meta, resolved.data_dir)
    if resolved.multilingual:
        _print_directions(meta, resolved.data.temperature)


def _print_directions(meta: dict[str, Any], temperature: float) -> None:
    """A multilingual dataset: each direction's training pairs and its share of an epoch (temperature sampling)."""
    from ..data.mixing import temperature_shares

    sizes = {pair: meta["splits"][f"train.{pair}"]["sentences"] for pair in meta["pairs"]}
    shares = temperature_shares(sizes, temperature, sum(sizes.values()))
    table = Table("direction", "training pairs", f"pairs per epoch (T={temperature:g})", title="directions")
    for pair, size in sizes.items():
        table.add_row(pair, f"{size:,}", f"{shares[pair]:,}")
    console.print(table)


def _print_summary(meta: dict[str, Any], out: Path) -> None:
    splits = Table("split", "read", "kept", "dropped", "src tokens", "tgt tokens", title="corpus")
    for name, info in meta["splits"].items():
        dropped = ", ".join(f"{n:,} {why}" for why, n in info["dropped"].items()) or "-"
        splits.add_row(
            name, f"{info['read']:,}", f"{info['kept']:,}", dropped, f"{info['src_tokens']:,}", f"{info['tgt_tokens']:,}"
        )
    buckets = Table("lengths", "pairs", "share", title="training length buckets (subword tokens + EOS)")
    total = sum(row[2] for row in meta["buckets"]["table"]) or 1
    for low, high, count in meta["buckets"]["table"]:
        span = f"{low}" if low == high else f"{low}-{high}"
        buckets.add_row(span, f"{count:,}", f"{100 * count / total:.1f}%")
    console.print(splits)
    console.print(buckets)
    vocab = meta["vocab"]
    console.print(
        f"vocabulary: {vocab['type']} {vocab['src_size']:,}"
        + ("" if vocab["joint"] else f" / {vocab['tgt_size']:,}")
        + (" joint" if vocab["joint"] else " per side")
        + "; dataset written to ",
        styled((str(out), "bold")),
        sep="",
    )
