"""Slurm commands: `collect slurm`, `nodes resume|drained`, `slurm-run`, `slurm-hook`.

`register(app)` adds them to the main typer app (the lead wires it in diagnoser/cli.py):

    diagnoser collect slurm 4242 --out evidence/ [--kernel-log-dir '/logs/{node}'] [--task-output 'out-%j-%t.log']
    diagnoser nodes resume n17 [--force] [--dry-run]      # undrain a node diagnoser drained
    diagnoser nodes drained [--json]                      # nodes diagnoser holds out of service
    diagnoser slurm-run [OPTIONS] -- sbatch -N 2 train.sbatch   # submit, watch, triage, recover
    diagnoser slurm-hook 4242 [--detach]                 # epilog style: triage a finished job, act

Options not given come from the `[slurm]` (and `[run]`) settings: the settings file, `DIAGNOSER_SLURM__<KEY>`, or
the older DIAGNOSER_SLURM_* variables (see `diagnoser config show`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from diagnoser.slurm.commands import SlurmCLI, SlurmError
from diagnoser.slurm.drain import DrainGuard, default_ops_log, diagnoser_drained, resume_node
from diagnoser.slurm.nodelogs import KernelSource

EXIT_UNUSABLE = 2

KernelDir = Annotated[str | None, typer.Option(
    "--kernel-log-dir", envvar="DIAGNOSER_SLURM_KERNEL_LOG_DIR",
    help="Per-node kernel logs: a path template with {node} (file or directory)")]
ViaSrun = Annotated[bool, typer.Option("--kernel-via-srun", envvar="DIAGNOSER_SLURM_KERNEL_VIA_SRUN",
                                       help="Read kernel logs with `srun -w NODE dmesg`")]
TaskOutput = Annotated[list[str] | None, typer.Option(
    "--task-output", help="srun per-task output pattern (%j %t %n %N ...), relative to WorkDir (repeatable)")]
OpsLog = Annotated[Path | None, typer.Option("--ops-log", envvar="DIAGNOSER_SLURM_OPS_LOG",
                                             help="Log of drains/resumes [user state dir]")]


def _fail(message: str) -> None:
    typer.echo(f"diagnoser: {message}", err=True)
    raise typer.Exit(EXIT_UNUSABLE)


def collect_slurm_command(
    job_id: Annotated[str, typer.Argument(help="Slurm job id")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory to write the evidence to")],
    kernel_log_dir: KernelDir = None,
    kernel_via_srun: ViaSrun = False,
    task_output: TaskOutput = None,
    triage: Annotated[bool, typer.Option("--triage/--no-triage", help="Triage what was collected")] = True,
    runbooks: Annotated[Path | None, typer.Option(envvar="DIAGNOSER_RUNBOOKS", help="Runbook directory")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the manifest (and diagnosis) as JSON")] = False,
) -> None:
    """Collect a Slurm job's record, outputs, nodes and kernel logs into DIR, then triage it."""
    from diagnoser.errors import ConfigError
    from diagnoser.settings import load_settings
    from diagnoser.slurm.collect import CollectOptions, collect_job

    given = {"kernel_log_dir": kernel_log_dir, "kernel_via_srun": kernel_via_srun or None,
             "task_output": tuple(task_output) if task_output else None}
    try:
        s = load_settings(cli={"slurm": given}).settings.slurm  # options not given: the [slurm] settings
    except ConfigError as exc:
        _fail(str(exc))
        return
    cli = SlurmCLI()
    opts = CollectOptions(kernel=KernelSource(s.kernel_log_dir, s.kernel_via_srun), task_output=s.task_output)
    result = collect_job(cli, job_id, out, opts)
    if result.job is None:
        _fail(f"job {job_id}: {'; '.join(result.notes) or 'no record'}")
    manifest = result.manifest()
    err = Console(stderr=True)
    if not as_json:
        err.print(f"collected job {job_id} ({manifest['state']}, exit {manifest['exit_code']}) into {out}: "
                  f"{len(result.files)} files in {result.seconds:.2f} s", highlight=False)
        for note in result.notes:
            err.print(f"  {note}", highlight=False, markup=False)
    diagnosis = None
    if triage:
        from diagnoser.collect.files import UnusableInput
        from diagnoser.triage import triage as run_triage

        try:
            diagnosis = run_triage([str(out)], runbook_dir=runbooks)
        except UnusableInput as exc:
            _fail(f"triage: {exc}")
            return
    if as_json:
        if diagnosis is not None:
            manifest["diagnosis"] = diagnosis.to_json_dict()
        sys.stdout.write(json.dumps(manifest) + "\n")
    elif diagnosis is not None:
        from diagnoser.render import render

        render(diagnosis, None, Console())


