"""`diagnoser run | checkpoints | approve`: the launcher hook and its helpers.

    diagnoser run [OPTIONS] -- torchrun --nproc-per-node 8 train.py --resume {resume}

`register(app)` adds the commands to the main typer app. Options override the config file
(`--config`, $DIAGNOSER_CONFIG); each option also reads the env var shown in `--help`.
Durations accept 90, 90s, 10m, 1.5h, 1h30m and Slurm's 00:10:00, 1-00:00:00.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.live import Live

from diagnoser.act.approval import REQUEST_FILE, NotAnApprover, respond
from diagnoser.act.checkpoints import CheckpointStore
from diagnoser.act.config import ConfigError, RunConfig, build_settings
from diagnoser.act.controller import Controller, ControllerError, RunResult
from diagnoser.act.policy import FALLBACK, Mode
from diagnoser.act.runstate import LockedError
from diagnoser.act.summary import StatusLine, render_summary, summarize
from diagnoser.metrics.cli import parse_duration
from diagnoser.models import Action, Category

if TYPE_CHECKING:
    from diagnoser.settings import MetricsSettings

EXIT_UNUSABLE = 2
EXIT_INTERRUPTED = 130


def _fail(message: str) -> None:
    typer.echo(f"diagnoser: {message}", err=True)
    raise typer.Exit(EXIT_UNUSABLE)


def _secs(text: str | None) -> float | None:
    return None if text is None else parse_duration(text)


def _budgets(items: list[str] | None) -> dict[str, int] | None:
    if not items:
        return None
    out = {}
    for item in items:
        cat, _, n = item.partition("=")
        if cat not in {c.value for c in Category} or not n.isdigit():
            raise typer.BadParameter(f"--budget wants CATEGORY=N (hardware|infra|user_code|unknown): {item!r}")
        out[cat] = int(n)
    return out


def run_command(
    command: Annotated[list[str], typer.Argument(help="The launch command, after --", show_default=False)],
    run_dir: Annotated[Path | None, typer.Option(envvar="DIAGNOSER_RUN_DIR",
                                                 help="Run directory: audit log, attempts' logs [default: "
                                                 "./diagnoser-run]")] = None,
    config: Annotated[Path | None, typer.Option("--config", envvar="DIAGNOSER_CONFIG",
                                                help="YAML/TOML config file")] = None,
    job_id: Annotated[str | None, typer.Option(help="Job name in the audit log [default: run dir name]")] = None,
    checkpoint_dir: Annotated[Path | None, typer.Option(envvar="DIAGNOSER_CHECKPOINT_DIR",
                                                        help="Where the job writes checkpoints")] = None,
    verify_load: Annotated[bool | None, typer.Option("--verify-load/--no-verify-load",
                                                     help="Also torch.load(weights_only) checkpoints")] = None,
    hang_timeout: Annotated[str | None, typer.Option(envvar="DIAGNOSER_HANG_TIMEOUT",
                                                     help="No progress line this long = hang [10m]")] = None,
    startup_timeout: Annotated[str | None, typer.Option(envvar="DIAGNOSER_STARTUP_TIMEOUT",
                                                        help="Before the first progress line [30m]")] = None,
    kill_grace: Annotated[str | None, typer.Option(envvar="DIAGNOSER_KILL_GRACE",
                                                   help="SIGTERM -> SIGKILL grace [30s]")] = None,
    progress_regex: Annotated[list[str] | None, typer.Option(
        help="Progress line pattern with a (?P<step>\\d+) group (repeatable) [step/iteration/tqdm]")] = None,
    mode: Annotated[Mode | None, typer.Option(envvar="DIAGNOSER_MODE", help="active, dry_run or shadow")] = None,
    min_confidence: Annotated[float | None, typer.Option(envvar="DIAGNOSER_MIN_CONFIDENCE",
                                                         help="Below it: plain restart + notify [0.6]")] = None,
    on_low_confidence: Annotated[str | None, typer.Option(
        envvar="DIAGNOSER_ON_LOW_CONFIDENCE", help="restart (plain, budgeted) or escalate (hold) [restart]")] = None,
    max_restarts: Annotated[int | None, typer.Option(envvar="DIAGNOSER_MAX_RESTARTS", help="Per run [20]")] = None,
    budget: Annotated[list[str] | None, typer.Option(help="Restarts per window, CATEGORY=N (repeatable)")] = None,
    window: Annotated[str | None, typer.Option(help="Budget window [1h]")] = None,
    crash_loop: Annotated[int | None, typer.Option(help="Same failure N times in a row -> give up [3]")] = None,
    max_excluded_nodes: Annotated[int | None, typer.Option(help="Nodes excluded/drained per window [2]")] = None,
    backoff: Annotated[str | None, typer.Option(help="First retry delay for infra failures [10s]")] = None,
    rollback_on_divergence: Annotated[bool | None, typer.Option(
        "--rollback-on-divergence/--no-rollback-on-divergence",
        help="On a NaN/Inf loss roll back to an older checkpoint once instead of stopping [off]")] = None,
    require_approval: Annotated[list[Action] | None, typer.Option(
        help="Actions that need a human (repeatable; escalate = hold uncertain failures) [drain_and_restart]")] = None,
    approval_timeout: Annotated[str | None, typer.Option(envvar="DIAGNOSER_APPROVAL_TIMEOUT",
                                                         help="Wait for `diagnoser approve`; 0: no asking [0]")] = None,
    approval_default: Annotated[str | None, typer.Option(envvar="DIAGNOSER_APPROVAL_DEFAULT",
                                                         help="approve or deny after the timeout [deny]")] = None,
    collect: Annotated[list[Path] | None, typer.Option(help="More logs for the triage (repeatable)")] = None,
    runbooks: Annotated[Path | None, typer.Option(envvar="DIAGNOSER_RUNBOOKS", help="Runbook directory")] = None,
    tee: Annotated[bool | None, typer.Option("--tee/--no-tee", help="Add --tee 3 to torchrun [on]")] = None,
    notify: Annotated[str | None, typer.Option(envvar="DIAGNOSER_NOTIFY_COMMAND",
                                               help="Shell command run on each notification")] = None,
    slack: Annotated[bool | None, typer.Option("--slack/--no-slack", envvar="DIAGNOSER_SLACK",
                                               help="Post to Slack and ask approvals there [off]")] = None,
    bot_config: Annotated[Path | None, typer.Option(help="Bot config for --slack [DIAGNOSER_BOT_CONFIG]")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout")] = False,
    metrics_port: Annotated[int | None, typer.Option(
        envvar="DIAGNOSER_METRICS__PORT", help="Serve Prometheus metrics on 127.0.0.1:PORT/metrics (0: any free "
        "port, printed on stderr)", min=0, max=65535)] = None,
    metrics_host: Annotated[str, typer.Option(help="Listen address of --metrics-port")] = "127.0.0.1",
) -> None:
    """Run a training job, detect failures and hangs, diagnose them and recover under policy."""
    if not command:
        _fail("no command: diagnoser run [OPTIONS] -- torchrun ... train.py")
    policy = {"mode": mode, "min_confidence": min_confidence, "on_low_confidence": on_low_confidence,
              "max_restarts": max_restarts, "budgets": _budgets(budget), "window_s": _secs(window),
              "crash_loop": crash_loop, "max_excluded_nodes": max_excluded_nodes,
              "require_approval": require_approval or None, "rollback_on_divergence": rollback_on_divergence}
    if backoff is not None:
        policy["backoff"] = {"base_s": _secs(backoff)}
    options = {"run_dir": run_dir, "job_id": job_id, "checkpoint_dir": checkpoint_dir, "verify_load": verify_load,
               "hang_timeout_s": _secs(hang_timeout), "startup_timeout_s": _secs(startup_timeout),
               "kill_grace_s": _secs(kill_grace), "progress_patterns": tuple(progress_regex) if progress_regex
               else None, "approval_timeout_s": _secs(approval_timeout), "approval_default": approval_default,
               "collect": tuple(collect) if collect else None, "runbooks": runbooks, "tee": tee,
               "notify_command": notify, "slack": slack, "bot_config": bot_config}
    try:
        settings = build_settings(config, options, policy)
    except (ConfigError, ValueError) as exc:
        _fail(str(exc))
        return
    cfg = settings.run
    err = Console(stderr=True)
    ckpt = cfg.checkpoint_dir
    if ckpt is not None and not ckpt.is_dir():
        what = "is not a directory" if ckpt.exists() else "does not exist"
        err.print(f"[yellow]diagnoser: warning:[/] --checkpoint-dir {ckpt} {what}: every restart would begin at "
                  "step 0 unless the job creates it", highlight=False, soft_wrap=True)
    hooks = _slack(cfg) if cfg.slack else None
    controller = Controller(cfg, command, approver=hooks.approver if hooks else None,
                            on_event=_metrics(_metrics_port(metrics_port, settings.metrics), metrics_host,
                                              cfg.job_id or Path(cfg.run_dir).name, err))
    if controller.prepare_note:
        err.print(f"[yellow]diagnoser:[/] {controller.prepare_note}")
    held = sorted(a.value for a in cfg.policy.require_approval if a not in FALLBACK)
    if held and not controller.approver.available:
        err.print(f"[yellow]diagnoser: warning:[/] require_approval {held} but nobody can approve (no approval "
                  "timeout, or no Slack approvers): those failures will stop the run", highlight=False, soft_wrap=True)
    if hooks is not None:
        hooks.follower.start()
    try:
        result = _supervise(controller, err)
    finally:
        if hooks is not None:
            hooks.follower.stop()
    summary = summarize(result.audit, result.status, result.reason)
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")
    else:
        render_summary(summary, err)
    if result.status != "succeeded":
        raise typer.Exit(EXIT_INTERRUPTED if result.reason.startswith("interrupted") else 1)


def _metrics_port(given: int | None, metrics: MetricsSettings) -> int | None:
    """--metrics-port, else the settings' `[metrics] port` when `[metrics] enabled = true`."""
    if given is not None:
        return given
    return metrics.port if metrics.enabled else None


