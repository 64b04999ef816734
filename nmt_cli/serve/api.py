"""The HTTP side of ``nmt serve``: routes, limits, JSON errors and the web page (FastAPI).

Handlers never decode: they check a request, turn its text into source ids, hand a
:class:`.loop.Job` to the model's decoding loop and wait for it, or for the client to go away
(then its rows are freed at the loop's next step). Errors are ``{"error": "..."}`` with a 4xx/5xx
status, as LibreTranslate answers them. LibreTranslate's routes are all here (``/translate``,
``/detect``, ``/languages``, ``/frontend/settings``, ``/translate_file``, ``/suggest``), read as its
server reads them: JSON, form-encoded or multipart bodies (``body.py``). Every response is counted
in ``/metrics`` by route and status; a client that goes away is one log line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from ..decode.aligner import Aligner
from ..decode.assess import Assessment, Assessor
from ..decode.attention_maps import parse_pharaoh
from ..decode.constrained import CONSTRAINED_MIN_BEAM, term_constraints
from ..decode.glossary_search import check_term_lengths
from ..decode.search import Hypothesis
from ..decode.translator import Translator
from ..errors import NmtError, TooLarge
from ..formats import EXTENSIONS, DocumentRequest, Sentences, translate_document
from ..formats.protect import Masked, keeps_spans, mask_line
from ..formats.segments import through_pivot
from ..languages import LanguageDetector, language_name
from ..terms.glossary import Glossary
from ..terms.matching import compiled
from ..utils.text import as_one_line
from ..version import __version__
from .body import read_fields
from .loop import Job, QueueFull, ShuttingDown
from .metrics import ServerMetrics
from .requests import (
    BadRequest,
    Limits,
    ServedModel,
    TranslationRequest,
    parse_request,
    pick_model,
    request_glossary,
    shown,
)

log = logging.getLogger("nmt.serve")
# Paths counted under their own name in nmt_http_responses_total; any other is "other" (bounded labels).
ROUTES = (
    "/",
    "/health",
    "/models",
    "/languages",
    "/metrics",
    "/translate",
    "/detect",
    "/frontend/settings",
    "/translate_file",
    "/suggest",
)


class SafeJSONResponse(JSONResponse):
    """JSON as UTF-8; text that UTF-8 cannot hold (a lone surrogate a client sent) as \\u escapes, not a 500."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


