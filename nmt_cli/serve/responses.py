"""What every response of ``nmt serve`` shares: JSON that never fails to encode, and the count of each by route and
status (``/metrics``)."""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse

from .metrics import ServerMetrics

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
