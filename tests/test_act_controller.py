"""The controller loop on a fake executor and a fake clock: every path through
failure -> triage -> policy -> audit -> action, resumption from the audit log, stop requests."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from diagnoser.act.approval import ApprovalRequest, ApprovalResponse, Approver
from diagnoser.act.clock import FakeClock
from diagnoser.act.config import RunConfig
from diagnoser.act.controller import Controller
from diagnoser.act.events import (
    ActionStarted,
    AttemptStarted,
    AuditWriter,
    DecisionMade,
    DiagnosisMade,
    FailureDetected,
    FailureHow,
    RunStarted,
    read_audit,
)
from diagnoser.act.executors import AttemptSpec, Executor, Handle, Placement
from diagnoser.act.policy import Backoff, Mode, Policy
from diagnoser.act.runstate import LockedError, RunLock
from diagnoser.models import Action, Category, Culprit, Diagnosis

A = Action


@dataclass
class Script:
    """A fake attempt: lines at seconds after start, checkpoints (step) written at a time, an exit."""

    lines: list[tuple[float, str]] = field(default_factory=list)
    exit_at: float | None = None  # None: never exits by itself (hang)
    code: int = 0
    ckpts: list[tuple[float, int]] = field(default_factory=list)


class FakeHandle(Handle):
    def __init__(self, clock: FakeClock, script: Script, console: Path, ckpt_dir: Path | None, key: int) -> None:
        self.clock, self.script, self.console, self.ckpt_dir, self.key = clock, script, console, ckpt_dir, key
        self.t0 = clock.monotonic()
        self.pid = 1000 + key
        self.killed: int | None = None
        self.done_lines = 0
        self.done_ckpts = 0

    def _advance(self) -> None:
        t = self.clock.monotonic() - self.t0
        if self.killed is not None:
            return
        with open(self.console, "a") as fh:
            while self.done_lines < len(self.script.lines) and self.script.lines[self.done_lines][0] <= t:
                fh.write(self.script.lines[self.done_lines][1] + "\n")
                self.done_lines += 1
        while self.done_ckpts < len(self.script.ckpts) and self.script.ckpts[self.done_ckpts][0] <= t:
            step = self.script.ckpts[self.done_ckpts][1]
            d = self.ckpt_dir / f"step_{step:06d}"
            d.mkdir(parents=True, exist_ok=True)
            (d / "COMPLETE").write_text("{}")
            self.done_ckpts += 1

    def ended(self) -> bool:
        self._advance()
        return self.killed is not None or (self.script.exit_at is not None
                                           and self.clock.monotonic() - self.t0 >= self.script.exit_at)

    @property
    def exit_code(self) -> int | None:
        if self.killed is not None:
            return -self.killed
        return self.script.code if self.ended() else None

    def rank_pids(self) -> dict[int, int]:
        return {}

    def signal(self, sig: int) -> int:
        if not self.ended():
            self.killed = int(sig)
        return 1

    def alive(self) -> int:
        return 0 if self.ended() else 1

    def record(self) -> dict:
        return {"fake": self.key}


class FakeExecutor(Executor):
    name = "fake"
    can_drain = True

    def __init__(self, clock: FakeClock, scripts: list[Script], ckpt_dir: Path | None = None) -> None:
        self.clock, self.scripts, self.ckpt_dir = clock, list(scripts), ckpt_dir
        self.specs: list[AttemptSpec] = []
        self.handles: dict[int, FakeHandle] = {}
        self.drained: list[tuple[str, ...]] = []

    def nodes(self) -> list[str]:
        return ["n1", "n2"]

    def start(self, spec: AttemptSpec) -> Handle:
        self.specs.append(spec)
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        h = FakeHandle(self.clock, self.scripts.pop(0), spec.log_path, self.ckpt_dir, len(self.specs))
        self.handles[h.key] = h
        return h

    def attach(self, record: dict) -> Handle | None:
        return self.handles.get(record.get("fake", -1))

    def exclude(self, command, env, nodes, ranks) -> Placement:
        return Placement(True, f"without {list(nodes)}", (*command, "--exclude", ",".join(nodes)), env, tuple(nodes))

    def drain(self, nodes, reason) -> tuple[bool, str]:
        self.drained.append(tuple(nodes))
        return True, f"drained {list(nodes)}"


def verdict(cat: Category, subtype: str, action: Action, conf: float = 0.9, nodes: tuple[str, ...] = ()) -> Diagnosis:
    return Diagnosis(category=cat, subtype=subtype, action=action, confidence=conf, culprit=Culprit(nodes=list(nodes)),
                     root_cause=f"{subtype} happened")


def steps(n0: int, n1: int, every: float = 1.0, start: float = 0.5) -> list[tuple[float, str]]:
    return [(start + (s - n0) * every, f"[rank0]: step {s} loss 1.0") for s in range(n0, n1 + 1)]


class Approve(Approver):
    def __init__(self, yes: bool) -> None:
        self.yes, self.requests = yes, []

    def request(self, req: ApprovalRequest, cancelled: Callable[[], bool]) -> ApprovalResponse:
        self.requests.append(req)
        return ApprovalResponse(self.yes, "alice" if self.yes else "bob")


def make(tmp_path: Path, scripts: list[Script], verdicts: list[Diagnosis], policy: Policy | None = None,
         approver: Approver | None = None, ckpt: bool = True, **cfg) -> tuple[Controller, FakeExecutor]:
    clock = FakeClock(datetime.now(UTC))
    ckpt_dir = tmp_path / "ck" if ckpt else None
    config = RunConfig(run_dir=tmp_path / "run", checkpoint_dir=ckpt_dir, hang_timeout_s=5, startup_timeout_s=20,
                       kill_grace_s=1, checkpoint_poll_s=0.5, progress_every_s=0, collect_kernel=False,
                       collect_stacks=False, policy=policy or Policy(backoff=Backoff(base_s=4, jitter=0)), **cfg)
    ex = FakeExecutor(clock, scripts, ckpt_dir)
    queue = list(verdicts)
    c = Controller(config, ["train", "--resume={resume}"], executor=ex, clock=clock, approver=approver,
                   triage_fn=lambda paths: queue.pop(0), notifier=lambda run_dir, payload: None)
    return c, ex


def types(c: Controller) -> list[str]:
    return [e.type for e in read_audit(c.layout.audit) if e.type not in ("progress", "checkpoint_saved")]


def events(c: Controller, kind: type) -> list:
    return [e for e in read_audit(c.layout.audit) if isinstance(e, kind)]


def test_infra_failure_backoff_then_resume_from_newest_checkpoint(tmp_path: Path) -> None:
    c, ex = make(tmp_path, [Script(steps(1, 5), exit_at=6, code=1, ckpts=[(3, 3)]), Script(steps(4, 8), exit_at=6)],
                 [verdict(Category.INFRA, "storage_stale_handle", A.RETRY_AFTER_BACKOFF)])
    r = c.run()
    assert r.status == "succeeded" and r.attempts == 2
    assert types(c) == ["run_started", "attempt_started", "failure_detected", "attempt_finished", "diagnosis",
                        "decision", "action_started", "attempt_started", "action_finished", "attempt_finished",
                        "run_finished"]
    decision = events(c, DecisionMade)[0]
    assert decision.action is A.RETRY_AFTER_BACKOFF and decision.approved_by == "policy"
    a1, a2 = events(c, AttemptStarted)
    assert (a1.resume_step, a2.resume_step) == (0, 3) and a2.resume_path.endswith("step_000003")
    assert (a2.time - decision.time).total_seconds() >= 4  # the backoff was waited
    assert ex.specs[1].env["DIAGNOSER_RESUME_FROM"].endswith("step_000003")
    assert ex.specs[1].command[-1].endswith("step_000003")  # {resume} in the command
    fail = events(c, FailureDetected)[0]
    assert fail.how is FailureHow.EXIT and fail.exit_code == 1 and fail.last_step == 5
    assert (c.layout.root / "attempt-001" / "logs" / "rank0.log").read_text().count("step") == 5
    assert json.loads((c.layout.root / "attempt-001" / "diagnosis.json").read_text())["subtype"] == \
        "storage_stale_handle"


def test_user_code_failure_stops_and_notifies(tmp_path: Path) -> None:
    notes = []
    c, ex = make(tmp_path, [Script(steps(1, 2), exit_at=3, code=1)],
                 [verdict(Category.USER_CODE, "python_exception", A.STOP_AND_NOTIFY)])
    c.notifier = lambda run_dir, payload: notes.append(payload)
    r = c.run()
    assert r.status == "stopped" and r.attempts == 1 and len(ex.specs) == 1
    assert events(c, DecisionMade)[0].action is A.STOP_AND_NOTIFY
    assert notes and notes[0]["subtype"] == "python_exception"


def test_hang_detected_killed_and_restarted(tmp_path: Path) -> None:
    c, ex = make(tmp_path, [Script(steps(1, 3)), Script(steps(1, 3), exit_at=4)],
                 [verdict(Category.UNKNOWN, "no_signature", A.ESCALATE, 0.0)])
    r = c.run()
    assert r.status == "succeeded"
    fail = events(c, FailureDetected)[0]
    assert fail.how is FailureHow.HANG and fail.last_step == 3
    assert 5 <= (fail.time - fail.last_progress_time).total_seconds() < 6
    assert ex.handles[1].killed == 15
    diag = events(c, DiagnosisMade)[0]
    assert (diag.subtype, diag.action) == ("hang", A.RESTART)  # the watchdog's evidence, cited
    watchdog = (c.layout.root / "attempt-001" / "logs" / "watchdog.log").read_text()
    assert "no progress line for" in watchdog
    saved = json.loads((c.layout.root / "attempt-001" / "diagnosis.json").read_text())
    assert saved["evidence"][0]["source"] == "watchdog.log"


def test_startup_timeout_before_first_progress(tmp_path: Path) -> None:
    c, _ = make(tmp_path, [Script([(1, "loading")])], [verdict(Category.USER_CODE, "x", A.STOP_AND_NOTIFY)])
    c.run()
    fail = events(c, FailureDetected)[0]
    assert fail.how is FailureHow.HANG and fail.last_step is None


def test_crash_loop_gives_up(tmp_path: Path) -> None:
    v = verdict(Category.HARDWARE, "gpu_xid_79", A.RESTART, nodes=("n2",))
    c, ex = make(tmp_path, [Script(steps(1, 2), exit_at=3, code=1) for _ in range(3)], [v, v, v])
    r = c.run()
    assert r.status == "gave_up" and r.attempts == 3
    last = events(c, DecisionMade)[-1]
    assert last.action is A.ESCALATE and "crash loop" in last.reason and "not waited for" in last.reason


def test_unknown_failure_restarts_and_notifies_without_asking(tmp_path: Path) -> None:
    approver, notes = Approve(False), []
    c, ex = make(tmp_path, [Script(steps(1, 2), exit_at=3, code=1), Script(steps(1, 2), exit_at=3)],
                 [verdict(Category.UNKNOWN, "no_signature", A.ESCALATE, 0.0)], approver=approver)
    c.notifier = lambda run_dir, payload: notes.append(payload)
    assert c.run().status == "succeeded" and len(ex.specs) == 2
    d = events(c, DecisionMade)[0]
    assert (d.action, d.approved_by) == (A.RESTART, "policy") and approver.requests == []
    assert [n["action"] for n in notes] == ["restart"] and notes[0]["subtype"] == "no_signature"


def test_escalation_held_for_approval_when_configured(tmp_path: Path) -> None:
    approver = Approve(True)
    c, ex = make(tmp_path, [Script(steps(1, 2), exit_at=3, code=1), Script(steps(1, 2), exit_at=3)],
                 [verdict(Category.UNKNOWN, "no_signature", A.ESCALATE, 0.1)], approver=approver,
                 policy=Policy(require_approval=frozenset({A.ESCALATE})))
    assert c.run().status == "succeeded"
    d = events(c, DecisionMade)[0]
    assert (d.action, d.approved_by) == (A.RESTART, "alice")
    assert approver.requests[0].rule == "low_confidence"


def test_escalation_held_and_denied_stops(tmp_path: Path) -> None:
    c, ex = make(tmp_path, [Script(steps(1, 2), exit_at=3, code=1)],
                 [verdict(Category.UNKNOWN, "no_signature", A.ESCALATE, 0.1)], approver=Approve(False),
                 policy=Policy(require_approval=frozenset({A.ESCALATE})))
    assert c.run().status == "stopped" and len(ex.specs) == 1


def test_drain_needs_approval_and_drains(tmp_path: Path) -> None:
    c, ex = make(tmp_path, [Script(steps(1, 2), exit_at=3, code=1), Script(steps(1, 2), exit_at=3)],
                 [verdict(Category.HARDWARE, "gpu_xid_79", A.DRAIN_AND_RESTART, nodes=("n2",))],
                 approver=Approve(True))
    assert c.run().status == "succeeded"
    assert ex.drained == [("n2",)] and ex.specs[1].command[-2:] == ("--exclude", "n2")
    d = events(c, DecisionMade)[0]
    assert d.nodes == ["n2"] and d.approved_by == "alice"
    assert events(c, AttemptStarted)[1].excluded_nodes == ["n2"]


def test_denied_drain_excludes_without_draining(tmp_path: Path) -> None:
    c, ex = make(tmp_path, [Script(steps(1, 2), exit_at=3, code=1), Script(steps(1, 2), exit_at=3)],
                 [verdict(Category.HARDWARE, "gpu_xid_79", A.DRAIN_AND_RESTART, nodes=("n2",))],
                 approver=Approve(False))
    assert c.run().status == "succeeded" and ex.drained == []
    d = events(c, DecisionMade)[0]
    assert d.action is A.RESTART_EXCLUDING_NODES and d.nodes == ["n2"] and "not approved" in d.reason
    assert ex.specs[1].command[-2:] == ("--exclude", "n2")


def test_default_approver_times_out_to_deny(tmp_path: Path) -> None:
    c, ex = make(tmp_path, [Script(steps(1, 2), exit_at=3, code=1), Script(steps(1, 2), exit_at=3)],
                 [verdict(Category.HARDWARE, "gpu_xid_79", A.DRAIN_AND_RESTART, nodes=("n2",))],
                 approval_timeout_s=30)
    assert c.run().status == "succeeded" and ex.drained == []
    d = events(c, DecisionMade)[0]
    assert "timeout:deny" in d.reason and d.action is A.RESTART_EXCLUDING_NODES


def test_no_approver_means_no_wait(tmp_path: Path) -> None:
    c, ex = make(tmp_path, [Script(steps(1, 2), exit_at=3, code=1), Script(steps(1, 2), exit_at=3)],
                 [verdict(Category.HARDWARE, "gpu_xid_79", A.DRAIN_AND_RESTART, nodes=("n2",))])
    assert c.run().status == "succeeded" and ex.drained == []
    d = events(c, DecisionMade)[0]
    assert d.action is A.RESTART_EXCLUDING_NODES and "not waited for" in d.reason
    assert not (c.layout.root / "approval-request.json").exists()
    assert (d.time - events(c, FailureDetected)[0].time).total_seconds() < 5


def test_rollback_picks_an_older_checkpoint_and_tells_the_job(tmp_path: Path) -> None:
    c, ex = make(tmp_path, [Script(steps(1, 7), exit_at=8, code=1, ckpts=[(3, 3), (6, 6)]),
                            Script(steps(4, 8), exit_at=6)],
                 [verdict(Category.USER_CODE, "checkpoint_corrupt", A.ROLLBACK_AND_RESTART, 0.8)])
    assert c.run().status == "succeeded"
    assert events(c, AttemptStarted)[1].resume_step == 3
    env = ex.specs[1].env
    assert env["DIAGNOSER_ROLLBACK"] == "1" and env["DIAGNOSER_FAILED_STEP"] == "7"


def test_dry_run_decides_and_does_not_act(tmp_path: Path) -> None:
    c, ex = make(tmp_path, [Script(steps(1, 2), exit_at=3, code=1)],
                 [verdict(Category.INFRA, "x", A.RESTART)], policy=Policy(mode=Mode.DRY_RUN))
    r = c.run()
    assert r.status == "failed" and len(ex.specs) == 1
    assert events(c, DecisionMade)[0].reason.startswith("dry-run") and not events(c, ActionStarted)


def test_shadow_does_not_kill_a_hang_and_restarts_like_torchrun(tmp_path: Path) -> None:
    c, ex = make(tmp_path, [Script(steps(1, 2), exit_at=30, code=1), Script(steps(1, 2), exit_at=3)],
                 [verdict(Category.USER_CODE, "python_exception", A.STOP_AND_NOTIFY)],
                 policy=Policy(mode=Mode.SHADOW))
    assert c.run().status == "succeeded"
    assert ex.handles[1].killed is None  # left running until it exited by itself
    d = events(c, DecisionMade)[0]
    assert d.action is A.RESTART and "would stop_and_notify" in d.reason


def test_stop_request_kills_and_records(tmp_path: Path) -> None:
    c, ex = make(tmp_path, [Script(steps(1, 50))], [])
    ticks = []

    def listener(status) -> None:
        ticks.append(status.step)
        if status.step == 3:
            c.request_stop("interrupted by SIGINT")

    c.listener = listener
    r = c.run()
    assert r.status == "stopped" and r.reason == "interrupted by SIGINT"
    assert ex.handles[1].killed == 15
    assert types(c)[-2:] == ["attempt_finished", "run_finished"]


def test_resume_after_a_crash_between_decision_and_action(tmp_path: Path) -> None:
    c, ex = make(tmp_path, [Script(steps(1, 2), exit_at=3)], [])
    now = c.clock.now()
    d = c.layout.attempt_dir(1, 1)
    (d / "logs").mkdir(parents=True)
    (d / "launcher.json").write_text(json.dumps({"template": ["train", "--resume={resume}"], "env": {},
                                                 "handle": {"fake": 99}}))
    with AuditWriter(c.layout.audit) as w:
        for ev in (RunStarted(time=now, job_id="j"), AttemptStarted(time=now, attempt=1, resume_step=0),
                   FailureDetected(time=now, attempt=1, how=FailureHow.EXIT, exit_code=1),
                   DiagnosisMade(time=now, attempt=1, category=Category.INFRA, subtype="x", action=A.RESTART,
                                 confidence=0.9),
                   DecisionMade(time=now, action=A.RESTART, reason="before the crash")):
            w.append(ev)
    from diagnoser.act.events import AttemptFinished

    with AuditWriter(c.layout.audit) as w:
        w.append(AttemptFinished(time=now, attempt=1, exit_code=1, status="failed"))
    r = c.run()
    assert r.status == "succeeded" and len(ex.specs) == 1  # one restart for the one failure
    assert len(events(c, DecisionMade)) == 1 and len(events(c, ActionStarted)) == 1
    assert [e.attempt for e in events(c, AttemptStarted)] == [1, 2]


def test_resume_reattaches_to_a_running_attempt(tmp_path: Path) -> None:
    c1, ex = make(tmp_path, [Script(steps(1, 4), exit_at=5)], [])
    c1.listener = lambda s: c1.request_stop("x") if s.step == 2 else None
    # simulate a controller that died: start the attempt, then abandon the controller object
    c1.watch = None
    h = ex.start(AttemptSpec(1, ("train",), c1.layout.console(c1.layout.attempt_dir(1, 1))))
    d = c1.layout.attempt_dir(1, 1)
    (d / "launcher.json").write_text(json.dumps({"template": ["train"], "env": {}, "handle": h.record()}))
    with AuditWriter(c1.layout.audit) as w:
        w.append(RunStarted(time=c1.clock.now(), job_id="j"))
        w.append(AttemptStarted(time=c1.clock.now(), attempt=1, resume_step=0))
    c1.clock.sleep(2.6)  # two steps were printed while no controller watched
    c2 = Controller(c1.config, ["train"], executor=ex, clock=c1.clock, triage_fn=lambda p: None,
                    notifier=lambda *a: None)
    r = c2.run()
    assert r.status == "succeeded" and len(ex.specs) == 1
    assert (d / "logs" / "rank0.log").read_text().count("step") == 4  # rebuilt once, not duplicated


def test_second_controller_is_locked_out(tmp_path: Path) -> None:
    c, _ = make(tmp_path, [Script(exit_at=1)], [])
    with RunLock(c.layout.lock), pytest.raises(LockedError):
        c.run()


def test_finished_run_dir_starts_a_new_run(tmp_path: Path) -> None:
    c, ex = make(tmp_path, [Script(steps(1, 2), exit_at=3), Script(steps(1, 2), exit_at=3)], [])
    assert c.run().status == "succeeded"
    c2 = Controller(c.config, ["train"], executor=ex, clock=c.clock, triage_fn=lambda p: None)
    assert c2.run().status == "succeeded"
    assert len(events(c, RunStarted)) == 2 and (c.layout.root / "run2-attempt-001").is_dir()


def test_triage_crash_still_restarts(tmp_path: Path) -> None:
    c, _ = make(tmp_path, [Script(steps(1, 2), exit_at=3, code=1), Script(steps(1, 2), exit_at=3)], [])
    c.triage_fn = lambda paths: (_ for _ in ()).throw(RuntimeError("boom"))
    assert c.run().status == "succeeded"
    diag = events(c, DiagnosisMade)[0]
    assert diag.subtype == "triage_failed" and diag.action is A.ESCALATE
    assert events(c, DecisionMade)[0].action is A.RESTART


def test_stop_requested_during_diagnosis_does_not_restart(tmp_path: Path) -> None:
    c, ex = make(tmp_path, [Script(steps(1, 2), exit_at=3, code=1), Script(exit_at=1)], [])

    def triage(paths: list[str]) -> Diagnosis:
        c.request_stop("interrupted by SIGTERM")
        return verdict(Category.INFRA, "x", A.RESTART)

    c.triage_fn = triage
    r = c.run()
    assert r.status == "stopped" and r.reason == "interrupted by SIGTERM" and len(ex.specs) == 1


def test_restart_excluding_nodes_replans_the_launch(tmp_path: Path) -> None:
    c, ex = make(tmp_path, [Script(steps(1, 2), exit_at=3, code=1), Script(steps(1, 2), exit_at=3)],
                 [verdict(Category.HARDWARE, "ib_link_down", A.RESTART_EXCLUDING_NODES, nodes=("n2",))])
    assert c.run().status == "succeeded"
    d = events(c, DecisionMade)[0]
    assert d.action is A.RESTART_EXCLUDING_NODES and d.nodes == ["n2"]
    assert ex.specs[1].command[-2:] == ("--exclude", "n2")
    assert "without ['n2']" in [e for e in read_audit(c.layout.audit) if e.type == "action_finished"][0].detail


def test_exclusion_the_executor_cannot_do_is_a_plain_restart(tmp_path: Path) -> None:
    c, ex = make(tmp_path, [Script(steps(1, 2), exit_at=3, code=1), Script(steps(1, 2), exit_at=3)],
                 [verdict(Category.HARDWARE, "ib_link_down", A.RESTART_EXCLUDING_NODES, nodes=("n2",))])
    ex.exclude = lambda *a: Placement(False, "cannot restart without n2: it is the only node")
    assert c.run().status == "succeeded" and len(ex.specs) == 2
    d = events(c, DecisionMade)[0]
    assert d.action is A.RESTART and "only node" in d.reason and d.nodes == []
    assert ex.specs[1].command == ex.specs[0].command


@pytest.mark.parametrize(("ranks_drop", "ending"), [(True, "succeeded"), (False, "hung")])
def test_ranks_exiting_is_teardown_not_a_hang(tmp_path: Path, ranks_drop: bool, ending: str) -> None:
    from diagnoser.act.supervise import Watch, WatchConfig

    class Ranked(FakeHandle):
        def rank_pids(self) -> dict[int, int]:
            early = self.clock.monotonic() - self.t0 < 3
            return {0: 1, 1: 2} if early or not ranks_drop else {0: 1}

    clock = FakeClock()
    console = tmp_path / "console.log"
    handle = Ranked(clock, Script(steps(1, 2), exit_at=12), console, None, 1)  # silent from 1.5 s to 12 s
    watch = Watch(handle, console, tmp_path / "logs", WatchConfig(hang_timeout_s=5, startup_timeout_s=20,
                                                                 failure_grace_s=30, poll_s=0.2), clock)
    assert watch.run().ending.value == ending
