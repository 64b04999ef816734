"""The HTTP side of ``nmt serve``: routes, limits, JSON errors and the web page (FastAPI).

Handlers never decode: they check a request and hand its lines, in a worker thread, to the engines
``nmt translate`` builds (``engines.py``), whose searches join the model's decoding loop; they wait for
the answer, or for the client to go away (then its searches are called off and their rows freed at the
loop's next step). The answers' shapes are ``answers.py``'s, uploaded documents ``files.py``'s. Errors
are ``{"error": "..."}`` with a 4xx/5xx status, as LibreTranslate answers them. LibreTranslate's routes
are all served (``/translate``, ``/detect``, ``/languages``, ``/frontend/settings``, ``/translate_file``,
``/suggest``), read as its server reads them: JSON, form-encoded or multipart bodies (``body.py``). Every
response is counted in ``/metrics`` by route and status; a client that goes away is one log line.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import asynccontextmanager, suppress
from importlib import resources
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from ..decode.glossary_search import check_term_lengths
from ..errors import NmtError
from ..formats import EXTENSIONS
from ..languages import LanguageDetector, language_name
from ..terms.glossary import Glossary
from ..terms.matching import compiled
from ..version import __version__
from .answers import Decoded, describe, html_answer, text_answer
from .body import read_fields
from .engines import document_sentences, line_engine, translate_lines
from .files import file_routes
from .loop import Cancelled, LoopSearches, QueueFull, ShuttingDown
from .metrics import ServerMetrics
from .requests import (
    BadRequest,
    Limits,
    ServedModel,
    TranslationRequest,
    parse_request,
)
from .responses import CountResponses, SafeJSONResponse

log = logging.getLogger("nmt.serve")


def create_app(models: list[ServedModel], limits: Limits, metrics: ServerMetrics) -> FastAPI:
    """The application; its lifespan starts the models' decoding loops and drains them at shutdown."""

    loops = list({id(model.loop): model.loop for model in models}.values())  # a multilingual model's directions share one
    # Each request waits for its searches in a thread of its own (engines.py), so that every waiting request's
    # sentences can join the running batch: as many threads as the queue holds sentences, up to 1,024 (beyond, a
    # request waits for a thread as it would for room in the queue); they start as requests come.
    workers = min(1024, max(8, max(loop.max_queue for loop in loops)))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="request")

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        for loop in loops:
            loop.start()
        yield
        for loop in loops:  # uvicorn has answered every request by now (SIGTERM drains them first)
            await asyncio.to_thread(loop.stop)
        pool.shutdown(wait=False)

    # No generated /docs or /redoc pages: they load their scripts from a CDN (nothing offline) and the routes
    # read their bodies themselves, so the generated schema would show none; docs/serving.md documents them.
    app = FastAPI(
        title="nmt serve",
        version=__version__,
        lifespan=lifespan,
        default_response_class=SafeJSONResponse,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.add_middleware(CountResponses, metrics=metrics)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, err: HTTPException) -> JSONResponse:
        return SafeJSONResponse({"error": str(err.detail)}, status_code=err.status_code)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, err: Exception) -> JSONResponse:
        log.error("internal error: %s: %s", type(err).__name__, str(err).splitlines()[0] if str(err) else "")
        return SafeJSONResponse({"error": f"internal error ({type(err).__name__}); the server goes on"}, status_code=500)

    for glossary in limits.glossaries.values():  # checked and compiled now, off every request's path
        for model in models:
            check_term_lengths(glossary, model.loaded)
        compiled(glossary, keep=True)
    detector = LanguageDetector(sorted({m.source for m in models} | {m.target for m in models}))
    app.include_router(_server_routes(models, metrics, limits.glossaries))
    app.include_router(_language_routes(models, limits, detector))
    app.include_router(file_routes(models, limits, pool))
    app.include_router(_translate_route(models, limits, metrics, detector, pool))
    return app


def _server_routes(models: list[ServedModel], metrics: ServerMetrics, glossaries: dict[str, Glossary]) -> APIRouter:
    """The web page, health, the models and glossaries served and Prometheus metrics."""
    router = APIRouter()
    page = resources.files("nmt_cli.serve").joinpath("page.html").read_text(encoding="utf-8")

    @router.get("/", response_class=HTMLResponse)
    async def index() -> str:
        return page

    @router.get("/health")
    async def health() -> dict[str, Any]:
        loops = {id(m.loop): m.loop for m in models}.values()  # a multilingual model's directions share one
        return {"status": "ok", "models": len(models), "queued_sentences": sum(loop.queued_sentences for loop in loops)}

    @router.get("/models")
    async def list_models() -> list[dict[str, Any]]:
        return [describe(model) for model in models]

    @router.get("/glossaries")
    async def list_glossaries() -> list[dict[str, Any]]:
        return [{"name": name, "terms": len(glossary)} for name, glossary in sorted(glossaries.items())]

    @router.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    return router


