"""Language names and language identification for LibreTranslate's API (``/languages``, ``/detect``,
``"source": "auto"``).

Names come from pycountry (ISO 639); identification from py3langid, a maintained fork of langid.py
whose model (97 languages, 4.6 MB, numpy only) ships inside the package, so nothing is downloaded and
a request costs about a millisecond. Both are in the ``serve`` extra. Detection is restricted to the
languages the served models read, as LibreTranslate restricts it to the languages it has.
"""

from __future__ import annotations

import re
import threading
from typing import Any


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
    """Which of ``candidates`` a text is written in, with LibreTranslate's confidence (0-100)."""

    def __init__(self, candidates: list[str]) -> None:
        self.candidates = sorted(set(candidates))
        self._identifier: Any = None
        self._lock = threading.Lock()
        self.unavailable: str | None = None
        self.known: list[str] = []  # the candidates the identifier knows
        try:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier
        except ImportError:
            self.unavailable = "language detection needs py3langid: pip install 'nmt-cli[serve]'"
            return
        identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
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
            only = self.known or self.candidates
            return [(only[0], 100.0 if len(self.candidates) == 1 else 0.0)] if only else []
        with self._lock:  # the identifier keeps no state per call, but its numpy buffers are shared
            ranked = self._identifier.rank(text)
        return [(code, round(100.0 * float(p), 2)) for code, p in ranked]
