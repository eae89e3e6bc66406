"""The Slurm command wrappers and the collector against a real loopback cluster (slurm-wlm + munge)."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster, slurm_cluster_fixture
from typer.testing import CliRunner

from diagnoser.slurm.collect import CollectOptions, collect_job
from diagnoser.slurm.commands import SlurmCLI, SlurmError
from diagnoser.slurm.drain import DrainGuard, drain_nodes, resume_node
from diagnoser.slurm.nodelogs import KernelSource
from diagnoser.triage import triage

pytestmark = pytest.mark.slow
cluster = slurm_cluster_fixture()
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus."


@pytest.fixture
def cli(cluster: SlurmCluster, monkeypatch) -> SlurmCLI:
    cluster.resume_all()
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))  # for the CLI commands run in-process
    return SlurmCLI(env={"SLURM_CONF": str(cluster.conf)})


def _script(tmp_path: Path, body: str, name: str = "job.sh") -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/bash\n" + body + "\n")
    path.chmod(0o755)
    return path


def test_records_of_real_jobs(cli: SlurmCLI, tmp_path: Path) -> None:
    ok = cli.sbatch(["-o", str(tmp_path / "ok-%j.out"), "--wrap", "echo hello"])
    bad = cli.sbatch(["-o", str(tmp_path / "bad-%j.out"), "--wrap", "echo oops >&2; exit 3"])
    long = cli.sbatch(["-o", str(tmp_path / "long-%j.out"), "--wrap", "sleep 60"])
    cli.wait_job(long, "running", 20)
    cli.cancel(long)
    done = {j: cli.wait_job(j, "ended", 30) for j in (ok, bad, long)}
    assert (done[ok].state, done[ok].status, done[ok].exit_code) == ("COMPLETED", 0, 0)
    assert (done[bad].state, done[bad].status) == ("FAILED", 3)
    assert done[long].state == "CANCELLED" and done[long].status != 0
    rec = done[ok]
    assert rec.nodes and rec.nodes[0] in {"n1", "n2", "n3", "n4"} and rec.batch_host == rec.nodes[0]
    assert Path(rec.std_out).read_text() == "hello\n" and rec.work_dir
    assert isinstance(rec.start_time, datetime) and rec.end_time is not None and rec.end_time >= rec.start_time
    assert cli.show_job("999999") is None


def test_requeue_pitfalls_and_exclusion(cli: SlurmCLI, tmp_path: Path) -> None:
    out = tmp_path / "rq-%j.out"
    job = cli.sbatch(["-N1", "-w", "n1", "-o", str(out), "--open-mode=append", "--wrap",
                      'echo "run ${SLURM_RESTART_COUNT:-0} on $SLURMD_NODENAME"; exit 1'])
    first = cli.wait_job(job, "ended", 30)
    assert first.state == "FAILED" and first.nodes == ("n1",)
    cli.requeue(job)
    pending = cli.show_job(job)
    assert pending is not None and pending.pending and pending.restarts == 1
    with pytest.raises(SlurmError, match="requeue"):  # requeue of a pending job fails
        cli.requeue(job)
    cli.update_job(job, ReqNodeList="", ExcNodeList="n1,n2")
    t0 = time.monotonic()
    cli.update_job(job, StartTime="now")  # else it waits cred_expire + 1 s
    second = cli.wait_job(job, "ended", 30)
    assert time.monotonic() - t0 < 8
    assert second.restarts == 1 and second.excluded == ("n1", "n2") and second.nodes[0] in {"n3", "n4"}
    text = Path(str(out).replace("%j", job)).read_text()
    assert text.splitlines() == ["run 0 on n1", f"run 1 on {second.nodes[0]}"]  # appended, not truncated


def test_node_failure_ends_the_job_as_node_fail(cli: SlurmCLI, cluster: SlurmCluster, tmp_path: Path) -> None:
    job = cli.sbatch(["-w", "n4", "--no-requeue", "-o", str(tmp_path / "nf-%j.out"), "--wrap", "sleep 60"])
    cli.wait_job(job, "running", 20)
    cli.run("scontrol", "update", "NodeName=n4", "State=DOWN", "Reason=test power loss")
    rec = cli.wait_job(job, "ended", 30)
    assert rec.state == "NODE_FAIL" and rec.status != 0
    got = collect_job(cli, job, tmp_path / "ev")
    assert "nodes/n4.scontrol.txt" in got.files
    verdict = triage([str(tmp_path / "ev")])
    assert verdict.subtype == "scheduler_node_failure", verdict.root_cause
    cluster.resume_all()


def test_a_run_slurm_requeued_still_has_its_nodes_kernel_logs(cli: SlurmCLI, cluster: SlurmCluster,
                                                                tmp_path: Path) -> None:
    """A run Slurm requeues itself leaves a PENDING record without nodes: the completion log still
    names them, so the failed node's kernel log is collected."""
    job = cli.sbatch(["-w", "n4", "--requeue", "-o", str(tmp_path / "rq-%j.out"), "--wrap", "sleep 60"])
    started = cli.wait_job(job, "running", 20).start_time
    cluster.inject_kernel_line("n4", f"[{time.strftime('%a %b %e %H:%M:%S %Y')}] {XID}")
    cli.run("scontrol", "update", "NodeName=n4", "State=DOWN", "Reason=test power loss")
    deadline = time.monotonic() + 30
    while (rec := cli.show_job(job)) is not None and not (rec.pending and rec.restarts == 1):
        assert time.monotonic() < deadline, rec
        time.sleep(0.3)
    assert rec.nodes == ()  # the record of the requeued job no longer lists n4
    got = collect_job(cli, job, tmp_path / "ev", CollectOptions(
        kernel=KernelSource(log_dir=str(cluster.kernel_dir / "{node}")), since=started))
    cli.cancel(job)
    (cluster.kernel_dir / "n4" / "dmesg.log").unlink()
    cluster.resume_all()
    assert got.run_nodes == ["n4"] and "dmesg/n4.log" in got.files, got.notes
    verdict = triage([str(tmp_path / "ev")])
    assert (verdict.subtype, list(verdict.culprit.nodes)) == ("gpu_xid_79", ["n4"]), verdict.root_cause


