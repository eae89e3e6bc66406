"""Watch one running attempt: stream its output, follow progress, detect failure and hang.

`Watch.run()` returns when the attempt ended (success or failure), hung, or was asked to stop.
Every wait is bounded by the poll interval; nothing here blocks on the job.

- output: the attempt's console file is tailed (the job writes it itself, O_APPEND) and routed to
  per-rank files (`logs.LogRouter`); past `max_raw_bytes` the console file is truncated after
  everything in it was read (copytruncate: a line written in that instant may be lost);
- failure: the launcher exited non-zero; or it still runs `failure_grace_s` after printing
  ChildFailedError, or max(`failure_grace_s`, `hang_timeout_s`) after a rank process disappeared
  (a launcher that does not tear down);
- hang: no progress line for `hang_timeout_s` (`startup_timeout_s` before the first one), while
  every rank process is still alive (ranks exiting means teardown: the failure grace applies);
- stop: `stop()` was called (Ctrl-C in the controller).
The caller collects stacks, kills and triages: `Watch` only observes (it never signals the job).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from pathlib import Path

from diagnoser.act.clock import Clock
from diagnoser.act.executors import Handle
from diagnoser.act.logs import DEFAULT_PROGRESS, FATAL, WORKER_FAILED, Line, LogRouter, ProgressMatcher

READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class WatchConfig:
    hang_timeout_s: float = 600.0
    startup_timeout_s: float = 1800.0
    failure_grace_s: float = 30.0
    poll_s: float = 0.2
    progress_patterns: tuple[str, ...] = DEFAULT_PROGRESS
    max_rank_log_bytes: int = 64 << 20
    max_raw_bytes: int = 256 << 20
    rank_check_s: float = 1.0


class Ending(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    HUNG = "hung"
    STOPPED = "stopped"


@dataclass(frozen=True)
class Outcome:
    ending: Ending
    at: datetime  # when it was detected
    exit_code: int | None = None
    reason: str = ""
    last_step: int | None = None
    last_progress_at: datetime | None = None


@dataclass
class Observer:
    """Callbacks into the controller (all called on the watching thread)."""

    on_progress: Callable[[int, datetime], None] = lambda step, at: None
    on_line: Callable[[Line], None] = lambda line: None
    on_tick: Callable[[], None] = lambda: None


class Watch:
    """The watch of one attempt; `run()` may be called again after a hang to keep watching."""

    def __init__(self, handle: Handle, console: Path, logs_dir: Path, config: WatchConfig, clock: Clock,
                 observer: Observer | None = None, rank_offset: int = 0, started_mono: float | None = None) -> None:
        self.handle = handle
        self.console = console
        self.config = config
        self.clock = clock
        self.observer = observer or Observer()
        self.router = LogRouter(logs_dir, config.max_rank_log_bytes, rank_offset)
        self.progress = ProgressMatcher(config.progress_patterns)
        self._fh = None
        self._offset = 0  # bytes of the console file consumed (survives close/reopen)
        self._silent = False
        self._stop_reason: str | None = None
        self.started_mono = clock.monotonic() if started_mono is None else started_mono
        self.last_progress_mono: float | None = None
        self.last_step: int | None = None
        self.last_progress_at: datetime | None = None
        self.fatal_since: float | None = None
        self.worker_failed: tuple[float, datetime] | None = None  # the launcher's latest "failed" line
        self.fatal_line: str | None = None
        self.rank_count = 0
        self.ranks_lost_since: float | None = None
        self._next_rank_check = 0.0

    def catch_up(self) -> None:
        """After re-attaching: route what the console already holds without reporting its progress
        lines as new (their time is unknown); the hang timer starts now."""
        self._silent = True
        try:
            self._read()
        finally:
            self._silent = False
        if self.last_step is not None:
            self.last_progress_mono = self.clock.monotonic()

    def stop(self, reason: str) -> None:
        """Ask `run()` to return STOPPED at its next poll (safe from a signal handler)."""
        self._stop_reason = reason

    def run(self, detect_hang: bool = True) -> Outcome:
        while True:
            self._read()
            now = self.clock.monotonic()
            if self.handle.ended():
                self._read()
                self._finish()
                code = self.handle.exit_code
                if code == 0:
                    return self._outcome(Ending.SUCCEEDED, 0, "exit 0")
                out = self._outcome(Ending.FAILED, code, f"launcher exited with {_describe(code)}")
                if self.worker_failed and now - self.worker_failed[0] <= self.config.failure_grace_s:
                    out = replace(out, at=self.worker_failed[1])  # detected when the launcher reported it
                return out
            if self._stop_reason is not None:
                return self._outcome(Ending.STOPPED, None, self._stop_reason)
            failed = self._launcher_lingers(now)
            if failed:
                return self._outcome(Ending.FAILED, None, failed)
            if detect_hang and self.ranks_lost_since is None:  # ranks exiting: teardown, not a hang
                hung = self._hung(now)
                if hung:
                    return self._outcome(Ending.HUNG, None, hung)
            self.observer.on_tick()
            self.clock.sleep(self.config.poll_s)

    def drain(self) -> None:
        """Read what is left (after the attempt was killed) and close the per-rank files."""
        self._read()
        self._finish()

    def _outcome(self, ending: Ending, code: int | None, reason: str) -> Outcome:
        return Outcome(ending, self.clock.now(), code, reason, self.last_step, self.last_progress_at)

    def _hung(self, now: float) -> str | None:
        if self.last_progress_mono is None:
            idle, limit, what = now - self.started_mono, self.config.startup_timeout_s, "since the start"
        else:
            idle, limit = now - self.last_progress_mono, self.config.hang_timeout_s
            what = f"after step {self.last_step}"
        if idle < limit:
            return None
        return f"no progress line for {idle:.1f} s {what} (timeout {limit:g} s)"

    def _launcher_lingers(self, now: float) -> str | None:
        """The launcher reported a failure (or a rank vanished) but does not exit."""
        if now >= self._next_rank_check:
            self._next_rank_check = now + self.config.rank_check_s
            count = len(self.handle.rank_pids())
            self.rank_count = max(self.rank_count, count)
            if count < self.rank_count:
                self.ranks_lost_since = self.ranks_lost_since if self.ranks_lost_since is not None else now
            else:
                self.ranks_lost_since = None
        grace = self.config.failure_grace_s
        if self.fatal_since is not None and now - self.fatal_since >= grace:
            return f"launcher reported a failure ({self.fatal_line}) but was still running after {grace:g} s"
        linger = max(grace, self.config.hang_timeout_s)  # a rank may finish before the others
        if self.ranks_lost_since is not None and now - self.ranks_lost_since >= linger:
            return f"a rank process exited and the launcher was still running {linger:g} s later"
        return None

    def _read(self) -> None:
        if self._fh is None:
            try:
                self._fh = open(self.console, "rb")  # noqa: SIM115 - closed in _finish
            except FileNotFoundError:
                return
            if self._offset > os.fstat(self._fh.fileno()).st_size:
                self._offset = 0  # truncated meanwhile
            self._fh.seek(self._offset)
        while True:
            chunk = self._fh.read(READ_CHUNK)
            if not chunk:
                break
            self._offset += len(chunk)
            for line in self.router.feed(chunk):
                self._line(line)
        self._maybe_truncate()

    def _maybe_truncate(self) -> None:
        assert self._fh is not None
        pos = self._fh.tell()
        if pos > self.config.max_raw_bytes:
            try:
                if os.path.getsize(self.console) == pos:  # everything read: cut it
                    os.truncate(self.console, 0)
                    self._fh.seek(0)
                    self._offset = 0
            except OSError:
                pass

    def _line(self, line: Line) -> None:
        self.observer.on_line(line)
        step = self.progress.step(line.text)
        if step is not None and self._silent:
            self.last_step = step if self.last_step is None else max(self.last_step, step)
        elif step is not None:
            self.last_progress_mono = self.clock.monotonic()
            self.last_progress_at = self.clock.now()
            self.last_step = step if self.last_step is None else max(self.last_step, step)
            self.observer.on_progress(self.last_step, self.last_progress_at)
        if line.rank is None and WORKER_FAILED.search(line.text):
            self.worker_failed = (self.clock.monotonic(), self.clock.now())
        if self.fatal_since is None and line.rank is None and FATAL.search(line.text):
            self.fatal_since = self.clock.monotonic()
            self.fatal_line = line.text.strip()[:120]

    def _finish(self) -> None:
        for line in self.router.finish():
            self._line(line)
        self.router.close()
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _describe(code: int | None) -> str:
    if code is None:
        return "an unknown status (re-attached job; no exit record)"
    if code < 0:
        import signal

        try:
            return f"signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"
