"""LibreTranslate's document translation: a file uploaded to ``/translate_file`` (any format ``nmt_cli/formats``
reads) is translated as ``nmt translate`` translates a file (``engines.document_sentences``) and kept for
``/download_file`` by an unguessable token."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import OrderedDict
from concurrent.futures import Executor
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.datastructures import UploadFile
from starlette.requests import ClientDisconnect

from ..errors import NmtError, TooLarge
from ..formats import EXTENSIONS, DocumentRequest, translate_document
from .body import read_fields
from .engines import document_sentences
from .loop import LoopSearches
from .requests import BadRequest, Limits, ServedModel, pick_model, request_glossary, shown
from .responses import SafeJSONResponse

log = logging.getLogger("nmt.serve")


def file_routes(models: list[ServedModel], limits: Limits, pool: Executor) -> APIRouter:
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
            sentences = document_sentences(model, LoopSearches(wait_for_room=True), glossary)
            try:
                document = DocumentRequest(sentences, model.source, model.target, Path(name), limits=limits.unpack)
                translated, _ = await asyncio.get_running_loop().run_in_executor(pool, translate_document, data, document)
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
