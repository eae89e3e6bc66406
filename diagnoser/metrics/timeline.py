"""Audit events -> a labelled timeline: where every second of a run's wall time went.

The wall time of a run (run_started .. run_finished, or the last event) is cut into contiguous
intervals, each with one `Phase`:

    startup     run start -> first training of attempt 1 (launch, rendezvous, first load)
    productive  training whose work was kept
    checkpoint  training blocked writing a checkpoint (`checkpoint_saved.seconds`)
    detection   failure -> failure detected (hangs: last progress -> watchdog fired)
    diagnosis   failure detected -> decision (triage, and waiting for an approval)
    restart     decision -> training resumes in the next attempt (action, backoff, queue, init,
                checkpoint load)
    recompute   training done after the checkpoint a later attempt resumed from: work lost
    other       after the last attempt: shutdown, or a stopped job winding down

Progress events may be sparse: the first training moment of an attempt is extrapolated back from
its first progress point with the run's median seconds per step (no estimate -> the first point).
Work after the last progress point of a failed attempt is lost (it is beyond every checkpoint).
Lost work is labelled `recompute` at the time it was originally done and charged to the failure
whose restart discarded it; a run that ends failed loses the work after its newest checkpoint.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path

from diagnoser.act.events import (
    AttemptFinished,
    AttemptStarted,
    AuditEvent,
    CheckpointSaved,
    DecisionMade,
    DiagnosisMade,
    FailureDetected,
    FailureHow,
    Progress,
    RunFinished,
    RunStarted,
    read_audit,
)
from diagnoser.models import Action, Category, DecidedBy


class Phase(StrEnum):
    PRODUCTIVE = "productive"
    CHECKPOINT = "checkpoint"
    STARTUP = "startup"
    DETECTION = "detection"
    DIAGNOSIS = "diagnosis"
    RESTART = "restart"
    RECOMPUTE = "recompute"
    OTHER = "other"


LOST_PHASES = (Phase.DETECTION, Phase.DIAGNOSIS, Phase.RESTART, Phase.RECOMPUTE)


@dataclass
class Interval:
    """[start, end) in seconds since the run started."""

    start: float
    end: float
    phase: Phase
    attempt: int
    failure: int | None = None  # index into Timeline.failures this time is charged to
    step_from: int | None = None  # training intervals only
    step_to: int | None = None  # None: unknown (after the last progress point)

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass
class Failure:
    """One detected failure and what it cost (seconds)."""

    index: int
    attempt: int
    time: float  # when it failed (hang: last progress)
    detected: float
    how: FailureHow
    exit_code: int | None = None
    category: Category = Category.UNKNOWN  # UNKNOWN also when no diagnosis was logged
    subtype: str = "undiagnosed"
    action: Action | None = None  # the decision's action, else the verdict's
    culprit_nodes: list[str] = field(default_factory=list)
    decided_by: DecidedBy | None = None
    confidence: float | None = None
    detection_s: float = 0.0
    diagnosis_s: float = 0.0
    restart_s: float = 0.0
    recompute_s: float = 0.0
    resumed: bool = False  # training resumed afterwards (restart_s is then complete)

    @property
    def repair_s(self) -> float:
        """Failure -> training resumed: detection + diagnosis + restart."""
        return self.detection_s + self.diagnosis_s + self.restart_s

    @property
    def lost_s(self) -> float:
        return self.repair_s + self.recompute_s


@dataclass
class Attempt:
    attempt: int
    start: float
    end: float  # failure time, or when it finished
    nodes: list[str]
    failure: int | None = None


@dataclass
class Timeline:
    job_id: str
    source: str
    started_at: datetime
    wall_s: float
    nodes: list[str]
    gpus_per_node: int
    status: str  # run_finished status, or "running" (log ends without it)
    intervals: list[Interval]
    failures: list[Failure]
    attempts: list[Attempt]
    seconds_per_step: float | None = None

    def totals(self) -> dict[Phase, float]:
        out = dict.fromkeys(Phase, 0.0)
        for iv in self.intervals:
            out[iv.phase] += iv.seconds
        return out

    @property
    def n_gpus(self) -> int:
        return max(len(self.nodes), 1) * self.gpus_per_node


@dataclass
class _AttemptLog:
    n: int
    start: datetime
    nodes: list[str]
    resume_step: int | None
    points: list[tuple[datetime, int, float, bool]] = field(default_factory=list)  # time, step, write s, ckpt?
    failure: FailureDetected | None = None
    diagnosis: DiagnosisMade | None = None
    decision: DecisionMade | None = None
    finished: AttemptFinished | None = None


def split_runs(events: list[AuditEvent]) -> list[list[AuditEvent]]:
    """Cut a log holding several runs at each `run_started`."""
    runs: list[list[AuditEvent]] = []
    for ev in events:
        if isinstance(ev, RunStarted) or not runs:
            runs.append([])
        runs[-1].append(ev)
    return runs


def _group(events: list[AuditEvent], t0: datetime, nodes: list[str]) -> list[_AttemptLog]:
    attempts: list[_AttemptLog] = []

    def current() -> _AttemptLog:
        if not attempts:  # events before any attempt_started: an implicit attempt 1 at run start
            attempts.append(_AttemptLog(1, t0, list(nodes), None))
        return attempts[-1]

    for ev in events:
        if isinstance(ev, AttemptStarted):
            attempts.append(_AttemptLog(ev.attempt, ev.time, list(ev.nodes) or list(nodes), ev.resume_step))
        elif isinstance(ev, Progress):
            current().points.append((ev.time, ev.step, 0.0, False))
        elif isinstance(ev, CheckpointSaved):
            current().points.append((ev.time, ev.step, ev.seconds or 0.0, True))
        elif isinstance(ev, FailureDetected):
            a = current()
            a.failure = a.failure or ev
        elif isinstance(ev, DiagnosisMade):
            a = current()
            if a.failure is not None and a.diagnosis is None:
                a.diagnosis = ev
        elif isinstance(ev, DecisionMade):
            a = current()
            if a.decision is None:
                a.decision = ev
        elif isinstance(ev, AttemptFinished):
            current().finished = ev
    return attempts


def _seconds_per_step(attempts: list[_AttemptLog]) -> float | None:
    rates = []
    for a in attempts:
        for (t1, s1, _, _), (t2, s2, w2, _) in zip(a.points, a.points[1:], strict=False):
            dt = (t2 - t1).total_seconds() - w2
            if s2 > s1 and dt > 0:
                rates.append(dt / (s2 - s1))
    return statistics.median(rates) if rates else None


class _Builder:
    """Emits contiguous intervals and relabels lost work on resume."""

    def __init__(self) -> None:
        self.intervals: list[Interval] = []
        self.cursor = 0.0
        self.kept: list[Interval] = []  # training intervals still counted as kept, in order

    def emit(self, end: float, phase: Phase, attempt: int, failure: int | None = None,
             step_from: int | None = None, step_to: int | None = None) -> None:
        start = self.cursor
        end = max(end, start)
        if end > start:
            iv = Interval(start, end, phase, attempt, failure, step_from, step_to)
            self.intervals.append(iv)
            if phase in (Phase.PRODUCTIVE, Phase.CHECKPOINT):
                self.kept.append(iv)
        self.cursor = end

    def discard_after(self, step: int, failure: Failure | None) -> None:
        """Work beyond `step` is lost: relabel it recompute and charge it to `failure`."""
        while self.kept:
            iv = self.kept[-1]
            if iv.phase is Phase.CHECKPOINT:
                if iv.step_from is not None and iv.step_from <= step:
                    return
            elif iv.step_to is not None and iv.step_to <= step:
                return
            elif iv.step_from is not None and iv.step_from < step:
                if iv.step_to is None:
                    return
                frac = (step - iv.step_from) / (iv.step_to - iv.step_from)
                mid = iv.start + frac * iv.seconds
                lost = Interval(mid, iv.end, Phase.RECOMPUTE, iv.attempt, None, step, iv.step_to)
                iv.end, iv.step_to = mid, step
                self.intervals.insert(self.intervals.index(iv) + 1, lost)
                self._charge(lost, failure)
                return
            self.kept.pop()
            iv.phase = Phase.RECOMPUTE
            self._charge(iv, failure)

    @staticmethod
    def _charge(iv: Interval, failure: Failure | None) -> None:
        if failure is not None:
            iv.failure = failure.index
            failure.recompute_s += iv.seconds


def build_timeline(events: list[AuditEvent], source: str = "<audit>") -> Timeline:
    """Label the wall time of one run (the events of one `run_started`; see `split_runs`)."""
    if not events:
        raise ValueError(f"{source}: no audit events")
    events = sorted(events, key=lambda e: e.time)
    run = next((e for e in events if isinstance(e, RunStarted)), None)
    finish = next((e for e in events if isinstance(e, RunFinished)), None)
    if finish is not None:
        events = [e for e in events if e.time <= finish.time]
    t0 = run.time if run else events[0].time
    end_t = finish.time if finish else events[-1].time
    nodes = list(run.nodes) if run else []

    def sec(t: datetime) -> float:
        return (t - t0).total_seconds()

    logs = _group(events, t0, nodes)
    if not nodes and logs:
        nodes = list(logs[0].nodes)
    rho = _seconds_per_step(logs)
    b = _Builder()
    failures: list[Failure] = []
    attempts: list[Attempt] = []
    pending: Failure | None = None  # failed, waiting for training to resume
    newest_ckpt = 0

    for k, a in enumerate(logs):
        s0 = a.resume_step if a.resume_step is not None else newest_ckpt
        if k > 0:
            b.discard_after(s0, pending)
        newest_ckpt = s0  # checkpoints beyond a rollback point are abandoned
        pts = [(sec(t), s, w, c) for t, s, w, c in a.points]
        start = sec(a.start)
        train_start = None
        if pts:
            t1, s1, _, _ = pts[0]
            train_start = t1 if rho is None else min(t1, max(start, t1 - max(s1 - s0, 0) * rho))
        fail = a.failure
        if fail is not None:
            last_pt = pts[-1][0] if pts else start
            if fail.how is FailureHow.HANG:
                t_fail = sec(fail.last_progress_time) if fail.last_progress_time else last_pt
                t_fail = min(max(t_fail, last_pt), sec(fail.time))
            else:
                t_fail = sec(fail.time)
            train_end = t_fail
        elif a.finished is not None:
            train_end = sec(a.finished.time)
        else:
            train_end = sec(logs[k + 1].start) if k + 1 < len(logs) else sec(end_t)

        # before training: startup (first attempt) or the restart of the pending failure
        lead_phase = Phase.STARTUP if k == 0 else Phase.RESTART
        b.emit(train_start if train_start is not None else train_end, lead_phase, a.n,
               pending.index if pending else None)
        if pending is not None:
            pending.restart_s = sum(iv.seconds for iv in b.intervals
                                    if iv.failure == pending.index and iv.phase is Phase.RESTART)
            pending.resumed = train_start is not None
        if train_start is not None:
            pending = None
            s_prev = s0
            for t, s, w, is_ckpt in pts:
                s = max(s, s_prev)
                if w > 0:
                    b.emit(t - w, Phase.PRODUCTIVE, a.n, None, s_prev, s)
                    b.emit(t, Phase.CHECKPOINT, a.n, None, s, s)
                else:
                    b.emit(t, Phase.PRODUCTIVE, a.n, None, s_prev, s)
                if is_ckpt:
                    newest_ckpt = s
                s_prev = s
            b.emit(train_end, Phase.PRODUCTIVE, a.n, None, s_prev, None)
        span_end = b.cursor
        f_index = None
        if fail is not None:
            f = _failure(len(failures), a, fail, b.cursor, sec)
            failures.append(f)
            f_index = f.index
            b.emit(sec(fail.time), Phase.DETECTION, a.n, f.index)
            f.detection_s = b.cursor - f.time
            decided = a.decision or a.diagnosis
            b.emit(sec(decided.time) if decided else b.cursor, Phase.DIAGNOSIS, a.n, f.index)
            f.diagnosis_s = b.cursor - f.detected
            pending = f
        attempts.append(Attempt(a.n, start, span_end, a.nodes, f_index))

    if pending is not None:  # ended failed: work after the newest checkpoint is lost
        b.discard_after(newest_ckpt, pending)
    b.emit(sec(end_t), Phase.OTHER, logs[-1].n if logs else 0)
    return Timeline(
        job_id=run.job_id if run else Path(source).stem, source=source, started_at=t0, wall_s=b.cursor,
        nodes=nodes, gpus_per_node=run.gpus_per_node if run else 1,
        status=finish.status if finish else "running", intervals=b.intervals, failures=failures,
        attempts=attempts, seconds_per_step=rho)


def _failure(index: int, a: _AttemptLog, ev: FailureDetected, t_fail: float, sec) -> Failure:
    d, dec = a.diagnosis, a.decision
    return Failure(
        index=index, attempt=a.n, time=t_fail, detected=max(sec(ev.time), t_fail), how=ev.how,
        exit_code=ev.exit_code, category=d.category if d else Category.UNKNOWN,
        subtype=d.subtype if d else "undiagnosed", action=dec.action if dec else (d.action if d else None),
        culprit_nodes=list(d.culprit_nodes) if d else [], decided_by=d.decided_by if d else None,
        confidence=d.confidence if d else None)


def load_timelines(path: str | Path, warnings: list[str] | None = None) -> list[Timeline]:
    """Timelines of every run in an audit log, or in every `*.jsonl` under a directory."""
    p = Path(path)
    files = sorted(p.rglob("*.jsonl")) if p.is_dir() else [p]
    if not files:
        raise FileNotFoundError(f"{path}: no *.jsonl audit logs")
    out = []
    for f in files:
        events = read_audit(f, warnings)
        out.extend(build_timeline(run, str(f)) for run in split_runs(events) if run)
    return out
