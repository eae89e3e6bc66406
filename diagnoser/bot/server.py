"""A small threaded WSGI server for the Bolt app (loopback by default), with a signature gate.

`SignatureGate` rejects unsigned, mis-signed and stale (replayed) requests with 401 before Bolt
parses anything, and caps the body size. Bolt checks the signature again (defence in depth).
"""

from __future__ import annotations

import io
import logging
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from slack_bolt.adapter.wsgi import SlackRequestHandler

from diagnoser.bot.app import BotApp
from diagnoser.bot.security import Check, ReplayGuard, verify

log = logging.getLogger(__name__)
MAX_BODY = 1 << 20
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class SignatureGate:
    """WSGI middleware: only Slack-signed, fresh POSTs reach the app."""

    def __init__(self, app: WsgiApp, secret: str, max_skew_s: float = 300.0,
                 now: Callable[[], float] = time.time) -> None:
        self.app, self.secret, self.max_skew_s, self.now = app, secret, max_skew_s, now
        self.rejected = 0
        self.replays = ReplayGuard(max_skew_s)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") != "POST":
            return self._deny(start_response, "405 Method Not Allowed", "POST only")
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            return self._deny(start_response, "413 Payload Too Large", "body too large")
        body = environ["wsgi.input"].read(length) if length else b""
        check = verify(self.secret, environ.get("HTTP_X_SLACK_REQUEST_TIMESTAMP"),
                       environ.get("HTTP_X_SLACK_SIGNATURE"), body, self.now(), self.max_skew_s)
        if check.ok and not self.replays.first_use(environ.get("HTTP_X_SLACK_SIGNATURE", ""),
                                                   environ.get("HTTP_X_SLACK_REQUEST_TIMESTAMP", ""), self.now()):
            check = Check(False, "replayed request (this signed request was already handled)")
        if not check.ok:
            self.rejected += 1
            log.warning("rejected request from %s: %s", environ.get("REMOTE_ADDR"), check.reason)
            return self._deny(start_response, "401 Unauthorized", check.reason)
        environ["wsgi.input"] = io.BytesIO(body)
        return self.app(environ, start_response)

    @staticmethod
    def _deny(start_response: Callable[..., Any], status: str, reason: str) -> list[bytes]:
        start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
        return [reason.encode()]


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s " + format, self.address_string(), *args)


class BotServer:
    """The HTTP endpoint Slack calls (`path`, default /slack/events); `port=0` picks a free port."""

    def __init__(self, bot: BotApp, host: str | None = None, port: int | None = None) -> None:
        cfg = bot.config
        wsgi = SlackRequestHandler(bot.bolt, path=cfg.path)
        self.gate = SignatureGate(wsgi, cfg.secret(), cfg.max_skew_s)
        self.httpd = make_server(host or cfg.host, cfg.port if port is None else port, self.gate,
                                 server_class=_ThreadingWSGIServer, handler_class=_QuietHandler)
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def start(self) -> BotServer:
        """Serve in a daemon thread (tests, embedding in `diagnoser run`)."""
        self._thread = threading.Thread(target=self.serve_forever, name="diagnoser-bot", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
