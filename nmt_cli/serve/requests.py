"""The two request shapes ``POST /translate`` accepts, read and checked before anything is queued.

- LibreTranslate's: ``{"q": "text" | ["text", ...], "source": "en" | "auto", "target": "de", "format": "text",
  "alternatives": 0}``, answered ``{"translatedText": ...}`` (and ``"alternatives"``, ``"detectedLanguage"``);
- ours: ``{"text": "text" | [...], "model": "en-de" (or "source"/"target"), "beam": 4, "nbest": 1,
  "alpha": 0.6}``, answered with scores, n-best lists and timing.

Every problem is a :class:`BadRequest` with the HTTP status and a one-line reason.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ..config import DecodeConfig
from ..decode.glossary_search import check_term_lengths
from ..decode.loading import LoadedModel
from ..errors import DataError, NmtError
from ..formats.unpack import UnpackLimits
from ..languages import SURE, read_as
from ..terms.glossary import Glossary, glossary_from_pairs
from ..utils.text import replace_control_characters
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
    unpack: UnpackLimits = field(default_factory=UnpackLimits)  # how far an uploaded .docx may unpack
    glossaries: dict[str, Glossary] = field(default_factory=dict)  # the glossaries a request may name (--glossary)
    max_glossary_terms: int = 1000  # terms a request may bring inline


@dataclass
class ServedModel:
    """A model behind the server: its name (``en-de``), languages, weights and decoding loop."""

    name: str
    source: str
    target: str
    loaded: LoadedModel
    loop: DecodingLoop
    parameters: int
    source_prefix: tuple[int, ...] = ()  # a multilingual model's target tag for this direction (decode/targets.py)
    target_tag: int | None = None  # the same, for a model whose decoder reads it first
    # a direction no model serves: first translated by this model into its source language (the pivot), then by
    # this one (its loaded model, loop and prefix are the second step's)
    pivot: ServedModel | None = None


@dataclass
class TranslationRequest:
    """A checked request: the texts, the model, the search settings and the answer's shape."""

    texts: list[str]
    single: bool  # the texts came as one string, not a list
    libre: bool  # answer in LibreTranslate's shape
    model: ServedModel
    config: DecodeConfig
    nbest: int
    detected: tuple[str, float] | None = None  # "source": "auto": the language found, confidence 0-100
    html: bool = False  # "format": "html": each text is HTML, translated with its markup kept
    confidence: bool = False  # "confidence": true: each translation gets its confidence and flags (decode/assess.py)
    glossary: Glossary | None = None  # "glossary": terms every translation must use (decode/constrained.py)
    ignored: list[str] = field(default_factory=list)  # fields of the body this request shape does not read


# The fields each request shape reads; others are ignored and named in the answer ("ignored").
# LibreTranslate's api_key and secret are taken and ignored: this server asks for no key.
LIBRE_FIELDS = frozenset(
    {"q", "source", "target", "format", "alternatives", "api_key", "secret", "confidence", "glossary", "keep_terms"}
)
SAMPLING_FIELDS = frozenset({"sampling", "top_k", "top_p", "temperature", "seed"})
OUR_FIELDS = frozenset(
    {"text", "model", "source", "target", "beam", "nbest", "alpha", "format", "api_key", "confidence", "glossary"}
    | {"keep_terms"}
    | SAMPLING_FIELDS
)
STRING_FIELDS = ("source", "target", "model", "format")


