"""The service's job ledger: what a restarted `diagnoser serve` knows of the jobs its predecessor ran."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil

from diagnoser.serve.ledger import RESTARTED, JobLedger

VERDICT = {"schema": "diagnosis/v1", "category": "hardware", "subtype": "gpu_xid_79", "action": "drain_and_restart"}


def record(status: str = "done", minutes_ago: int = 0) -> dict:
    submitted = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    done = status != "pending"
    return {"id": uuid.uuid4().hex, "kind": "upload", "submitted": submitted, "status": status,
            "finished": submitted + timedelta(seconds=3) if done else None, "seconds": 3.0 if done else None,
            "result": VERDICT if status == "done" else None, "error": "empty input" if status == "failed" else None,
            "crashed": False}


def dead_owner() -> dict:
    """The identity of a process that has exited (its pid may be reused: the create time says it is not it)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    owner = {"pid": proc.pid, "started": psutil.Process(proc.pid).create_time()}
    proc.wait()
    return owner


def test_a_finished_job_reads_back_the_same_after_a_restart(tmp_path: Path) -> None:
    done, failed = record("done", 2), record("failed", 1)
    first = JobLedger(tmp_path)
    first.write(done)
    first.write(failed)
    loaded = JobLedger(tmp_path).load(keep=1000)
    assert [r["id"] for r in loaded] == [done["id"], failed["id"]]  # oldest first
    assert loaded[0]["result"] == VERDICT and loaded[0]["submitted"] == done["submitted"]
    assert loaded[1]["status"] == "failed" and loaded[1]["error"] == "empty input"


def test_a_job_pending_when_its_server_died_is_failed_and_says_so(tmp_path: Path) -> None:
    job = record("pending")
    JobLedger(tmp_path).write(job)
    path = tmp_path / f"{job['id']}.json"
    data = json.loads(path.read_text())
    data["owner"] = dead_owner()
    path.write_text(json.dumps(data))
    [loaded] = JobLedger(tmp_path).load(keep=1000)
    assert loaded["status"] == "failed" and loaded["error"] == RESTARTED and loaded["crashed"]
    assert json.loads(path.read_text())["status"] == "failed"  # saved: the next restart agrees


def test_a_job_pending_in_a_server_that_still_runs_is_left_pending(tmp_path: Path) -> None:
    job = record("pending")
    JobLedger(tmp_path).write(job)  # owned by this (live) process
    [loaded] = JobLedger(tmp_path).load(keep=1000)
    assert loaded["status"] == "pending"


def test_damaged_records_are_skipped_and_the_rest_load(tmp_path: Path) -> None:
    good = record("done")
    ledger = JobLedger(tmp_path)
    ledger.write(good)
    (tmp_path / f"{uuid.uuid4().hex}.json").write_text('{"id": "trunc')
    (tmp_path / f"{uuid.uuid4().hex}.json").write_bytes(b"\xff\xfe\x00binary")
    misnamed = {**record(), "id": uuid.uuid4().hex}  # a file whose record names another job
    (tmp_path / f"{uuid.uuid4().hex}.json").write_text(json.dumps(misnamed, default=str))
    hand_edited = [{"submitted": "2026-11-27T08:00:00"},  # no zone: not orderable with the rest
                   {"kind": "ftp"}, {"result": "drain everything"}, {"seconds": "fast"}, {"error": ["x"]}]
    for change in hand_edited:
        bad = {**record(), **change}
        (tmp_path / f"{bad['id']}.json").write_text(json.dumps(bad, default=str))
    assert [r["id"] for r in JobLedger(tmp_path).load(keep=1000)] == [good["id"]]


def test_only_the_newest_finished_records_are_kept(tmp_path: Path) -> None:
    ledger = JobLedger(tmp_path)
    jobs = [record("done", minutes_ago=10 - i) for i in range(5)]
    for job in jobs:
        ledger.write(job)
    assert [r["id"] for r in JobLedger(tmp_path).load(keep=3)] == [j["id"] for j in jobs[2:]]
    assert sorted(p.stem for p in tmp_path.glob("*.json")) == sorted(j["id"] for j in jobs[2:])


def test_names_that_are_not_job_ids_are_never_read_or_written(tmp_path: Path) -> None:
    ledger = JobLedger(tmp_path / "jobs")
    (tmp_path / "secret.json").write_text(json.dumps(record(), default=str))
    assert ledger.read("../secret") is None and ledger.path("../secret") is None
    ledger.write({**record(), "id": "../escape"})
    assert not (tmp_path / "escape.json").exists() and not list((tmp_path / "jobs").iterdir())


def test_an_unusable_directory_keeps_jobs_in_memory_without_failing(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    ledger = JobLedger(blocker / "jobs")
    assert not ledger.usable
    ledger.write(record())  # no exception: the triage is not the ledger's to fail
    assert ledger.load(keep=1000) == []
