"""``nmt calibrate``: fit the confidence map of a model on a user's own sentences and their references.

The model translates the sources as ``nmt translate --confidence`` would (same search settings, same
teacher-forced features, ``quality/features.py``); each translation is labelled acceptable when its
sentence chrF against the reference reaches the threshold; a logistic regression maps features to that
probability (``quality/confidence_map.py``). The map is written into a new model file, next to the old one,
never over it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..errors import NmtError
from ..quality.confidence_map import MIN_PAIRS, Calibration, auroc, expected_calibration_error, fit
from ..quality.features import Features, features
from ..utils import torchfile
from ..utils.run_folder import MODEL_FILE
from .attention_maps import cross_attention
from .forced import forced_scores
from .loading import LoadedModel, load_model
from .targets import Route
from .translator import Translator


@dataclass(frozen=True)
class CalibrationReport:
    calibration: Calibration
    pairs: int
    acceptable: float  # the share of translations that reached the threshold
    auroc_confidence: float  # for "bad" (below the threshold), on the fitting pairs
    auroc_seq_logprob: float
    calibration_error: float  # expected calibration error, 10 bins, on the fitting pairs


def calibrate(
    model_path: Path,
    sources: list[str],
    references: list[str],
    threshold: float = 50.0,
    device: str | torch.device = "cpu",
    way: Route = Route(),
) -> CalibrationReport:
    """Fit a calibration for the model at ``model_path`` on ``sources`` and their ``references`` (of one
    direction of a multilingual model: ``way``, decode/targets.py)."""
    if len(sources) != len(references):
        raise NmtError(
            f"{len(sources):,} source lines but {len(references):,} references; give one reference per source line"
        )
    kept = [(s, r) for s, r in zip(sources, references) if s.strip() and r.strip()]
    if len(kept) < MIN_PAIRS:
        raise NmtError(f"calibration needs at least {MIN_PAIRS} non-empty pairs; got {len(kept)}")
    return calibrate_loaded(load_model(model_path, device), kept, threshold, torch.device(device), way=way)


def calibrate_loaded(
    loaded: LoadedModel,
    kept: list[tuple[str, str]],
    threshold: float,
    device: torch.device,
    probe: int = 0,
    way: Route = Route(),
) -> CalibrationReport:
    """Fit a calibration for ``loaded`` on (source, reference) pairs, non-empty and at least MIN_PAIRS.

    ``probe``: translate that many pairs first and give up (NmtError) when none is acceptable, before the rest:
    a model trained a few updates writes to the length limit, and translating a whole validation set to learn
    that it is all bad would take minutes."""
    import sacrebleu

    if way.target_tag is not None:  # its features would read the tag as a word of the output
        raise NmtError("a model whose decoder reads the target tag (data.language_tag: target) is not calibrated yet")
    translator = Translator(
        loaded, loaded.recipe.decode, device, assess=True, source_prefix=way.source_prefix, target_tag=way.target_tag
    )
    hyps: list[Any] = []
    acceptable: list[bool] = []
    for part in (kept[:probe], kept[probe:]) if probe else (kept,):
        # each line's best Translation; each pair read alone (a document of one), whatever context the model reads
        hyps += [h[0] for h in translator.translate((s for s, _ in part), documents=map(str, itertools.count()))]
        acceptable = [sacrebleu.sentence_chrf(h.text, [ref]).score >= threshold for h, (_, ref) in zip(hyps, kept)]
        if not any(acceptable):
            raise NmtError(
                f"none of the first {len(hyps):,} translations reaches sentence chrF {threshold:g}: calibration needs "
                "good and bad ones; give sentences nearer the model's limits, or another --threshold"
            )
    found = [hyp.assessment.features for hyp in hyps if hyp.assessment is not None]
    sources = [s for s, _ in kept]
    synthetic = {
        "hallucination": _paired(loaded, translator, sources, [hyps[(i + 1) % len(hyps)][0] for i in range(len(hyps))]),
        "omission": _omitted(loaded, translator, sources),
    }
    calibration = fit(found, acceptable, threshold, synthetic)
    confidences = [calibration.confidence(f) for f in found]
    bad = [not ok for ok in acceptable]
    return CalibrationReport(
        calibration,
        len(kept),
        sum(acceptable) / len(kept),
        auroc([-c for c in confidences], bad),
        auroc([-f.mean_logprob for f in found], bad),
        expected_calibration_error(confidences, acceptable),
    )


def _paired(loaded: LoadedModel, translator: Translator, sources: list[str], outputs: list[str]) -> list[Features]:
    """The features of each source paired with the given output (made-up failures to learn a flag from)."""
    source_ids = [translator.source_prefix + ids for ids in loaded.src_vocab.encode(sources, out_type=int)]
    output_ids = loaded.tgt_vocab.encode(outputs, out_type=int)
    limit = loaded.recipe.model.max_positions - 1
    pairs = [(s[:limit], o[:limit]) for s, o in zip(source_ids, output_ids)]
    assert translator.assessor is not None
    first = translator.assessor.model
    device = next(first.parameters()).device
    totals = forced_scores(first, pairs, loaded.recipe.decode, device, unwritten=loaded.unwritten)
    attention = cross_attention(first, [s for s, _ in pairs], [o for _, o in pairs], translator.assessor.layer)
    return [
        features(total.total if total.total is not None else -1e9, weights, s, o)
        for (s, o), total, weights in zip(pairs, totals, attention)
    ]


def _omitted(loaded: LoadedModel, translator: Translator, sources: list[str]) -> list[Features]:
    """Each source of six words or more paired with the translation of its first 60% only: omissions."""
    long_enough = [s for s in sources if len(s.split()) >= 6]
    parts = [" ".join(s.split()[: max(1, int(len(s.split()) * 0.6))]) for s in long_enough]
    translated = [h[0].text for h in translator.translate(parts, documents=map(str, itertools.count()))]
    return _paired(loaded, translator, long_enough, translated)


def write_calibrated(model_path: Path, calibration: Calibration, output: Path, direction: str | None = None) -> None:
    """A copy of the model file with ``calibration`` stored in it (as ``direction``'s, "en-de", for a
    multilingual model: the other directions' are kept), written atomically to ``output``."""
    source = model_path / MODEL_FILE if model_path.is_dir() else model_path
    if output.resolve() == source.resolve():
        raise NmtError(f"{output}: is the model file being calibrated; write the calibrated model to another file")
    _store(source, {direction: calibration} if direction else calibration, output)


def store_in_place(model_file: Path, calibration: Calibration | dict[str, Calibration]) -> None:
    """Store ``calibration`` (a multilingual model's: one per direction) in a model file training has just
    written (atomically: the old file stays whole until the new one is complete)."""
    _store(model_file, calibration, model_file)


def _store(source: Path, calibration: Calibration | dict[str, Calibration], output: Path) -> None:
    payload = torchfile.load(source)
    kind = payload.pop("kind", "weights")
    payload = {k: v for k, v in payload.items() if k not in ("format_version", "nmt_version")}
    if isinstance(calibration, dict):
        payload["calibrations"] = {**payload.get("calibrations", {}), **{k: v.to_dict() for k, v in calibration.items()}}
    else:
        payload["calibration"] = calibration.to_dict()
    torchfile.save(output, payload, kind)