def parse_request(
    fields: dict[str, Any], from_form: bool, models: list[ServedModel], limits: Limits, detector: Detector | None = None
) -> TranslationRequest:
    """Check a request's fields; raise :class:`BadRequest` naming the field and the fix. ``from_form``:
    the values are a form's strings, whose numbers are read here."""
    libre = "q" in fields
    if libre == ("text" in fields):
        raise BadRequest(400, 'give the text as "q" (LibreTranslate) or "text" (nmt), exactly one of them')
    for name in STRING_FIELDS:
        if name in fields and not isinstance(fields[name], str):
            raise BadRequest(400, f'"{name}" must be a string')
    texts, single = _texts(fields["q" if libre else "text"], "q" if libre else "text")
    if sum(len(text.split("\n")) for text in texts) > limits.max_sentences:
        raise BadRequest(413, f"more than {limits.max_sentences} lines in one request; split it")
    if not any(text.strip() for text in texts):
        raise BadRequest(400, "the text is empty")
    if fields.get("format", "text") not in ("text", "html"):
        raise BadRequest(400, f'format "{shown(fields["format"])}" is not supported; use "text" or "html"')
    model, detected = pick_model(fields, models, texts, detector)
    defaults = model.loaded.recipe.decode
    if libre:
        alternatives = _integer(fields, "alternatives", 0, 0, limits.max_beam - 1, from_form)
        nbest = alternatives + 1
        beam = max(defaults.beam, nbest)
        alpha = defaults.alpha
        sampling = False
    else:
        beam = _integer(fields, "beam", defaults.beam, 1, limits.max_beam, from_form)
        sampling = _boolean(fields, "sampling", from_form)
        nbest = _integer(fields, "nbest", 1, 1, limits.max_beam if sampling else beam, from_form)
        alpha = _number(fields, "alpha", defaults.alpha, 0.0, 10.0, from_form)
    config = replace(defaults, beam=beam, alpha=alpha, sampling=False)
    if not libre and sampling:
        config = _sampling(fields, config, from_form)
    ignored = sorted(set(fields) - (LIBRE_FIELDS if libre else OUR_FIELDS))
    html = fields.get("format") == "html"
    if config.sampling and model.pivot is not None and model.pivot.loop is not model.loop:
        raise BadRequest(400, f'"sampling": {model.name} goes through two models; translate each step on its own')
    if config.sampling and (html or "glossary" in fields or "keep_terms" in fields):
        given = '"format": "html"' if html else '"glossary"' if "glossary" in fields else '"keep_terms"'
        raise BadRequest(400, f'"sampling" draws plain text translations; leave out {given} or "sampling"')
    confidence = _boolean(fields, "confidence", from_form)
    if confidence and html:
        raise BadRequest(400, '"confidence" is given for "format": "text" only; leave it out for HTML')
    if confidence and model.pivot is not None:  # as nmt translate --confidence refuses it
        raise BadRequest(
            400,
            f'"confidence": {model.source}-{model.target} was never trained and goes through {model.pivot.target}; '
            "confidence applies to a trained direction; leave it out",
        )
    glossary = request_glossary(fields, limits, model)
    return TranslationRequest(
        texts,
        single,
        libre,
        model,
        config,
        1 if html else nbest,
        detected,
        html=html,
        confidence=confidence,
        glossary=glossary,
        ignored=[shown(k) for k in ignored],
    )


def request_glossary(fields: dict[str, Any], limits: Limits, model: ServedModel) -> Glossary | None:
    """A request's "glossary" (the name of one loaded at start-up, or its own list of pairs) and "keep_terms"
    (names to copy as written, as ``nmt translate --keep-terms``) as one glossary; None without either. In a form
    (``/translate_file``'s upload) a list comes as JSON text."""
    given = [name for name in ("glossary", "keep_terms") if name in fields]
    if not given:
        return None
    if model.pivot is not None:
        raise BadRequest(
            400,
            f'"{given[0]}": {model.source}-{model.target} goes through {model.pivot.target}, and terms are for one '
            "language pair; translate each step with its own terms, or leave them out",
        )
    if model.loaded.recipe.model.reads_context:
        raise BadRequest(400, f'"{given[0]}" is applied by sentence-level models only so far; leave it out')
    value = _listed(fields, "glossary") if "glossary" in fields else None
    glossary = _glossary(value, limits) if value is not None else None
    if "keep_terms" in fields:
        glossary = _with_kept(glossary, _listed(fields, "keep_terms"), limits)
    assert glossary is not None
    if glossary is not limits.glossaries.get(value if isinstance(value, str) else ""):  # served ones: at start-up
        try:
            check_term_lengths(glossary, model.loaded)  # the command line's own check
        except NmtError as err:
            raise BadRequest(400, str(err)) from None
    return glossary


