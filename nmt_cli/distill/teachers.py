"""The teachers a student learns from: nmt models on this machine (one, or an ensemble), or a LibreTranslate-
compatible server (``nmt serve``, LibreTranslate, a large model behind that API).

Each gives, for the training sources in order, its translation and, where it can, its confidence in [0, 1]
(``decode/assess.py``): the distillation drops what its teacher doubts. A teacher has an identity: what makes its
translations what they are (the models' bytes and the search, or the server's address), so that a resumed
distillation never mixes two teachers' translations.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from ..config import DistillConfig, Recipe
from ..errors import NmtError

Taught = tuple[str, float | None]  # a translation and its confidence (None: the teacher gives none)


class Teacher(Protocol):
    identity: dict[str, Any]
    gives_confidence: bool

    def translate(self, lines: Iterator[str]) -> Iterator[Taught]:
        """Each line's translation, in order, as the lines are read."""
        ...


def teacher_of(recipe: Recipe, device: str = "cpu") -> Teacher:
    """The teacher ``recipe.distill`` names: its models, or its server."""
    d = recipe.distill
    source, target = recipe.data.src_lang, recipe.data.tgt_lang
    if d.endpoint:
        return ServerTeacher(d, source, target)
    if not d.teacher:
        raise NmtError(
            "distill.teacher names no model and distill.endpoint no server: give the teacher (--set "
            "distill.teacher=[runs/big] or distill.endpoint=http://localhost:8080)"
        )
    return ModelTeacher.load(d, source, target, device)


@dataclass
class ModelTeacher:
    """nmt models on this machine (an ensemble where several), translating as ``nmt translate`` does: beam
    ``distill.beam``, protected spans kept, each translation assessed for its confidence."""

    engine: Any
    identity: dict[str, Any]
    files: list[Path]
    gives_confidence: bool = True

    @classmethod
    def load(cls, config: DistillConfig, source: str, target: str, device: str) -> ModelTeacher:
        from ..decode.file_job import file_sha256
        from ..decode.loading import load_ensemble
        from ..decode.protected import ProtectedEngine
        from ..decode.targets import route
        from ..decode.translator import Translator

        paths = [Path(p) for p in config.teacher]
        for path in paths:
            if not path.exists():
                raise NmtError(
                    f"distill.teacher: {path} not found; give a model folder or file that nmt trained or imported"
                )
        loaded = load_ensemble(paths, device)
        try:
            way = route(loaded.recipe.data, loaded.src_vocab, target, str(paths[0]), source)
        except NmtError as err:  # its words name translate's options: say whose direction this is
            raise NmtError(f"distill.teacher: the student translates {source}-{target}, and {err}") from None
        search = replace(loaded.recipe.decode, beam=config.beam, sampling=False)
        translator = Translator(
            loaded,
            search,
            device,
            chunk_lines=config.chunk_lines,
            assess=True,
            source_prefix=way.source_prefix,
            target_tag=way.target_tag,
        )
        files = [p / "model.pt" if p.is_dir() else p for p in paths]
        identity = {"models": [file_sha256(f) for f in files], "beam": config.beam, "direction": [source, target]}
        return cls(ProtectedEngine(translator), identity, files)

    def translate(self, lines: Iterator[str]) -> Iterator[Taught]:
        for hyps in self.engine.translate(lines):
            best = hyps[0]
            confidence = best.assessment.shown_confidence if best.assessment is not None else None
            yield best.text, confidence


@dataclass
class ServerTeacher:
    """A LibreTranslate-compatible server: ``POST /translate`` with ``q`` a list of ``batch_lines`` lines, at
    most ``requests_per_second``, a failed request tried again ``retries`` times with a doubling wait (a 429 or
    503's ``Retry-After`` honoured). Its confidence is read where the server gives one (``nmt serve``)."""

    config: DistillConfig
    source: str
    target: str
    gives_confidence: bool = False

    def __post_init__(self) -> None:
        self.url = self.config.endpoint.rstrip("/") + "/translate"
        self.identity = {"endpoint": self.config.endpoint, "direction": [self.source, self.target]}
        self.gives_confidence = self.config.min_confidence > 0  # asked for only where it is used
        self._last_request = 0.0

    def translate(self, lines: Iterator[str]) -> Iterator[Taught]:
        batch: list[str] = []
        for line in lines:
            batch.append(line)
            if len(batch) == self.config.batch_lines:
                yield from self._ask(batch)
                batch = []
        if batch:
            yield from self._ask(batch)

    def _ask(self, lines: list[str]) -> list[Taught]:
        asked = [line for line in lines if line.strip()]  # a server may refuse an empty text
        answers = iter(self._post(asked) if asked else [])
        return [next(answers) if line.strip() else ("", None) for line in lines]

    def _post(self, lines: list[str]) -> list[Taught]:
        body: dict[str, Any] = {"q": lines, "source": self.source, "target": self.target, "format": "text"}
        if self.gives_confidence:
            body["confidence"] = True
        data = json.dumps(body).encode("utf-8")
        wait = 1.0
        for attempt in range(self.config.retries + 1):
            self._pace()
            request = urllib.request.Request(self.url, data, {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=self.config.timeout_seconds) as response:
                    return self._answers(json.loads(response.read().decode("utf-8")), len(lines))
            except urllib.error.HTTPError as err:
                if err.code not in (429, 500, 502, 503, 504) or attempt == self.config.retries:
                    raise NmtError(f"distill.endpoint {self.url}: HTTP {err.code} {_error_text(err)}") from None
                wait = max(wait, _retry_after(err))
            except (urllib.error.URLError, OSError, ValueError) as err:
                if attempt == self.config.retries:
                    reason = getattr(err, "reason", err)
                    raise NmtError(
                        f"distill.endpoint {self.url}: no answer after {attempt + 1} tries ({reason}); is the server "
                        "running? The distillation goes on from here when started again"
                    ) from None
            time.sleep(wait)
            wait *= 2
        raise AssertionError("unreachable")

    def _answers(self, body: Any, count: int) -> list[Taught]:
        texts = body.get("translatedText") if isinstance(body, dict) else None
        if not isinstance(texts, list) or len(texts) != count or not all(isinstance(t, str) for t in texts):
            raise NmtError(f"distill.endpoint {self.url}: the answer has no translatedText list of {count} texts")
        found = body.get("confidence")
        confidences: list[float | None] = [None] * count
        if isinstance(found, list) and len(found) == count:
            confidences = [c.get("confidence") if isinstance(c, dict) else None for c in found]
        if self.gives_confidence and any(c is None for c in confidences):
            raise NmtError(
                f"distill.endpoint {self.url}: gives no confidence, and distill.min_confidence asks for one; set it to 0"
            )
        return list(zip(texts, confidences))

    def _pace(self) -> None:
        if self.config.requests_per_second > 0:
            gap = 1.0 / self.config.requests_per_second - (time.monotonic() - self._last_request)
            if gap > 0:
                time.sleep(gap)
        self._last_request = time.monotonic()


def _retry_after(err: urllib.error.HTTPError) -> float:
    try:
        return min(float(err.headers.get("Retry-After", 0)), 600.0)
    except (TypeError, ValueError):
        return 0.0


def _error_text(err: urllib.error.HTTPError) -> str:
    try:
        message = json.loads(err.read().decode("utf-8")).get("error", "")
    except (ValueError, AttributeError, OSError):
        message = ""
    return f"({message})" if message else err.reason


__all__ = ["ModelTeacher", "ServerTeacher", "Taught", "Teacher", "teacher_of"]
