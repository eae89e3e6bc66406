"""What the controller does while an attempt runs, between failures: progress lines become audit
events (rate-limited, the last one flushed at the end), new checkpoints are logged as they appear,
and the launcher's re-attach record keeps an up-to-date process list."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from diagnoser.act.approval import write_json
from diagnoser.act.events import CheckpointSaved, Progress

if TYPE_CHECKING:
    from diagnoser.act.controller import Controller

RECORD_EVERY_S = 5.0  # how often the re-attach record's process list is refreshed


class ObserversMixin:
    """Mixed into `Controller` (see there for the attributes used); the `Watch` calls these."""

    def _on_progress(self: Controller, step: int, at: datetime) -> None:
        self.status.step, self.status.last_progress_at = step, at
        a = self.state.last
        if a is not None:
            a.last_step = step
        every = self.config.progress_every_s
        if self._progress_written is None or (at - self._progress_written).total_seconds() >= every:
            self._emit(Progress(time=at, step=step, attempt=a.n if a else None))
            self._progress_written = at
            self._pending_progress = None
        else:
            self._pending_progress = (step, at)

    def _flush_progress(self: Controller, attempt: int) -> None:
        if self._pending_progress is not None:
            step, at = self._pending_progress
            self._emit(Progress(time=at, step=step, attempt=attempt))
            self._progress_written, self._pending_progress = at, None

    def _on_tick(self: Controller) -> None:
        now = self.clock.monotonic()
        if now >= self._next_ckpt_poll:
            self._next_ckpt_poll = now + self.config.checkpoint_poll_s
            self._poll_checkpoints()
        if now >= self._next_record:  # keep the re-attach record's process list fresh
            self._next_record = now + RECORD_EVERY_S
            self._save_handle_record()
        self.listener(self.status)

    def _save_handle_record(self: Controller) -> None:
        a = self.state.last
        handle = self.handles.get(a.n) if a else None
        if a is None or handle is None:
            return
        path = self.layout.launcher_record(self._attempt_dir(a.n))
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        if record.get("handle") != handle.record():
            write_json(path, {**record, "handle": handle.record()})

    def _poll_checkpoints(self: Controller, final: bool = False) -> None:
        if self._ckpt is None:
            return
        # at the end, one synchronous look: a checkpoint written just before the end is logged too
        found = self._ckpt.final() if final else self._ckpt.poll()
        a = self.state.last
        for c in sorted(found, key=lambda c: c.step):
            self._emit(CheckpointSaved(time=datetime.fromtimestamp(c.mtime, UTC), step=c.step, path=str(c.path),
                                       attempt=a.n if a else None))
