"""Bearer-token access for the network listeners (`diagnoser serve`, `diagnoser mcp` over HTTP).

One rule for both: a listener beyond loopback needs a token; every request then carries
`Authorization: Bearer <token>`, compared in constant time. The token comes from the settings tree
(environment or a token file), never from the command line, where shell history and `ps` show it.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class TokenError(ValueError):
    """The token setting is unusable (one line, exit 2)."""


def read_token_file(path: str | Path) -> str:
    """The token in `path` (surrounding whitespace dropped); TokenError if unreadable or empty."""
    try:
        token = Path(path).expanduser().read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise TokenError(f"token_file {path}: {exc.strerror or exc}") from None
    if not token:
        raise TokenError(f"token_file {path} is empty")
    return token


def effective_token(token: str | None, token_file: str | Path | None) -> str | None:
    """The token itself if set, else the token file's content, else None."""
    token = (token or "").strip()
    if token:
        return token
    return read_token_file(token_file) if token_file else None


def authorized(header: str | None, token: str) -> bool:
    """Whether an Authorization header value carries `token` (constant-time comparison)."""
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


class BearerTokenMiddleware:
    """ASGI middleware: HTTP requests without the token get 401 and never reach the app."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            header = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"authorization"), None)
            if not authorized(header, self.token):
                body = json.dumps({"detail": "missing or wrong bearer token"}).encode()
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b"Bearer"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
