"""The HTTP side of ``nmt serve``: routes, limits, JSON errors and the web page (FastAPI).

Handlers never decode: they check a request, turn its text into source ids, hand a
:class:`.loop.Job` to the model's decoding loop and wait for it, or for the client to go away
(then its rows are freed at the loop's next step). Errors are ``{"error": "..."}`` with a 4xx/5xx
status, as LibreTranslate answers them.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException

from ..decode.search import Hypothesis
from .loop import Job, QueueFull, ShuttingDown
from .metrics import ServerMetrics
from .requests import BadRequest, Limits, ServedModel, TranslationRequest, parse_request


@dataclass
class Decoded:
    """A request's lines and, for each, its n-best list (empty lines: none) and whether it was cut."""

    lines: list[list[str]]  # per text, its lines
    hypotheses: list[list[list[Hypothesis]]]  # per text, per line
    truncated: list[list[bool]]


def create_app(models: list[ServedModel], limits: Limits, metrics: ServerMetrics) -> FastAPI:
    """The application; its lifespan starts the models' decoding loops and drains them at shutdown."""

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        for model in models:
            model.loop.start()
        yield
        for model in models:  # uvicorn has answered every request by now (SIGTERM drains them first)
            await asyncio.to_thread(model.loop.stop)

    app = FastAPI(title="nmt serve", lifespan=lifespan)
    page = resources.files("nmt_cli.serve").joinpath("page.html").read_text(encoding="utf-8")

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, err: HTTPException) -> JSONResponse:
        return JSONResponse({"error": str(err.detail)}, status_code=err.status_code)

    @app.get("/", response_class=HTMLResponse)
    async def index() -> str:
        return page

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "models": len(models), "queued_sentences": sum(m.loop.queued_sentences for m in models)}

    @app.get("/models")
    async def list_models() -> list[dict[str, Any]]:
        return [_describe(model) for model in models]

    @app.get("/languages")
    async def languages() -> list[dict[str, Any]]:
        """LibreTranslate's list: each source language and the targets it can be translated into."""
        sources = sorted({m.source for m in models})
        return [{"code": s, "name": s, "targets": sorted({m.target for m in models if m.source == s})} for s in sources]

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/translate")
    async def translate(request: Request) -> Response:
        started = time.perf_counter()
        metrics.in_flight.inc()
        try:
            parsed = parse_request(await _body(request, limits.max_body_bytes), models, limits)
            decoded = await _decode(request, parsed)
            if decoded is None:
                metrics.requests.labels("cancelled").inc()
                return Response(status_code=499)  # nobody is listening any more
            metrics.requests.labels("ok").inc()
            return JSONResponse(_answer(parsed, decoded, time.perf_counter() - started))
        except BadRequest as err:
            metrics.requests.labels("error" if err.status >= 500 else "refused").inc()
            headers = {"Retry-After": "1"} if err.status in (429, 503) else None
            return JSONResponse({"error": err.message}, status_code=err.status, headers=headers)
        finally:
            metrics.in_flight.dec()
            metrics.latency.observe(time.perf_counter() - started)

    return app


async def _body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"the body has {int(declared):,} bytes; the limit is {limit:,}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BadRequest(413, f"the body is over the limit of {limit:,} bytes")
    return bytes(body)


