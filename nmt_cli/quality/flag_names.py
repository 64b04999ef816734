"""The names of the flags ``--confidence`` gives a translation: one list for the code, ``--help`` and the docs."""

from __future__ import annotations

TRUNCATED = "truncated"  # the output stopped at its length limit
REPETITION = "repetition"  # an n-gram looping, or half the 3-grams repeated
UNTRANSLATED = "untranslated"  # most output tokens copied from the source
HALLUCINATION = "hallucination"  # detached from its source (a learnt map, fitted by nmt calibrate)
OMISSION = "omission"  # part of the source left out (a learnt map, fitted by nmt calibrate)

FLAGS = (TRUNCATED, REPETITION, UNTRANSLATED, HALLUCINATION, OMISSION)

# The most a translation that is its source given back may be trusted: a reader must look (a name is copied
# rightly, a message the model could not translate wrongly; below 0.5, --fuzzy-below's default, it is reviewed).
COPY_CEILING = 0.25

__all__ = ["COPY_CEILING", "FLAGS", "HALLUCINATION", "OMISSION", "REPETITION", "TRUNCATED", "UNTRANSLATED"]