def _metrics(port: int | None, host: str, job_id: str, err: Console):
    """The audit-event observer that feeds /metrics (None without --metrics-port)."""
    if port is None:
        return None
    from diagnoser.metrics_export import Metrics, RunObserver

    metrics = Metrics()
    try:
        bound = metrics.serve(port, host)
    except OSError as exc:
        _fail(f"--metrics-port {port}: cannot listen on {host}:{port}: {exc.strerror or exc}")
        raise
    err.print(f"diagnoser: metrics on http://{bound[0]}:{bound[1]}/metrics", markup=False, highlight=False)
    return RunObserver(metrics, job_id)


def _slack(cfg: RunConfig):
    """Slack hooks from the bot config: the audit follower posts the run into the job's thread, the
    approver asks there (only approvers named in the bot config can answer; `diagnoser approve` still can)."""
    try:
        from diagnoser.bot.config import load_bot_config
        from diagnoser.bot.wiring import slack_hooks
    except ImportError as exc:
        _fail(f"--slack needs the bot extra (pip install 'diagnoser[bot]'): {exc}")
        raise
    try:
        bot = load_bot_config(cfg.bot_config)
        given = cfg.approval_timeout_s > 0  # else the bot config's approval_timeout_s / approval_default apply
        return slack_hooks(cfg.run_dir, cfg.job_id, timeout_s=cfg.approval_timeout_s if given else None,
                           default_approve=cfg.approval_default == "approve" if given else None, cfg=bot)
    except ConfigError as exc:
        _fail(f"--slack: {exc}")
        raise