async def _decode(request: Request, parsed: TranslationRequest) -> Decoded | None:
    """Queue the request's non-empty lines and wait for them; None if the client disconnected."""
    loaded, max_src = parsed.model.loaded, parsed.model.loaded.recipe.model.max_positions - 1
    lines = [text.split("\n") for text in parsed.texts]
    flat = [line.strip() for text_lines in lines for line in text_lines]
    todo = [i for i, line in enumerate(flat) if line]
    encoded = loaded.src_vocab.encode([flat[i] for i in todo], out_type=int)
    truncated_flat = [False] * len(flat)
    for i, ids in zip(todo, encoded):
        truncated_flat[i] = len(ids) > max_src
    results_flat: list[list[Hypothesis]] = [[] for _ in flat]
    if todo:
        running = asyncio.get_running_loop()
        answered: asyncio.Future[Job] = running.create_future()
        job = Job(
            [ids[:max_src] for ids in encoded],
            parsed.config,
            parsed.nbest,
            on_done=lambda job: _resolve_from_thread(running, answered, job),
        )
        try:
            parsed.model.loop.submit(job)
        except QueueFull as err:
            raise BadRequest(429, f"too many requests: {err}; retry later") from None
        except ShuttingDown as err:
            raise BadRequest(503, str(err)) from None
        gone = asyncio.ensure_future(_disconnected(request))
        waiting: set[asyncio.Future[Any]] = {answered, gone}
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if not answered.done():
            parsed.model.loop.cancel(job)
            return None
        gone.cancel()
        if job.error:
            raise BadRequest(500, job.error)
        for i, hyps in zip(todo, job.results):
            results_flat[i] = hyps
    return Decoded(lines, _regroup(results_flat, lines), _regroup(truncated_flat, lines))


def _resolve_from_thread(loop: asyncio.AbstractEventLoop, future: asyncio.Future, job: Job) -> None:
    """Called by the decoding loop's thread: hand the job to the event loop that awaits it."""
    loop.call_soon_threadsafe(_resolve, future, job)


def _resolve(future: asyncio.Future, job: Job) -> None:
    if not future.done():
        future.set_result(job)


async def _disconnected(request: Request) -> None:
    """Returns when the client closes the connection (the body has been read: only that can come)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _regroup(flat: list, lines: list[list[str]]) -> list[list]:
    grouped, start = [], 0
    for text_lines in lines:
        grouped.append(flat[start : start + len(text_lines)])
        start += len(text_lines)
    return grouped


def _answer(parsed: TranslationRequest, decoded: Decoded, seconds: float) -> dict[str, Any]:
    """The response body. A text of several lines joins its lines' i-th hypotheses (or their best)."""
    vocab = parsed.model.loaded.tgt_vocab
    texts = []
    for hyps_per_line in decoded.hypotheses:
        alternatives = []
        for rank in range(parsed.nbest):
            picked = [hyps[min(rank, len(hyps) - 1)] if hyps else None for hyps in hyps_per_line]
            if rank and all(h is None or len(hyps) <= rank for h, hyps in zip(picked, hyps_per_line)):
                break
            text = "\n".join(vocab.decode(h.tokens) if h else "" for h in picked)
            scores = [h.score for h in picked if h]
            alternatives.append({"text": text, "score": sum(scores) / len(scores) if scores else 0.0})
        texts.append(alternatives)
    if parsed.libre:
        best = [alternatives[0]["text"] for alternatives in texts]
        body: dict[str, Any] = {"translatedText": best[0] if parsed.single else best}
        if parsed.nbest > 1:
            others = [[a["text"] for a in alternatives[1:]] for alternatives in texts]
            body["alternatives"] = others[0] if parsed.single else others
        return body
    return {
        "model": parsed.model.name,
        "beam": parsed.config.beam,
        "alpha": parsed.config.alpha,
        "translations": [
            {
                "text": alternatives[0]["text"],
                "score": alternatives[0]["score"],
                "nbest": alternatives,
                "truncated": any(cut),
            }
            for alternatives, cut in zip(texts, decoded.truncated)
        ],
        "time_ms": round(seconds * 1000, 2),
    }


def _describe(model: ServedModel) -> dict[str, Any]:
    recipe = model.loaded.recipe
    return {
        "name": model.name,
        "source": model.source,
        "target": model.target,
        "recipe": recipe.name,
        "path": str(model.loaded.path),
        "parameters": model.parameters,
        "layers": recipe.model.layers,
        "d_model": recipe.model.d_model,
        "beam": recipe.decode.beam,
        "alpha": recipe.decode.alpha,
        "max_positions": recipe.model.max_positions,
    }
