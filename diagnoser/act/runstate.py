"""The run directory: its layout, the controller lock, and the run's state rebuilt from the audit log.

    <run_dir>/audit.jsonl              audit/v1, append-only (the source of truth)
    <run_dir>/controller.lock          held (fcntl) by the one controller of this run
    <run_dir>/attempt-001/console.log  the attempt's raw stdout+stderr (bounded)
                         /launcher.json  how to re-attach to it; its command and env
                         /exit.json      its exit status (written by wrap.py)
                         /diagnosis.json the full diagnosis/v1 of its failure
                         /logs/          what the triage reads: rank<N>.log, launcher.log,
                                         watchdog.log, stacks/rank<N>.txt, dmesg/<host>.log
A second run in the same directory (the first one finished) uses `run2-attempt-001/` and so on.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from diagnoser.act.events import (
    ActionFinished,
    ActionStarted,
    AttemptFinished,
    AttemptStarted,
    AuditEvent,
    CheckpointSaved,
    DecisionMade,
    DiagnosisMade,
    FailureDetected,
    Progress,
    RunFinished,
    RunStarted,
)
from diagnoser.act.policy import NODE_ACTIONS, JobHistory, PastFailure
from diagnoser.models import Action


class LockedError(RuntimeError):
    """Another controller holds the run directory."""


class RunLock:
    """An exclusive, non-blocking fcntl lock on `<run_dir>/controller.lock`, released on exit (or
    by the kernel when the controller dies): two controllers never act on one run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def __enter__(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise LockedError(f"{self.path.parent} is held by another controller (pid {holder})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


@dataclass(frozen=True)
class RunLayout:
    root: Path

    @property
    def audit(self) -> Path:
        return self.root / "audit.jsonl"

    @property
    def lock(self) -> Path:
        return self.root / "controller.lock"

    def attempt_dir(self, run_index: int, attempt: int) -> Path:
        prefix = "" if run_index <= 1 else f"run{run_index}-"
        return self.root / f"{prefix}attempt-{attempt:03d}"

    @staticmethod
    def console(attempt_dir: Path) -> Path:
        return attempt_dir / "console.log"

    @staticmethod
    def logs(attempt_dir: Path) -> Path:
        return attempt_dir / "logs"

    @staticmethod
    def launcher_record(attempt_dir: Path) -> Path:
        return attempt_dir / "launcher.json"

    @staticmethod
    def diagnosis(attempt_dir: Path) -> Path:
        return attempt_dir / "diagnosis.json"


@dataclass
class AttemptState:
    """Everything the audit log says about one attempt."""

    n: int
    started: AttemptStarted
    failure: FailureDetected | None = None
    finished: AttemptFinished | None = None
    diagnosis: DiagnosisMade | None = None
    decision: DecisionMade | None = None
    action_started: ActionStarted | None = None
    action_finished: ActionFinished | None = None
    last_step: int | None = None


@dataclass
class RunState:
    """The current run (the events after the last run_started)."""

    run_index: int = 0
    started: RunStarted | None = None
    finished: RunFinished | None = None
    attempts: list[AttemptState] = field(default_factory=list)
    checkpoints: set[str] = field(default_factory=set)  # paths already reported

    @property
    def last(self) -> AttemptState | None:
        return self.attempts[-1] if self.attempts else None

    def rollbacks(self) -> list[tuple[int, datetime]]:
        """(step rolled back to, when): checkpoints beyond that step written before then are abandoned."""
        out = []
        for prev, nxt in zip(self.attempts, self.attempts[1:], strict=False):
            d = prev.decision
            if d is not None and d.action is Action.ROLLBACK_AND_RESTART and nxt.started.resume_step is not None:
                out.append((nxt.started.resume_step, nxt.started.time))
        return out

    def excluded_nodes(self) -> list[str]:
        seen: list[str] = []
        for a in self.attempts:
            d = a.decision
            if d is not None and d.action in NODE_ACTIONS and _acted(a):
                seen += [n for n in d.nodes if n not in seen]
        return seen


def _acted(a: AttemptState) -> bool:
    """The attempt's action started and did not fail (it finishes after the next attempt started)."""
    return a.action_started is not None and (a.action_finished is None or a.action_finished.ok)


def fold(state: RunState, ev: AuditEvent) -> RunState:
    """Apply one audit event to the state (a run_started begins a new state)."""
    if isinstance(ev, RunStarted):
        return RunState(run_index=state.run_index + 1, started=ev)
    a = state.last
    if isinstance(ev, AttemptStarted):
        state.attempts.append(AttemptState(ev.attempt, ev))
    elif isinstance(ev, RunFinished):
        state.finished = ev
    elif isinstance(ev, CheckpointSaved):
        state.checkpoints.add(ev.path)
    elif a is None:
        return state
    elif isinstance(ev, Progress):
        a.last_step = ev.step if a.last_step is None else max(a.last_step, ev.step)
    elif isinstance(ev, FailureDetected):
        a.failure = a.failure or ev
    elif isinstance(ev, AttemptFinished):
        a.finished = ev
    elif isinstance(ev, DiagnosisMade):
        a.diagnosis = a.diagnosis or ev
    elif isinstance(ev, DecisionMade):
        a.decision = a.decision or ev
    elif isinstance(ev, ActionStarted):
        a.action_started = a.action_started or ev
    elif isinstance(ev, ActionFinished):
        # a restart's action finishes after the next attempt started: credit the attempt it belongs to
        owner = next((x for x in reversed(state.attempts) if x.action_started and not x.action_finished), a)
        owner.action_finished = ev
    return state


def load_state(events: list[AuditEvent]) -> RunState:
    """Fold the audit events into the state of the last run."""
    state = RunState()
    for ev in events:
        state = fold(state, ev)
    return state


def read_ranks(diagnosis_path: Path) -> tuple[int, ...]:
    try:
        data = json.loads(diagnosis_path.read_text(encoding="utf-8"))
        return tuple(int(r) for r in data.get("culprit", {}).get("ranks", []))
    except (OSError, ValueError, TypeError, AttributeError):
        return ()


def job_history(state: RunState, layout: RunLayout, job_id: str, nodes: list[str] | tuple[str, ...] = ()
                ) -> JobHistory:
    """The policy's view of the run: decided failures, executed node exclusions, and the job's own
    nodes (`nodes`, plus what the audit log recorded): culprits outside them are never acted on."""
    failures = []
    excluded: list[tuple[datetime, str]] = []
    for a in state.attempts:
        if a.failure is None or a.diagnosis is None or a.decision is None:
            continue
        d = a.diagnosis
        ranks = read_ranks(layout.diagnosis(layout.attempt_dir(state.run_index, a.n)))
        failures.append(PastFailure(a.failure.time, d.category, d.subtype, tuple(d.culprit_nodes), ranks,
                                    a.decision.action))
        if a.decision.action in NODE_ACTIONS and _acted(a):
            excluded += [(a.decision.time, n) for n in a.decision.nodes]
    own = dict.fromkeys(nodes)
    if state.last is not None:  # the failed attempt's own allocation
        own.update(dict.fromkeys(state.last.started.nodes))
    return JobHistory(job_id=job_id, failures=tuple(failures), excluded=tuple(excluded), nodes=tuple(own))
