"""``nmt import hf|fairseq``: a model trained elsewhere as an nmt model folder."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import NmtError
from .common import console, model_hint

HELP = "Bring a model trained by another toolkit into an nmt model folder."


def hf(
    source: str = typer.Argument(
        ..., help="A local MarianMT folder (OPUS-MT's HuggingFace layout), or a hub name such as Helsinki-NLP/opus-mt-en-de."
    ),
    output: Path = typer.Option(..., "--output", "-o", help="The model folder to write (its model.pt)."),
    src_lang: str = typer.Option(
        None, "--src-lang", help="Source language [default: tokenizer_config.json's].", show_default=False
    ),
    tgt_lang: str = typer.Option(
        None, "--tgt-lang", help="Target language [default: tokenizer_config.json's].", show_default=False
    ),
    revision: str = typer.Option(
        None, "--revision", help="With a hub name: a branch, tag or commit [default: main].", show_default=False
    ),
) -> None:
    """Import a HuggingFace MarianMT model (OPUS-MT): translate, score, serve, export or fine-tune it as any nmt model.

    A hub name is fetched with huggingface_hub (pip install 'nmt-cli[hub]') into its cache; nothing else is downloaded."""
    from ..convert.hub import fetch_marian, looks_like_hub_name
    from ..convert.marian import import_marian

    _refuse_existing(output)
    if looks_like_hub_name(source):
        console.print(f"fetching {source} from the HuggingFace hub", soft_wrap=True)
        folder = fetch_marian(source, revision)
    else:
        folder = Path(source)
        if not folder.is_dir():
            raise NmtError(
                f"{source}: not a folder; give a local MarianMT folder (config.json, vocab.json, *.spm, weights) "
                "or a hub name such as Helsinki-NLP/opus-mt-en-de"
            )
    origin = source if folder != Path(source) else None
    _done(source, import_marian(folder, output, src_lang, tgt_lang, origin))


def fairseq(
    checkpoint: Path = typer.Argument(..., help="A fairseq transformer checkpoint (checkpoint_best.pt ...)."),
    output: Path = typer.Option(..., "--output", "-o", help="The model folder to write (its model.pt)."),
    spm: Path = typer.Option(..., "--spm", help="The SentencePiece model the data was encoded with (both sides)."),
    spm_tgt: Path = typer.Option(
        None, "--spm-tgt", help="The target side's SentencePiece model, where it differs.", show_default=False
    ),
    dict_src: Path = typer.Option(
        None, "--dict-src", help="dict.SRC.txt [default: the checkpoint's data-bin's].", show_default=False
    ),
    dict_tgt: Path = typer.Option(
        None, "--dict-tgt", help="dict.TGT.txt [default: the checkpoint's data-bin's].", show_default=False
    ),
    src_lang: str = typer.Option(
        None, "--src-lang", help="Source language [default: the checkpoint's].", show_default=False
    ),
    tgt_lang: str = typer.Option(
        None, "--tgt-lang", help="Target language [default: the checkpoint's].", show_default=False
    ),
) -> None:
    """Import a fairseq transformer trained on SentencePiece pieces: translate, score, serve, export or fine-tune it."""
    from ..convert.fairseq import import_fairseq

    _refuse_existing(output)
    written = import_fairseq(checkpoint, output, (dict_src, dict_tgt), (spm, spm_tgt), (src_lang, tgt_lang))
    _done(checkpoint, written)


def _refuse_existing(output: Path) -> None:
    if (output / "model.pt").exists():
        raise NmtError(f"{output}/model.pt exists; import into another folder")


def _done(source: Path | str, written: Path) -> None:
    from ..decode.loading import load_model

    hint = model_hint(load_model(written), written)
    console.print(f"imported {source} into {written}; try it: {hint}", soft_wrap=True)
