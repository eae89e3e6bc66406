"""`diagnoser slurm-hook JOB`: triage a finished Slurm job and act on it, once per run of the job.

The epilog pattern, for operators (no process supervises the job while it runs): slurmctld runs
the hook when a job ends (`EpilogSlurmctld=`, see examples/slurm/), or cron / a person runs it.
For each run of an opted-in job (`sbatch --comment=diagnoser`) it writes the same audit/v1 events
the restart controller writes, under `<state_dir>/job-<JOB>/` (so `diagnoser report` reads them),
and decides with the same policy (budgets, crash-loop breaker, node cap, backoff):

- restart / retry_after_backoff -> `scontrol requeue` + `StartTime=now+<backoff>` (Slurm waits,
  nobody sleeps); restart_excluding_nodes -> also `ExcNodeList=`; drain_and_restart -> drain
  (cluster-wide cap, reason `diagnoser: <subtype> job<J>-a<n>`) then requeue excluding the node;
- stop_and_notify / escalate -> the job stays failed; the notifier runs. A hook cannot wait for a
  human: an action that needs approval escalates (notify with the proposed action).

Idempotent: a run already handled (same job id, Restarts and StartTime) is skipped, and a lock
keeps two hooks of the same job apart. From an epilog, start it through `diagnoser.slurm.epilog`
(returns at once, the hook acts once the job has left COMPLETING).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from diagnoser.act.approval import write_json
from diagnoser.act.events import (
    ActionFinished,
    ActionStarted,
    AttemptFinished,
    AttemptStarted,
    AuditWriter,
    DecisionMade,
    DiagnosisMade,
    FailureDetected,
    FailureHow,
    RunFinished,
    RunStarted,
    read_audit,
)
from diagnoser.act.policy import NODE_ACTIONS, RESTARTS, Policy, decide
from diagnoser.act.runstate import LockedError, RunLayout, RunLock, fold, job_history, load_state
from diagnoser.act.targets import check_targets, expand_nodes
from diagnoser.classify.redact import redact_diagnosis
from diagnoser.models import Action, Diagnosis
from diagnoser.slurm.collect import CollectOptions, collect_job
from diagnoser.slurm.commands import SlurmCLI, SlurmError
from diagnoser.slurm.drain import DrainGuard, drain_nodes, drain_reason
from diagnoser.slurm.nodelogs import KernelSource
from diagnoser.slurm.records import JobRecord, join_hostlist


@dataclass(frozen=True)
class HookConfig:
    state_dir: Path
    policy: Policy = field(default_factory=Policy)
    kernel: KernelSource = field(default_factory=KernelSource)
    task_output: tuple[str, ...] = ()
    guard: DrainGuard = field(default_factory=DrainGuard)
    ops_log: Path | None = None
    opt_in: str = "diagnoser"  # substring of the job's Comment; "" = every job
    notify_command: str | None = None
    runbooks: Path | None = None
    settle_s: float = 60.0  # wait at most this long for the job to leave COMPLETING


@dataclass
class HookResult:
    job_id: str
    action: str  # what was done: skipped | succeeded | the Action value
    detail: str = ""
    attempt: int = 0
    events: list[str] = field(default_factory=list)


def _settle(cli: SlurmCLI, job_id: str, limit_s: float) -> JobRecord | None:
    deadline = time.monotonic() + limit_s
    rec = cli.show_job(job_id)
    while rec is not None and rec.state == "COMPLETING" and time.monotonic() < deadline:
        time.sleep(0.5)
        rec = cli.show_job(job_id)
    return rec


def _run_key(rec: JobRecord) -> dict:
    return {"job_id": rec.job_id, "restarts": rec.restarts,
            "start": rec.start_time.isoformat() if rec.start_time else None}


def handle_job(cli: SlurmCLI, job_id: str, cfg: HookConfig, triage_fn=None) -> HookResult:
    """Handle the latest run of one job (see the module docstring)."""
    rec = _settle(cli, job_id, cfg.settle_s)
    if rec is None:
        return HookResult(job_id, "skipped", "unknown job (or gone from slurmctld)")
    if cfg.opt_in and cfg.opt_in not in rec.raw.get("Comment", ""):
        return HookResult(job_id, "skipped", f"not opted in (Comment does not contain {cfg.opt_in!r})")
    if not rec.ended:
        return HookResult(job_id, "skipped", f"job is {rec.state}, not finished")
    layout = RunLayout(cfg.state_dir / f"job-{job_id}")
    try:
        with RunLock(layout.lock), AuditWriter(layout.audit) as audit:
            return _handle(cli, rec, cfg, layout, audit, triage_fn)
    except LockedError:
        return HookResult(job_id, "skipped", "another hook is handling this job")


def _handle(cli: SlurmCLI, rec: JobRecord, cfg: HookConfig, layout: RunLayout, audit: AuditWriter,
            triage_fn) -> HookResult:
    state = load_state(read_audit(layout.audit)) if layout.audit.stat().st_size else load_state([])
    last = state.last
    seen: dict = {}
    if last is not None:
        try:
            seen = json.loads(layout.launcher_record(layout.attempt_dir(state.run_index, last.n)).read_text())
        except (OSError, ValueError):
            seen = {}
        if seen.get("run") == _run_key(rec):
            return HookResult(rec.job_id, "skipped", f"run already handled (attempt {last.n})", last.n)
    offset = int(seen.get("output_size", 0)) if seen.get("run", {}).get("job_id") == rec.job_id else 0
    result = HookResult(rec.job_id, "", attempt=0)

    def emit(ev) -> None:
        nonlocal state
        audit.append(ev)
        state = fold(state, ev)
        result.events.append(ev.type)

    now = datetime.now(UTC)
    if state.started is None or state.finished is not None:
        emit(RunStarted(time=rec.start_time or now, job_id=rec.job_id, command=[rec.command], nodes=list(rec.nodes)))
    n = (state.last.n + 1) if state.last else 1
    result.attempt = n
    adir = layout.attempt_dir(state.run_index, n)
    adir.mkdir(parents=True, exist_ok=True)
    write_json(layout.launcher_record(adir), {"attempt": n, "run": _run_key(rec), "handle": None,
                                              "output_size": _size(rec.std_out)})
    emit(AttemptStarted(time=rec.start_time or now, attempt=n, nodes=list(rec.nodes),
                        excluded_nodes=list(rec.excluded)))
    ended = rec.end_time or now
    if rec.state == "COMPLETED" and rec.status == 0:
        emit(AttemptFinished(time=ended, attempt=n, exit_code=0, status="succeeded"))
        emit(RunFinished(time=ended, status="succeeded", reason="the job completed"))
        result.action = "succeeded"
        return result
    emit(FailureDetected(time=ended, attempt=n, how=FailureHow.EXIT, exit_code=rec.status))
    emit(AttemptFinished(time=ended, attempt=n, exit_code=rec.status, status="failed"))
    t0 = time.monotonic()
    verdict = redact_diagnosis(_diagnose(cli, rec, cfg, layout.logs(adir), triage_fn, offset))
    took = round(time.monotonic() - t0, 3)
    layout.diagnosis(adir).write_text(json.dumps(verdict.to_json_dict(), indent=1), encoding="utf-8")
    emit(DiagnosisMade.of(verdict, datetime.now(UTC), n, took))
    d = decide(job_history(state, layout, rec.job_id, rec.nodes), verdict, cfg.policy, datetime.now(UTC))
    action, reason = d.action, d.reason
    if d.needs_approval and d.execute and d.on_approve is not None:  # `action` is what runs without a yes
        reason = f"{reason}; {d.on_approve.value} needs approval, which a hook cannot wait for"
    nodes = list(d.nodes) if action in NODE_ACTIONS else []
    emit(DecisionMade(time=datetime.now(UTC), action=action, reason=reason, approved_by="policy", nodes=nodes))
    result.action = action.value
    if not d.execute:  # dry-run: decided and logged, nothing done
        emit(RunFinished(time=datetime.now(UTC), status="failed", reason=reason[:2000]))
        result.detail = reason
        return result
    if action in RESTARTS:
        wait = f"backoff {d.delay_s:.1f} s (StartTime)" if d.delay_s else ""
        emit(ActionStarted(time=datetime.now(UTC), action=action, detail=wait))
        ok, detail = _requeue(cli, rec, action, nodes, d.delay_s, verdict, n, cfg)
        emit(ActionFinished(time=datetime.now(UTC), action=action, ok=ok, detail=detail))
        result.detail = detail
        if not ok:
            _notify(cfg, layout, rec, n, action, detail, verdict)
            emit(RunFinished(time=datetime.now(UTC), status="stopped", reason=detail[:2000]))
        elif d.notify:  # an uncertain failure: requeued, and a human is told
            _notify(cfg, layout, rec, n, action, reason, verdict)
        return result
    if action is Action.STOP_AND_NOTIFY:
        emit(ActionStarted(time=datetime.now(UTC), action=action, detail="leave the job failed, notify"))
        emit(ActionFinished(time=datetime.now(UTC), action=action, ok=True, detail="job left failed"))
    _notify(cfg, layout, rec, n, action, reason, verdict)
    gave_up = d.rule in ("budget", "max_restarts", "crash_loop")
    emit(RunFinished(time=datetime.now(UTC), status="gave_up" if gave_up else "stopped", reason=reason[:2000]))
    result.detail = reason
    return result


def _size(path: str) -> int:
    try:
        return os.path.getsize(path) if path and "%" not in path else 0
    except OSError:
        return 0


def _diagnose(cli: SlurmCLI, rec: JobRecord, cfg: HookConfig, logs: Path, triage_fn, offset: int) -> Diagnosis:
    """Collect this run's evidence (its part of an appended output file) and triage it."""
    from diagnoser.act.attempts import failed_verdict

    collect_job(cli, rec.job_id, logs, CollectOptions(kernel=cfg.kernel, task_output=cfg.task_output,
                                                      since=rec.start_time, output_offset=offset))
    try:
        if triage_fn is not None:
            return triage_fn([str(logs)])
        from diagnoser.triage import triage

        return triage([str(logs)], runbook_dir=cfg.runbooks)
    except Exception as exc:  # noqa: BLE001 - escalate on any triage failure, never crash the epilog
        return failed_verdict(f"{type(exc).__name__}: {exc}")


