"""``nmt calibrate``: fit a model's confidence map on sentences and references of the user's own domain."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import NmtError
from ..utils.allocator import bound_kernel_caches
from .common import ThreadsOption, console, device_option, language_option, resolve_device, translate_hint


def run(
    model: Path = typer.Option(..., "--model", "-m", help="Model folder (its model.pt) or model file."),
    src: Path = typer.Option(..., "--src", help="Source sentences, one per line."),
    ref: Path = typer.Option(..., "--ref", help="Their reference translations, one per line."),
    output: Path = typer.Option(
        None,
        "--output",
        "-o",
        help="The calibrated model file to write [default: model.calibrated.pt beside the model file].",
        show_default=False,
    ),
    threshold: float = typer.Option(
        50.0, "--threshold", min=0.0, max=100.0, help="The sentence chrF an acceptable translation reaches."
    ),
    device: str = device_option("cpu"),
    threads: int = ThreadsOption,
    to: str = language_option("--to", "A multilingual model: the direction's target language (its map is this one's)."),
    source: str = language_option("--from", "A multilingual model: the direction's source language."),
) -> None:
    """Fit the confidence of `nmt translate --confidence` to your data; writes a new model file, never over the old."""
    bound_kernel_caches()  # decoding's batches come in every shape (utils/allocator.py)
    from ..decode.fit_confidence import calibrate, write_calibrated
    from ..score.metrics import read_lines
    from ..utils.run_folder import MODEL_FILE

    source_file = model / MODEL_FILE if model.is_dir() else model
    output = output or source_file.with_name(source_file.stem + ".calibrated.pt")
    if output.resolve() == source_file.resolve():  # before the translating, not after
        raise NmtError(f"{output}: is the model file being calibrated; write the calibrated model to another file")
    import os

    import torch

    from ..utils.cpu import check_parallelism

    check_parallelism(threads, "--threads")
    torch.set_num_threads(threads or os.cpu_count() or 1)
    way, direction = _direction(model, source, to)  # before anything is read or translated
    sources, references = read_lines(src), read_lines(ref)
    distinct = len(set(zip(sources, references)))
    if distinct < len(sources):
        console.print(
            f"warning: {len(sources) - distinct:,} of the {len(sources):,} pairs repeat another pair; a fit on "
            f"{distinct:,} distinct pairs, and its scores on them, say less than the count suggests",
            soft_wrap=True,
        )
    report = calibrate(model, sources, references, threshold, resolve_device(device), way)
    write_calibrated(model, report.calibration, output, direction)
    console.print(
        f"calibrated on {report.pairs:,} pairs ({report.acceptable:.0%} acceptable: sentence chrF >= {threshold:g}); "
        f"on these pairs AUROC for bad translations {report.auroc_confidence:.3f} (mean log-probability alone "
        f"{report.auroc_seq_logprob:.3f}), expected calibration error {report.calibration_error:.3f}",
        soft_wrap=True,
    )
    # a multilingual model's calibrated direction, named in full
    reads, writes = direction.split("-") if direction else ("en", "")
    named = ("--from", reads, "--to", writes) if direction else ()
    console.print(
        f"wrote {output}; try it: {translate_hint(output, [reads], [writes], '--confidence', *named)}", soft_wrap=True
    )


def _direction(model: Path, source: str | None, to: str | None):  # type: ignore[no-untyped-def]
    """The route and the name ("en-de") of the direction a multilingual model is calibrated for; (no route,
    None) for a model of one direction."""
    from ..decode.loading import load_model
    from ..decode.targets import language, route
    from .translate_engine import languages_of

    loaded = load_model(model)
    data = loaded.recipe.data
    way = route(data, loaded.src_vocab, to, str(model), source)
    if not data.pairs:
        return way, None
    src, tgt = languages_of(data, source, to)
    if not src:
        raise NmtError(f"{model} reads several languages: give --from, one of the sources of {', '.join(data.pairs)}")
    named = [
        f"{a}-{b}" for a, b in loaded.recipe.directions if language(a) == language(src) and language(b) == language(tgt)
    ]
    if not named:
        raise NmtError(f"{src}-{tgt}: {model} was not trained on it; calibrate one of {', '.join(data.pairs)}")
    return way, named[0]