def _listed(fields: dict[str, Any], name: str) -> Any:
    """A field that may hold a list, which a form sends as JSON text."""
    value = fields[name]
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            return json.loads(value)
        except json.JSONDecodeError as err:
            raise BadRequest(
                400, f'"{name}" is not valid JSON ({err.msg}); send a served glossary\'s name or a list'
            ) from None
    return value


def _with_kept(glossary: Glossary | None, names: Any, limits: Limits) -> Glossary:
    """``glossary`` and the names a request keeps as written (each a term translated as itself)."""
    if not (isinstance(names, list) and all(isinstance(name, str) for name in names)):
        raise BadRequest(400, '"keep_terms" must be a list of names (strings) to copy as written')
    if len(names) > limits.max_glossary_terms:
        raise BadRequest(413, f'"keep_terms" holds more than {limits.max_glossary_terms} names; send fewer')
    try:
        kept = glossary_from_pairs([[name, name] for name in names], '"keep_terms"')
        return Glossary.join(glossary, kept) if glossary is not None else kept
    except DataError as err:
        raise BadRequest(400, str(err)) from None


def _sampling(fields: dict[str, Any], config: DecodeConfig, from_form: bool) -> DecodeConfig:
    """Our shape's "sampling": true with its settings, as ``nmt translate --sampling`` takes them."""
    return replace(
        config,
        sampling=True,
        top_k=_integer(fields, "top_k", config.top_k, 0, 1_000_000, from_form),
        top_p=_number(fields, "top_p", config.top_p, 1e-6, 1.0, from_form),
        temperature=_number(fields, "temperature", config.temperature, 0.01, 100.0, from_form),
        seed=_integer(fields, "seed", config.seed, 0, 2**31 - 1, from_form),
    )


def _glossary(value: Any, limits: Limits) -> Glossary:
    """A request's "glossary": the name of one loaded at start-up, or its own list of pairs."""
    if isinstance(value, str):
        if value not in limits.glossaries:
            served = ", ".join(sorted(limits.glossaries)) or "none (nmt serve --glossary NAME=FILE loads them)"
            raise BadRequest(400, f'no glossary named "{shown(value)}"; served: {served}')
        return limits.glossaries[value]
    if isinstance(value, list) and len(value) > limits.max_glossary_terms:
        raise BadRequest(413, f'"glossary" holds more than {limits.max_glossary_terms} terms; send fewer')
    try:
        return glossary_from_pairs(value, '"glossary"')
    except DataError as err:
        raise BadRequest(400, str(err)) from None


class Detector(Protocol):
    """Language identification (``languages.LanguageDetector``): (language, confidence 0-100), best first."""

    unavailable: str | None

    def detect(self, text: str) -> list[tuple[str, float]]: ...


def _texts(value: Any, name: str) -> tuple[list[str], bool]:
    if isinstance(value, str):
        texts, single = [value], True
    elif isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        texts, single = value, False
    else:
        raise BadRequest(400, f'"{name}" must be a string or a non-empty list of strings')
    for text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            code = f"\\u{ord(text[err.start]):04x}"
            raise BadRequest(
                400, f'"{name}" holds a lone surrogate ({code}), which is not text; send valid Unicode'
            ) from None
    return [replace_control_characters(text) for text in texts], single


