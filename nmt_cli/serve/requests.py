"""The two request shapes ``POST /translate`` accepts, read and checked before anything is queued.

- LibreTranslate's: ``{"q": "text" | ["text", ...], "source": "en", "target": "de", "format": "text",
  "alternatives": 0}``, answered ``{"translatedText": ...}`` (and ``"alternatives"``);
- ours: ``{"text": "text" | [...], "model": "en-de" (or "source"/"target"), "beam": 4, "nbest": 1,
  "alpha": 0.6}``, answered with scores, n-best lists and timing.

Every problem is a :class:`BadRequest` with the HTTP status and a one-line reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from ..config import DecodeConfig
from ..decode.translator import LoadedModel
from .loop import DecodingLoop


class BadRequest(Exception):
    """A request that is refused: ``status`` (400, 404, 413, ...) and a one-line ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclass(frozen=True)
class Limits:
    """What one request may ask for."""

    max_body_bytes: int = 1_000_000
    max_sentences: int = 128  # lines over all texts of a request
    max_beam: int = 16


@dataclass
class ServedModel:
    """A model behind the server: its name (``en-de``), languages, weights and decoding loop."""

    name: str
    source: str
    target: str
    loaded: LoadedModel
    loop: DecodingLoop
    parameters: int


@dataclass
class TranslationRequest:
    """A checked request: the texts, the model, the search settings and the answer's shape."""

    texts: list[str]
    single: bool  # the texts came as one string, not a list
    libre: bool  # answer in LibreTranslate's shape
    model: ServedModel
    config: DecodeConfig
    nbest: int


def parse_request(body: bytes, models: list[ServedModel], limits: Limits) -> TranslationRequest:
    """Read a request body; raise :class:`BadRequest` naming the field and the fix."""
    try:
        fields = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BadRequest(400, f"the body is not valid JSON ({err})") from None
    if not isinstance(fields, dict):
        raise BadRequest(400, 'the body must be a JSON object, e.g. {"q": "Hello", "source": "en", "target": "de"}')
    libre = "q" in fields
    if libre == ("text" in fields):
        raise BadRequest(400, 'give the text as "q" (LibreTranslate) or "text" (nmt), exactly one of them')
    texts, single = _texts(fields["q" if libre else "text"], "q" if libre else "text")
    if sum(len(text.split("\n")) for text in texts) > limits.max_sentences:
        raise BadRequest(413, f"more than {limits.max_sentences} lines in one request; split it")
    if not any(text.strip() for text in texts):
        raise BadRequest(400, "the text is empty")
    if fields.get("format", "text") != "text":
        raise BadRequest(400, f'format "{fields["format"]}" is not supported; use "text"')
    model = _model(fields, models)
    defaults = model.loaded.recipe.decode
    if libre:
        alternatives = _integer(fields, "alternatives", 0, 0, limits.max_beam - 1)
        nbest = alternatives + 1
        beam = max(defaults.beam, nbest)
        alpha = defaults.alpha
    else:
        beam = _integer(fields, "beam", defaults.beam, 1, limits.max_beam)
        nbest = _integer(fields, "nbest", 1, 1, beam)
        alpha = _number(fields, "alpha", defaults.alpha, 0.0, 10.0)
    config = replace(defaults, beam=beam, alpha=alpha, sampling=False)
    return TranslationRequest(texts, single, libre, model, config, nbest)


def _texts(value: Any, name: str) -> tuple[list[str], bool]:
    if isinstance(value, str):
        return [value], True
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        return value, False
    raise BadRequest(400, f'"{name}" must be a string or a non-empty list of strings')


def _model(fields: dict[str, Any], models: list[ServedModel]) -> ServedModel:
    """The model named by "model", or by "source"/"target" ("auto" or none: the only one that fits)."""
    if "model" in fields:
        for model in models:
            if model.name == fields["model"]:
                return model
        raise BadRequest(400, f'no model "{fields["model"]}"; GET /models lists them')
    source, target = fields.get("source", "auto"), fields.get("target")
    fits = [m for m in models if source in ("auto", m.source) and target in (None, m.target)]
    if len(fits) == 1:
        return fits[0]
    pairs = ", ".join(f"{m.source}-{m.target}" for m in models)
    if not fits:
        raise BadRequest(400, f"no model translates {source} to {target or 'any language'}; this server has {pairs}")
    raise BadRequest(400, f"several models fit ({pairs}); name the source and target languages")


def _integer(fields: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = fields.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadRequest(400, f'"{name}" must be a whole number from {low} to {high}')
    return value


def _number(fields: dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    value = fields.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise BadRequest(400, f'"{name}" must be a number from {low:g} to {high:g}')
    return float(value)
