"""`AuditFollower`: follow a `diagnoser run` from its audit log (`audit/v1`) into the job's Slack thread.

Needs no hook in the controller: it tails `<run_dir>/audit.jsonl` (complete lines only) and turns
events into `SlackNotifier` calls — attempt starts and the run's end edit the parent message,
failures, verdicts (with feedback buttons when given a `VerdictCache`) and decisions (with who
approved) go into the thread. Run it in the controller's process (`start()`, a daemon thread) or
anywhere that sees the run directory.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from diagnoser.act.events import (
    ActionFinished,
    AttemptStarted,
    AuditEvent,
    DecisionMade,
    DiagnosisMade,
    FailureDetected,
    RunFinished,
    RunStarted,
    iter_events,
)
from diagnoser.bot.feedback import VerdictCache
from diagnoser.bot.notifier import SlackNotifier
from diagnoser.hostlist import compress_hostlist
from diagnoser.models import Culprit, Diagnosis

log = logging.getLogger(__name__)


class AuditFollower:
    """Posts what the controller writes to the audit log (see the module docstring)."""

    def __init__(self, notifier: SlackNotifier, run_dir: Path, job_id: str | None = None,
                 verdicts: VerdictCache | None = None, poll_s: float = 1.0) -> None:
        self.notifier = notifier
        self.run_dir = Path(run_dir)
        self.job_id = job_id or self.run_dir.resolve().name
        self.verdicts = verdicts
        self.poll_s = poll_s
        self.offset = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> int:
        """Handle the events appended since the last call; how many."""
        try:
            with open(self.run_dir / "audit.jsonl", "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except OSError:
            return 0
        end = chunk.rfind(b"\n") + 1  # a line still being written waits for the next poll
        if end == 0:
            return 0
        self.offset += end
        n = 0
        for event in iter_events(chunk[:end].decode("utf-8", errors="replace").splitlines(), str(self.run_dir)):
            try:
                self.handle(event)
            except Exception as exc:  # noqa: BLE001 - a notification problem never stops following
                log.warning("slack follower: %s: %s", type(event).__name__, exc)
            n += 1
        return n

    def handle(self, ev: AuditEvent) -> None:
        """One event -> at most one post and one edit of the parent."""
        n = self.notifier
        if isinstance(ev, RunStarted):
            self.job_id = ev.job_id or self.job_id
            n.update_status(self.job_id, "running")
        elif isinstance(ev, AttemptStarted):
            excluded = f", without {compress_hostlist(ev.excluded_nodes)}" if ev.excluded_nodes else ""
            n.update_status(self.job_id, f"attempt {ev.attempt} running{excluded}")
        elif isinstance(ev, FailureDetected):
            code = f", exit code {ev.exit_code}" if ev.exit_code is not None else ""
            step = f", last step {ev.last_step}" if ev.last_step is not None else ""
            n.post_failure(self.job_id, ev.attempt or 0, f"{ev.how.value}{code}{step}")
        elif isinstance(ev, DiagnosisMade):
            d = self._diagnosis(ev)
            key = self.verdicts.put(d, self.job_id) if self.verdicts is not None else None
            n.post_verdict(self.job_id, d, key)
        elif isinstance(ev, DecisionMade):
            who = f" (approved by {ev.approved_by})" if ev.approved_by and ev.approved_by != "policy" else ""
            nodes = f" nodes {compress_hostlist(ev.nodes)}" if ev.nodes else ""
            n.post_action(self.job_id, ev.action.value + nodes, ev.reason + who)
            n.update_status(self.job_id, f"{ev.action.value}{who}")
        elif isinstance(ev, ActionFinished) and not ev.ok:
            n.post_action(self.job_id, ev.action.value, f"failed: {ev.detail}")
        elif isinstance(ev, RunFinished):
            n.update_status(self.job_id, f"finished: {ev.status}" + (f" — {ev.reason}" if ev.reason else ""))

    def _diagnosis(self, ev: DiagnosisMade) -> Diagnosis:
        """The attempt's full verdict (`diagnosis.json`), else the audit event's summary of it."""
        found = sorted(self.run_dir.glob(f"*attempt-{ev.attempt or 0:03d}/diagnosis.json"),
                       key=lambda p: p.stat().st_mtime)
        if found:
            try:
                return Diagnosis.model_validate(json.loads(found[-1].read_text(encoding="utf-8")))
            except (OSError, ValueError):
                pass
        return Diagnosis(category=ev.category, subtype=ev.subtype, action=ev.action, confidence=ev.confidence,
                         culprit=Culprit(nodes=ev.culprit_nodes), root_cause="(summary from the audit log)",
                         decided_by=ev.decided_by)

    def start(self) -> AuditFollower:
        """Follow in a daemon thread until `stop()` (which posts what is left)."""
        def loop() -> None:
            while not self._stop.wait(self.poll_s):
                self.poll()
            self.poll()
        self._thread = threading.Thread(target=loop, name="slack-audit-follower", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