def _language_routes(models: list[ServedModel], limits: Limits, detector: LanguageDetector) -> APIRouter:
    """LibreTranslate's: the languages, the settings its clients read first, detection, (no) suggestions."""
    router = APIRouter()

    @router.get("/languages")
    async def languages() -> list[dict[str, Any]]:
        """LibreTranslate's list: each language text can be translated from, its name and its targets."""
        sources = sorted({m.source for m in models})
        return [
            {"code": code, "name": language_name(code), "targets": sorted({m.target for m in models if m.source == code})}
            for code in sources
        ]

    @router.get("/frontend/settings")
    async def frontend_settings() -> dict[str, Any]:
        """What LibreTranslate's web page and clients read first: limits, keys, the default pair."""
        first = models[0]
        return {
            "charLimit": limits.max_body_bytes,
            "frontendTimeout": 500,
            "apiKeys": False,
            "keyRequired": False,
            "suggestions": False,
            "filesTranslation": True,
            "supportedFilesFormat": sorted(EXTENSIONS),
            "language": {
                "source": {"code": first.source, "name": language_name(first.source)},
                "target": {"code": first.target, "name": language_name(first.target)},
            },
        }

    @router.post("/detect")
    async def detect(request: Request) -> Response:
        try:
            fields, _ = await read_fields(request, limits.max_body_bytes)
            text = fields.get("q")
            if isinstance(text, list) and text and all(isinstance(t, str) for t in text):
                text = "\n".join(text)
            if not isinstance(text, str):
                raise BadRequest(400, '"q" must be a string: the text whose language to detect')
            if detector.unavailable:
                raise BadRequest(501, detector.unavailable)
            ranked = detector.detect(text.encode("utf-8", "replace").decode("utf-8"))
            return SafeJSONResponse([{"confidence": confidence, "language": code} for code, confidence in ranked])
        except BadRequest as err:
            return SafeJSONResponse({"error": err.message}, status_code=err.status)
        except ClientDisconnect:
            log.info("a client went away before its /detect request was read")
            return Response(status_code=499)

    @router.post("/suggest")
    async def suggest() -> Response:
        return SafeJSONResponse({"error": "suggestions are disabled on this server"}, status_code=403)

    return router


def _translate_route(
    models: list[ServedModel], limits: Limits, metrics: ServerMetrics, detector: LanguageDetector, pool: Executor
) -> APIRouter:
    """``/translate``, in both request shapes (LibreTranslate's and nmt's own)."""
    router = APIRouter()

    @router.post("/translate")
    async def translate(request: Request) -> Response:
        started = time.perf_counter()
        metrics.in_flight.inc()
        try:
            fields, from_form = await read_fields(request, limits.max_body_bytes)
            parsed = parse_request(fields, from_form, models, limits, detector)
            if parsed.html:
                pages = await asyncio.get_running_loop().run_in_executor(pool, _translate_html, parsed)
                metrics.requests.labels("ok").inc()
                return SafeJSONResponse(html_answer(parsed, pages, time.perf_counter() - started))
            decoded = await _decode(request, parsed, pool)
            if decoded is None:
                metrics.requests.labels("cancelled").inc()
                log.info("a client went away before its translation was ready")
                return Response(status_code=499)  # nobody is listening any more
            metrics.requests.labels("ok").inc()
            return SafeJSONResponse(text_answer(parsed, decoded, time.perf_counter() - started))
        except BadRequest as err:
            metrics.requests.labels("error" if err.status >= 500 else "refused").inc()
            headers = {"Retry-After": "1"} if err.status in (429, 503) else None
            return SafeJSONResponse({"error": err.message}, status_code=err.status, headers=headers)
        except ClientDisconnect:
            metrics.requests.labels("cancelled").inc()
            log.info("a client went away before its request was read")
            return Response(status_code=499)
        finally:
            metrics.in_flight.dec()
            metrics.latency.observe(time.perf_counter() - started)

    return router


async def _decode(request: Request, parsed: TranslationRequest, pool: Executor) -> Decoded | None:
    """The request's lines translated by ``nmt translate``'s engines (``engines.py``), their searches on the
    models' decoding loops; None if the client went away (its searches are called off, their rows freed)."""
    lines = [text.split("\n") for text in parsed.texts]
    flat = [line.strip() for text_lines in lines for line in text_lines]
    searches = LoopSearches()
    engine = line_engine(parsed, searches)
    work = asyncio.get_running_loop().run_in_executor(pool, translate_lines, engine, parsed.model, flat)
    gone = asyncio.ensure_future(_disconnected(request))
    waiting: set[asyncio.Future[Any]] = {work, gone}
    await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    if not work.done():
        searches.cancel()
        with suppress(Exception):
            await work  # its thread ends at once (a model reading context: once its lines are translated)
        return None
    gone.cancel()
    try:
        found = work.result()
    except Cancelled:
        return None
    except QueueFull as err:
        raise BadRequest(429, f"too many requests: {err}; retry later") from None
    except ShuttingDown as err:
        raise BadRequest(503, str(err)) from None
    except NmtError as err:
        raise BadRequest(500, str(err)) from None
    reader = parsed.model.pivot or parsed.model  # the model that reads the source
    max_src, prefix = reader.loaded.recipe.model.max_positions - 1, len(reader.source_prefix)
    truncated = [bool(ids) and prefix + len(ids) > max_src for ids in reader.loaded.src_vocab.encode(flat, out_type=int)]
    hypotheses = [hyps if line else [] for line, hyps in zip(flat, found)]
    return Decoded(lines, _regroup(hypotheses, lines), _regroup(truncated, lines))


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


def _translate_html(parsed: TranslationRequest) -> list[str]:
    """``"format": "html"``: each text translated as an HTML page or fragment (``formats/html.py``), its
    sentences through the decoding loop."""
    from ..formats.html import translate_html

    sentences = document_sentences(parsed.model, LoopSearches(wait_for_room=True), parsed.glossary)
    return [translate_html(text, sentences, parsed.model.source, parsed.model.target)[0] for text in parsed.texts]
