"""Options and output helpers shared by the command modules."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, Literal

import typer
from rich.console import Console
from rich.text import Text

from ..config import DecodeConfig, Recipe, load_recipe, option_help, override_section
from ..errors import NmtError

# Everything is printed as written (file names, terms and hints like "pip install 'nmt-cli[serve]'" would be
# read as Rich style tags, ":100:" as an emoji); styles are given as Text parts (see `styled`).
console = Console(stderr=True, highlight=False, emoji=False)


def styled(*parts: str | tuple[str, str]) -> Text:
    """A line of plain strings and (text, style) pairs, with no markup read from any of them."""
    return Text.assemble(*parts)


RecipeArg = typer.Argument(..., help="Recipe YAML file.", show_default=False)
SetOption = typer.Option(
    [], "--set", "-s", metavar="KEY=VALUE", help="Override a recipe value, e.g. --set model.layers=3 (repeatable)."
)


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
WEIGHT_DTYPES = {None: "float32", "fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def weights_dtype(name: str | None) -> Any:
    """The ``torch.dtype`` that ``--dtype NAME`` names (None: fp32)."""
    import torch

    if name not in WEIGHT_DTYPES:
        raise NmtError(f"--dtype: '{name}' is not fp32, bf16 or fp16")
    return getattr(torch, WEIGHT_DTYPES[name])