def test_drain_is_idempotent_capped_and_resumable(cli: SlurmCLI, tmp_path: Path) -> None:
    ops = tmp_path / "ops.jsonl"
    guard = DrainGuard(max_nodes=1, window_s=600)
    first = drain_nodes(cli, ["n3"], "diagnoser: gpu_xid_79 job1-a1", guard, ops)
    assert first.ok and first.drained == ["n3"]
    node = cli.show_node("n3")
    assert node is not None and node.drained and node.reason == "diagnoser: gpu_xid_79 job1-a1"
    again = drain_nodes(cli, ["n3"], "diagnoser: gpu_xid_79 job1-a2", guard, ops)
    assert again.ok and again.already == ["n3"] and again.drained == []
    capped = drain_nodes(cli, ["n4"], "diagnoser: gpu_xid_79 job2-a1", guard, ops)
    assert not capped.ok and "drain cap" in capped.detail
    assert not cli.show_node("n4").drained
    assert resume_node(cli, "n3", ops_log=ops)[0] is True
    assert resume_node(cli, "n3", ops_log=ops)[0] is False  # already in service: nothing to do
    cli.drain("n4", "maintenance by ops")
    with pytest.raises(SlurmError, match="someone else"):
        resume_node(cli, "n4")
    import typer

    from diagnoser.slurm.cli import register

    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["nodes", "resume", "n4", "--force", "--ops-log", str(ops)])
    assert res.exit_code == 0 and "resumed" in res.output
    ops_lines = [json.loads(line) for line in ops.read_text().splitlines()]
    assert [(o["op"], o["node"], o["ok"]) for o in ops_lines] == [
        ("drain", "n3", True), ("drain", "n4", False), ("resume", "n3", True), ("resume", "n4", True)]


def test_collect_job_for_the_triage(cli: SlurmCLI, cluster: SlurmCluster, tmp_path: Path) -> None:
    cluster.inject_kernel_line("n2", f"[{time.strftime('%a %b %e %H:%M:%S %Y')}] {XID}")
    script = _script(tmp_path, "#SBATCH -N2 -w n[1-2]\n"
                     f"srun --output={tmp_path}/task-%j-%t.out bash -c "
                     "'echo step 1; if [ $SLURMD_NODENAME = n2 ]; then echo CUDA error >&2; exit 1; fi'\n"
                     "exit $?")
    job = cli.sbatch(["-o", str(tmp_path / "slurm-%j.out"), str(script)])
    cli.wait_job(job, "ended", 30)
    kernel = KernelSource(log_dir=str(cluster.kernel_dir / "{node}"))
    opts = CollectOptions(kernel=kernel, task_output=(f"{tmp_path}/task-%j-%t.out",))
    got = collect_job(cli, job, tmp_path / "ev", opts)
    assert {f"scontrol-{job}.txt", f"jobcomp-{job}.sacct.txt", f"slurm-{job}.out", "tasks/rank0.log",
            "tasks/rank1.log", "nodes/n1.scontrol.txt", "nodes/n2.scontrol.txt", "dmesg/n2.log"} <= set(got.files)
    assert "srun: error: n2: task 1: Exited with exit code 1" in (tmp_path / "ev" / f"slurm-{job}.out").read_text()
    manifest = json.loads((tmp_path / "ev" / ".collect.json").read_text())
    assert manifest["state"] == "FAILED" and manifest["nodes"] == ["n1", "n2"]
    verdict = triage([str(tmp_path / "ev")])
    assert (verdict.subtype, list(verdict.culprit.nodes)) == ("gpu_xid_79", ["n2"])
    import typer

    from diagnoser.slurm.cli import register

    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["collect", "slurm", job, "--out", str(tmp_path / "ev2"), "--json",
                                   "--kernel-log-dir", str(cluster.kernel_dir / "{node}")])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["diagnosis"]["subtype"] == "gpu_xid_79" and data["state"] == "FAILED"
    (cluster.kernel_dir / "n2" / "dmesg.log").unlink()


def test_kernel_log_through_srun(cli: SlurmCLI, tmp_path: Path) -> None:
    from diagnoser.slurm.nodelogs import collect_kernel_logs

    notes = collect_kernel_logs(cli, ["n1"], tmp_path, None, KernelSource(via_srun=True))
    assert (tmp_path / "dmesg" / "n1.log").exists(), notes
    assert "srun dmesg" in notes[0]


def test_errors_name_the_command(tmp_path: Path) -> None:
    broken = SlurmCLI(env={"SLURM_CONF": str(tmp_path / "missing.conf")}, timeout_s=2)
    with pytest.raises(SlurmError) as err:
        broken.show_nodes()  # scontrol itself retries a missing config for 60 s: the timeout bounds it
    assert "scontrol show node" in str(err.value) and "no answer within 2 s" in str(err.value)
    assert "missing.conf" in str(err.value)
    with pytest.raises(SlurmError, match="not found"):
        SlurmCLI(env={"PATH": str(tmp_path)}).run("scontrol", "ping")
