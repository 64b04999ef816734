"""nmt: the Transformer of "Attention Is All You Need", end to end, from the command line.

The public Python API mirrors the commands: ``prepare``, ``train``, ``translate_lines``,
``score`` and ``average_checkpoints``. Heavy modules are imported on first use so that
``import nmt_cli`` (and ``nmt --help``) stay instant.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "load_recipe", "NmtError"]

from .config import load_recipe  # noqa: E402
from .errors import NmtError  # noqa: E402
