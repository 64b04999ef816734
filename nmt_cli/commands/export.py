"""``nmt export MODEL OUT --for ctranslate2``: a CTranslate2 model folder from our weights."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import typer

from ..errors import NmtError
from .common import console, deprecated, model_hint

Targets = Literal["ctranslate2", "hf"]
# CTranslate2's weight types (the quantization names its converters take)
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")


def run(
    model: Path = typer.Argument(..., help="Model folder or checkpoint file."),
    output: Path = typer.Argument(..., help="Folder to create."),
    target: Targets = typer.Option(
        "ctranslate2", "--for", help="The toolkit: ctranslate2, or hf (a MarianMT folder transformers loads)."
    ),
    target_old: Targets = typer.Option(None, "--format", hidden=True),  # --format is an output's shape elsewhere
    quantization: str = typer.Option(
        None,
        "--quantization",
        metavar="TYPE",
        help=f"CTranslate2 weight type: {', '.join(QUANTIZATIONS)} (int8: the fast one on a CPU).",
        show_default=False,
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

    loaded = load_model(model)
    written = export(loaded, output, quantization, force)
    console.print(
        f"CTranslate2 model written to {written}; try it: {model_hint(loaded, written, '--engine', 'ctranslate2')}",
        soft_wrap=True,
    )
