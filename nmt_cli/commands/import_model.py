"""``nmt import hf FOLDER -o RUN``: a model trained elsewhere as an nmt model folder (issue 43)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import NmtError
from .common import console

HELP = "Bring a model trained by another toolkit into an nmt model folder."


def hf(
    source: Path = typer.Argument(..., help="A local MarianMT folder (OPUS-MT's HuggingFace layout)."),
    output: Path = typer.Option(..., "--output", "-o", help="The model folder to write (its model.pt)."),
    src_lang: str = typer.Option(
        None, "--src-lang", help="Source language [default: tokenizer_config.json's].", show_default=False
    ),
    tgt_lang: str = typer.Option(
        None, "--tgt-lang", help="Target language [default: tokenizer_config.json's].", show_default=False
    ),
) -> None:
    """Import a HuggingFace MarianMT model (OPUS-MT): translate, score, serve, export or fine-tune it as any nmt model."""
    from ..convert.marian import import_marian

    if not source.is_dir():
        raise NmtError(f"{source}: not a folder; give a local MarianMT folder (config.json, vocab.json, *.spm, weights)")
    if (output / "model.pt").exists():
        raise NmtError(f"{output}/model.pt exists; import into another folder")
    written = import_marian(source, output, src_lang, tgt_lang)
    console.print(
        f"imported {source} into {written}; translate with: nmt translate -m {written} < input.txt",
        markup=False,
        soft_wrap=True,
    )
