"""Load the models, build the application and run it under uvicorn until SIGINT/SIGTERM.

uvicorn answers a SIGTERM by refusing new connections and waiting for the requests in flight;
then the application's lifespan ends and each decoding loop finishes what it holds.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import replace
from pathlib import Path

import torch
import uvicorn

from ..decode.loading import LoadedModel, load_model
from ..decode.targets import Route, language, route, target_tags
from ..errors import NmtError
from ..model.transformer import count_parameters
from .api import create_app
from .loop import DecodingLoop
from .metrics import ServerMetrics
from .requests import Limits, ServedModel


def load_served_models(
    paths: list[Path],
    device: torch.device,
    dtype: torch.dtype,
    metrics: ServerMetrics,
    batch_tokens: int | None,
    max_queue: int,
    batching: bool,
    int8: bool = False,
) -> list[ServedModel]:
    """One decoding loop per model, named after its language pair (``en-de``; ``en-de.2`` if repeated). A
    multilingual model (target tags, ``decode/targets.py``) serves each of its directions (``en-fr``, ``en-de``...)
    through its one loop, so that requests of every direction share its batches. A direction none serves that
    two others join up to is served through their pivot language (:func:`pivots`). ``int8``: linear layers compute
    in int8 (the CPU only)."""
    served: list[ServedModel] = []
    for path in paths:
        loaded = load_model(path, device, dtype, int8)
        loop = None
        for source, target, way in _directions(loaded):
            name = f"{source}-{target}"
            taken = sum(1 for m in served if m.source == source and m.target == target)
            if taken:
                name = f"{name}.{taken + 1}"
            if loop is None:
                tokens = batch_tokens or loaded.recipe.decode.batch_tokens
                loop = DecodingLoop(loaded.model, name, metrics, tokens, max_queue, batching, loaded.rules())
            parameters = count_parameters(loaded.model)
            calibrated = loaded.for_direction(source, target)  # a multilingual model's map for this direction
            served.append(ServedModel(name, source, target, calibrated, loop, parameters, way.source_prefix, way.target_tag))
    return served + pivots(served)


def _directions(loaded: LoadedModel) -> list[tuple[str, str, Route]]:
    """(source, target, how a line is told its target) for each direction a model serves: a multilingual
    recipe's directions (``data.pairs``), else its source with each of its target tags' languages (a tag's own
    name where two tags share a language, as Serbian's two scripts), else its one pair."""
    data, vocab = loaded.recipe.data, loaded.src_vocab
    tags = target_tags(vocab)
    if data.pairs:
        return [(src, tgt, route(data, vocab, tgt, "", src)) for src, tgt in loaded.recipe.directions]
    if not tags:
        return [(data.src_lang, data.tgt_lang, Route())]
    by_language: dict[str, list[str]] = {}
    for name in tags:
        by_language.setdefault(language(name), []).append(name)
    found = [
        (data.src_lang, lang if len(names) == 1 else name, tags[name])
        for lang, names in by_language.items()
        for name in names
    ]
    return [(src, tgt, Route((tag,))) for src, tgt, tag in sorted(found)]


def pivots(served: list[ServedModel]) -> list[ServedModel]:
    """The directions no model serves that two served ones join up to, through a pivot language (English where
    it can be, as LibreTranslate pivots): each answered by translating into the pivot, then out of it."""
    direct = {(m.source, m.target) for m in served}
    first_of = {(m.source, m.target): m for m in reversed(served)}  # the first model of a direction, as requests pick
    languages = sorted({m.source for m in served} | {m.target for m in served})
    found = []
    for source in sorted({m.source for m in served}):
        for target in languages:
            if source == target or (source, target) in direct:
                continue
            middle = [p for p in languages if (source, p) in direct and (p, target) in direct]
            if not middle:
                continue
            pivot = "en" if "en" in middle else middle[0]
            second = first_of[(pivot, target)]
            found.append(replace(second, name=f"{source}-{target}", source=source, pivot=first_of[(source, pivot)]))
    return found


def check_port(host: str, port: int) -> None:
    """Fail in one line, before loading any model, if the address cannot be listened on."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            probe.bind((host, port))
    except OSError as err:
        raise NmtError(f"cannot listen on {host}:{port}: {err.strerror or err}; pick another --port or --host") from None


def serve(
    paths: list[Path],
    host: str,
    port: int,
    device: torch.device,
    dtype: torch.dtype,
    limits: Limits,
    batch_tokens: int | None,
    max_queue: int,
    batching: bool,
    log_level: str,
    int8: bool = False,
) -> None:
    check_port(host, port)
    metrics = ServerMetrics()
    models = load_served_models(paths, device, dtype, metrics, batch_tokens, max_queue, batching, int8)
    app = create_app(models, limits, metrics)
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s: %(message)s")
    for model in models:
        logging.getLogger("nmt.serve").info(
            "%s: %s (%s parameters) on %s", model.name, model.loaded.path, f"{model.parameters:,}", device
        )
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=None)
    server = uvicorn.Server(config)
    try:
        server.run()
    except SystemExit:  # uvicorn exits when it cannot bind after all (it logged why)
        raise NmtError(f"cannot listen on {host}:{port} (see the message above)") from None
    if not server.started:
        raise NmtError(f"the server did not start on {host}:{port} (see the messages above)")
