"""`SlackApprover`: the controller's `Approver` with Approve / Deny buttons in the job's Slack thread.

The request is posted into the job thread and also written to the run directory in the
`FileApprover` format, plus a marker `approval-slack.json` naming this request's id. The bot
(`diagnoser bot serve`, the same or another process on a shared filesystem) answers a button press
from an allowed user with `answer()`, which writes `approval-response.json` only when the marker
still names that request (no stale or replayed clicks). `diagnoser approve RUN_DIR` keeps working as
a fallback. After the decision or the timeout (then the configured default) the buttons are replaced
by who decided.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from diagnoser.act.approval import (
    REQUEST_FILE,
    RESPONSE_FILE,
    ApprovalRequest,
    ApprovalResponse,
    Approver,
    respond_as,
    wait_for_response,
    write_json,
)
from diagnoser.act.clock import Clock, SystemClock
from diagnoser.bot import blocks as bk
from diagnoser.bot.notifier import SlackNotifier
from diagnoser.models import Action

log = logging.getLogger(__name__)
MARKER_FILE = "approval-slack.json"


class SlackApprover(Approver):
    """Ask in Slack, wait for the answer (or `timeout_s`, then `default_approve`)."""

    def __init__(self, notifier: SlackNotifier, run_dir: Path, timeout_s: float = 900.0,
                 default_approve: bool = False, approvers: tuple[str, ...] = (),
                 clock: Clock | None = None, poll_s: float = 0.5) -> None:
        self.notifier = notifier
        self.run_dir = Path(run_dir)
        self.timeout_s = timeout_s
        self.default_approve = default_approve
        self.approvers = tuple(approvers)
        self.clock = clock or SystemClock()
        self.poll_s = poll_s

    @property
    def available(self) -> bool:
        """Someone can press Approve: approvers are configured and there is time to wait for them."""
        return self.timeout_s > 0 and bool(self.approvers)

    def request(self, req: ApprovalRequest, cancelled: Callable[[], bool]) -> ApprovalResponse:
        """Post the buttons, block until approved, denied, timed out, or `cancelled()` (then deny)."""
        request_id = uuid.uuid4().hex
        request_path, response_path = self.run_dir / REQUEST_FILE, self.run_dir / RESPONSE_FILE
        marker = self.run_dir / MARKER_FILE
        response_path.unlink(missing_ok=True)
        write_json(request_path, {k: (v.value if isinstance(v, Action) else v) for k, v in asdict(req).items()})
        write_json(marker, {"id": request_id, "job_id": req.job_id, "attempt": req.attempt})
        value = bk.approval_value(str(self.run_dir.resolve()), request_id)
        text, blocks = bk.approval_blocks(req, value, self.approvers, self.timeout_s, self.default_approve)
        parent = self.notifier.thread_ts(req.job_id)
        ts = self.notifier.poster.post(self.notifier.channel, text, blocks, thread_ts=parent)
        if ts is None:
            log.warning("slack: approval request for %s not posted; `diagnoser approve %s` still answers",
                        req.job_id, self.run_dir)
        self.notifier.update_status(req.job_id, f"waiting for approval: {(req.on_approve or req.action).value}")
        try:
            answer = self._wait(response_path, cancelled)
        finally:
            for p in (marker, request_path, response_path, self.run_dir / claim_name(request_id)):
                p.unlink(missing_ok=True)
        if ts is not None:
            text, blocks = bk.decided_blocks(req, answer.approved, answer.by, answer.note)
            self.notifier.poster.update(self.notifier.channel, ts, text, blocks)
        verdict = "approved" if answer.approved else "denied"
        self.notifier.update_status(req.job_id, f"{(req.on_approve or req.action).value} {verdict} ({answer.by})")
        return answer

    def _wait(self, response_path: Path, cancelled: Callable[[], bool]) -> ApprovalResponse:
        return wait_for_response(response_path, self.clock, self.timeout_s, self.poll_s, self.default_approve,
                                 cancelled)


def parse_value(value: str) -> tuple[Path, str] | None:
    """The run directory and request id a button carries (None if malformed)."""
    try:
        data = json.loads(value)
        return Path(str(data["run_dir"])), str(data["id"])
    except (ValueError, KeyError, TypeError):
        return None


def pending_id(run_dir: Path) -> str | None:
    """The id of the request waiting in `run_dir`, if any."""
    try:
        data = json.loads((run_dir / MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not (run_dir / REQUEST_FILE).is_file():
        return None
    return str(data.get("id")) if isinstance(data, dict) else None


def claim_name(request_id: str) -> str:
    return f"approval-slack-{request_id}.claimed"


def answer(run_dir: Path, request_id: str, approved: bool, by: str, note: str = "") -> bool:
    """Answer request `request_id` if it is still the pending one; False if stale, unknown, or
    already answered (the first press wins, across processes: an exclusive claim file)."""
    if not request_id.isalnum() or pending_id(run_dir) != request_id:
        return False
    try:
        with open(run_dir / claim_name(request_id), "x", encoding="utf-8") as fh:
            fh.write(by)
    except FileExistsError:
        return False
    except OSError as exc:
        log.warning("cannot answer the approval in %s: %s", run_dir, exc)
        return False
    respond_as(run_dir, approved, by, note=note)
    return True