def _requeue(cli: SlurmCLI, rec: JobRecord, action: Action, nodes: list[str], delay_s: float,
             verdict: Diagnosis, attempt: int, cfg: HookConfig) -> tuple[bool, str]:
    notes = []
    if nodes:  # exclusions are checked like drains: nodes of this run only, counted expanded
        refused = check_targets(nodes, rec.nodes, cfg.policy.max_excluded_nodes,
                                "drain" if action is Action.DRAIN_AND_RESTART else "exclude")
        if refused:
            return False, refused
        nodes = expand_nodes(nodes)
    try:
        if action is Action.DRAIN_AND_RESTART:
            res = drain_nodes(cli, nodes, drain_reason(verdict.subtype, f"job{rec.job_id}-a{attempt}"), cfg.guard,
                              cfg.ops_log)
            if not res.ok:
                return False, f"drain failed: {res.detail}"
            notes.append(res.detail)
        cli.requeue(rec.job_id)
        if nodes:
            excluded = join_hostlist({*rec.excluded, *nodes})
            cli.update_job(rec.job_id, ExcNodeList=excluded)
            notes.append(f"ExcNodeList={excluded}")
        begin = "now" if delay_s < 1 else f"now+{int(round(delay_s))}"
        cli.update_job(rec.job_id, StartTime=begin)
        notes.insert(0, f"requeued job {rec.job_id}, StartTime={begin}")
    except SlurmError as exc:
        return False, f"{exc}"
    return True, "; ".join(notes)