def _supervise(controller: Controller, err: Console) -> RunResult:
    """Run the controller with signals forwarded: the first Ctrl-C/SIGTERM stops the job cleanly,
    a second one kills it without grace."""
    def on_signal(signum: int, _frame: object) -> None:
        controller.request_stop(f"interrupted by {signal.Signals(signum).name}")

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    last_phase = [""]

    def plain(status) -> None:  # not a terminal: one line per change of phase or message
        key = f"{status.phase}|{status.message}"
        if key != last_phase[0]:
            last_phase[0] = key
            err.print(f"diagnoser: attempt {status.attempt}: {status.phase}"
                      + (f": {status.message}" if status.message else ""), markup=False, highlight=False)

    try:
        if err.is_terminal:
            with Live(StatusLine(controller.status), console=err, refresh_per_second=2, transient=True):
                return controller.run()
        controller.listener = plain
        return controller.run()
    except (LockedError, ControllerError) as exc:
        _fail(str(exc))
        raise
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def checkpoints_command(
    directory: Annotated[Path, typer.Argument(help="Checkpoint directory")],
    verify_load: Annotated[bool, typer.Option("--verify-load", help="Also torch.load(weights_only=True)")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List checkpoints with their validity and the one `diagnoser run` would resume from."""
    if not directory.is_dir():
        _fail(f"{directory}: {'not a directory' if directory.exists() else 'no such directory'}")
    store = CheckpointStore(directory, verify_load=verify_load)
    rows = [{"path": str(c.path), "step": c.step, "valid": (v := store.check(c)).ok, "reason": v.reason}
            for c in store.scan()]
    chosen = store.select().checkpoint
    if as_json:
        sys.stdout.write(json.dumps({"checkpoints": rows, "resume": str(chosen.path) if chosen else None,
                                     "tracker": store.tracker_note()}) + "\n")
        return
    from diagnoser.tables import print_rows

    print_rows(("step", "path", "valid", "reason"),
               [(r["step"], r["path"], "yes" if r["valid"] else "no", r["reason"]) for r in rows])
    typer.echo(f"resume from: {chosen.path if chosen else '(none: start from scratch)'}")


def approve_command(
    run_dir: Annotated[Path, typer.Argument(help="The run directory of the waiting `diagnoser run`")],
    deny: Annotated[bool, typer.Option("--deny", help="Deny instead of approve")] = False,
    by: Annotated[str | None, typer.Option(help="On whose behalf (a note; the audit log records the real OS user)")
                  ] = None,
    action: Annotated[Action | None, typer.Option(help="Run this action instead of the proposed one")] = None,
    note: Annotated[str, typer.Option(help="A note for the audit log")] = "",
) -> None:
    """Answer a pending approval request of `diagnoser run`."""
    request = run_dir / REQUEST_FILE
    if not request.exists():
        _fail(f"{run_dir}: no approval is pending")
    try:
        pending = json.loads(request.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        _fail(f"{request}: cannot read the pending request ({getattr(exc, 'strerror', None) or exc})")
        return
    try:
        respond(run_dir, not deny, by, action, note)
    except NotAnApprover as exc:
        _fail(str(exc))
    verb = "denied" if deny else "approved"
    typer.echo(f"{verb}: {pending.get('action')} ({pending.get('rule')}: {pending.get('reason')})")


def register(app: typer.Typer) -> None:
    """Add `run`, `checkpoints` and `approve` to the main app."""
    app.command("run", context_settings={"allow_interspersed_args": False})(run_command)
    app.command("checkpoints")(checkpoints_command)
    app.command("approve")(approve_command)


def main() -> None:
    """`python -m diagnoser.act.cli run -- ...`: the act commands without the main CLI."""
    app = typer.Typer(add_completion=False, no_args_is_help=True)
    register(app)
    app()


if __name__ == "__main__":
    main()
