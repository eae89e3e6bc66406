"""The restart controller: attempt -> failure or hang -> logs -> triage -> policy -> audit -> act.

Every step is written to the audit log before the next one runs (the decision before its action),
so the loop is a state machine over the audit log: a controller that died (or was restarted by its
own supervisor) reads the log, re-attaches to a still-running attempt or picks up the step it was
in, and never runs an action twice. The run directory's lock (`RunLock`) keeps a second controller
out, so one failure gets one restart.

Injectable: executor (where attempts run), clock, approver, triage function, notifier.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from diagnoser.act import attempts as att
from diagnoser.act.approval import Approver, FileApprover, write_json
from diagnoser.act.checkpoints import CheckpointStore, CheckpointWatcher
from diagnoser.act.clock import Clock, SystemClock
from diagnoser.act.config import RunConfig
from diagnoser.act.events import (
    AttemptFinished,
    AuditEvent,
    AuditWriter,
    FailureDetected,
    FailureHow,
    RunStarted,
    read_audit,
)
from diagnoser.act.executors import Executor, Handle, LocalExecutor
from diagnoser.act.hooks import TriageFn, default_notifier, default_triage
from diagnoser.act.launchers import nproc
from diagnoser.act.observers import ObserversMixin
from diagnoser.act.policy import Mode
from diagnoser.act.runstate import AttemptState, RunLayout, RunLock, RunState, fold, load_state
from diagnoser.act.stacks import collect_stacks
from diagnoser.act.steps import Pending, StepsMixin
from diagnoser.act.supervise import Ending, Observer, Outcome, Watch, WatchConfig
from diagnoser.models import Diagnosis

log = logging.getLogger(__name__)
_ATTEMPT_DIR = re.compile(r"(?:run\d+-)?attempt-\d{3,}")


@dataclass
class Status:
    """What the live status line shows."""

    phase: str = "starting"
    attempt: int = 0
    step: int | None = None
    last_progress_at: datetime | None = None
    failures: dict[str, int] = field(default_factory=dict)  # category -> count
    message: str = ""


class ControllerError(RuntimeError):
    """The controller could not go on (its run directory failed); the message is one line."""


@dataclass(frozen=True)
class RunResult:
    status: str  # run_finished status
    reason: str
    attempts: int
    audit: Path


class Controller(StepsMixin, ObserversMixin):
    """Supervises one job run (see the module docstring). `run()` returns when the run finished."""

    def __init__(self, config: RunConfig, command: list[str] | tuple[str, ...], executor: Executor | None = None,
                 clock: Clock | None = None, approver: Approver | None = None, triage_fn: TriageFn | None = None,
                 listener: Callable[[Status], None] | None = None,
                 notifier: Callable[[Path, dict], None] | None = None,
                 on_event: Callable[[AuditEvent], None] | None = None) -> None:
        self.config = config
        self.on_event = on_event  # sees every audit event once written (e.g. the Prometheus metrics)
        self.policy = config.policy
        self.executor = executor or LocalExecutor(tee=config.tee)
        self.clock = clock or SystemClock()
        self.layout = RunLayout(Path(config.run_dir))
        self.approver = approver or FileApprover(self.layout.root, config.approval_timeout_s,
                                                 config.approval_default == "approve", self.clock,
                                                 approvers=config.approvers)
        self.triage_fn = triage_fn or default_triage(config.runbooks)
        self.listener = listener or (lambda status: None)
        self.notifier = notifier or default_notifier(config.notify_command)
        prepared, self.prepare_note = self.executor.prepare(tuple(command))
        self.command = tuple(command)
        self.launch = att.Launch(prepared, {})
        self.store = CheckpointStore(config.checkpoint_dir, verify_load=config.verify_load,
                                     markers=config.checkpoint_markers) if config.checkpoint_dir else None
        self.status = Status()
        self.state = RunState()
        self.audit: AuditWriter | None = None
        self.handles: dict[int, Handle] = {}
        self.verdicts: dict[int, Diagnosis] = {}
        self.pending: dict[int, Pending] = {}
        self.watch: Watch | None = None
        self.stop_reason: str | None = None
        self.force = False
        self._progress_written: datetime | None = None
        self._pending_progress: tuple[int, datetime] | None = None
        self._ckpt: CheckpointWatcher | None = None
        self._next_ckpt_poll = 0.0
        self._next_record = 0.0

    # ----------------------------------------------------------------------------------- public
    def request_stop(self, reason: str) -> None:
        """Stop the job cleanly (Ctrl-C, SIGTERM); a second request kills without grace."""
        if self.stop_reason is not None:
            self.force = True
        self.stop_reason = self.stop_reason or reason
        if self.watch is not None:
            self.watch.stop(reason)

    def run(self) -> RunResult:
        """Supervise until the run finished. Its own files failing (a full disk, an audit path that
        is not a file) raise `ControllerError` (one line) after every live attempt was stopped
        cleanly: the controller never leaves a job running unsupervised."""
        try:
            with RunLock(self.layout.lock), AuditWriter(self.layout.audit) as audit:
                self.audit = audit
                try:
                    return self._run()
                finally:
                    if self._ckpt is not None:
                        self._ckpt.close()
                    self.audit = None
                    # a daemon thread still inside native code when the interpreter exits aborts the
                    # process ("FATAL: exception not rethrown"): let the triage warm-up finish first
                    warm = getattr(self.triage_fn, "warm_up", None)
                    if warm is not None:
                        warm.join(timeout=120)
        except OSError as exc:
            raise ControllerError(self._stop_all(f"{exc.strerror or exc} ({exc.filename or self.layout.root})")
                                  ) from exc

    def _stop_all(self, why: str) -> str:
        """Stop every live attempt this controller knows; the one line that says what happened."""
        stopped = []
        for n, h in sorted(self.handles.items()):
            try:
                if h.alive():
                    self.executor.stop(h, self.config.kill_grace_s, self.clock)
                    stopped.append(f"attempt {n} (pid {h.pid})")
            except Exception as exc:  # noqa: BLE001 - keep stopping the others
                stopped.append(f"attempt {n}: stop failed ({exc})")
        done = f"stopped {', '.join(stopped)} cleanly" if stopped else "no attempt was running"
        return f"cannot write the run directory: {why}; {done}"

    def _reconcile(self) -> None:
        """Attempts alive on this host that the audit log does not show as running (a damaged or
        edited audit log, a controller that died between steps) are stopped cleanly, never left
        running unsupervised and never doubled by a new attempt."""
        a = self.state.last
        running = self._attempt_dir(a.n) if (a is not None and a.failure is None and a.finished is None
                                             and self.state.finished is None) else None
        for d in sorted(self.layout.root.glob("*attempt-*")):
            if not _ATTEMPT_DIR.fullmatch(d.name) or not d.is_dir() or (
                    running is not None and d.resolve() == running.resolve()):
                continue
            try:
                record = json.loads(self.layout.launcher_record(d).read_text())
                h = self.executor.attach(record["handle"]) if record.get("handle") else None
            except (OSError, ValueError, TypeError, KeyError, AttributeError):
                h = None
            if h is None:
                h, _ = self.executor.rediscover(d)
            if h is not None and h.alive():
                self.executor.stop(h, self.config.kill_grace_s, self.clock)
                self._say(f"{d.name} was still running although the audit log does not show it running: "
                          f"stopped it cleanly (pid {h.pid})")

    # ------------------------------------------------------------------------------ the loop
    def _run(self) -> RunResult:
        events = read_audit(self.layout.audit) if self.layout.audit.exists() else []
        state = load_state(events)
        self.state = state
        self._reconcile()
        if state.started is None or state.finished is not None:
            job_id = self.config.job_id or self.layout.root.resolve().name
            per_node = nproc(self.command)
            self._emit(RunStarted(time=self.clock.now(), job_id=job_id, command=list(self.command),
                                  nodes=self.executor.nodes(),
                                  gpus_per_node=per_node or 1))
        else:
            self._restore_launch()
        self.job_id = self.state.started.job_id if self.state.started else "job"
        for a in self.state.attempts:
            if a.diagnosis is not None:
                self._fail_count(a.diagnosis.category.value)
        while True:
            a = self.state.last
            if self.state.finished is not None:
                f = self.state.finished
                return RunResult(f.status, f.reason, len(self.state.attempts), self.layout.audit)
            if a is None and self.stop_reason is not None:
                self._finish("stopped", self.stop_reason)
            elif a is None:
                self._start_next(None)
            elif a.failure is None and a.finished is None:
                self._supervise(a)
            elif a.finished is not None and a.finished.status == "succeeded":
                self._finish("succeeded", "the job exited 0")
            elif self.stop_reason is not None and a.finished is not None:  # stopped between steps
                self._finish("stopped", self.stop_reason)
            elif a.failure is None:  # killed without a failure: the controller was stopped
                self._finish("stopped", self.stop_reason or "stopped")
            elif a.finished is None and self.policy.mode is Mode.ACTIVE:  # the controller died before the kill
                self._kill(a, self._handle(a), "finishing an attempt found failed on restart")
            elif a.diagnosis is None:
                self._diagnose(a)
            elif a.decision is None:
                self._decide(a)
            elif a.action_finished is None or a.action_started is None:
                self._execute(a)
            else:  # the action finished but the run went no further (crash right after)
                self._after_action(a)

    # --------------------------------------------------------------------------- audit, status
    def _emit(self, event: AuditEvent) -> None:
        """Write the event (fsync), then fold it into the state exactly as a restarted controller would."""
        assert self.audit is not None
        self.audit.append(event)
        self.state = fold(self.state, event)
        if self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:  # noqa: BLE001 - an observer's bug must never stop supervision
                log.exception("audit event observer failed")
        self.listener(self.status)

    def _set(self, phase: str, message: str = "") -> None:
        self.status.phase = phase
        self.status.message = message
        self.listener(self.status)

    def _fail_count(self, category: str) -> None:
        self.status.failures[category] = self.status.failures.get(category, 0) + 1

    # ------------------------------------------------------------------------------ supervise
    def _attempt_dir(self, n: int) -> Path:
        return self.layout.attempt_dir(self.state.run_index, n)

    def _handle(self, a: AttemptState) -> Handle | None:
        if a.n in self.handles:
            return self.handles[a.n]
        d = self._attempt_dir(a.n)
        try:
            record = json.loads(self.layout.launcher_record(d).read_text())
            h = self.executor.attach(record["handle"]) if isinstance(record, dict) and record.get("handle") else None
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            h = None
        if h is None:  # missing or damaged record: find the attempt by what it runs, never lose it
            h, found = self.executor.rediscover(d)
            if h is not None:
                self._say(f"attempt {a.n}: {self.layout.launcher_record(d).name} unusable; re-attached to "
                          f"pid {found.get('pid')} found by its exit file")
                with contextlib.suppress(OSError):
                    write_json(self.layout.launcher_record(d), {"attempt": a.n, "handle": found, "recovered": True})
        if h is not None:
            self.handles[a.n] = h
        return h

    def _say(self, line: str) -> None:
        """One line for the person running the controller (status line and log)."""
        log.warning("diagnoser: %s", line)
        self._set(self.status.phase, line)

    def _watch_config(self) -> WatchConfig:
        cfg = self.config
        return WatchConfig(cfg.hang_timeout_s, cfg.startup_timeout_s, cfg.failure_grace_s, cfg.poll_s,
                           cfg.progress_patterns, cfg.max_rank_log_bytes, cfg.max_raw_bytes)

    def _supervise(self, a: AttemptState) -> None:
        d = self._attempt_dir(a.n)
        reattached = a.n not in self.handles
        handle = self._handle(a)
        self.status.attempt, self.status.step = a.n, a.last_step
        if handle is None:
            self._record_failure(a, Outcome(Ending.FAILED, self.clock.now(), None,
                                            "attempt lost: no launcher record to re-attach to"))
            self._emit(AttemptFinished(time=self.clock.now(), attempt=a.n, status="failed"))
            return
        cfg = self.config
        wcfg = self._watch_config()
        self._progress_written = None
        self._pending_progress = None
        started = a.started.time
        self._ckpt = CheckpointWatcher(self.store, started.timestamp() - 1, self.state.checkpoints,
                                       att.abandoned_by(self.state.rollbacks())) if self.store else None
        self._next_ckpt_poll = 0.0
        elapsed = max(0.0, (self.clock.now() - started).total_seconds())
        watch = Watch(handle, self.layout.console(d), self.layout.logs(d), wcfg, self.clock,
                      Observer(on_progress=self._on_progress, on_tick=self._on_tick),
                      self.executor.rank_offset(self.launch.template), self.clock.monotonic() - elapsed)
        self.watch = watch
        if reattached:  # rebuild the per-rank files from the console file, silently
            for f in self.layout.logs(d).glob("*.log*"):
                if f.name.startswith(("rank", "launcher")):
                    f.unlink()
            watch.catch_up()
        if self.stop_reason:
            watch.stop(self.stop_reason)
        self._set("running", f"attempt {a.n}")
        try:
            outcome = watch.run(detect_hang=True)
            self._poll_checkpoints(final=True)
            self._flush_progress(a.n)
            if outcome.ending is Ending.SUCCEEDED:
                self._kill_leftovers(handle)
                watch.drain()
                self._emit(AttemptFinished(time=outcome.at, attempt=a.n, exit_code=0, status="succeeded"))
            elif outcome.ending is Ending.STOPPED:
                self._set("stopping", outcome.reason)
                self.executor.stop(handle, 0.0 if self.force else cfg.kill_grace_s, self.clock)
                watch.drain()
                self._emit(AttemptFinished(time=self.clock.now(), attempt=a.n, exit_code=handle.exit_code,
                                           status="killed"))
                self._finish("stopped", outcome.reason)
            elif outcome.ending is Ending.FAILED:
                self._record_failure(a, outcome)
                self._kill(a, handle, outcome.reason)
            else:
                self._on_hang(a, handle, outcome)
        finally:
            self.watch = None
            if self._ckpt is not None:
                self._ckpt.close()
                self._ckpt = None

    def _watch_to_end(self, a: AttemptState) -> None:
        """Dry-run and shadow modes do not kill a hung job: keep following it until it exits."""
        handle = self._handle(a)
        if handle is not None and not handle.ended():
            d = self._attempt_dir(a.n)
            cfg = self.config
            self.watch = Watch(handle, self.layout.console(d), self.layout.logs(d), self._watch_config(), self.clock,
                               Observer(on_progress=self._on_progress, on_tick=self._on_tick),
                               self.executor.rank_offset(self.launch.template))
            if self.stop_reason:
                self.watch.stop(self.stop_reason)
            self._set("watching", f"{self.policy.mode.value}: attempt {a.n} left running")
            try:
                outcome = self.watch.run(detect_hang=False)
                if outcome.ending is Ending.STOPPED:
                    self.executor.stop(handle, 0.0 if self.force else cfg.kill_grace_s, self.clock)
                self.watch.drain()
            finally:
                self.watch = None
        if a.finished is None:
            code = handle.exit_code if handle is not None else None
            self._emit(AttemptFinished(time=self.clock.now(), attempt=a.n, exit_code=code,
                                       status="succeeded" if code == 0 else "failed"))

    def _on_hang(self, a: AttemptState, handle: Handle, outcome: Outcome) -> None:
        self._set("hung", outcome.reason)
        self._record_failure(a, outcome)
        logs = self.layout.logs(self._attempt_dir(a.n))
        detail = ""
        if self.config.collect_stacks:
            ranks = handle.rank_pids()
            if not ranks and handle.main_pid() is not None:  # not a distributed launcher: the job itself
                ranks = {0: handle.main_pid()}
            result = collect_stacks(ranks, logs / "stacks", self.config.stack_timeout_s)
            detail = f"; {result.detail}"
        att.write_watchdog_note(logs, outcome.at, f"job hung: {outcome.reason}{detail}")
        if self.policy.mode is Mode.ACTIVE:
            self._kill(a, handle, outcome.reason)

    def _kill(self, a: AttemptState, handle: Handle | None, reason: str) -> None:
        self._set("stopping", reason)
        code = None
        if handle is not None:
            code = self.executor.stop(handle, 0.0 if self.force else self.config.kill_grace_s, self.clock)
        if self.watch is not None:
            self.watch.drain()
        status = "failed" if a.failure is not None and a.failure.how is FailureHow.EXIT else "killed"
        self._emit(AttemptFinished(time=self.clock.now(), attempt=a.n, exit_code=code, status=status))

    def _kill_leftovers(self, handle: Handle) -> None:
        if handle.alive():
            self.executor.stop(handle, min(5.0, self.config.kill_grace_s), self.clock)

    def _record_failure(self, a: AttemptState, outcome: Outcome) -> None:
        how = FailureHow.HANG if outcome.ending is Ending.HUNG else FailureHow.EXIT
        last_at = outcome.last_progress_at or a.started.time
        self._emit(FailureDetected(time=outcome.at, attempt=a.n, how=how, exit_code=outcome.exit_code,
                                   last_progress_time=last_at, last_step=outcome.last_step))
        self._set("failed", outcome.reason)
