"""Approvals: a human (or the chat-ops bot) says yes or no to an escalated or sensitive action.

`Approver.request` blocks until an answer or its timeout. The default `FileApprover` needs no
service: it writes the request to `<run_dir>/approval-request.json`, waits for
`<run_dir>/approval-response.json` (written by `diagnoser approve RUN_DIR [--deny]`, or by a bot),
and when nobody answers within `timeout_s` approves or denies by configuration. With no timeout
nobody could answer: `available` is False and the controller does not ask. The chat-ops bot
plugs in as another `Approver`.

Who answered is the OS user that owns the response file (what `diagnoser approve` writes as the
real user running it), never a name written inside it. With `approvers` configured, an answer
from anyone else is discarded (and logged) and the wait goes on.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from diagnoser import atomic
from diagnoser.act.clock import Clock, SystemClock
from diagnoser.models import Action

log = logging.getLogger(__name__)
REQUEST_FILE = "approval-request.json"
RESPONSE_FILE = "approval-response.json"


@dataclass(frozen=True)
class ApprovalRequest:
    job_id: str
    attempt: int
    action: Action  # the decision (escalate, or an action that needs approval)
    on_approve: Action | None  # what runs when approved (a response may name another restart action)
    rule: str
    reason: str
    category: str
    subtype: str
    confidence: float
    culprit_nodes: tuple[str, ...] = ()
    root_cause: str = ""


@dataclass(frozen=True)
class ApprovalResponse:
    approved: bool
    by: str  # who decided: a person, or "timeout:approve" / "timeout:deny"
    action: Action | None = None  # an approver may choose the action to run instead
    note: str = ""


class Approver(ABC):
    @property
    def available(self) -> bool:
        """Whether anyone can answer at all; the controller does not ask (nor wait) otherwise."""
        return True

    @abstractmethod
    def request(self, req: ApprovalRequest, cancelled: Callable[[], bool]) -> ApprovalResponse:
        """Block until approved, denied, timed out, or `cancelled()` (then deny)."""


class FileApprover(Approver):
    """Answers from a response file in the run directory; the configured default after a timeout."""

    def __init__(self, run_dir: Path, timeout_s: float = 0.0, default_approve: bool = False,
                 clock: Clock | None = None, poll_s: float = 0.5, approvers: tuple[str, ...] = ()) -> None:
        self.run_dir = Path(run_dir)
        self.approvers = tuple(approvers)
        self.timeout_s = timeout_s
        self.default_approve = default_approve
        self.clock = clock or SystemClock()
        self.poll_s = poll_s

    @property
    def available(self) -> bool:
        """Only a wait gives a person time to run `diagnoser approve`: no timeout, nobody to ask."""
        return self.timeout_s > 0

    def request(self, req: ApprovalRequest, cancelled: Callable[[], bool]) -> ApprovalResponse:
        request_path, response_path = self.run_dir / REQUEST_FILE, self.run_dir / RESPONSE_FILE
        response_path.unlink(missing_ok=True)
        write_json(request_path, {**{k: (v.value if isinstance(v, Action) else v) for k, v in asdict(req).items()},
                                  "approvers": list(self.approvers)})
        try:
            return wait_for_response(response_path, self.clock, self.timeout_s, self.poll_s, self.default_approve,
                                     cancelled, self.approvers)
        finally:
            request_path.unlink(missing_ok=True)
            response_path.unlink(missing_ok=True)


def os_user(uid: int | None = None) -> str:
    """The login name of `uid` (default: the real user running this process)."""
    uid = os.getuid() if uid is None else uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"


def read_response(path: Path, approvers: tuple[str, ...] = ()) -> ApprovalResponse | None:
    """The answer in `path`, attributed to the file's owner; None (and the file removed) when
    there is none yet, it is unreadable, or its owner is not one of `approvers`."""
    try:
        owner = os_user(path.stat().st_uid)
        data = json.loads(path.read_text(encoding="utf-8"))
        action = Action(data["action"]) if data.get("action") else None
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    if approvers and owner not in approvers:
        log.warning("approval answer by %s ignored: not an approver (%s)", owner, ", ".join(approvers))
        path.unlink(missing_ok=True)
        return None
    claimed = str(data.get("by") or "")
    # an OS name must be the writer's own; a chat identity (`slack:U123`) is vouched for by the bot
    foreign = claimed and claimed != owner and not claimed.startswith("slack:")
    by = f"{claimed} (via {owner})" if foreign else (claimed or owner)
    return ApprovalResponse(bool(data.get("approved")), by, action, str(data.get("note") or ""))


def respond_as(run_dir: Path, approved: bool, by: str, action: Action | None = None, note: str = "") -> Path:
    """Answer for an identity the caller verified itself (the chat bot: a Slack user on its approver
    list); the controller records it as `<by> (via <OS user that wrote it>)`."""
    path = Path(run_dir) / RESPONSE_FILE
    write_json(path, {"approved": approved, "by": by, "action": action.value if action else None, "note": note})
    return path


class NotAnApprover(PermissionError):
    """The user running `diagnoser approve` is not on the run's approver list."""


def respond(run_dir: Path, approved: bool, by: str | None = None, action: Action | None = None,
            note: str = "") -> Path:
    """Answer a pending request as the real OS user (what `diagnoser approve` does); `by` is only a
    note. Raises NotAnApprover when the pending request names approvers and this user is not one."""
    user = os_user()
    try:
        pending = json.loads((Path(run_dir) / REQUEST_FILE).read_text(encoding="utf-8"))
        approvers = [str(a) for a in pending.get("approvers") or []]
    except (OSError, ValueError, AttributeError):
        approvers = []
    if approvers and user not in approvers:
        raise NotAnApprover(f"{user} may not answer for this run (approvers: {', '.join(approvers)})")
    if by and by != user:
        note = f"{note}; on behalf of {by}" if note else f"on behalf of {by}"
    path = Path(run_dir) / RESPONSE_FILE
    write_json(path, {"approved": approved, "by": user, "action": action.value if action else None, "note": note})
    return path


def write_json(path: Path, data: dict) -> None:
    atomic.write_text(path, json.dumps(data, indent=1))


def wait_for_response(response_path: Path, clock: Clock, timeout_s: float, poll_s: float, default_approve: bool,
                      cancelled: Callable[[], bool], approvers: tuple[str, ...] = ()) -> ApprovalResponse:
    """Poll for an answer file until it appears, the wait is cancelled, or the timeout applies the default."""
    deadline = clock.monotonic() + timeout_s
    while True:
        answer = read_response(response_path, approvers)
        if answer is not None:
            return answer
        if cancelled():
            return ApprovalResponse(False, "cancelled")
        if clock.monotonic() >= deadline:
            return ApprovalResponse(default_approve, f"timeout:{'approve' if default_approve else 'deny'}",
                                    note=f"no answer within {timeout_s:g} s")
        clock.sleep(min(poll_s, max(0.0, deadline - clock.monotonic())))