def nodes_resume_command(
    nodes: Annotated[list[str], typer.Argument(help="Node names (or a hostlist like n[1-3])")],
    force: Annotated[bool, typer.Option("--force", help="Also nodes drained by someone else")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be done")] = False,
    by: Annotated[str, typer.Option(help="Who resumes (for the operations log)")] = "operator",
    ops_log: OpsLog = None,
) -> None:
    """Return drained nodes to service (`scontrol update NodeName=... State=RESUME`); idempotent."""
    from diagnoser.slurm.records import expand_hostlist

    cli = SlurmCLI(dry_run=dry_run)
    failed = False
    for node in [n for expr in nodes for n in expand_hostlist(expr)]:
        try:
            changed, detail = resume_node(cli, node, force, ops_log or default_ops_log(), by)
        except SlurmError as exc:
            typer.echo(f"diagnoser: {exc}", err=True)
            failed = True
            continue
        prefix = "would resume" if dry_run and changed else ("resumed" if changed else "unchanged")
        typer.echo(f"{prefix}: {detail}")
    if failed:
        raise typer.Exit(1)


def nodes_drained_command(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Nodes currently drained by diagnoser, with the reason (subtype, incident) and when."""
    try:
        rows = diagnoser_drained(SlurmCLI())
    except SlurmError as exc:
        _fail(str(exc))
        return
    data = [{"node": n.name, "state": n.state, "reason": n.reason, "by": n.reason_user,
             "since": n.reason_time.isoformat() if n.reason_time else None} for n in rows]
    if as_json:
        sys.stdout.write(json.dumps(data) + "\n")
        return
    for d in data:
        typer.echo(f"{d['node']}\t{d['state']}\t{d['since']}\t{d['reason']}")


def slurm_run_command(
    command: Annotated[list[str], typer.Argument(help="sbatch [OPTIONS] SCRIPT [ARGS], after --")],
    run_dir: Annotated[Path | None, typer.Option(envvar="DIAGNOSER_RUN_DIR", help="Run directory")] = None,
    config: Annotated[Path | None, typer.Option("--config", envvar="DIAGNOSER_CONFIG",
                                                help="YAML/TOML config of `diagnoser run` (policy ...)")] = None,
    job_id: Annotated[str | None, typer.Option(help="Job name in the audit log")] = None,
    mode: Annotated[str | None, typer.Option(envvar="DIAGNOSER_MODE", help="active, dry_run or shadow")] = None,
    hang_timeout: Annotated[str | None, typer.Option(help="No progress line this long = hang [10m]")] = None,
    startup_timeout: Annotated[str | None, typer.Option(
        help="Before the first progress line, queue wait included [30m]")] = None,
    backoff: Annotated[str | None, typer.Option(help="First retry delay for infra failures [10s]")] = None,
    max_excluded_nodes: Annotated[int | None, typer.Option(help="Nodes excluded/drained per job and window")] = None,
    require_approval: Annotated[list[str] | None, typer.Option(
        help="Actions that need a human (repeatable; 'none' for none) [drain_and_restart]")] = None,
    notify: Annotated[str | None, typer.Option(envvar="DIAGNOSER_NOTIFY_COMMAND",
                                               help="Shell command run on stop/escalation")] = None,
    kernel_log_dir: KernelDir = None,
    kernel_via_srun: ViaSrun = False,
    task_output: TaskOutput = None,
    max_drains: Annotated[int | None, typer.Option(
        envvar="DIAGNOSER_SLURM_MAX_DRAINS", help="Nodes drained by diagnoser per window, cluster-wide [2]")] = None,
    drain_window: Annotated[str | None, typer.Option(help="Window of the drain cap [1h]")] = None,
    poll: Annotated[float | None, typer.Option(help="Seconds between `scontrol show job` polls [1.0]")] = None,
    ops_log: OpsLog = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout")] = False,
) -> None:
    """Submit a batch job and supervise it: on failure collect, triage, and requeue / exclude / drain."""
    from diagnoser.act.cli import _supervise
    from diagnoser.act.controller import Controller
    from diagnoser.act.summary import render_summary, summarize
    from diagnoser.errors import ConfigError
    from diagnoser.metrics.cli import parse_duration
    from diagnoser.settings import load_settings
    from diagnoser.slurm.executor import SlurmExecutor

    if not command:
        _fail("no command: diagnoser slurm-run [OPTIONS] -- sbatch [OPTIONS] SCRIPT")
    policy: dict = {"mode": mode, "max_excluded_nodes": max_excluded_nodes}
    if require_approval:
        policy["require_approval"] = [a for a in require_approval if a != "none"]
    if backoff is not None:
        policy["backoff"] = {"base_s": parse_duration(backoff)}
    options = {"run_dir": run_dir, "job_id": job_id, "notify_command": notify, "collect_stacks": False,
               "hang_timeout_s": parse_duration(hang_timeout) if hang_timeout else None,
               "startup_timeout_s": parse_duration(startup_timeout) if startup_timeout else None}
    slurm = {"kernel_log_dir": kernel_log_dir, "kernel_via_srun": kernel_via_srun or None,
             "task_output": tuple(task_output) if task_output else None, "max_drains": max_drains,
             "drain_window_s": parse_duration(drain_window) if drain_window else None, "poll_s": poll,
             "ops_log": ops_log}
    try:
        settings = load_settings(config, cli={"run": {**options, "policy": policy}, "slurm": slurm},
                                 legacy="run").settings
    except (ConfigError, ValueError) as exc:
        _fail(str(exc))
        return
    cfg, s = settings.run, settings.slurm
    executor = SlurmExecutor(Path(cfg.run_dir), SlurmCLI(dry_run=s.dry_run),
                             KernelSource(s.kernel_log_dir, s.kernel_via_srun), s.task_output,
                             DrainGuard(s.max_drains, s.drain_window_s, s.drain_lock),
                             s.ops_log or default_ops_log(), s.poll_s)
    err = Console(stderr=True)
    controller = Controller(cfg, command, executor=executor)
    if controller.prepare_note:
        err.print(f"[yellow]diagnoser:[/] {controller.prepare_note}")
    try:
        result = _supervise(controller, err)
    except (SlurmError, ValueError) as exc:
        _fail(str(exc))
        return
    summary = summarize(result.audit, result.status, result.reason)
    summary["slurm_job_id"] = executor.job_id
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")
    else:
        render_summary(summary, err)
    if result.status != "succeeded":
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `collect slurm`, `nodes resume|drained`, `slurm-run` and `slurm-hook` to the main app."""
    from diagnoser.slurm.hook import hook_command

    collect = typer.Typer(no_args_is_help=True, help="Collect a failed job's evidence from its scheduler.")
    collect.command("slurm")(collect_slurm_command)
    app.add_typer(collect, name="collect")
    nodes = typer.Typer(no_args_is_help=True, help="Nodes diagnoser took out of service (Slurm).")
    nodes.command("resume")(nodes_resume_command)
    nodes.command("drained")(nodes_drained_command)
    app.add_typer(nodes, name="nodes")
    app.command("slurm-run", context_settings={"allow_interspersed_args": False})(slurm_run_command)
    app.command("slurm-hook")(hook_command)


def main() -> None:
    """`python -m diagnoser.slurm.cli ...`: these commands without the main CLI."""
    app = typer.Typer(add_completion=False, no_args_is_help=True)
    register(app)
    app()


if __name__ == "__main__":
    main()