class CountResponses:
    """ASGI middleware: every HTTP response counted by route and status, errors and refusals included."""

    def __init__(self, app: Any, metrics: ServerMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # what the server answers when the application raises before responding

        async def counted(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            path = scope.get("path", "")
            route = next((r for r in ROUTES if path == r or (r != "/" and path.startswith(r + "/"))), "other")
            self.metrics.responses.labels(route, str(status)).inc()


@dataclass
class Decoded:
    """A request's lines and, for each, its n-best list (empty lines: none) and whether it was cut."""

    lines: list[list[str]]  # per text, its lines
    hypotheses: list[list[list[Hypothesis]]]  # per text, per line
    truncated: list[list[bool]]
    assessments: list[list[list[Assessment]]] | None = None  # per text, per line, per hypothesis ("confidence")
    missing_terms: list[list[str]] | None = None  # per text, the glossary terms its best translation lacks
    placed_terms: list[list[dict[str, str]]] | None = None  # per text, the terms it holds: source and translation
    # per text, per line: what the model read (paths, URLs, numbers... masked) and what each mask stands for
    masked: list[list[Masked]] | None = None


def create_app(models: list[ServedModel], limits: Limits, metrics: ServerMetrics) -> FastAPI:
    """The application; its lifespan starts the models' decoding loops and drains them at shutdown."""

    loops = list({id(model.loop): model.loop for model in models}.values())  # a multilingual model's directions share one

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        for loop in loops:
            loop.start()
        yield
        for loop in loops:  # uvicorn has answered every request by now (SIGTERM drains them first)
            await asyncio.to_thread(loop.stop)

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
    app.include_router(_file_routes(models, limits))
    app.include_router(_translate_route(models, limits, metrics, detector))
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
        return [_describe(model) for model in models]

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


def _file_routes(models: list[ServedModel], limits: Limits) -> APIRouter:
    """LibreTranslate's document translation: upload, then download by the URL the answer gave."""
    router = APIRouter()
    translated_files = TranslatedFiles()

    @router.post("/translate_file")
    async def translate_file(request: Request) -> Response:
        """LibreTranslate's: a multipart ``file`` (any format ``nmt_cli/formats`` reads), answered with the URL of
        its translation; the sentences go through the model's decoding loop like any request's, with the terms of
        a ``glossary`` field (a served glossary's name, or JSON pairs) as ``/translate``'s."""
        try:
            fields, _ = await read_fields(request, limits.max_body_bytes)
            upload = fields.get("file")
            if not isinstance(upload, UploadFile):
                raise BadRequest(400, 'send the document as the multipart field "file"')
            name = Path(upload.filename or "file").name
            if Path(name).suffix.lower() not in EXTENSIONS:
                formats = ", ".join(sorted(EXTENSIONS))
                raise BadRequest(400, f"{shown(name)}: not a document format this server translates ({formats})")
            model, _ = pick_model({k: v for k, v in fields.items() if k in ("source", "target")}, models, [], None)
            glossary = request_glossary(fields, limits, model)
            data = await upload.read()
            sentences = _sentences_by_route(model, glossary=glossary)
            try:
                document = DocumentRequest(sentences, model.source, model.target, Path(name), limits=limits.unpack)
                translated, _ = await asyncio.to_thread(translate_document, data, document)
            except TooLarge as err:
                raise BadRequest(413, str(err)) from None
            except NmtError as err:
                raise BadRequest(400, str(err)) from None
            token = translated_files.keep(name, translated)
            return SafeJSONResponse({"translatedFileUrl": f"{request.base_url}download_file/{token}/{name}"})
        except BadRequest as err:
            return SafeJSONResponse({"error": err.message}, status_code=err.status)
        except ClientDisconnect:
            log.info("a client went away before its file was read")
            return Response(status_code=499)

    @router.get("/download_file/{token}/{name}")
    async def download_file(token: str, name: str) -> Response:
        found = translated_files.get(token, name)
        if found is None:
            return SafeJSONResponse({"error": "no such translated file (they are kept for the last 100)"}, status_code=404)
        return Response(
            found, media_type="application/octet-stream", headers={"Content-Disposition": f'attachment; filename="{name}"'}
        )

    return router


def _translate_route(
    models: list[ServedModel], limits: Limits, metrics: ServerMetrics, detector: LanguageDetector
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
                pages = await asyncio.to_thread(_translate_html, parsed)
                metrics.requests.labels("ok").inc()
                return SafeJSONResponse(_html_answer(parsed, pages, time.perf_counter() - started))
            decoded = await _decode_by_route(request, parsed)
            if decoded is None:
                metrics.requests.labels("cancelled").inc()
                log.info("a client went away before its translation was ready")
                return Response(status_code=499)  # nobody is listening any more
            metrics.requests.labels("ok").inc()
            return SafeJSONResponse(_answer(parsed, decoded, time.perf_counter() - started))
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


async def _decode_by_route(request: Request, parsed: TranslationRequest) -> Decoded | None:
    """:func:`_decode`, through the pivot language first for a direction served by pivoting: the best
    translation of each text into the pivot is what the second model reads."""
    first_model = parsed.model.pivot
    if first_model is None:
        return await _decode(request, parsed)
    first = replace(parsed, model=first_model, nbest=1, confidence=False, glossary=None)
    middle = await _decode(request, first)
    if middle is None:
        return None
    texts = [alternatives[0]["text"] for alternatives in _alternatives(first, middle)]
    return await _decode(request, replace(parsed, texts=texts))


async def _decode(request: Request, parsed: TranslationRequest) -> Decoded | None:
    """Queue the request's non-empty lines and wait for them; None if the client disconnected. As with nmt
    translate's lines (``decode/protected.py``): each line first as it is, then the lines whose translation did not
    keep their paths, URLs, numbers... exactly again, masked (a glossary or a context model: masked at once)."""
    lines = [text.split("\n") for text in parsed.texts]
    plain = [line.strip() for text_lines in lines for line in text_lines]
    masked = [mask_line(line) for line in plain]
    model = parsed.model.loaded.recipe.model
    if parsed.glossary is not None or model.concat or model.recurrence:
        return await _decode_shown(request, parsed, lines, masked)
    first = await _decode_shown(request, parsed, lines, [Masked(line, {}) for line in plain])
    if first is None:
        return None
    vocab = parsed.model.loaded.tgt_vocab
    hypotheses = [hyps for text in first.hypotheses for hyps in text]
    again = [
        i
        for i, (line, hyps) in enumerate(zip(plain, hypotheses))
        if masked[i].originals
        and not all(keeps_spans(line, Masked(line, {}).restore(as_one_line(vocab.decode(h.tokens)))) for h in hyps)
    ]
    if not again:
        return first
    second = await _decode_shown(request, replace(parsed, texts=[plain[i] for i in again]), None, [masked[i] for i in again])
    return None if second is None else _merged(first, second, again)


def _merged(first: Decoded, second: Decoded, again: list[int]) -> Decoded:
    """``first`` with the lines ``again`` (flat indices) taken from ``second`` (one text per line, in that order)."""

    def flat(per_text: list[list[Any]]) -> list[Any]:
        return [item for text in per_text for item in text]

    hypotheses, truncated, shown = flat(first.hypotheses), flat(first.truncated), flat(first.masked or [])
    assessments = flat(first.assessments) if first.assessments is not None else None
    for n, i in enumerate(again):
        hypotheses[i], truncated[i] = second.hypotheses[n][0], second.truncated[n][0]
        shown[i] = (second.masked or [])[n][0]
        if assessments is not None and second.assessments is not None:
            assessments[i] = second.assessments[n][0]
    lines = first.lines
    return replace(
        first,
        hypotheses=_regroup(hypotheses, lines),
        truncated=_regroup(truncated, lines),
        assessments=_regroup(assessments, lines) if assessments is not None else None,
        masked=_regroup(shown, lines),
    )


async def _decode_shown(
    request: Request, parsed: TranslationRequest, lines: list[list[str]] | None, shown: list[Masked]
) -> Decoded | None:
    """The lines (per text; None: each text one line) decoded as ``shown`` (one per line, masked or not)."""
    loaded, max_src = parsed.model.loaded, parsed.model.loaded.recipe.model.max_positions - 1
    lines = lines if lines is not None else [[text] for text in parsed.texts]
    flat = [line.text for line in shown]
    if loaded.recipe.model.concat or loaded.recipe.model.recurrence:  # no glossary here (parse_request)
        decoded = await asyncio.to_thread(_decode_with_translator, parsed, lines, flat)
        return replace(decoded, masked=_regroup(shown, lines))
    todo = [i for i, line in enumerate(flat) if line]
    prefix = list(parsed.model.source_prefix)  # a multilingual model's tag for this direction
    encoded = [prefix + ids if ids else ids for ids in loaded.src_vocab.encode([flat[i] for i in todo], out_type=int)]
    truncated_flat = [False] * len(flat)
    for i, ids in zip(todo, encoded):
        truncated_flat[i] = len(ids) > max_src
    results_flat: list[list[Hypothesis]] = [[] for _ in flat]
    assessed_flat: list[list[Assessment]] = [[] for _ in flat]
    constraints, config = None, parsed.config
    if parsed.glossary is not None:  # each sentence's terms join the running batch with it (decode/constrained.py)
        matcher = compiled(parsed.glossary)
        constraints = [term_constraints(matcher, loaded.tgt_vocab, flat[i]) for i in todo]
        config = replace(config, beam=max(config.beam, CONSTRAINED_MIN_BEAM))
    if todo:
        running = asyncio.get_running_loop()
        answered: asyncio.Future[Job] = running.create_future()
        job = Job(
            [ids[:max_src] for ids in encoded],
            config,
            parsed.nbest,
            on_done=lambda job: _resolve_from_thread(running, answered, job),
            assess=Assessor.of(loaded, parsed.config).assess if parsed.confidence else None,
            constraints=constraints,
            first_token=parsed.model.target_tag,
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
        for i, assessed in zip(todo, job.assessments):
            assessed_flat[i] = assessed
    assessments = _regroup(assessed_flat, lines) if parsed.confidence else None
    missing = placed = None
    if constraints is not None:
        lacking: list[list[str]] = [[] for _ in flat]
        holding: list[list[dict[str, str]]] = [[] for _ in flat]
        for i, wanted in zip(todo, constraints):
            best = loaded.tgt_vocab.decode(results_flat[i][0].tokens) if results_flat[i] else ""
            found = [(c, c.found_in(best)) for c in wanted]
            lacking[i] = [c.source for c, target in found if target is None]
            holding[i] = [{"source": c.source, "target": target} for c, target in found if target is not None]
        missing = [sorted({t for terms in text for t in terms}) for text in _regroup(lacking, lines)]
        placed = [[term for terms in text for term in terms] for text in _regroup(holding, lines)]
    hypotheses, truncated = _regroup(results_flat, lines), _regroup(truncated_flat, lines)
    return Decoded(lines, hypotheses, truncated, assessments, missing, placed, _regroup(shown, lines))


class TranslatedFiles:
    """The last translated documents, by an unguessable token, for /download_file (kept in memory)."""

    def __init__(self, keep: int = 100) -> None:
        self.files: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        self.limit = keep

    def keep(self, name: str, data: bytes) -> str:
        token = secrets.token_urlsafe(16)
        self.files[token] = (name, data)
        while len(self.files) > self.limit:
            self.files.popitem(last=False)
        return token

    def get(self, token: str, name: str) -> bytes | None:
        found = self.files.get(token)
        return found[1] if found is not None and found[0] == name else None


def _sentences_by_route(model: ServedModel, glossary: Glossary | None = None) -> Sentences:
    """:func:`_sentences_through_loop`, through the pivot language first for a direction served by pivoting
    (its word alignments joined through the pivot's words, for markup)."""
    if model.pivot is None:
        return _sentences_through_loop(model, glossary=glossary)
    return through_pivot(_sentences_through_loop(model.pivot), _sentences_through_loop(model))


def _sentences_through_loop(model: ServedModel, block: int = 64, glossary: Glossary | None = None) -> Sentences:
    """A document's sentences -> translations (run in a worker thread), word-aligned for markup: the sentences
    join the model's running batch in blocks, as requests' lines do, so a file never holds the queue alone;
    the alignments are computed in the loop's thread (the model is the loop's alone), as confidence is. With a
    ``glossary``, each sentence's terms go with it (decode/constrained.py)."""
    loaded, max_src = model.loaded, model.loaded.recipe.model.max_positions - 1
    prefix = list(model.source_prefix)  # a multilingual model's tag for this direction
    matcher = compiled(glossary) if glossary is not None else None
    config = loaded.recipe.decode
    if matcher is not None:
        config = replace(config, beam=max(config.beam, CONSTRAINED_MIN_BEAM))
    if loaded.recipe.model.concat or loaded.recipe.model.recurrence:
        return _sentences_as_document(model)
    aligner = Aligner(loaded)

    def run(sentences: list[str], aligned: bool) -> list[tuple[str, list[tuple[int, int]]]]:
        out: list[tuple[str, list[tuple[int, int]]]] = []
        for start in range(0, len(sentences), block):
            pieces = loaded.src_vocab.encode(sentences[start : start + block], out_type=int)
            encoded = [(prefix + ids)[:max_src] if ids else ids for ids in pieces]
            todo = [i for i, ids in enumerate(encoded) if ids]  # a sentence of no pieces has no translation
            finished = threading.Event()
            constraints = None
            if matcher is not None:
                constraints = [term_constraints(matcher, loaded.tgt_vocab, sentences[start + i]) for i in todo]
            job = Job(
                [encoded[i] for i in todo],
                config,
                1,
                on_done=_setter(finished),
                assess=aligner.align if aligned else None,
                constraints=constraints,
                first_token=model.target_tag,
            )
            while todo:
                try:
                    model.loop.submit(job)
                    break
                except QueueFull:
                    time.sleep(0.05)  # the queue is full of requests: wait for room
                except ShuttingDown as err:
                    raise NmtError(str(err)) from None
            if todo:
                finished.wait()
            if job.error:
                raise NmtError(job.error)
            texts: list[tuple[str, list[tuple[int, int]]]] = [("", [])] * len(encoded)
            for n, (i, hyps) in enumerate(zip(todo, job.results)):
                links = parse_pharaoh(job.assessments[n][0]) if aligned and hyps else []
                texts[i] = (as_one_line(loaded.tgt_vocab.decode(hyps[0].tokens)) if hyps else "", links)
            out += texts
        return out

    return Sentences(
        lambda sentences: [text for text, _ in run(sentences, False)],
        lambda sentences: run(sentences, True),
        terms=matcher.applied if matcher is not None else None,  # gettext notes the terms applied, as nmt translate does
        kept=matcher.kept_spans if matcher is not None else None,  # a term translated as itself: masked
    )


# One request at a time per model on this path: a document's lines are translated in order, each after the ones
# before it.
_ENGINE_LOCKS: dict[str, threading.Lock] = {}


def _decode_with_translator(parsed: TranslationRequest, lines: list[list[str]], flat: list[str]) -> Decoded:
    """A request for a model that reads document context (``model.concat``, ``model.recurrence``): its lines are
    one document, in order, decoded with nmt translate's engine rather than the sentence-level decoding loop."""
    loaded, max_src = parsed.model.loaded, parsed.model.loaded.recipe.model.max_positions - 1
    translator = Translator(loaded, parsed.config, nbest=parsed.nbest, assess=parsed.confidence)
    with _ENGINE_LOCKS.setdefault(parsed.model.name, threading.Lock()):
        found = list(translator.translate(flat, documents=["request"] * len(flat)))
    hypotheses: list[list[Hypothesis]] = [
        [Hypothesis(loaded.tgt_vocab.encode(t.text, out_type=int), t.score) for t in hyps] if line else []
        for line, hyps in zip(flat, found)
    ]
    assessed = [[t.assessment for t in hyps if t.assessment is not None] if line else [] for line, hyps in zip(flat, found)]
    truncated = [len(ids) > max_src for ids in loaded.src_vocab.encode(flat, out_type=int)]
    assessments = _regroup(assessed, lines) if parsed.confidence else None
    missing = None
    if parsed.glossary is not None:
        per_line = [list(hyps[0].missing_terms or ()) if line and hyps else [] for line, hyps in zip(flat, found)]
        missing = [sorted({t for terms in text for t in terms}) for text in _regroup(per_line, lines)]
    return Decoded(lines, _regroup(hypotheses, lines), _regroup(truncated, lines), assessments, missing)


def _sentences_as_document(model: ServedModel) -> Sentences:
    """A file's or a page's sentences as one document, for a model that reads document context."""
    translator = Translator(model.loaded, model.loaded.recipe.decode, alignments=True)
    sentences = translator.sentences()
    lock = _ENGINE_LOCKS.setdefault(model.name, threading.Lock())

    def locked(run: Callable[[list[str]], Any]) -> Callable[[list[str]], Any]:
        def call(lines: list[str]) -> Any:
            with lock:
                return run(lines)

        return call

    assert sentences.align is not None
    return Sentences(locked(sentences.translate), locked(sentences.align))


def _setter(event: threading.Event) -> Callable[[Job], None]:
    return lambda _job: event.set()


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


def _translate_html(parsed: TranslationRequest) -> list[str]:
    """``"format": "html"``: each text translated as an HTML page or fragment (``formats/html.py``), its
    sentences through the decoding loop."""
    from ..formats.html import translate_html

    sentences = _sentences_by_route(parsed.model, glossary=parsed.glossary)
    return [translate_html(text, sentences, parsed.model.source, parsed.model.target)[0] for text in parsed.texts]


def _html_answer(parsed: TranslationRequest, pages: list[str], seconds: float) -> dict[str, Any]:
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


def _alternatives(parsed: TranslationRequest, decoded: Decoded) -> list[list[dict[str, Any]]]:
    """Per text, its alternatives (best first): the text of its lines' i-th hypotheses, their mean score and,
    where asked, their confidence."""
    vocab = parsed.model.loaded.tgt_vocab
    texts = []
    for n, hyps_per_line in enumerate(decoded.hypotheses):
        shown = decoded.masked[n] if decoded.masked is not None else [Masked(line, {}) for line in decoded.lines[n]]
        alternatives = []
        for rank in range(parsed.nbest):
            picked = [hyps[min(rank, len(hyps) - 1)] if hyps else None for hyps in hyps_per_line]
            if rank and all(h is None or len(hyps) <= rank for h, hyps in zip(picked, hyps_per_line)):
                break
            text = "\n".join(
                line.restore(as_one_line(vocab.decode(h.tokens))) if h else "" for h, line in zip(picked, shown)
            )
            scores = [h.score for h in picked if h]
            alternative = {"text": text, "score": sum(scores) / len(scores) if scores else 0.0}
            if decoded.assessments is not None:
                alternative.update(_confidence_fields(decoded.assessments[n], rank))
            alternatives.append(alternative)
        texts.append(alternatives)
    return texts


def _answer(parsed: TranslationRequest, decoded: Decoded, seconds: float) -> dict[str, Any]:
    """The response body. A text of several lines joins its lines' i-th hypotheses (or their best); a direction
    served through a pivot language says which (``"pivot": "en"``)."""
    texts = _alternatives(parsed, decoded)
    pivot = {"pivot": parsed.model.pivot.target} if parsed.model.pivot is not None else {}
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
        if decoded.missing_terms is not None:  # an addition, as "confidence" is
            body["missingTerms"] = decoded.missing_terms[0] if parsed.single else decoded.missing_terms
        if parsed.ignored:
            body["ignored"] = parsed.ignored
        return body
    return {
        "model": parsed.model.name,
        **pivot,
        "beam": parsed.config.beam,
        "alpha": parsed.config.alpha,
        "translations": [
            {
                **alternatives[0],
                "nbest": alternatives,
                "truncated": any(cut),
                **({"missing_terms": decoded.missing_terms[n]} if decoded.missing_terms is not None else {}),
                **({"glossary_terms": decoded.placed_terms[n]} if decoded.placed_terms is not None else {}),
            }
            for n, (alternatives, cut) in enumerate(zip(texts, decoded.truncated))
        ],
        "time_ms": round(seconds * 1000, 2),
        **({"ignored": parsed.ignored} if parsed.ignored else {}),
    }


def _confidence_fields(assessed_per_line: list[list[Assessment]], rank: int) -> dict[str, Any]:
    """The confidence of a text's ``rank``-th translation (a line with fewer alternatives: its last)."""
    return Assessment.of_text([found[min(rank, len(found) - 1)] if found else None for found in assessed_per_line])


def _describe(model: ServedModel) -> dict[str, Any]:
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
