"""What every translation engine is to its callers: an :class:`Engine` turns lines into, per line, a
``Translation`` per hypothesis of its n-best list, best first, and counts what it did (:class:`TranslationStats`).

Our engine (``decode/translator.py``, ``Translator``) and CTranslate2's (``export/ctranslate2.py``,
``CTranslate2Translator``) are both Engines, each with every choice (model, device, precision, decoding
settings) fixed when it is made; ``nmt translate`` picks one and reads lines through it.

``Translation`` is a named tuple, so that ``hyps[0][0]`` (the text of the best) reads as it always did; new code
reads the names.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from ..config import DecodeConfig
    from .assess import Assessment


class Translation(NamedTuple):
    """One hypothesis: its text, its score (the search's: summed log-probability over the length penalty), and
    where asked for, its Pharaoh word alignment (``alignments=True``) and its assessment (``assess=True``)."""

    text: str
    score: float
    alignment: str | None = None
    assessment: Assessment | None = None


EMPTY = Translation("", 0.0)  # an empty input line translates to an empty line


@dataclass
class TranslationStats:
    """Counts the caller reports when translation ends."""

    sentences: int = 0
    empty: int = 0
    truncated: int = 0
    output_tokens: int = 0
    truncated_lines: list[int] = field(default_factory=list)
    control_lines: int = 0  # lines with control characters, each replaced by a space


class Engine(Protocol):
    """Lines in, n-best lists out, in order."""

    config: DecodeConfig  # the decoding settings it runs with
    stats: TranslationStats
    languages: tuple[str, str]  # the model's source and target language ("" when unknown)
    max_positions: int  # the longest sequence the model takes (0: not known)

    def translate(
        self,
        lines: Iterable[str],
        prefixes: Iterable[str] | None = None,
        first_line: int = 0,
        documents: Iterable[str] | None = None,
    ) -> Iterator[list[Translation]]:
        """For every line its n-best list; ``prefixes``, one per line, start the outputs; ``first_line`` is the
        index of the first line in the whole input (a resumed job's or a shard's start); ``documents``, one id
        per line, says which lines a model reading document context reads together."""
        ...
