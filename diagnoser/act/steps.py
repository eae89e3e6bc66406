"""The controller's steps after a failure: diagnose, decide (with approval), execute; and starting
an attempt. Each step ends by writing its audit event, which is what moves the loop forward.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from diagnoser.act import attempts as att
from diagnoser.act import evidence as ev
from diagnoser.act.approval import ApprovalRequest, write_json
from diagnoser.act.checkpoints import Selection
from diagnoser.act.events import (
    ActionFinished,
    ActionStarted,
    AttemptStarted,
    DecisionMade,
    DiagnosisMade,
    FailureHow,
    RunFinished,
)
from diagnoser.act.executors import AttemptSpec, Placement
from diagnoser.act.policy import NODE_ACTIONS, RESTARTS, Decision, Mode, decide
from diagnoser.act.runstate import AttemptState, job_history
from diagnoser.act.targets import check_targets, job_targets
from diagnoser.classify.redact import redact_diagnosis
from diagnoser.models import Action, Culprit, Diagnosis

if TYPE_CHECKING:
    from diagnoser.act.controller import Controller

log = logging.getLogger(__name__)

GIVE_UP_RULES = ("budget", "max_restarts", "crash_loop")


@dataclass
class Pending:
    """What a decision needs to run, beyond the DecisionMade event (lost on a controller restart:
    then the placement is recomputed; the backoff's rest is taken from action_started)."""

    decision: Decision
    placement: Placement | None = None


class StepsMixin:
    """Mixed into `Controller` (see there for the attributes used)."""

    # ------------------------------------------------------------------------------- diagnose
    def _diagnose(self: Controller, a: AttemptState) -> None:
        assert a.failure is not None
        self._set("diagnosing", f"attempt {a.n}")
        d = self._attempt_dir(a.n)
        logs = self.layout.logs(d)
        logs.mkdir(parents=True, exist_ok=True)
        t0 = self.clock.monotonic()
        kernel_note = self.executor.collect_kernel(a.started.time, logs) if self.config.collect_kernel else ""
        if self.executor.local_evidence:
            self._exit_evidence(a, d, kernel_note)
        extra = [*self.config.collect, *self.executor.launcher_logs(self.launch.template, a.started.time)]
        try:
            verdict = self.triage_fn([str(logs), *(str(p) for p in extra)])
        except Exception as exc:  # noqa: BLE001 - an unusable input or a bug: escalate, never crash
            verdict = att.failed_verdict(f"{type(exc).__name__}: {exc}")
        if a.failure.how is FailureHow.HANG:
            note = _last_watchdog_line(logs)
            if note is not None:
                verdict = att.hang_verdict(verdict, note, self.policy.min_confidence)
        verdict = redact_diagnosis(verdict)  # whatever triage_fn produced: no secret reaches the run dir
        self.layout.diagnosis(d).write_text(json.dumps(verdict.to_json_dict(), indent=1), encoding="utf-8")
        self.verdicts[a.n] = verdict
        self._fail_count(verdict.category.value)
        self._emit(DiagnosisMade.of(verdict, self.clock.now(), a.n, self.clock.monotonic() - t0))

    def _exit_evidence(self: Controller, a: AttemptState, d: Path, kernel_note: str) -> None:
        """What the controller saw of the attempt's end, as `logs/launcher-exit.log` for the triage."""
        assert a.failure is not None
        logs, handle = self.layout.logs(d), self._handle(a)
        try:
            record = json.loads(self.layout.launcher_record(d).read_text())
        except (OSError, ValueError):
            record = {}
        before = ev.OomCounter.from_json(record.get("oom_kill_at_start"))
        now_count = ev.read_oom_kill(Path(before.path)) if before else None
        after = ev.OomCounter(before.path, now_count) if before and now_count is not None else None
        ranks, first = ev.launcher_failures(_tail(self.layout.console(d)) or _tail(logs / "launcher.log"))
        pids = handle.known_pids() if handle else set()
        left_out = ev.scope_kernel_logs(logs / "dmesg", pids)
        kernel_read, kernel_pids = ev.kernel_oom_pids(logs / "dmesg")
        failed_at = a.failure.time.timestamp()
        outside = [(name, datetime.fromtimestamp(t, UTC)) for name, t in
                   (handle.received_signals() if handle else []) if t <= failed_at]
        exited = a.failure.exit_code is not None
        code = a.failure.exit_code if exited else (a.finished.exit_code if a.finished else None)
        facts = ev.ExitFacts(
            at=a.failure.time, started=a.started.time, launcher_pid=handle.pid if handle else None,
            launcher_code=code, ranks=ranks, first=first, pids=pids, kernel_oom_pids=kernel_pids,
            kernel_log_read=kernel_read or kernel_note.startswith("dmesg:"), kernel_lines_left_out=left_out,
            oom_before=before, oom_after=after, outside_signals=outside,
            sent_by_diagnoser=None if exited else f"SIGTERM (then SIGKILL after {self.config.kill_grace_s:g} s) "
            f"after the {a.failure.how.value} was detected",
            last_step=a.failure.last_step, last_progress_at=a.failure.last_progress_time,
            error_file=ev.read_error_file(Path(os.environ.get(ev.ENV_ERROR_FILE) or d / ev.ERROR_FILE)))
        try:
            ev.write_exit_evidence(logs, facts)
        except OSError as exc:  # a full disk must not stop the diagnosis
            log.warning("exit evidence not written: %s", exc)

    def _verdict(self: Controller, a: AttemptState) -> Diagnosis:
        if a.n in self.verdicts:
            return self.verdicts[a.n]
        try:
            data = json.loads(self.layout.diagnosis(self._attempt_dir(a.n)).read_text(encoding="utf-8"))
            return Diagnosis.model_validate(data)
        except (OSError, ValueError):
            ev = a.diagnosis
            assert ev is not None
            return Diagnosis(category=ev.category, subtype=ev.subtype, action=ev.action, confidence=ev.confidence,
                             culprit=Culprit(nodes=ev.culprit_nodes), root_cause="(restored from the audit log)",
                             decided_by=ev.decided_by)

    # --------------------------------------------------------------------------------- decide
    def _decide(self: Controller, a: AttemptState) -> None:
        verdict = self._verdict(a)
        history = job_history(self.state, self.layout, self.job_id, self.executor.job_nodes())
        decision = decide(history, verdict, self.policy, self.clock.now())
        decision, placement = self._feasible(decision, verdict)
        final, reason, approved_by = decision.action, decision.reason, "policy"
        if decision.execute and decision.needs_approval and not self.approver.available:
            reason = f"{reason}; no approver configured: not waited for"
        elif decision.execute and decision.needs_approval:
            self._set("approval", f"waiting for approval: {decision.reason}")
            resp = self.approver.request(ApprovalRequest(
                self.job_id, a.n, decision.action, decision.on_approve, decision.rule, decision.reason,
                verdict.category.value, verdict.subtype, verdict.confidence, tuple(verdict.culprit.nodes),
                verdict.root_cause), cancelled=lambda: self.stop_reason is not None)
            wanted = resp.action or decision.on_approve
            if resp.approved and wanted not in (None, Action.ESCALATE):
                assert wanted is not None
                final, approved_by, reason = wanted, resp.by, f"{reason}; approved by {resp.by}"
                if final in NODE_ACTIONS and (placement is None or final is not decision.action):
                    decision = replace(decision, nodes=job_targets(verdict.culprit.nodes, history.nodes).nodes)
                    checked, placement = self._feasible(replace(decision, action=final), verdict)
                    if checked.action is not final:
                        final, reason = checked.action, f"{reason}; but {checked.reason}"
            else:
                approved_by = None
                reason = f"{reason}; not approved ({resp.by}{': ' + resp.note if resp.note else ''})"
        nodes = list(decision.nodes) if final in NODE_ACTIONS else []
        if final is Action.RESTART_EXCLUDING_NODES and placement is not None:
            nodes = list(placement.excluded_nodes)  # e.g. the local executor leaves devices out, not nodes
        self.pending[a.n] = Pending(replace(decision, action=final, nodes=tuple(nodes)), placement)
        self._emit(DecisionMade(time=self.clock.now(), action=final, reason=reason, approved_by=approved_by,
                                nodes=nodes))
        if final in RESTARTS and decision.notify:  # the job goes on; a human is told why
            self._notify(a, final, reason)

    def _feasible(self: Controller, d: Decision, verdict: Diagnosis) -> tuple[Decision, Placement | None]:
        """The executor must be able to do it; otherwise the next less invasive action it can do
        (drain -> exclude -> plain restart), with a notification and the executor's reason."""
        if not d.execute or d.action not in NODE_ACTIONS:
            return d, None
        if d.action is Action.DRAIN_AND_RESTART and not self.executor.can_drain:
            d = replace(d, action=Action.RESTART_EXCLUDING_NODES, rule="executor", notify=True,
                        reason=f"{d.reason}; the {self.executor.name} executor cannot drain nodes")
        placement = self.executor.exclude(self.launch.template, self.launch.env, d.nodes,
                                          tuple(verdict.culprit.ranks))
        if not placement.ok:
            return replace(d, action=Action.RESTART, rule="executor", nodes=(), notify=True,
                           reason=f"{d.reason}; {placement.detail}; plain restart"), None
        return d, placement

    # -------------------------------------------------------------------------------- execute
    def _execute(self: Controller, a: AttemptState) -> None:
        dec = a.decision
        assert dec is not None
        pending = self.pending.get(a.n)
        if self.policy.mode is not Mode.ACTIVE:
            handle = self._handle(a)
            if a.finished is None or (handle is not None and not handle.ended()):
                self._watch_to_end(a)
            if self.policy.mode is Mode.DRY_RUN:
                self._finish("failed", f"dry-run: decided {dec.action.value}, not executed")
                return
        if a.action_started is not None and a.action_finished is None and self._next_started(a):
            return  # the restart went through before a controller restart; its attempt runs
        if dec.action in RESTARTS:
            self._restart(a, dec, pending)
        elif dec.action is Action.STOP_AND_NOTIFY:
            self._emit(ActionStarted(time=self.clock.now(), action=dec.action, detail="stop the run, notify"))
            self._notify(a, dec.action, dec.reason)
            self._emit(ActionFinished(time=self.clock.now(), action=dec.action, ok=True, detail="stopped"))
            self._finish("stopped", dec.reason)
        else:
            self._notify(a, dec.action, dec.reason)
            rule = pending.decision.rule if pending else ""
            self._finish("gave_up" if rule in GIVE_UP_RULES else "stopped", dec.reason)

    def _restart(self: Controller, a: AttemptState, dec: DecisionMade, pending: Pending | None) -> None:
        action = dec.action
        if a.action_started is None:
            delay = pending.decision.delay_s if pending else 0.0
            detail = f"backoff {delay:.1f} s" if delay else ""
            self._emit(ActionStarted(time=self.clock.now(), action=action, detail=detail, delay_s=delay or None))
        else:  # resumed after a controller restart mid-action: wait what is left of the backoff
            started = a.action_started
            elapsed = (self.clock.now() - started.time).total_seconds()
            delay = max(0.0, min(started.delay_s or 0.0, (started.delay_s or 0.0) - elapsed))
            if delay:
                self._say(f"resuming the backoff: {delay:.0f} s of {started.delay_s:.0f} s left")
        if delay:
            self._set("backoff", f"retry in {delay:.0f} s")
            deadline = self.clock.monotonic() + delay
            while self.clock.monotonic() < deadline and self.stop_reason is None:
                self.clock.sleep(min(0.2, deadline - self.clock.monotonic()))
            if self.stop_reason is not None:
                self._emit(ActionFinished(time=self.clock.now(), action=action, ok=False, detail=self.stop_reason))
                self._finish("stopped", self.stop_reason)
                return
        notes = []
        if action in NODE_ACTIONS:  # the decision may come from a damaged audit log: check it again
            own = job_history(self.state, self.layout, self.job_id, self.executor.job_nodes()).nodes
            refused = check_targets(dec.nodes, own, self.policy.max_excluded_nodes,
                                    "drain" if action is Action.DRAIN_AND_RESTART else "exclude")
            if refused:
                self._emit(ActionFinished(time=self.clock.now(), action=action, ok=False, detail=refused))
                self._notify(a, action, refused)
                self._finish("stopped", refused)
                return
        if action is Action.DRAIN_AND_RESTART:
            ok, why = self.executor.drain(tuple(dec.nodes), dec.reason)
            notes.append(why)
            if not ok:
                self._emit(ActionFinished(time=self.clock.now(), action=action, ok=False, detail=why))
                self._notify(a, action, f"drain failed: {why}")
                self._finish("stopped", f"drain failed: {why}")
                return
        if action in NODE_ACTIONS:
            placement = pending.placement if pending and pending.placement else self.executor.exclude(
                self.launch.template, self.launch.env, tuple(dec.nodes), tuple(self._verdict(a).culprit.ranks))
            if placement.ok:
                self.launch = att.Launch(placement.command, placement.env)
            notes.append(placement.detail)
        rollback = action is Action.ROLLBACK_AND_RESTART
        below = None
        if rollback and self._started_by_rollback(a):
            below = a.started.resume_step
        selection = att.choose_resume(self.store, self.state.rollbacks(), rollback, below)
        if rollback and selection.checkpoint is None:
            notes.append("no older valid checkpoint: starting from scratch")
        failed_step = a.failure.last_step if a.failure else None
        n = self._start_attempt(a.n + 1, selection, failed_step if rollback else None)
        self._emit(ActionFinished(time=self.clock.now(), action=action, ok=True,
                                  detail="; ".join([f"attempt {n} started", selection.describe(), *notes])))

    def _started_by_rollback(self: Controller, a: AttemptState) -> bool:
        prev = next((x for x in self.state.attempts if x.n == a.n - 1), None)
        return bool(prev and prev.decision and prev.decision.action is Action.ROLLBACK_AND_RESTART)

    def _next_started(self: Controller, a: AttemptState) -> bool:
        return any(x.n == a.n + 1 for x in self.state.attempts)

    def _after_action(self: Controller, a: AttemptState) -> None:
        """An action finished but neither a new attempt nor the run's end followed it."""
        fin = a.action_finished
        self._finish("stopped", fin.detail if fin is not None else "stopped")

    # ------------------------------------------------------------------------- start, finish
    def _start_attempt(self: Controller, n: int, selection: Selection | None = None,
                       rollback_from: int | None = None) -> int:
        if selection is None:
            selection = att.choose_resume(self.store, self.state.rollbacks(), False)
        d = self._attempt_dir(n)
        self._stop_orphan(d)
        d.mkdir(parents=True, exist_ok=True)
        ckpt = selection.checkpoint
        command = att.render_command(self.launch.template, ckpt, n)
        env = {**self.launch.env, **att.job_env(ckpt, n, self.layout.root, self.config.resume_env, rollback_from)}
        if self.executor.local_evidence and ev.ENV_ERROR_FILE not in os.environ and ev.ENV_ERROR_FILE not in env:
            env[ev.ENV_ERROR_FILE] = str(d / ev.ERROR_FILE)  # torchrun's @record error file
            (d / ev.ERROR_FILE).unlink(missing_ok=True)
        when = self.clock.now()
        spec = AttemptSpec(n, command, self.layout.console(d), env)
        record_path = self.layout.launcher_record(d)
        record = {"attempt": n, "command": list(command), "template": list(self.launch.template),
                  "env": self.launch.env, "handle": None}
        write_json(record_path, record)
        handle = self.executor.start(spec)
        self.handles[n] = handle
        oom = ev.oom_counter(handle.pid) if self.executor.local_evidence else None
        record = {**record, "oom_kill_at_start": oom.to_json() if oom else None}
        write_json(record_path, {**record, "handle": handle.record()})
        self._emit(AttemptStarted(time=when, attempt=n, nodes=self.executor.nodes(),
                                  excluded_nodes=self.state.excluded_nodes(),
                                  resume_step=ckpt.step if ckpt else 0,
                                  resume_path=str(ckpt.path) if ckpt else None))
        self.status.attempt, self.status.step = n, None
        return n

    def _start_next(self: Controller, prev: AttemptState | None) -> None:
        self._start_attempt(1 if prev is None else prev.n + 1)

    def _stop_orphan(self: Controller, d: Path) -> None:
        """An attempt launched by a controller that died before logging it: stop it first."""
        try:
            record = json.loads(self.layout.launcher_record(d).read_text())
            handle = self.executor.attach(record["handle"]) if record.get("handle") else None
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            handle = None
        if handle is None:  # no usable record: find it by what it runs
            handle, _ = self.executor.rediscover(d)
        if handle is not None and handle.alive():
            self.executor.stop(handle, self.config.kill_grace_s, self.clock)
            self._say(f"{d.name}: an attempt started by an earlier controller but never logged was running: "
                      f"stopped it cleanly (pid {handle.pid})")

    def _restore_launch(self: Controller) -> None:
        for a in reversed(self.state.attempts):
            try:
                record = json.loads(self.layout.launcher_record(self._attempt_dir(a.n)).read_text())
                self.launch = att.Launch(tuple(record["template"]), dict(record.get("env") or {}))
                return
            except (OSError, ValueError, KeyError, TypeError):
                continue

    def _finish(self: Controller, status: str, reason: str) -> None:
        self._set(status, reason)
        self._emit(RunFinished(time=self.clock.now(), status=status, reason=reason[:2000]))  # type: ignore[arg-type]

    def _notify(self: Controller, a: AttemptState, action: Action, reason: str) -> None:
        verdict = self._verdict(a) if a.diagnosis is not None else None
        payload = {"job_id": self.job_id, "attempt": a.n, "action": action.value, "reason": reason,
                   "run_dir": str(self.layout.root)}
        if verdict is not None:
            payload |= {"category": verdict.category.value, "subtype": verdict.subtype,
                        "root_cause": verdict.root_cause, "confidence": verdict.confidence,
                        "evidence": [e.model_dump() for e in verdict.evidence[:5]]}
        try:
            self.notifier(self.layout.root, payload)
        except Exception as exc:  # noqa: BLE001 - a broken notifier never stops the controller
            self._set("notify_failed", str(exc))


def _tail(path: Path, size: int = 2 << 20) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - size))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _last_watchdog_line(logs: Path) -> tuple[str, int, str] | None:
    path = logs / "watchdog.log"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    return ("watchdog.log", len(lines), lines[-1]) if lines else None

