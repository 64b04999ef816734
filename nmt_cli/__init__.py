"""nmt: the Transformer of "Attention Is All You Need", end to end, from the command line.

Each command is a plain function of its module (README, "Python API"): ``config.load_recipe``,
``data.prepare.prepare``, ``train.loop.train``, ``decode.translator.load_model`` and ``Translator``,
``decode.forced.forced_scores``, ``score.metrics.score``, ``train.checkpoint.average_checkpoints``.
Heavy modules are imported on first use so that ``import nmt_cli`` (and ``nmt --help``) stay instant.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "load_recipe", "NmtError"]

from .config import load_recipe  # noqa: E402
from .errors import NmtError  # noqa: E402
