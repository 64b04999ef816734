"""The bodies ``POST /translate`` answers with, in both request shapes (``requests.py``), and ``/models``' entries.

A text of several lines joins its lines' i-th hypotheses into its i-th alternative; LibreTranslate's shape keeps
its own fields as they are and adds ours (``confidence``, ``missingTerms``) only where asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..decode.assess import Assessment
from ..decode.constrained import term_constraints
from ..decode.translation import Translation
from ..languages import language_name
from ..terms.matching import compiled
from .requests import ServedModel, TranslationRequest


@dataclass
class Decoded:
    """A request's lines and, for each, its n-best list (an empty line: none) and whether it was cut."""

    lines: list[list[str]]  # per text, its lines
    hypotheses: list[list[list[Translation]]]  # per text, per line
    truncated: list[list[bool]]


def text_answer(parsed: TranslationRequest, decoded: Decoded, seconds: float) -> dict[str, Any]:
    """The response body; a direction served through a pivot language says which (``"pivot": "en"``)."""
    texts = _alternatives(parsed, decoded)
    pivot = {"pivot": parsed.model.pivot.target} if parsed.model.pivot is not None else {}
    missing = _missing_terms(decoded) if parsed.glossary is not None else None
    if parsed.libre:
        best = [alternatives[0]["text"] for alternatives in texts]
        body: dict[str, Any] = {"translatedText": best[0] if parsed.single else best, **pivot}
        if parsed.nbest > 1:
            others = [[a["text"] for a in alternatives[1:]] for alternatives in texts]
            body["alternatives"] = others[0] if parsed.single else others
        if parsed.detected is not None:  # one language for the request, repeated per text as LibreTranslate does
            found = {"confidence": parsed.detected[1], "language": parsed.detected[0]}
            body["detectedLanguage"] = found if parsed.single else [found] * len(texts)
        if parsed.confidence:  # an addition to LibreTranslate's shape, asked for; its own fields stay as they are
            assessed = [{k: a[k] for k in ("confidence", "calibrated", "flags")} for a in (t[0] for t in texts)]
            body["confidence"] = assessed[0] if parsed.single else assessed
        if missing is not None:  # an addition, as "confidence" is
            body["missingTerms"] = missing[0] if parsed.single else missing
        if parsed.ignored:
            body["ignored"] = parsed.ignored
        return body
    placed = _placed_terms(parsed, decoded) if parsed.glossary is not None else None
    return {
        "model": parsed.model.name,
        **pivot,
        "beam": parsed.config.beam,
        "alpha": parsed.config.alpha,
        **({"sampling": True} if parsed.config.sampling else {}),  # drawn, not searched: beam and alpha unused
        "translations": [
            {
                **alternatives[0],
                "nbest": alternatives,
                "truncated": any(cut),
                **({"missing_terms": missing[n]} if missing is not None else {}),
                **({"glossary_terms": placed[n]} if placed is not None else {}),
            }
            for n, (alternatives, cut) in enumerate(zip(texts, decoded.truncated))
        ],
        "time_ms": round(seconds * 1000, 2),
        **({"ignored": parsed.ignored} if parsed.ignored else {}),
    }


def html_answer(parsed: TranslationRequest, pages: list[str], seconds: float) -> dict[str, Any]:
    """The response body of ``"format": "html"``: each text's translated page."""
    pivot = {"pivot": parsed.model.pivot.target} if parsed.model.pivot is not None else {}
    if parsed.libre:
        body: dict[str, Any] = {"translatedText": pages[0] if parsed.single else pages, **pivot}
        if parsed.detected is not None:
            found = {"confidence": parsed.detected[1], "language": parsed.detected[0]}
            body["detectedLanguage"] = found if parsed.single else [found] * len(pages)
        return {**body, **({"ignored": parsed.ignored} if parsed.ignored else {})}
    return {
        "model": parsed.model.name,
        **pivot,
        "format": "html",
        "translations": [{"text": page} for page in pages],
        "time_ms": round(seconds * 1000, 2),
        **({"ignored": parsed.ignored} if parsed.ignored else {}),
    }


def describe(model: ServedModel) -> dict[str, Any]:
    """A model's entry in ``/models``."""
    recipe = model.loaded.recipe
    return {
        "name": model.name,
        "source": model.source,
        "target": model.target,
        "source_name": language_name(model.source),
        "target_name": language_name(model.target),
        "recipe": recipe.name,
        "parameters": model.parameters,
        "layers": recipe.model.n_encoder_layers,
        "decoder_layers": recipe.model.n_decoder_layers,
        "d_model": recipe.model.d_model,
        "beam": recipe.decode.beam,
        "alpha": recipe.decode.alpha,
        "max_positions": recipe.model.max_positions,
        "calibrated": model.loaded.calibration is not None,  # "confidence": true gives calibrated probabilities
        **({"pivot": model.pivot.target} if model.pivot is not None else {}),  # through this language
    }


def _alternatives(parsed: TranslationRequest, decoded: Decoded) -> list[list[dict[str, Any]]]:
    """Per text, its alternatives (best first): the text of its lines' i-th hypotheses, their mean score and,
    where asked, their confidence."""
    texts = []
    for hyps_per_line in decoded.hypotheses:
        alternatives = []
        for rank in range(parsed.nbest):
            picked = [hyps[min(rank, len(hyps) - 1)] if hyps else None for hyps in hyps_per_line]
            if rank and all(h is None or len(hyps) <= rank for h, hyps in zip(picked, hyps_per_line)):
                break
            scores = [h.score for h in picked if h]
            alternative = {
                "text": "\n".join(h.text if h else "" for h in picked),
                "score": sum(scores) / len(scores) if scores else 0.0,
            }
            if parsed.confidence:  # a line with fewer alternatives: its last
                alternative.update(Assessment.of_text([h.assessment if h else None for h in picked]))
            alternatives.append(alternative)
        texts.append(alternatives)
    return texts


def _missing_terms(decoded: Decoded) -> list[list[str]]:
    """Per text, the glossary terms its best translation lacks."""
    return [
        sorted({term for hyps in text for term in (hyps[0].missing_terms or () if hyps else ())})
        for text in decoded.hypotheses
    ]


def _placed_terms(parsed: TranslationRequest, decoded: Decoded) -> list[list[dict[str, str]]]:
    """Per text, the glossary terms its best translation holds: their source and the translation it used."""
    assert parsed.glossary is not None
    matcher, vocab = compiled(parsed.glossary), parsed.model.loaded.tgt_vocab
    placed: list[list[dict[str, str]]] = []
    for lines, text in zip(decoded.lines, decoded.hypotheses):
        found = []
        for line, hyps in zip(lines, text):
            for constraint in term_constraints(matcher, vocab, line.strip()) if hyps else ():
                target = constraint.found_in(hyps[0].text)
                if target is not None:
                    found.append({"source": constraint.source, "target": target})
        placed.append(found)
    return placed
