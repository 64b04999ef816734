"""Reading a request's fields, as LibreTranslate's server does: a JSON, form-encoded or multipart body, or the
query string.

LibreTranslate's client libraries send forms (``libretranslatepy``: ``application/x-www-form-urlencoded``;
``libretranslate-aio``: the same, repeating ``q`` for a list, and multipart for files), so a server that
reads only JSON answers every call of theirs with 400. A form's values are strings; the request
parser (``requests.py``) reads numbers from them. Whatever the body holds, the outcome is fields or a
:class:`BadRequest` with a one-line reason: never an exception that would answer 500.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl

from starlette.datastructures import UploadFile
from starlette.requests import Request

from ..errors import reason
from .requests import BadRequest

MAX_FORM_FIELDS = 1000


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refused with 413 once it passes ``limit`` bytes (declared or sent)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"the body has {int(declared):,} bytes; the limit is {limit:,}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BadRequest(413, f"the body is over the limit of {limit:,} bytes")
    return bytes(body)


async def read_fields(request: Request, limit: int) -> tuple[dict[str, Any], bool]:
    """The request's fields, and whether they came from a form or the query string (their values are then
    strings). As LibreTranslate's server reads them: a JSON body alone, else the form's fields over the query
    string's (deep-translator's ``LibreTranslator`` sends ``q``, ``source``, ``target`` and ``api_key`` in the
    query string of a POST with an empty body)."""
    body = await read_body(request, limit)
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/x-www-form-urlencoded":
        return {**_query(request), **_urlencoded(body)}, True
    if kind == "multipart/form-data":
        return {**_query(request), **await _multipart(request, body)}, True
    if not body.strip() and request.url.query:
        return _query(request), True
    return _json(body), False


def _query(request: Request) -> dict[str, Any]:
    """The query string's fields (a repeated key gives the list, as in a form)."""
    try:
        pairs = parse_qsl(request.url.query, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
    except ValueError:
        raise BadRequest(413, f"the query string has more than {MAX_FORM_FIELDS} fields") from None
    return _grouped(pairs)


def _json(body: bytes) -> dict[str, Any]:
    try:
        fields = json.loads(body)
    except json.JSONDecodeError as err:
        raise BadRequest(400, f"the body is not valid JSON ({err.msg} at line {err.lineno} column {err.colno})") from None
    except UnicodeDecodeError:
        raise BadRequest(400, "the body is not valid JSON (not UTF-8 text)") from None
    except ValueError:  # an integer of thousands of digits, which Python refuses to convert
        raise BadRequest(400, "the body is not valid JSON (a number too long to read)") from None
    except RecursionError:
        raise BadRequest(400, "the body is not valid JSON (nested too deeply)") from None
    if not isinstance(fields, dict):
        raise BadRequest(400, 'the body must be a JSON object, e.g. {"q": "Hello", "source": "en", "target": "de"}')
    return fields


def _urlencoded(body: bytes) -> dict[str, Any]:
    if body.strip().startswith(b"{"):  # `curl -d '{...}'` labels JSON as a form unless told otherwise
        raise BadRequest(
            400, "the body is JSON but its Content-Type says a form: send the header Content-Type: application/json"
        )
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
    except UnicodeDecodeError:
        raise BadRequest(400, "the form is not valid UTF-8") from None
    except ValueError:
        raise BadRequest(413, f"the form has more than {MAX_FORM_FIELDS} fields") from None
    return _grouped(pairs)


async def _multipart(request: Request, body: bytes) -> dict[str, Any]:
    sent = False

    async def replay() -> dict[str, Any]:  # the body was read already: hand it to the form parser once
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    try:
        form = await Request(request.scope, replay).form(max_files=1, max_fields=MAX_FORM_FIELDS)
    except Exception as err:  # python-multipart's and starlette's parse errors have no common base
        raise BadRequest(400, f"the multipart form cannot be read ({reason(err, 120)})") from None
    return _grouped([(key, value) for key, value in form.multi_items()])


def _grouped(pairs: Sequence[tuple[str, str | UploadFile]]) -> dict[str, Any]:
    """Form pairs as fields: a key given once has its value, a repeated key (``q=a&q=b``) the list."""
    fields: dict[str, Any] = {}
    for key, value in pairs:
        if key in fields:
            fields[key] = [*fields[key], value] if isinstance(fields[key], list) else [fields[key], value]
        else:
            fields[key] = value
    return fields