def _notify(cfg: HookConfig, layout: RunLayout, rec: JobRecord, attempt: int, action: Action, reason: str,
            verdict: Diagnosis) -> None:
    from diagnoser.act.controller import default_notifier

    payload = {"job_id": rec.job_id, "attempt": attempt, "action": action.value, "reason": reason,
               "run_dir": str(layout.root), "category": verdict.category.value, "subtype": verdict.subtype,
               "root_cause": verdict.root_cause, "confidence": verdict.confidence,
               "evidence": [e.model_dump() for e in verdict.evidence[:5]]}
    with contextlib.suppress(Exception):  # a broken notifier never fails the hook
        default_notifier(cfg.notify_command)(layout.root, payload)


def hook_command(
    job_id: Annotated[str, typer.Argument(envvar="SLURM_JOB_ID", help="The finished job [$SLURM_JOB_ID]")],
    state_dir: Annotated[Path | None, typer.Option(envvar="DIAGNOSER_SLURM_STATE_DIR",
                                                   help="Where per-job audit logs and evidence go "
                                                   "[./diagnoser-slurm]")] = None,
    config: Annotated[Path | None, typer.Option("--config", envvar="DIAGNOSER_CONFIG",
                                                help="Settings file: its [run.policy] and [slurm] are used")] = None,
    kernel_log_dir: Annotated[str | None, typer.Option(envvar="DIAGNOSER_SLURM_KERNEL_LOG_DIR")] = None,
    kernel_via_srun: Annotated[bool, typer.Option(envvar="DIAGNOSER_SLURM_KERNEL_VIA_SRUN")] = False,
    task_output: Annotated[list[str] | None, typer.Option(help="srun per-task output pattern")] = None,
    opt_in: Annotated[str, typer.Option(help="Only jobs whose Comment contains this ('' = all)")] = "diagnoser",
    max_drains: Annotated[int | None, typer.Option(envvar="DIAGNOSER_SLURM_MAX_DRAINS", help="[2]")] = None,
    drain_window_s: Annotated[str | None, typer.Option(help="Window of the drain cap: 3600, 1h, 01:00:00 [1h]")] = None,
    ops_log: Annotated[Path | None, typer.Option(envvar="DIAGNOSER_SLURM_OPS_LOG")] = None,
    notify: Annotated[str | None, typer.Option(envvar="DIAGNOSER_NOTIFY_COMMAND")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Triage a finished Slurm job and requeue / exclude / drain / leave it failed (epilog style)."""
    from diagnoser.errors import ConfigError
    from diagnoser.settings import load_settings
    from diagnoser.slurm.drain import default_ops_log

    slurm = {"state_dir": state_dir, "kernel_log_dir": kernel_log_dir, "kernel_via_srun": kernel_via_srun or None,
             "task_output": tuple(task_output) if task_output else None, "max_drains": max_drains,
             "drain_window_s": drain_window_s, "ops_log": ops_log}  # a duration string: [slurm] validates it
    try:
        settings = load_settings(config, cli={"slurm": slurm}, legacy="run").settings
    except (ConfigError, ValueError) as exc:
        typer.echo(f"diagnoser: {exc}", err=True)
        raise typer.Exit(2) from None
    s = settings.slurm
    cfg = HookConfig(s.state_dir or Path("diagnoser-slurm"), settings.run.policy,
                     KernelSource(s.kernel_log_dir, s.kernel_via_srun), s.task_output,
                     DrainGuard(s.max_drains, s.drain_window_s, s.drain_lock), s.ops_log or default_ops_log(),
                     opt_in, notify or settings.run.notify_command)
    try:
        result = handle_job(SlurmCLI(), job_id, cfg)
    except SlurmError as exc:
        typer.echo(f"diagnoser: {exc}", err=True)
        raise typer.Exit(1) from None
    line = {"job_id": result.job_id, "attempt": result.attempt, "action": result.action, "detail": result.detail,
            "time": datetime.now(UTC).isoformat()}
    typer.echo(json.dumps(line) if as_json else f"job {result.job_id}: {result.action}: {result.detail}")


def _main() -> None:
    app = typer.Typer(add_completion=False)
    app.command()(hook_command)
    app()


if __name__ == "__main__":
    _main()
