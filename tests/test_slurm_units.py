"""Slurm helpers without a cluster: record parsing, sbatch editing, output patterns, drain reasons."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from diagnoser.slurm.collect import find_task_files, pattern_regex
from diagnoser.slurm.drain import DrainGuard, drain_reason, subtype_from
from diagnoser.slurm.records import (
    expand_hostlist,
    jobcomp_lines,
    join_hostlist,
    parse_exit,
    parse_job,
    parse_kv,
    parse_nodes,
    parse_sacct,
)
from diagnoser.slurm.sbatch import parse_sbatch, required_nodes, script_directives, with_exclusions

JOB = ("JobId=42 JobName=train UserId=alice(1000) GroupId=alice(1000) JobState=NODE_FAIL Reason=NodeDown "
       "Requeue=1 Restarts=2 BatchFlag=1 ExitCode=0:0 StartTime=2026-01-01T10:00:00 EndTime=Unknown "
       "Partition=gpu ReqNodeList=(null) ExcNodeList=gpu-[003-004] NodeList=gpu-[001-002] BatchHost=gpu-001 "
       "NumNodes=2 WorkDir=/home/alice/run StdErr=/home/alice/run/out-%j.txt StdOut=/home/alice/run/out-%j.txt "
       "Comment=diagnoser keep going Power=")
NODE = ("NodeName=n2 Arch=x86_64 State=IDLE+DRAIN Partitions=debug,gpu "
        "Reason=diagnoser: gpu_xid_79 job4-a1 [root@2026-11-22T00:45:27]")


def test_kv_values_with_spaces_run_until_the_next_key() -> None:
    kv = parse_kv(NODE)
    assert kv["Reason"] == "diagnoser: gpu_xid_79 job4-a1 [root@2026-11-22T00:45:27]"
    assert parse_kv(JOB)["Comment"] == "diagnoser keep going"


def test_job_record() -> None:
    job = parse_job(JOB)
    assert job is not None
    assert (job.job_id, job.state, job.restarts, job.user) == ("42", "NODE_FAIL", 2, "alice")
    assert job.nodes == ("gpu-001", "gpu-002") and job.excluded == ("gpu-003", "gpu-004")
    assert job.ended and not job.pending and job.status == 1  # NODE_FAIL with ExitCode 0:0 is no success
    assert job.end_time is None and job.start_time is not None


@pytest.mark.parametrize(("value", "expected"), [("3:0", (3, 0)), ("0:9", (0, 9)), ("", (None, None))])
def test_exit_codes(value: str, expected: tuple) -> None:
    assert parse_exit(value) == expected


def test_status_of_a_signal_and_of_success() -> None:
    killed = parse_job("JobId=1 JobState=CANCELLED ExitCode=0:15")
    done = parse_job("JobId=2 JobState=COMPLETED ExitCode=0:0")
    assert killed is not None and killed.status == -15
    assert done is not None and done.status == 0
    completing = parse_job("JobId=3 JobState=COMPLETING ExitCode=3:0")
    assert completing is not None and completing.failed_completing and completing.status == 3
    ok_completing = parse_job("JobId=4 JobState=COMPLETING ExitCode=0:0")
    assert ok_completing is not None and ok_completing.status is None  # its final state decides


def test_hostlists() -> None:
    assert expand_hostlist("n[1-3,7],gpu-[01-02]") == ["n1", "n2", "n3", "n7", "gpu-01", "gpu-02"]
    assert expand_hostlist("rack[1-2]-n[1-2]") == ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]
    assert expand_hostlist("(null)") == []
    assert join_hostlist({"n10", "n2", "n1"}) == "n1,n2,n10"


def test_node_record_splits_the_reason_stamp() -> None:
    [node] = parse_nodes(NODE)
    assert node.drained and not node.usable
    assert node.reason == "diagnoser: gpu_xid_79 job4-a1" and node.reason_user == "root"
    assert node.reason_time is not None and node.partitions == ("debug", "gpu")
    [down] = parse_nodes("NodeName=n3 State=IDLE* Reason=Not responding [slurm@2026-01-01T00:00:00]")
    assert not down.usable and not down.drained


def test_sacct_and_jobcomp() -> None:
    rows = parse_sacct("JobID|State|ExitCode\n42|FAILED|1:0\n42.batch|FAILED|1:0\n")
    assert rows[1] == {"JobID": "42.batch", "State": "FAILED", "ExitCode": "1:0"}
    text = ("JobId=42 UserId=a JobState=FAILED StartTime=2026-01-01T10:00:00 EndTime=2026-01-01T10:01:00\n"
            "JobId=420 UserId=a JobState=COMPLETED StartTime=2026-01-01T10:00:00\n"
            "JobId=42 UserId=a JobState=COMPLETED StartTime=2026-01-01T11:00:00 EndTime=2026-01-01T11:30:00\n")
    assert len(jobcomp_lines(text, "42")) == 2
    since = datetime.fromisoformat("2026-01-01T10:30:00").astimezone()
    assert [line.split()[2] for line in jobcomp_lines(text, "42", since)] == ["JobState=COMPLETED"]


def test_sbatch_split_and_exclusions(tmp_path) -> None:
    sb = parse_sbatch(["sbatch", "-N", "2", "-x", "n3", "--time=10", "--exclusive", "job.sh", "--lr", "3"])
    assert sb.script == ("job.sh", "--lr", "3") and sb.get("--nodes") == "2" and sb.excluded == ["n3"]
    cmd = with_exclusions(("sbatch", "-N", "2", "-x", "n3", "job.sh", "-x"), ("n2",))
    assert cmd == ("sbatch", "--nodes=2", "--exclude=n2,n3", "job.sh", "-x")  # the script's own -x is kept
    pinned = with_exclusions(("sbatch", "-w", "n[1-2]", "job.sh"), ("n2",))
    assert pinned == ("sbatch", "--nodelist=n1", "--exclude=n2", "job.sh")
    assert parse_sbatch(with_exclusions(("sbatch", "-w", "n2", "job.sh"), ("n2",))).get("--nodelist") is None
    assert parse_sbatch(["job.sh"]).script == ("job.sh",)
    assert parse_sbatch(["sbatch", "-N2", "--wrap=hostname"]).get("--wrap") == "hostname"
    with pytest.raises(ValueError, match="no batch script"):
        parse_sbatch(["sbatch", "-N", "2"])
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH -N 3\n#SBATCH --output=o-%j.txt  # comment\necho hi\n#SBATCH -N 9\n")
    directives = script_directives(script)
    assert directives is not None and directives.get("--output") == "o-%j.txt"
    assert required_nodes(parse_sbatch([str(script)])) == 3
    assert required_nodes(parse_sbatch(["sbatch", "-N", "2-4", str(script)])) == 2


def test_output_patterns(tmp_path) -> None:
    job = parse_job(f"JobId=7 JobName=tr UserId=bob(1) JobState=FAILED NodeList=n[1-2] WorkDir={tmp_path}")
    assert job is not None
    for name in ("task-7-0-n1.out", "task-7-1-n2.out", "task-8-0-n1.out", "task-7-x-n1.out"):
        (tmp_path / name).write_text("x\n")
    globbed, regex = pattern_regex(str(tmp_path / "task-%j-%t-%N.out"), job)
    assert globbed.endswith("task-7-*-*.out") and regex.match(str(tmp_path / "task-7-1-n2.out"))
    found = find_task_files("task-%j-%t-%N.out", job, 10)
    assert [(p.name, t, n) for p, t, n in found] == [("task-7-0-n1.out", 0, "n1"), ("task-7-1-n2.out", 1, "n2")]
    (tmp_path / "r-7-1-00003.log").write_text("x\n")
    assert [(t, n) for _, t, n in find_task_files("r-%j-%n-%5t.log", job, 10)] == [(3, "n2")]


def test_drain_reason_and_guard() -> None:
    assert drain_reason("gpu_xid_79", "job4-a1") == "diagnoser: gpu_xid_79 job4-a1"
    assert subtype_from("hardware/gpu_xid_79 -> drain_and_restart (0.97)") == "gpu_xid_79"
    assert subtype_from("something else") == "unknown"
    now = datetime.now(UTC).astimezone()  # Slurm stamps reasons in local time
    fresh, old, other = parse_nodes(
        f"NodeName=a State=IDLE+DRAIN Reason=diagnoser: x j1-a1 [root@{now:%Y-%m-%dT%H:%M:%S}]\n"
        f"NodeName=b State=IDLE+DRAIN Reason=diagnoser: x j1-a1 [root@{now - timedelta(hours=3):%Y-%m-%dT%H:%M:%S}]\n"
        f"NodeName=c State=IDLE+DRAIN Reason=maintenance [ops@{now:%Y-%m-%dT%H:%M:%S}]\n")
    recent = DrainGuard(2, 3600).recent([fresh, old, other], now)
    assert [n.name for n in recent] == ["a"]


def test_a_truncated_output_file_is_read_from_its_start(tmp_path) -> None:
    """A requeue that truncates the job's output (no --open-mode=append on the cluster side, a log
    rotation) must not hide the new run's lines behind the old run's offset."""
    from diagnoser.slurm.commands import SlurmCLI
    from diagnoser.slurm.handle import SlurmHandle

    out = tmp_path / "job-7.out"
    out.write_text("attempt 1 on n[1-2]\n" + "step 1\n" * 80 + "CUDA error: unspecified launch failure\n")
    offset = out.stat().st_size  # where the second run would begin in an appended file
    out.write_text("attempt 2 on n[1,3]\nsrun: error: n3: task 1: Exited with exit code 1\n")  # truncated
    console = tmp_path / "attempt-002" / "console.log"
    h = SlurmHandle(SlurmCLI(), "7", 2, console, [[str(out), offset]], restarts=1)
    h.pump(final=True)
    assert console.read_text() == out.read_text()
    assert "truncated" in h.note


def test_a_run_that_ended_at_once_without_output_is_evidence_of_a_launch_failure(tmp_path) -> None:
    """Recorded `scontrol show job` of a requeued run that slurmd refused (credential revoked in the
    same second): FAILED, ExitCode 1:0, StartTime == EndTime, nothing written."""
    from diagnoser.slurm.commands import SlurmCLI
    from diagnoser.slurm.executor import handle_evidence
    from diagnoser.slurm.handle import SlurmHandle
    from diagnoser.slurm.records import job_from_kv, parse_kv
    from diagnoser.triage import triage

    rec = job_from_kv(parse_kv("JobId=2 JobName=job.sbatch JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0 "
                               "Restarts=1 SubmitTime=2026-11-23T20:12:36 StartTime=2026-11-23T20:12:36 "
                               "EndTime=2026-11-23T20:12:36 NodeList=n[1,3] BatchHost=n1"))
    h = SlurmHandle(SlurmCLI(), "2", 2, tmp_path / "console.log", [], restarts=1)
    [line] = handle_evidence(h, rec, output_bytes=0)
    assert "never ran" in line and "n1,n3" in line
    assert handle_evidence(h, rec, output_bytes=120) == []  # it wrote something: it ran
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "slurm-2.handle.txt").write_text(line + "\n")
    d = triage([str(tmp_path / "logs")], workers=1)
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "scheduler_launch_failure", "restart")
