"""What a translator gives back for one line: a ``Translation`` per hypothesis of its n-best list, best first.

A named tuple, so that ``hyps[0][0]`` (the text of the best) reads as it always did; new code reads the names.
Our engine (``decode/translator.py``) and the CTranslate2 engine (``export/ctranslate2.py``) both give these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from .assess import Assessment


class Translation(NamedTuple):
    """One hypothesis: its text, its score (the search's: summed log-probability over the length penalty), and
    where asked for, its Pharaoh word alignment (``alignments=True``) and its assessment (``assess=True``)."""

    text: str
    score: float
    alignment: str | None = None
    assessment: Assessment | None = None


EMPTY = Translation("", 0.0)  # an empty input line translates to an empty line
