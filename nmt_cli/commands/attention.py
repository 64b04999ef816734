"""``nmt attention -m MODEL "sentence" -o att.png``: what every head attends to, for one translation."""

from __future__ import annotations

from pathlib import Path

import typer

from ..config import DecodeConfig
from ..errors import NmtError
from ..utils.allocator import bound_kernel_caches
from .common import console, decode_option, with_decoding


def run(
    sentence: str = typer.Argument(..., help="The source sentence to translate and show."),
    model: Path = typer.Option(..., "--model", "-m", help="Model folder (its model.pt) or any checkpoint file."),
    output: Path = typer.Option(..., "--output", "-o", help="The PNG file to write."),
    beam: int = decode_option("beam", "--beam", "-b"),
) -> None:
    """Draw encoder, decoder and cross-attention heatmaps per layer and head (needs matplotlib)."""
    bound_kernel_caches()  # decoding's batches come in every shape (utils/allocator.py)
    from ..attention_figure import draw_attention
    from ..data.batches import pad_rows
    from ..data.vocab import EOS_ID
    from ..decode.attention_maps import attention_maps
    from ..decode.loading import load_model
    from ..decode.search import search

    with_decoding(DecodeConfig(), {"beam": beam})  # a bad --beam fails now, as decode.beam would
    if output.suffix.lower() != ".png" or output.is_dir():
        raise NmtError(f"{output}: nmt attention writes a PNG file; name a .png file (not a folder)")
    loaded = load_model(model)
    source = loaded.src_vocab.encode(sentence.strip(), out_type=int)[: loaded.recipe.model.max_positions - 1]
    if not source:
        raise NmtError("the sentence is empty; give the text to translate")
    config = with_decoding(loaded.recipe.decode, {"beam": beam})
    hypothesis = search(loaded.model, pad_rows([source + [EOS_ID]]), config, rules=loaded.rules())[0][0]
    maps = attention_maps(loaded.model, source, hypothesis.tokens)
    draw_attention(
        maps,
        [loaded.src_vocab.IdToPiece(t) for t in source],
        [loaded.tgt_vocab.IdToPiece(t) for t in hypothesis.tokens],
        output,
    )
    console.print(
        f"{loaded.tgt_vocab.decode(hypothesis.tokens)}\nattention of {len(maps.encoder)}+{len(maps.decoder)} "
        f"layers written to {output}",
    )
