"""Slack request signatures (v0 HMAC-SHA256), replay window, and a per-channel rate limit.

Slack signs every request: `X-Slack-Signature: v0=hex(HMAC_SHA256(signing_secret,
"v0:{X-Slack-Request-Timestamp}:{raw body}"))`. A request older than `max_skew_s` (5 minutes) is
a replay even with a valid signature; within the window, `ReplayGuard` accepts each signed request
once (an identical request sent again is a replay too).
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

VERSION = "v0"
TIMESTAMP_HEADER = "X-Slack-Request-Timestamp"
SIGNATURE_HEADER = "X-Slack-Signature"


def sign(secret: str, timestamp: str | int, body: bytes | str) -> str:
    """The `X-Slack-Signature` value Slack would send for this body and timestamp."""
    raw = body.encode() if isinstance(body, str) else body
    base = f"{VERSION}:{timestamp}:".encode() + raw
    return f"{VERSION}=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def below_roots(path: str | Path, roots: Iterable[Path]) -> Path | None:
    """`path` resolved (symlinks followed) if it is one of `roots` or lies below one, else None.
    The rule every remote caller (`/diagnose`, the MCP and HTTP servers) is held to; `roots` must be
    resolved already. The triage itself is then run with `within=roots` so that no symlink inside a
    directory leads out."""
    real = Path(path).expanduser().resolve()
    return real if any(real == r or real.is_relative_to(r) for r in roots) else None


@dataclass(frozen=True)
class Check:
    ok: bool
    reason: str = ""


def verify(secret: str, timestamp: str | None, signature: str | None, body: bytes,
           now: float | None = None, max_skew_s: float = 300.0) -> Check:
    """Whether a request is Slack's own and fresh. Constant-time comparison."""
    if not timestamp or not signature:
        return Check(False, "unsigned request")
    try:
        ts = int(timestamp)
    except ValueError:
        return Check(False, "bad timestamp")
    now = time.time() if now is None else now
    if abs(now - ts) > max_skew_s:
        return Check(False, "stale timestamp (replay?)")
    if not hmac.compare_digest(sign(secret, timestamp, body), signature):
        return Check(False, "bad signature")
    return Check(True)


class ReplayGuard:
    """Remembers the signatures accepted within the freshness window; a second use is a replay.
    Bounded: entries older than the window are dropped, and at most `max_entries` are kept."""

    def __init__(self, window_s: float = 300.0, max_entries: int = 100_000) -> None:
        self.window_s, self.max_entries = window_s, max_entries
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def first_use(self, signature: str, timestamp: str, now: float | None = None) -> bool:
        """True the first time this (timestamp, signature) is seen within the window."""
        now = time.time() if now is None else now
        key = f"{timestamp}:{signature}"
        with self._lock:
            if len(self._seen) >= self.max_entries or len(self._seen) % 1024 == 0:
                cutoff = now - 2 * self.window_s
                self._seen = {k: t for k, t in self._seen.items() if t >= cutoff}
            if key in self._seen:
                return False
            if len(self._seen) >= self.max_entries:  # flooded with fresh valid requests: refuse, never forget
                return False
            self._seen[key] = now
            return True


class RateLimiter:
    """Token bucket per key (channel): `burst` at once, then `rate_per_min` a minute. Thread-safe."""

    def __init__(self, rate_per_min: float = 20.0, burst: int = 10,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate_per_min / 60.0
        self.burst = float(burst)
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()
        self.dropped: dict[str, int] = {}

    def allow(self, key: str) -> bool:
        """Take one token for `key`; False (and count a drop) when the bucket is empty."""
        with self._lock:
            now = self.clock()
            tokens, last = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens < 1.0:
                self._buckets[key] = (tokens, now)
                self.dropped[key] = self.dropped.get(key, 0) + 1
                return False
            self._buckets[key] = (tokens - 1.0, now)
            return True
