"""Test doubles for the Slack bot tests: a local Slack Web API, signed requests, a JSON sink."""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from diagnoser.bot.security import sign


class _Recorder(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.calls: list[tuple[str, dict[str, Any], str]] = []  # (path, payload, raw body)
        self.headers_seen: list[dict[str, str]] = []
        self.lock = threading.Lock()
        self.next_ts = 1700000000.000100


class _Handler(BaseHTTPRequestHandler):
    server: _Recorder

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        ctype = self.headers.get("Content-Type", "")
        if "json" in ctype:
            payload = json.loads(raw or "{}")
        else:
            payload = {k: v[0] for k, v in urllib.parse.parse_qs(raw).items()}
        method = self.path.rsplit("/", 1)[-1]
        with self.server.lock:
            self.server.calls.append((method, payload, raw))
            self.server.headers_seen.append(dict(self.headers))
            self.server.next_ts += 0.0001
            ts = f"{self.server.next_ts:.6f}"
        if method == "auth.test":
            resp = {"ok": True, "user_id": "UBOT", "bot_id": "BBOT", "team_id": "T1", "team": "t",
                    "url": "https://t.slack.com/", "user": "diagnoser"}
        elif method == "chat.postEphemeral":
            resp = {"ok": True, "message_ts": ts}
        elif method == "chat.update":
            resp = {"ok": True, "channel": payload.get("channel"), "ts": payload.get("ts"), "text": payload.get("text")}
        elif method.startswith("chat."):
            resp = {"ok": True, "channel": payload.get("channel"), "ts": ts,
                    "message": {"text": payload.get("text"), "ts": ts}}
        else:  # a JSON webhook
            resp = {"ok": True}
        body = json.dumps(resp).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class FakeSlack:
    """A local HTTP server speaking Slack's Web API wire format; records every call."""

    def __init__(self) -> None:
        self.server = _Recorder()
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/"

    def calls(self, method: str | None = None) -> list[dict[str, Any]]:
        with self.server.lock:
            return [p for m, p, _ in self.server.calls if method is None or m == method]

    def raw(self) -> str:
        with self.server.lock:
            return "\n".join(r for _, _, r in self.server.calls)

    def wait(self, method: str, n: int = 1, timeout: float = 10.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.calls(method)
            if len(found) >= n:
                return found
            time.sleep(0.02)
        raise AssertionError(f"expected {n} {method} calls, got {self.calls(method)}")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    """POST and return (status, body) for any status."""
    req = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def slack_post(url: str, body: str, secret: str | None, ts: int | None = None,
               signature: str | None = None) -> tuple[int, str]:
    """POST `body` signed exactly as Slack signs (or with the given, possibly wrong, parts)."""
    stamp = str(int(time.time()) if ts is None else ts)
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if secret is not None:
        headers["X-Slack-Request-Timestamp"] = stamp
        headers["X-Slack-Signature"] = signature or sign(secret, stamp, body.encode())
    return post(url, body.encode(), headers)


_TRIGGERS = itertools.count(3)


def command_body(text: str, channel: str = "C1", user: str = "U1", command: str = "/diagnose") -> str:
    return urllib.parse.urlencode({
        "token": "legacy", "team_id": "T1", "team_domain": "t", "channel_id": channel, "channel_name": "ops",
        "user_id": user, "user_name": "someone", "command": command, "text": text, "api_app_id": "A1",
        "response_url": "https://hooks.slack.invalid/commands/T1/1/x",
        "trigger_id": f"1.2.{next(_TRIGGERS)}"})  # Slack gives every command its own trigger id


def action_body(action_id: str, value: str, user: str, channel: str = "C1", message_ts: str = "1.1",
                thread_ts: str | None = None, selected: str | None = None) -> str:
    action: dict[str, Any] = {"action_id": action_id, "block_id": "b", "action_ts": "1.2"}
    if selected is None:
        action |= {"type": "button", "value": value}
    else:
        action |= {"type": "static_select", "selected_option": {"value": selected,
                                                                "text": {"type": "plain_text", "text": "x"}}}
    message = {"ts": message_ts, "type": "message", "text": "x"}
    if thread_ts:
        message["thread_ts"] = thread_ts
    payload = {"type": "block_actions", "user": {"id": user, "username": user.lower(), "team_id": "T1"},
               "api_app_id": "A1", "token": "legacy", "team": {"id": "T1", "domain": "t"},
               "container": {"type": "message", "message_ts": message_ts, "channel_id": channel},
               "channel": {"id": channel, "name": "ops"}, "message": message, "trigger_id": "1.2.3",
               "response_url": "https://hooks.slack.invalid/actions/T1/1/x", "actions": [action]}
    return urllib.parse.urlencode({"payload": json.dumps(payload)})


SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


def start_bot(tmp_path: Any, fake: FakeSlack, triage_fn: Any = None, **overrides: Any) -> tuple[Any, str]:
    """The real Bolt app behind the real WSGI server on a free loopback port; (server, events URL)."""
    from slack_sdk import WebClient

    from diagnoser.bot.app import build_app
    from diagnoser.bot.config import load_bot_config
    from diagnoser.bot.server import BotServer

    cfg = load_bot_config(None, {"port": 0, "data_dir": tmp_path / "botdata", "feedback": "jsonl",
                                 "api_base_url": fake.base_url, **overrides},
                          env={"SLACK_BOT_TOKEN": "xoxb-test-token-000", "SLACK_SIGNING_SECRET": SECRET})
    client = WebClient(token=cfg.token(), base_url=fake.base_url, timeout=10)
    server = BotServer(build_app(cfg, client, triage_fn)).start()
    host, port = server.address
    return server, f"http://{host}:{port}{cfg.path}"