def pick_model(
    fields: dict[str, Any], models: list[ServedModel], texts: list[str], detector: Detector | None
) -> tuple[ServedModel, tuple[str, float] | None]:
    """The model named by "model", or by "source"/"target" ("auto" or none: detected, or the only one
    that fits), and the detected source language with its confidence when it was detected."""
    if "model" in fields:
        for model in models:
            if model.name == fields["model"]:
                return model, None
        raise BadRequest(400, f'no model "{shown(fields["model"])}"; GET /models lists them')
    source, target = fields.get("source", "auto"), fields.get("target")
    detected = None
    if source == "auto" and detector is not None and not detector.unavailable:
        detected = _detected_source(detector.detect(" ".join(texts)), models, target)
        source = detected[0] if detected else source
    fits = [m for m in models if source in ("auto", m.source) and target in (None, m.target)]
    # one pair served by several models (a big one and its distilled student): the first loaded that serves it
    # directly, so that every LibreTranslate client, which names languages only, reaches one; "model" names another
    fits.sort(key=lambda m: m.pivot is not None)
    if len(fits) == 1 or (fits and len({(m.source, m.target) for m in fits}) == 1):
        return fits[0], detected
    pairs = ", ".join(f"{m.source}-{m.target}" for m in models)
    if not fits:
        wanted = f"{shown(source)} to {shown(target) if target is not None else 'any language'}"
        raise BadRequest(400, f"no model translates {wanted}; this server has {pairs}")
    raise BadRequest(400, f"several models fit ({pairs}); name the source and target languages")


def _detected_source(
    ranked: list[tuple[str, float]], models: list[ServedModel], target: str | None
) -> tuple[str, float] | None:
    """ "source": "auto": the language /detect ranks first, when a served model reads it into ``target``
    (``languages.read_as``). Text surely in the target language already, or in a language no model reads, is
    refused naming what was detected; where the identifier is unsure (a word: "Hi"), the likeliest language a model
    reads."""
    readers = sorted({m.source for m in models if target in (None, m.target)})
    reading = read_as(ranked, readers)
    if reading is None:
        return None
    if reading.source is not None or reading.sure < SURE:
        return (reading.source, reading.confidence) if reading.source is not None else None
    language, confidence = reading.identified, reading.sure
    if language == target:
        raise BadRequest(
            400, f'the text is in {language} already (detected, {confidence:g}% sure); give "source" if it is not'
        )
    raise BadRequest(
        400,
        f"the text is in {language} (detected, {confidence:g}% sure), and no model here reads it"
        f'{f" into {target}" if target else ""}; models read {", ".join(readers) or "none"}, or give "source"',
    )


def _integer(fields: dict[str, Any], name: str, default: int, low: int, high: int, from_form: bool = False) -> int:
    value = fields.get(name, default)
    if from_form and isinstance(value, str) and re.fullmatch(r"[+-]?\d{1,9}", value.strip()):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadRequest(400, f'"{name}" must be a whole number from {low} to {high}')
    return value


def _boolean(fields: dict[str, Any], name: str, from_form: bool = False) -> bool:
    value = fields.get(name, False)
    if from_form and isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0", ""):
        value = value.strip().lower() in ("true", "1")
    if not isinstance(value, bool):
        raise BadRequest(400, f'"{name}" must be true or false')
    return value


def _number(fields: dict[str, Any], name: str, default: float, low: float, high: float, from_form: bool = False) -> float:
    value = fields.get(name, default)
    if from_form and isinstance(value, str) and re.fullmatch(r"[+-]?(\d{1,9}(\.\d{0,9})?|\.\d{1,9})", value.strip()):
        value = float(value)
    # JSON's NaN and Infinity parse as floats: math.isfinite refuses them where a range check alone might not.
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        raise BadRequest(400, f'"{name}" must be a number from {low:g} to {high:g}')
    return float(value)


def shown(value: Any, limit: int = 40) -> str:
    """A client's value as an error message may quote it: printable, short, no lone surrogates."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)[:limit]
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    text = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
