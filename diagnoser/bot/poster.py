"""The one way out to Slack: every payload is redacted, channel messages are rate-limited.

Nothing the bot or the notifiers send bypasses `SlackPoster`, so a secret in a log line (an `sk-...`
key, an `hf_...` token, a presigned URL) is masked by `diagnoser.classify.redact` before it leaves.
Slack API errors are logged, never raised into the controller.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

from diagnoser.bot.security import RateLimiter
from diagnoser.classify.redact import redact, scrub

log = logging.getLogger(__name__)




class SlackPoster:
    """chat.postMessage / chat.update / chat.postEphemeral through a `WebClient`, redacted."""

    def __init__(self, client: WebClient, limiter: RateLimiter | None = None) -> None:
        self.client = client
        self.limiter = limiter or RateLimiter()

    def _call(self, method: str, channel: str, limited: bool, **kwargs: Any) -> dict | None:
        # edits do not notify anyone: their own bucket, so status edits never eat the message budget
        bucket = f"{channel}:edits" if method == "chat.update" else channel
        if limited and not self.limiter.allow(bucket):
            log.warning("slack: rate limit for channel %s: %s dropped", channel, method)
            return None
        try:
            resp = self.client.api_call(method, json=scrub({"channel": channel, **kwargs}))
        except (SlackApiError, SlackClientError, OSError) as exc:
            log.warning("slack: %s failed: %s", method, redact(str(exc)))
            return None
        return resp.data if isinstance(resp.data, dict) else None

    def post(self, channel: str, text: str, blocks: list[dict] | None = None,
             thread_ts: str | None = None) -> str | None:
        """Post a message (a thread reply with `thread_ts`); its `ts`, or None if dropped/failed."""
        kwargs: dict[str, Any] = {"text": text, "unfurl_links": False, "unfurl_media": False}
        if blocks:
            kwargs["blocks"] = blocks
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
        data = self._call("chat.postMessage", channel, True, **kwargs)
        return str(data["ts"]) if data and data.get("ts") else None

    def update(self, channel: str, ts: str, text: str, blocks: list[dict] | None = None) -> bool:
        """Edit a message in place (the job thread's parent: status without channel spam)."""
        kwargs: dict[str, Any] = {"ts": ts, "text": text}
        if blocks is not None:
            kwargs["blocks"] = blocks
        return self._call("chat.update", channel, True, **kwargs) is not None

    def ephemeral(self, channel: str, user: str, text: str, blocks: list[dict] | None = None,
                  thread_ts: str | None = None) -> bool:
        """A message only `user` sees (refusals, pickers); not rate-limited: it reaches one person."""
        kwargs: dict[str, Any] = {"user": user, "text": text}
        if blocks:
            kwargs["blocks"] = blocks
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
        return self._call("chat.postEphemeral", channel, False, **kwargs) is not None
