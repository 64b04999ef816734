"""Language names and language identification, one for the command line (``nmt translate --from auto``) and
the server (LibreTranslate's ``/languages``, ``/detect``, ``"source": "auto"``).

Names come from pycountry (ISO 639); identification from py3langid, a maintained fork of langid.py
whose model (97 languages, 4.6 MB, numpy only) ships inside the package, so nothing is downloaded and
a text costs about a millisecond. py3langid is the ``langid`` extra (in ``serve`` too), pycountry the ``serve``
extra. The server restricts detection to the languages its models read and write, as LibreTranslate restricts it to
the languages it has; which language a text is then read as (:func:`read_as`) is decided alike everywhere.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

# The identifier's confidence (0-100) above which its first answer stands even where no model reads that language
# (the text is then refused or passed through); below it, the likeliest language a model reads is taken (a lone
# word, "Hi", is no evidence of anything)
SURE = 90.0


def language_name(code: str) -> str:
    """The English name of an ISO 639 code ("de" -> "German", "pt_BR" -> "Portuguese (BR)"); the code
    itself when it is not one."""
    try:
        import pycountry
    except ImportError:
        return code
    base, *region = re.split(r"[-_]", code, maxsplit=1)
    field = {2: "alpha_2", 3: "alpha_3"}.get(len(base))
    found = pycountry.languages.get(**{field: base.lower()}) if field else None
    if found is None:
        return code
    return f"{found.name} ({region[0]})" if region else str(found.name)


class LanguageDetector:
    """Which of ``candidates`` (None: every language the identifier knows) a text is written in, with
    LibreTranslate's confidence (0-100)."""

    def __init__(self, candidates: list[str] | None) -> None:
        self.candidates = sorted(set(candidates)) if candidates is not None else None
        self._identifier: Any = None
        self._lock = threading.Lock()
        self.unavailable: str | None = None
        self.known: list[str] = []  # the candidates the identifier knows
        try:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier
        except ImportError:
            self.unavailable = "language detection needs py3langid: pip install 'nmt-cli[langid]'"
            return
        identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        if self.candidates is None:
            self.candidates = self.known = sorted(identifier.labels)
            self._identifier = identifier
            return
        known = [code for code in self.candidates if code in identifier.labels]
        if len(known) >= 2:
            identifier.set_languages(known)
            self._identifier = identifier
        self.known = known

    def detect(self, text: str) -> list[tuple[str, float]]:
        """(language, confidence 0-100) pairs, most likely first. With one candidate it is the answer;
        with none the identifier knows, there is nothing to rank."""
        if self.unavailable:
            raise RuntimeError(self.unavailable)
        if self._identifier is None:
            assert self.candidates is not None  # all the identifier's languages: it is there
            only = self.known or self.candidates
            return [(only[0], 100.0 if len(self.candidates) == 1 else 0.0)] if only else []
        with self._lock:  # the identifier keeps no state per call, but its numpy buffers are shared
            ranked = self._identifier.rank(text)
        return [(code, round(100.0 * float(p), 2)) for code, p in ranked]


@dataclass(frozen=True)
class Reading:
    """What a text was identified as, and which language it is read (translated) from."""

    identified: str  # the language ranked first
    sure: float  # its confidence, 0-100
    source: str | None  # the language a model reads it as; None: it is surely in one no model reads
    confidence: float  # the identifier's confidence in ``source``


def read_as(ranked: list[tuple[str, float]], readers: list[str]) -> Reading | None:
    """The language a text ranked ``ranked`` (best first) is translated from, among ``readers``, the languages a
    model reads: the first, where a model reads it or the identifier is unsure of it (less than ``SURE``), else none
    (a runner-up at 0.15% is no answer: English text was translated "from French"). None: nothing was ranked."""
    if not ranked:
        return None
    language, confidence = ranked[0]
    if language not in readers and confidence >= SURE:
        return Reading(language, confidence, None, 0.0)
    found = next((pair for pair in ranked if pair[0] in readers), None)
    return Reading(language, confidence, found[0] if found else None, found[1] if found else 0.0)


class LineIdentifier:
    """Which language each line is translated from into ``target`` (``nmt translate --from auto``), in two steps:
    a line the identifier, over every language it knows, is sure (``SURE``) is in none of ``readers`` and not in
    ``target`` is in another language; any other line is in whichever of ``readers`` and ``target`` it ranks first
    among those alone. Deciding among the few languages in play is what keeps short lines right (chosen on Multi30k
    validation: docs/benchmarks.md)."""

    def __init__(self, readers: list[str], target: str) -> None:
        self.readers, self.target = readers, target
        self.anywhere = LanguageDetector(None)
        self.among = LanguageDetector([*readers, target])
        self.unavailable = self.anywhere.unavailable

    def identify(self, line: str) -> str:
        """The line's language: one of ``readers``, ``target``, or another the identifier is sure of."""
        ranked = self.anywhere.detect(line)
        if ranked and ranked[0][0] not in (*self.readers, self.target) and ranked[0][1] >= SURE:
            return ranked[0][0]
        among = self.among.detect(line)
        return among[0][0] if among else self.readers[0]
