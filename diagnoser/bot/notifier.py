"""Notifications from `diagnoser run`: one Slack thread per job, or a plain webhook.

`SlackNotifier` posts the job's parent message once (`chat.postMessage`), puts every failure,
verdict and action into its thread (`thread_ts` replies), and edits the parent (`chat.update`) for
status: restarts update the thread instead of spamming the channel. The thread map can be kept in
a JSON file so a restarted controller continues the same thread.

Both notifiers are also the controller's `notifier(run_dir, payload)` callable, and
`SlackNotifier.status_listener(job_id)` is a controller `listener(Status)`.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slack_sdk import WebClient

from diagnoser import atomic
from diagnoser.bot import blocks as bk
from diagnoser.bot.poster import SlackPoster, scrub
from diagnoser.bot.security import RateLimiter
from diagnoser.classify.redact import redact
from diagnoser.models import Diagnosis

log = logging.getLogger(__name__)


class SlackNotifier:
    """One thread per job in `channel` (see the module docstring)."""

    def __init__(self, client: WebClient, channel: str, limiter: RateLimiter | None = None,
                 runbook_url: str | None = None, state_file: Path | None = None) -> None:
        self.poster = SlackPoster(client, limiter)
        self.channel = channel
        self.runbook_url = runbook_url
        self.state_file = state_file
        self._threads: dict[str, str] = self._load()
        self._lock = threading.RLock()

    # -------------------------------------------------------------------------- thread map
    def _load(self) -> dict[str, str]:
        if self.state_file is None:
            return {}
        try:
            data = json.loads(Path(self.state_file).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def _save(self) -> None:
        if self.state_file is None:
            return
        path = Path(self.state_file)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(path, json.dumps(self._threads))

    def thread_ts(self, job_id: str, status: str = "running") -> str | None:
        """The job's parent message `ts`, posting it the first time."""
        with self._lock:
            ts = self._threads.get(job_id)
            if ts is None:
                ts = self.poster.post(self.channel, bk.status_text(job_id, status), bk.status_blocks(job_id, status))
                if ts is not None:
                    self._threads[job_id] = ts
                    self._save()
            return ts

    def _reply(self, job_id: str, text: str, blocks: list[dict] | None = None) -> str | None:
        parent = self.thread_ts(job_id)
        if parent is None:
            return None
        return self.poster.post(self.channel, text, blocks, thread_ts=parent)

    # ------------------------------------------------------------------------------ events
    def post_failure(self, job_id: str, attempt: int, reason: str) -> str | None:
        """A failure (exit or hang) of an attempt, into the job's thread."""
        text = f":x: attempt {attempt} failed: {bk.esc(reason)}"
        return self._reply(job_id, text, [bk.section(text)])

    def post_verdict(self, job_id: str, diagnosis: Diagnosis, feedback_key: str | None = None) -> str | None:
        """The verdict (Block Kit), into the job's thread."""
        text, blocks = bk.verdict_blocks(diagnosis, job_id, self.runbook_url, feedback_key)
        return self._reply(job_id, text, blocks)

    def post_action(self, job_id: str, action: str, reason: str, attempt: int | None = None) -> str | None:
        """What the controller does about it (restart, drain, stop, escalate)."""
        at = f" (attempt {attempt})" if attempt is not None else ""
        text = f":gear: *{bk.esc(action)}*{at}: {bk.esc(reason)}"
        return self._reply(job_id, text, [bk.section(text)])

    def update_status(self, job_id: str, status: str) -> bool:
        """Edit the parent message: the one line a channel reader sees."""
        with self._lock:
            ts = self._threads.get(job_id)
            if ts is None:
                return self.thread_ts(job_id, status) is not None
        return self.poster.update(self.channel, ts, bk.status_text(job_id, status), bk.status_blocks(job_id, status))

    # ------------------------------------------------------------------- controller hooks
    def __call__(self, run_dir: Path, payload: dict) -> None:
        """The controller's `notifier(run_dir, payload)`: stop/escalation/drain-failure messages."""
        job = str(payload.get("job_id") or Path(run_dir).name)
        action, reason = str(payload.get("action", "?")), str(payload.get("reason", ""))
        if payload.get("category"):
            reason += (f"\n{payload['category']}/`{payload.get('subtype', '?')}` "
                       f"(confidence {float(payload.get('confidence') or 0):.2f}): {payload.get('root_cause', '')}")
        lines = [f"{e.get('source')}:{e.get('line')}: {bk.cut(str(e.get('text', '')), bk.LINE_CHARS)}"
                 for e in payload.get("evidence") or [] if isinstance(e, dict)][: bk.EVIDENCE_LINES]
        if lines:
            reason += "\n```" + bk.code("\n".join(lines)) + "```"
        self.post_action(job, action, reason, payload.get("attempt"))
        self.update_status(job, f"{action} (attempt {payload.get('attempt', '?')})")

    def status_listener(self, job_id: str) -> Callable[[Any], None]:
        """A controller `listener(Status)`: edits the parent on a change of phase or attempt only."""
        last: list[tuple[str, int] | None] = [None]

        def listen(status: Any) -> None:
            key = (str(status.phase), int(status.attempt))
            if key == last[0]:
                return
            last[0] = key
            if status.phase == "failed":
                self.post_failure(job_id, status.attempt, status.message)
            text = f"{status.phase} (attempt {status.attempt})" + (f": {status.message}" if status.message else "")
            self.update_status(job_id, bk.cut(text, 300))
        return listen


class WebhookNotifier:
    """For teams without the bot: POST each notification to a Slack incoming webhook or any JSON URL.

    `kind="slack"` sends `{"text", "blocks"}`; `kind="json"` sends the controller's payload as is.
    Either way every string is redacted first. Failures are logged, never raised.
    """

    def __init__(self, url: str, kind: str = "slack", timeout_s: float = 10.0,
                 limiter: RateLimiter | None = None) -> None:
        if kind not in ("slack", "json"):
            raise ValueError(f"unknown webhook kind {kind!r} (slack | json)")
        self.url, self.kind, self.timeout_s = url, kind, timeout_s
        self.limiter = limiter or RateLimiter()

    def body(self, payload: dict) -> dict:
        if self.kind == "json":
            return scrub({"schema": "diagnoser-notification/v1", **payload})
        job = payload.get("job_id", "job")
        text = (f"{job}: {payload.get('action', '?')} (attempt {payload.get('attempt', '?')}) — "
                f"{payload.get('reason', '')}")
        if payload.get("category"):
            text += f"\n{payload['category']}/{payload.get('subtype', '?')}: {payload.get('root_cause', '')}"
        lines = [f"{e.get('source')}:{e.get('line')}: {bk.cut(str(e.get('text', '')), bk.LINE_CHARS)}"
                 for e in payload.get("evidence") or [] if isinstance(e, dict)][: bk.EVIDENCE_LINES]
        blocks = [bk.section(text)] + ([bk.section("```" + bk.code("\n".join(lines)) + "```")] if lines else [])
        return scrub({"text": bk.cut(text, 3000), "blocks": blocks})

    def send(self, payload: dict) -> bool:
        if not self.limiter.allow(self.url):
            log.warning("webhook: rate limit: notification dropped")
            return False
        data = json.dumps(self.body(payload)).encode()
        req = urllib.request.Request(self.url, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310 - configured URL
                return 200 <= resp.status < 300
        except OSError as exc:
            log.warning("webhook failed: %s", redact(str(exc)))
            return False

    def __call__(self, run_dir: Path, payload: dict) -> None:
        """The controller's `notifier(run_dir, payload)`."""
        self.send(payload)
