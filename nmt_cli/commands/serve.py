"""``nmt serve -m MODEL``: translation over HTTP with continuous batching (docs/serving.md)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Literal

import typer

from ..config import DecodeConfig
from ..errors import NmtError
from ..utils.allocator import bound_kernel_caches
from .common import ThreadsOption, decode_option, device_option, resolve_device, weights_dtype, with_decoding


def run(
    models: list[Path] = typer.Option(
        ...,
        "--model",
        "-m",
        help="Model folder or checkpoint; repeat for more models (each is chosen by its language pair).",
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(8080, "--port", min=0, max=65535, help="Port to listen on."),
    device: str = device_option(),
    threads: int = ThreadsOption,
    dtype: Literal["fp32", "bf16", "fp16", "int8"] = typer.Option(
        "fp32", "--dtype", help="Weights and arithmetic: fp32, bf16 or fp16; int8 on the CPU (linear layers in 8 bits)."
    ),
    batching: bool = typer.Option(
        True,
        "--batching/--no-batching",
        help="Continuous batching: new requests join "
        "the running batch at the next decoder step. Off: one request at a time.",
    ),
    batch_tokens: int = decode_option("batch_tokens", "--batch-tokens"),
    max_queue: int = typer.Option(
        1024, "--max-queue", min=1, max=10_000_000, help="Sentences waiting at most; more: HTTP 429."
    ),
    max_sentences: int = typer.Option(
        128, "--max-sentences", min=1, max=1_000_000, help="Lines per request at most; more: 413."
    ),
    max_body: int = typer.Option(
        1_000_000, "--max-body-bytes", min=1, max=1 << 30, help="Request body size at most; more: 413."
    ),
    max_beam: int = typer.Option(16, "--max-beam", min=1, max=1024, help="Largest beam a request may ask for."),
    max_unpacked_mb: int = typer.Option(
        100, "--max-unpacked-mb", min=1, max=1 << 20, help="An uploaded .docx whose XML parts unpack to more: 413."
    ),
    max_unpack_ratio: float = typer.Option(
        100.0,
        "--max-unpack-ratio",
        min=1.0,
        max=1e9,
        help="An uploaded .docx with a part (over 1 MiB) that unpacks to more times its packed size: 413.",
    ),
    log_level: Literal["critical", "error", "warning", "info", "debug"] = typer.Option(
        "info", "--log-level", help="How much the server logs."
    ),
    glossaries: list[str] = typer.Option(
        [],
        "--glossary",
        metavar="[NAME=]PATH",
        help='A glossary requests may name ("glossary": "NAME"): TSV, CSV or TBX as nmt translate reads it; '
        "FILE alone is named after its file name. Repeat for several. Requests may also send their own pairs.",
        show_default=False,
    ),
) -> None:
    """Serve models over HTTP: POST /translate (LibreTranslate's API and ours), a web page at /."""
    bound_kernel_caches()  # decoding's batches come in every shape (utils/allocator.py)
    try:
        import fastapi  # noqa: F401
        import prometheus_client  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as err:
        raise NmtError(f"nmt serve needs the serve extra ({err.name} is missing): pip install 'nmt-cli[serve]'") from None
    import torch

    from ..formats.unpack import MIB, UnpackLimits
    from ..serve.requests import Limits
    from ..serve.server import serve
    from ..utils.allocator import keep_freed_memory
    from ..utils.cpu import check_parallelism

    with_decoding(DecodeConfig(), {"batch_tokens": batch_tokens})  # a bad value fails as the recipe key would
    weights = weights_dtype(dtype)  # a bad name fails before anything is loaded
    if log_level not in ("critical", "error", "warning", "info", "debug"):
        raise NmtError(f"--log-level: '{log_level}' is not critical, error, warning, info or debug")
    for path in models:
        if not path.exists():
            raise NmtError(f"{path}: model not found (a folder written by nmt train, or a checkpoint file)")
    check_parallelism(threads, "--threads")
    torch.set_num_threads(threads or os.cpu_count() or 1)
    keep_freed_memory()  # each step's buffers reused, not faulted in anew (utils/allocator.py)
    unpack = UnpackLimits(max_unpacked_mb * MIB, max_unpack_ratio)
    named = _served_glossaries(glossaries, models)
    limits = Limits(max_body_bytes=max_body, max_sentences=max_sentences, max_beam=max_beam, unpack=unpack, glossaries=named)
    # uvicorn drains the requests in flight on SIGTERM, then raises it again under the handler it found:
    # the default one, so that a supervisor sees the server ended by SIGTERM (not an error exit).
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    target = resolve_device(device)
    if dtype == "int8" and target.type != "cpu":
        raise NmtError(f"--dtype int8: computed on the CPU, not on {target}; use --dtype bf16 there")
    serve(models, host, port, target, weights, limits, batch_tokens, max_queue, batching, log_level, dtype == "int8")


def _served_glossaries(given: list[str], models: list[Path]) -> dict:  # type: ignore[type-arg]
    """``--glossary NAME=FILE`` read and checked before any model loads (a TBX is read for the first model's
    languages, taken from the recipe beside it)."""
    from ..config import load_recipe
    from ..terms.glossary import read_glossary

    named = {}
    for item in given:
        name, _, file = item.rpartition("=") if "=" in item else ("", "", item)
        path = Path(file)
        name = name or path.stem
        if not path.is_file():
            raise NmtError(f"--glossary {item}: {path} not found")
        if name in named:
            raise NmtError(f"--glossary {item}: the name '{name}' is taken; give NAME=FILE with another name")
        languages = ("", "")
        recipe_file = (models[0] if models[0].is_dir() else models[0].parent) / "recipe.yaml"
        if recipe_file.is_file():
            data = load_recipe(recipe_file).data
            languages = (data.src_lang, data.tgt_lang)
        named[name] = read_glossary(path, *languages)
    return named
