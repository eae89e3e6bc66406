"""Request body limits, enforced while the body streams in (ASGI middleware).

A declared `Content-Length` over the limit is answered 413 before anything is read; a body that
grows past it (chunked uploads) is answered 413 the moment it does, and the app sees the client gone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

Scope = dict[str, Any]


class BodyLimit:
    """`limit_for(path)` -> the byte limit of requests to that path."""

    def __init__(self, app: Any, limit_for: Callable[[str], int]) -> None:
        self.app, self.limit_for = app, limit_for

    async def __call__(self, scope: Scope, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope.get("path", ""))
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _reply_413(send, limit)
            return
        seen = 0
        replied = False

        async def counted() -> dict:
            nonlocal seen, replied
            if replied:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:  # answer now; the app sees the client gone and its reply is dropped
                    replied = True
                    await _reply_413(send, limit)
                    return {"type": "http.disconnect"}
            return message

        async def guarded(message: dict) -> None:
            if not replied:
                await send(message)

        try:
            await self.app(scope, counted, guarded)
        except Exception:
            if not replied:
                raise


async def _reply_413(send: Callable, limit: int) -> None:
    body = json.dumps({"detail": f"request body over the limit of {limit} bytes"}).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
