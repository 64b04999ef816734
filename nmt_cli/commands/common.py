"""Options and output helpers shared by the command modules."""

from __future__ import annotations

import shlex
import typing
from pathlib import Path
from typing import Any, Literal

import typer
from rich.console import Console
from rich.text import Text

from ..config import DecodeConfig, Recipe, load_recipe, option_help, override_section
from ..errors import NmtError

# Everything is printed as written (file names, terms and hints like "pip install 'nmt-cli[serve]'" would be
# read as Rich style tags, ":100:" as an emoji) and never wrapped (a hint is copied whole); styles are given as Text
# parts (see `styled`).
console = Console(stderr=True, soft_wrap=True, highlight=False, markup=False, emoji=False)


def styled(*parts: str | tuple[str, str]) -> Text:
    """A line of plain strings and (text, style) pairs, with no markup read from any of them."""
    return Text.assemble(*parts)


RecipeArg = typer.Argument(..., help="Recipe YAML file.", show_default=False)
SetOption = typer.Option(
    [], "--set", "-s", metavar="KEY=VALUE", help="Override a recipe value, e.g. --set model.layers=3 (repeatable)."
)


# A line to try a model on, in its source language (English for any other: a hint must run as printed).
_SAMPLE = {"en": "Cannot open file.", "de": "Die Datei kann nicht geöffnet werden.", "fr": "Impossible d'ouvrir le fichier."}


def count(n: int, noun: str, plural: str = "") -> str:
    """``n`` and its noun, singular for one: "1 line", "2 lines", "1,024 entries"."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def command_line(*argv: object) -> str:
    """A command as a shell reads it back: every argument quoted where it needs it (paths with spaces, ``[...]``)."""
    return shlex.join(str(arg) for arg in argv)


def overrides_args(overrides: list[str]) -> list[str]:
    """``--set`` overrides as the command line that gave them (for a next step that reads the same recipe)."""
    return [part for item in overrides for part in ("--set", item)]


def translate_hint(model: object, sources: list[str], targets: list[str], *options: str) -> str:
    """A translate command a user can paste and run: a sample line in the model's (first) source language piped
    into ``nmt translate -m MODEL``, with ``--to`` where the model writes several languages and ``--from`` where it
    reads several (translation refuses a multilingual model without them)."""
    sources, targets = list(dict.fromkeys(sources)), list(dict.fromkeys(targets))
    source = sources[0] if sources else "en"
    argv: list[object] = ["nmt", "translate", "-m", model, *options]
    if len(targets) > 1:
        argv += ["--to", next((t for t in targets if t != source), targets[0])]
    if len(sources) > 1:
        argv += ["--from", source]
    sample = _SAMPLE.get(source.split("_")[0].split("-")[0].lower(), _SAMPLE["en"])
    return f"echo {shlex.quote(sample)} | {command_line(*argv)}"


def model_hint(loaded: Any, model: object, *options: str) -> str:
    """:func:`translate_hint` for a loaded model: its languages from its recipe's directions, or, for a model of
    one source language (an imported OPUS-MT model with target tags), from its tags."""
    from ..decode.targets import targets_of

    data = loaded.recipe.data
    if data.pairs:
        sources, targets = (list(side) for side in zip(*loaded.recipe.directions))
        return translate_hint(model, sources, targets, *options)
    return translate_hint(model, [data.src_lang], targets_of(loaded.src_vocab, data.tgt_lang), *options)


def deprecated(old: str, new: str) -> None:
    """One line on stderr for an old spelling that still works (scripts written for it keep running)."""
    console.print(f"note: {old} is deprecated; use {new} (the old spelling will go in a later release)", soft_wrap=True)


def recipe_from_cli(path: Path, overrides: list[str]) -> Recipe:
    """Load the recipe named on the command line with its ``--set`` overrides."""
    return load_recipe(path, overrides)


def decode_option(name: str, *flags: str) -> Any:
    """A command-line option that overrides the model's ``decode.NAME``: its help, choices and default
    come from the recipe's declaration, and its value is checked as a recipe value (see :func:`with_decoding`)."""
    return typer.Option(None, *flags, help=option_help(DecodeConfig, name), show_default=False, metavar=_choices(name))


def _choices(name: str) -> str | None:
    """``[a|b]`` for a recipe key with fixed choices (shown as Click shows its own), else Click's own name."""
    hint = typing.get_type_hints(DecodeConfig)[name]
    return "[" + "|".join(typing.get_args(hint)) + "]" if typing.get_origin(hint) is Literal else None


def with_decoding(config: DecodeConfig, values: dict[str, Any]) -> DecodeConfig:
    """``config`` with the command line's decoding options (None: keep the recipe's), each checked with the
    recipe's own rules: a bad ``--beam 0`` fails as ``--set decode.beam=0`` does, naming the flag."""
    flags = {name: "--" + name.replace("_", "-") for name in values}
    return override_section(config, values, flags)


# Where and how wide a command computes, declared once for every command that takes them.
ThreadsOption = typer.Option(0, "--threads", min=0, max=4096, help="CPU threads (0: all cores).")


def device_option(default: str = "auto", when: str = "") -> Any:
    """``--device``: cpu, cuda, cuda:N (or auto: a GPU where there is one); ``when`` says when it applies."""
    choices = "cpu, cuda, cuda:N or auto." if default == "auto" else "cpu, cuda or cuda:N."
    return typer.Option(default, "--device", help=f"{when}{choices}")


def language_option(flag: str, help: str) -> Any:
    """``--to`` or ``--from``: a language code (ISO 639-1 or 639-3) naming a direction of a multilingual model."""
    return typer.Option(None, flag, metavar="LANG", help=help, show_default=False)


def resolve_device(name: str, local_rank: int | None = None) -> Any:
    """The ``--device`` to run on (a ``torch.device``); under torchrun, ``auto`` and ``cuda`` take the GPU of the
    local rank."""
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and local_rank is not None:
        name = f"cuda:{local_rank % max(torch.cuda.device_count(), 1)}"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise NmtError(f"--device {name}: CUDA is not available on this machine; use --device cpu")
    try:
        return torch.device(name)
    except RuntimeError:
        raise NmtError(f"--device: '{name}' is not a device; use cpu, cuda, cuda:N or auto") from None


# --dtype: the torch dtype of the weights and the arithmetic (int8 is CTranslate2's alone)
# int8: the weights stay in fp32 and the linear layers compute in int8 (decode/loading.py, on the CPU)
WEIGHT_DTYPES = {None: "float32", "fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "float32"}


def weights_dtype(name: str | None) -> Any:
    """The ``torch.dtype`` that ``--dtype NAME`` names (None: fp32)."""
    import torch

    if name not in WEIGHT_DTYPES:
        raise NmtError(f"--dtype: '{name}' is not fp32, bf16, fp16 or int8")
    return getattr(torch, WEIGHT_DTYPES[name])
