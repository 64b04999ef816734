"""``nmt export MODEL OUT --for ctranslate2``: a CTranslate2 model folder from our weights."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import typer

from ..errors import NmtError
from .common import console, deprecated

Targets = Literal["ctranslate2", "hf"]


def run(
    model: Path = typer.Argument(..., help="Model folder or checkpoint file."),
    output: Path = typer.Argument(..., help="Folder to create."),
    target: Targets = typer.Option(
        "ctranslate2", "--for", help="The toolkit: ctranslate2, or hf (a MarianMT folder transformers loads)."
    ),
    target_old: Targets = typer.Option(None, "--format", hidden=True),  # --format is an output's shape elsewhere
    quantization: str = typer.Option(
        None, "--quantization", help="CTranslate2 weight type, e.g. int8, float16.", show_default=False
    ),
    force: bool = typer.Option(False, "--force", help="With --for ctranslate2 only: replace an existing output folder."),
) -> None:
    """Export a trained model for another inference engine (CTranslate2: fast CPU int8/fp32 decoding; hf: MarianMT)."""
    if target_old is not None:
        deprecated("nmt export --format", "--for")
        target = target_old
    from ..decode.loading import load_model

    if target == "hf":
        if quantization or force:
            raise NmtError("--quantization and --force apply to --for ctranslate2; drop them for hf")
        from ..convert.marian import export_marian

        folder = export_marian(load_model(model), output)
        console.print(
            f"MarianMT folder written to {folder}; load it with transformers' MarianMTModel.from_pretrained",
            soft_wrap=True,
        )
        return
    from ..convert.ctranslate2 import export

    written = export(load_model(model), output, quantization, force)
    console.print(
        f"CTranslate2 model written to {written}; translate with: "
        f"nmt translate --engine ctranslate2 -m {written} < input.txt",
        soft_wrap=True,
    )
