"""End to end on a real loopback Slurm cluster: the restart controller with the Slurm executor, and
the epilog-style hook, on injected faults (persistent GPU fault on n2, user-code KeyError,
transient stale file handle, a crash loop)."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster, slurm_cluster_fixture

from diagnoser.act.config import RunConfig
from diagnoser.act.controller import Controller, RunResult
from diagnoser.act.events import read_audit
from diagnoser.act.policy import Backoff, Policy
from diagnoser.models import Action
from diagnoser.slurm.commands import SlurmCLI
from diagnoser.slurm.drain import DrainGuard
from diagnoser.slurm.executor import SlurmExecutor
from diagnoser.slurm.hook import HookConfig, handle_job
from diagnoser.slurm.nodelogs import KernelSource

pytestmark = pytest.mark.slow
cluster = slurm_cluster_fixture()
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus."
ENV = '[ -f "$DIAGNOSER_ENV_FILE" ] && . "$DIAGNOSER_ENV_FILE"\n'
RUN_LIMIT_S = 60.0


@pytest.fixture
def cli(cluster: SlurmCluster) -> SlurmCLI:
    cluster.cancel_all()
    cluster.resume_all()
    for f in cluster.kernel_dir.glob("*/dmesg.log"):
        f.unlink()
    return SlurmCLI(env={"SLURM_CONF": str(cluster.conf)})


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "job.sbatch"
    path.write_text("#!/bin/bash\n" + body + "\n")
    path.chmod(0o755)
    return path


def _run(cluster: SlurmCluster, cli: SlurmCLI, tmp_path: Path, command: list[str], policy: Policy,
         max_drains: int = 2) -> tuple[RunResult, SlurmExecutor, list]:
    run_dir = tmp_path / "run"
    cfg = RunConfig(run_dir=run_dir, collect_stacks=False, failure_grace_s=5, poll_s=0.2, hang_timeout_s=60,
                    startup_timeout_s=60, progress_every_s=0, approval_timeout_s=0, policy=policy)
    executor = SlurmExecutor(run_dir, cli, KernelSource(log_dir=str(cluster.kernel_dir / "{node}")),
                             guard=DrainGuard(max_drains, 600), ops_log=tmp_path / "ops.jsonl", poll_s=0.3)
    controller = Controller(cfg, command, executor=executor)
    timer = threading.Timer(RUN_LIMIT_S, controller.request_stop, args=("test time limit",))
    timer.start()
    try:
        result = controller.run()
    finally:
        timer.cancel()
    return result, executor, read_audit(result.audit)


def _explain(result: RunResult, tmp_path: Path) -> str:
    """Why a run ended as it did, from its own records (for assertion messages: a failure on a
    CI machine must be explainable from the CI output alone)."""
    parts = [f"{result.status}: {result.reason}"]
    for attempt in sorted((tmp_path / "run").glob("attempt-*")):
        for name in ("diagnosis.json", "logs/.collect.json"):
            f = attempt / name
            if f.exists():
                data = json.loads(f.read_text())
                keep = ("subtype", "root_cause", "notes", "evidence") if name == "diagnosis.json" else (
                    "state", "reason", "nodes", "files", "notes")
                parts.append(f"{attempt.name}/{name}: {json.dumps({k: data.get(k) for k in keep})[:1500]}")
        console = attempt / "console.log"
        if console.exists():
            parts.append(f"{attempt.name}/console.log: {console.read_text(errors='replace')[-800:]!r}")
    return "\n".join(parts)


def _events(events: list, kind: str) -> list:
    return [e for e in events if e.type == kind]


def test_persistent_gpu_fault_drains_the_node_and_the_job_completes_elsewhere(
        cluster: SlurmCluster, cli: SlurmCLI, tmp_path: Path) -> None:
    cluster.inject_kernel_line("n2", f"[{time.strftime('%a %b %e %H:%M:%S %Y')}] {XID}")
    script = _script(tmp_path, "#SBATCH -N2\n" + ENV +
                     "echo \"attempt $DIAGNOSER_ATTEMPT on $SLURM_JOB_NODELIST\"\n"
                     "srun bash -c 'if [ \"$SLURMD_NODENAME\" = n2 ]; then echo \"rank $SLURM_PROCID: CUDA error: "
                     "unspecified launch failure\" >&2; exit 1; fi; for i in 1 2 3; do echo \"step $i\"; "
                     "sleep 0.2; done'\nexit $?")
    policy = Policy(require_approval=frozenset())
    result, ex, events = _run(cluster, cli, tmp_path, ["sbatch", "-w", "n[1-2]", str(script)], policy)
    assert result.status == "succeeded", _explain(result, tmp_path)
    [diag] = _events(events, "diagnosis")
    assert (diag.subtype, diag.culprit_nodes, diag.culprit_gpus) == ("gpu_xid_79", ["n2"], ["0000:3b:00"])
    [decision] = _events(events, "decision")
    assert decision.action is Action.DRAIN_AND_RESTART and decision.nodes == ["n2"]
    n2 = cli.show_node("n2")
    assert n2 is not None and n2.drained
    assert n2.reason == f"diagnoser: gpu_xid_79 job{ex.job_id}-a1"  # names the subtype and the incident
    job = cli.show_job(ex.job_id)
    assert job is not None and job.state == "COMPLETED" and job.restarts == 1
    assert "n2" not in job.nodes and "n2" in job.excluded
    attempt2 = (tmp_path / "run" / "attempt-002" / "console.log").read_text()
    assert "attempt 2 on" in attempt2 and "step 3" in attempt2 and "CUDA error" not in attempt2
    assert (tmp_path / "run" / "attempt-001" / "logs" / "dmesg" / "n2.log").exists()


def test_user_code_failure_is_not_requeued(cluster: SlurmCluster, cli: SlurmCLI, tmp_path: Path) -> None:
    script = _script(tmp_path, "#SBATCH -N2\n" + ENV +
                     "srun python3 -c \"import os; cfg = {'batch_size': 8}; print('step 1', flush=True); "
                     "lr = cfg['learning_rate']\"\nexit $?")
    result, ex, events = _run(cluster, cli, tmp_path, ["sbatch", str(script)], Policy())
    assert result.status == "stopped", _explain(result, tmp_path)
    [diag] = _events(events, "diagnosis")
    assert diag.category.value == "user_code"
    assert [d.action for d in _events(events, "decision")] == [Action.STOP_AND_NOTIFY]
    job = cli.show_job(ex.job_id)
    assert job is not None and job.state == "FAILED" and job.restarts == 0  # left failed
    note = json.loads((tmp_path / "run" / "notification.json").read_text())
    assert note["action"] == "stop_and_notify" and "KeyError" in json.dumps(note["evidence"])


def test_transient_storage_error_is_requeued_after_backoff(cluster: SlurmCluster, cli: SlurmCLI,
                                                           tmp_path: Path) -> None:
    marker = tmp_path / "failed-once"
    script = _script(tmp_path, "#SBATCH -N1\n" + ENV +
                     f"if [ ! -e {marker} ]; then touch {marker}; srun python3 -c \"raise OSError(116, "
                     "'Stale file handle', '/nfs/data/shard-0001.tar')\"; exit $?; fi\n"
                     "srun bash -c 'for i in 1 2; do echo step $i; done'\nexit $?")
    policy = Policy(backoff=Backoff(base_s=2.0, jitter=0.0))
    result, ex, events = _run(cluster, cli, tmp_path, ["sbatch", str(script)], policy)
    assert result.status == "succeeded", _explain(result, tmp_path)
    [diag] = _events(events, "diagnosis")
    assert (diag.category.value, diag.subtype) == ("infra", "storage_stale_handle")
    [decision] = _events(events, "decision")
    assert decision.action is Action.RETRY_AFTER_BACKOFF
    failed_at = _events(events, "failure_detected")[0].time
    second = [e for e in _events(events, "attempt_started") if e.attempt == 2][0]
    assert (second.time - failed_at).total_seconds() >= 2.0  # waited the backoff before the requeue
    job = cli.show_job(ex.job_id)
    assert job is not None and job.state == "COMPLETED" and job.restarts == 1


def test_crash_loop_escalates(cluster: SlurmCluster, cli: SlurmCLI, tmp_path: Path) -> None:
    script = _script(tmp_path, "#SBATCH -N1\n" + ENV +
                     "srun python3 -c \"raise OSError(116, 'Stale file handle', '/nfs/ckpt/latest')\"\nexit $?")
    policy = Policy(backoff=Backoff(base_s=0.3, jitter=0.0), crash_loop=3)
    result, ex, events = _run(cluster, cli, tmp_path, ["sbatch", str(script)], policy)
    assert result.status == "gave_up", _explain(result, tmp_path)
    decisions = [d.action for d in _events(events, "decision")]
    assert decisions == [Action.RETRY_AFTER_BACKOFF, Action.RETRY_AFTER_BACKOFF, Action.ESCALATE]
    assert "crash loop" in _events(events, "decision")[-1].reason
    job = cli.show_job(ex.job_id)
    assert job is not None and job.state == "FAILED" and job.restarts == 2  # not requeued a third time


def test_epilog_hook_requeues_with_backoff_then_drains(cluster: SlurmCluster, cli: SlurmCLI,
                                                       tmp_path: Path) -> None:
    """The hook on finished runs: a stale handle is requeued with StartTime=now+backoff (Slurm waits);
    then an Xid on the node it ran on drains that node and requeues the job excluding it."""
    marker = tmp_path / "failed-once"
    script = _script(tmp_path, "#SBATCH -N1\n"
                     f"if [ ! -e {marker} ]; then touch {marker}; "
                     "echo \"OSError: [Errno 116] Stale file handle: '/nfs/x'\" >&2; exit 1; fi\n"
                     f"if [ ! -e {marker}.2 ]; then touch {marker}.2; echo \"CUDA error on $SLURMD_NODENAME\" >&2; "
                     "exit 1; fi\necho done")
    cfg = HookConfig(tmp_path / "hook", Policy(require_approval=frozenset(), backoff=Backoff(base_s=3, jitter=0)),
                     KernelSource(log_dir=str(cluster.kernel_dir / "{node}")), guard=DrainGuard(2, 600),
                     ops_log=tmp_path / "ops.jsonl")
    job = cli.sbatch(["--comment=diagnoser", "-o", str(tmp_path / "out-%j.txt"), "--open-mode=append", str(script)])
    first = cli.wait_job(job, "ended", 30)
    r1 = handle_job(cli, job, cfg)
    assert r1.action == "retry_after_backoff", r1.detail
    assert handle_job(cli, job, cfg).action == "skipped"  # idempotent: the same run is handled once
    pending = cli.show_job(job)
    assert pending is not None and pending.pending and pending.restarts == 1
    assert pending.start_time is not None and first.end_time is not None
    assert (pending.start_time - first.end_time).total_seconds() >= 2  # Slurm holds it for the backoff
    second = cli.wait_job(job, "ended", 30)
    node = second.nodes[0]
    cluster.inject_kernel_line(node, f"[{time.strftime('%a %b %e %H:%M:%S %Y')}] {XID}")
    r2 = handle_job(cli, job, cfg)
    assert r2.action == "drain_and_restart", r2.detail
    drained = cli.show_node(node)
    assert drained is not None and drained.reason == f"diagnoser: gpu_xid_79 job{job}-a2"
    third = cli.wait_job(job, "ended", 30)
    assert third.state == "COMPLETED" and node not in third.nodes and third.restarts == 2
    assert handle_job(cli, job, cfg).action == "succeeded"
    events = read_audit(tmp_path / "hook" / f"job-{job}" / "audit.jsonl")
    assert [e.type for e in events].count("attempt_started") == 3 and events[-1].type == "run_finished"


def test_a_run_slurm_requeued_itself_waits_for_the_policy(cluster: SlurmCluster, cli: SlurmCLI,
                                                          tmp_path: Path) -> None:
    """NODE_FAIL: Slurm requeues the job by itself; the handle ends the attempt and holds the job,
    the verdict (scheduler node failure -> restart) releases it, and it completes elsewhere."""
    marker = tmp_path / "ran-once"
    script = _script(tmp_path, "#SBATCH -N1\n" + ENV +
                     f"if [ ! -e {marker} ]; then touch {marker}; echo step 1; sleep 60; fi\necho step 2")

    def take_the_node_down() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            jobs = cli.run("squeue", "-h", "-t", "R", "-o", "%i %N").stdout.split()
            if len(jobs) == 2 and marker.exists():
                cli.run("scontrol", "update", f"NodeName={jobs[1]}", "State=DOWN", "Reason=power supply lost")
                return
            time.sleep(0.3)

    downer = threading.Thread(target=take_the_node_down)
    downer.start()
    try:
        result, ex, events = _run(cluster, cli, tmp_path, ["sbatch", str(script)], Policy())
    finally:
        downer.join()
    assert result.status == "succeeded", _explain(result, tmp_path)
    [diag] = _events(events, "diagnosis")
    assert diag.subtype == "scheduler_node_failure"
    job = cli.show_job(ex.job_id)
    assert job is not None and job.state == "COMPLETED" and job.restarts == 1  # Slurm's requeue, not a second


def test_starts_are_idempotent_across_a_controller_restart(cluster: SlurmCluster, cli: SlurmCLI,
                                                           tmp_path: Path) -> None:
    """A controller that died after submitting or requeueing (before logging it) calls start() again
    for the same attempt: it adopts the run instead of submitting or requeueing a second time."""
    from diagnoser.act.executors import AttemptSpec

    run = tmp_path / "run"
    command = ("sbatch", "-N1", "--wrap", "echo step ${SLURM_RESTART_COUNT:-0}; exit 1")
    first = SlurmExecutor(run, cli, poll_s=0.3)
    spec1 = AttemptSpec(1, command, run / "attempt-001" / "console.log", {"DIAGNOSER_ATTEMPT": "1"})
    h1 = first.start(spec1)
    again = SlurmExecutor(run, cli, poll_s=0.3)  # a new controller process
    assert again.start(spec1).record()["job_id"] == h1.record()["job_id"]
    deadline = time.monotonic() + 30
    while not h1.ended() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert h1.exit_code == 1
    spec2 = AttemptSpec(2, command, run / "attempt-002" / "console.log", {"DIAGNOSER_ATTEMPT": "2"})
    h2 = again.start(spec2)
    h2b = SlurmExecutor(run, cli, poll_s=0.3).start(spec2)
    job = cli.show_job(h1.record()["job_id"])
    assert job is not None and job.restarts == 1 and h2b.record()["job_id"] == job.job_id  # requeued once
    deadline = time.monotonic() + 30
    while not h2.ended() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert spec1.log_path.read_text() == "step 0\n" and spec2.log_path.read_text() == "step 1\n"
    assert (run / "slurm" / "attempt.env").read_text() == "export DIAGNOSER_ATTEMPT=2\n"
    assert cli.run("squeue", "-h").stdout.strip() == ""  # nothing submitted twice, nothing left running


def test_the_jobs_own_output_is_evidence_even_without_the_console(cluster: SlurmCluster, cli: SlurmCLI,
                                                                  tmp_path: Path) -> None:
    """The console copy of a run can be missing (a run that ended before the console caught up, a
    controller restart): the collection then copies this run's slice of the batch output itself."""
    from diagnoser.act.executors import AttemptSpec

    run = tmp_path / "run"
    command = ("sbatch", "-N1", "--wrap", "echo run ${SLURM_RESTART_COUNT:-0}; echo 'KeyError: lr' >&2; exit 1")
    ex = SlurmExecutor(run, cli, poll_s=0.3)
    for n in (1, 2):
        spec = AttemptSpec(n, command, run / f"attempt-00{n}" / "console.log", {"DIAGNOSER_ATTEMPT": str(n)})
        h = ex.start(spec)
        deadline = time.monotonic() + 30
        while not h.ended() and time.monotonic() < deadline:
            time.sleep(0.3)
        assert h.ended(), h.note
    spec.log_path.unlink()  # the second run's console is lost
    out = run / "attempt-002" / "logs"
    ex.collect_kernel(datetime.now(UTC) - timedelta(minutes=5), out)
    manifest = json.loads((out / ".collect.json").read_text())
    job = manifest["job_id"]
    assert manifest["console"]["batch_output_copied"] and f"slurm-{job}.out" in manifest["files"], manifest
    copied = (out / f"slurm-{job}.out").read_text()
    assert copied == "run 1\nKeyError: lr\n"  # this run only, not the first run's lines
    assert f"slurm-{job}.handle.txt" in manifest["files"]
