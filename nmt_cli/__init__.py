"""nmt: the Transformer of "Attention Is All You Need", end to end, from the command line.

The Python API (README, "Python API") is each command's plain function, importable from here::

    from nmt_cli import load_recipe, prepare, load_model, Translator, forced_scores

Training and scoring are ``nmt_cli.train.loop.train`` and ``nmt_cli.score.metrics.score``: their
short names belong to the subpackages ``nmt_cli.train`` and ``nmt_cli.score``.

Names are resolved on first use (PEP 562), so ``import nmt_cli`` (and ``nmt --help``) stay instant:
torch and the data modules load only when a name that needs them is touched.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .version import __version__

# public name -> module that defines it
_API = {
    "load_recipe": "config",
    "NmtError": "errors",
    "prepare": "data.prepare",
    "average_checkpoints": "train.checkpoint",
    "load_model": "decode.loading",
    "load_ensemble": "decode.loading",
    "Translator": "decode.translator",
    "Translation": "decode.translation",
    "Engine": "decode.translation",
    "forced_scores": "decode.forced",
    "read_glossary": "terms.glossary",
    "read_keep_terms": "terms.glossary",
    "Glossary": "terms.glossary",
    "translate_file": "formats",
    "run_quickstart": "pipeline",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'nmt_cli' has no attribute '{name}'")
    value = getattr(import_module(f".{_API[name]}", __name__), name)
    globals()[name] = value  # once resolved, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
