"""Time for the controller: injectable, so tests can run hours of policy in microseconds."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Wall time (aware UTC, for the audit log), a monotonic time for timeouts, and sleep."""

    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class FakeClock:
    """A clock that only moves when slept on (tests)."""

    def __init__(self, start: datetime | None = None) -> None:
        self._t0 = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._elapsed = 0.0

    def now(self) -> datetime:
        return self._t0 + timedelta(seconds=self._elapsed)

    def monotonic(self) -> float:
        return self._elapsed

    def sleep(self, seconds: float) -> None:
        self._elapsed += max(0.0, seconds)

    def advance(self, seconds: float) -> None:
        self.sleep(seconds)
