"""The last step of training: fit the confidence of ``nmt translate --confidence`` on the validation set.

The model file just written is loaded as ``nmt translate`` would load it, translates the validation
sources, and the fitted map (``decode/fit_confidence.py``) is stored in that file. A validation set smaller
than the minimum leaves the model uncalibrated, said in the log with the command that fits one later.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch

from ..config import Recipe
from ..data.prepare import split_text, text_paths
from ..decode.fit_confidence import calibrate_loaded, store_in_place
from ..decode.loading import load_model
from ..decode.targets import route
from ..errors import NmtError
from ..quality.confidence_map import MIN_PAIRS
from ..utils.allocator import release_freed_memory
from ..utils.files import split_lines


def calibrate_model_file(model_file: Path, recipe: Recipe, device: torch.device, log: Callable[[str], None]) -> None:
    """Fit the calibration of ``model_file`` on the run's validation pairs and store it there."""
    if recipe.multilingual:
        _calibrate_directions(model_file, recipe, device, log)
        return
    sources_path, references_path = text_paths(recipe.data_dir, "valid", recipe)
    later = f"nmt calibrate -m {model_file} --src IN-DOMAIN.{recipe.data.src_lang} --ref IN-DOMAIN.{recipe.data.tgt_lang}"
    if not (sources_path.is_file() and references_path.is_file()):
        log(f"no validation set: {model_file} has no calibration; fit one with `{later}`")
        return
    kept = _pairs(sources_path, references_path)
    if len(kept) < MIN_PAIRS:
        log(
            f"{len(kept)} validation pairs, fewer than the {MIN_PAIRS} a calibration needs: {model_file} has no "
            f"calibration; fit one with `{later}`"
        )
        return
    started = time.monotonic()
    release_freed_memory()  # training's free heap, before the translations allocate theirs
    try:
        report = calibrate_loaded(load_model(model_file, device), kept, recipe.train.calibrate_chrf, device, probe=MIN_PAIRS)
    except NmtError as err:  # e.g. every validation translation acceptable: nothing to tell apart
        log(f"{model_file} has no calibration: {err}; fit one with `{later}`")
        return
    store_in_place(model_file, report.calibration)
    log(
        f"confidence calibrated on {report.pairs:,} validation pairs in {time.monotonic() - started:.0f} s "
        f"({report.acceptable:.0%} acceptable: sentence chrF >= {recipe.train.calibrate_chrf:g}; AUROC for bad "
        f"translations {report.auroc_confidence:.3f}, mean log-probability alone {report.auroc_seq_logprob:.3f}; "
        f"calibration error {report.calibration_error:.3f}); stored in {model_file}"
    )


def _calibrate_directions(model_file: Path, recipe: Recipe, device: torch.device, log: Callable[[str], None]) -> None:
    """A multilingual model: one calibration per direction, each on its own validation pairs (the translations
    of one direction and another are not alike enough to share a map)."""
    loaded = load_model(model_file, device)
    fitted = {}
    for src, tgt in recipe.directions:
        name = f"{src}-{tgt}"
        sources_path, references_path = split_text(recipe.data_dir, f"valid.{name}", src, tgt)
        if not (sources_path.is_file() and references_path.is_file()):
            log(f"no validation set: {model_file} has no calibration for {name}")
            continue
        kept = _pairs(sources_path, references_path)
        if len(kept) < MIN_PAIRS:
            log(f"{name}: {len(kept)} validation pairs, fewer than the {MIN_PAIRS} a calibration needs")
            continue
        way = route(recipe.data, loaded.src_vocab, tgt, str(model_file), src)
        release_freed_memory()
        try:
            report = calibrate_loaded(loaded, kept, recipe.train.calibrate_chrf, device, probe=MIN_PAIRS, way=way)
        except NmtError as err:
            log(f"{model_file} has no calibration for {name}: {err}")
            continue
        fitted[name] = report.calibration
        log(f"{name}: confidence calibrated on {report.pairs:,} validation pairs ({report.acceptable:.0%} acceptable; "
            f"AUROC for bad translations {report.auroc_confidence:.3f})")  # fmt: skip
    if fitted:
        store_in_place(model_file, fitted)


def _pairs(sources_path: Path, references_path: Path) -> list[tuple[str, str]]:
    """The validation pairs a calibration learns from: both sides non-empty."""
    sources = split_lines(sources_path.read_text(encoding="utf-8"))
    references = split_lines(references_path.read_text(encoding="utf-8"))
    return [(s, r) for s, r in zip(sources, references) if s.strip() and r.strip()]
