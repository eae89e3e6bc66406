"""End to end with real processes: `diagnoser run` supervising torchrun (gloo, CPU) running
tests/e2e/train.py with injected faults; plus Ctrl-C and a controller killed mid-run.

Each fault test asserts the final step reached, that no step up to the newest valid checkpoint ran
more than twice (once, then once more after a restart), and the audit log's story.
Needs torch (`pip install torch==2.13.0`, CPU); skipped without it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from diagnoser.act.checkpoints import CheckpointStore
from diagnoser.act.events import read_audit
from diagnoser.collect.pyspy import main_stack

pytestmark = pytest.mark.slow
TRAIN = Path(__file__).parent / "e2e" / "train.py"
STEPS = 9
has_torch = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0
    or not any((Path(p) / "torchrun").exists() for p in os.environ.get("PATH", "").split(os.pathsep)),
    reason="needs torch (pip install torch==2.13.0) and torchrun")


def diagnoser_run(tmp: Path, faults: dict[str, str], *options: str, nproc: int = 2,
                  timeout: float = 240) -> tuple[dict, list]:
    env = {**os.environ, "FAULT_STATE_DIR": str(tmp / "state"), "TRAIN_STEPS_LOG": str(tmp / "steps.jsonl"),
           "PYTHONUNBUFFERED": "1", **faults}
    cmd = [sys.executable, "-m", "diagnoser.act.cli", "run", "--json", "--run-dir", str(tmp / "run"),
           "--checkpoint-dir", str(tmp / "ck"), "--hang-timeout", "10s", "--startup-timeout", "150s",
           "--kill-grace", "3s", "--backoff", "1s", *options, "--",
           "torchrun", "--standalone", "--nproc-per-node", str(nproc), str(TRAIN), "--steps", str(STEPS),
           "--ckpt-dir", str(tmp / "ck"), "--ckpt-every", "3", "--step-time", "0.05"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return json.loads(proc.stdout), read_audit(tmp / "run" / "audit.jsonl")


def executed_steps(tmp: Path) -> Counter:
    path = tmp / "steps.jsonl"
    return Counter(json.loads(line)["step"] for line in path.read_text().splitlines()) if path.exists() else Counter()


def assert_progress(tmp: Path, final: int = STEPS) -> Counter:
    runs = executed_steps(tmp)
    assert max(runs) == final and all(runs[s] >= 1 for s in range(1, final + 1)), runs
    newest = CheckpointStore(tmp / "ck").select().checkpoint
    assert newest is not None
    redone = {s: n for s, n in runs.items() if s <= newest.step and n > 2}
    assert not redone, f"steps redone more than once before checkpoint {newest.step}: {redone}"
    return runs


def of(events: list, kind: str) -> list:
    return [e for e in events if e.type == kind]


@has_torch
def test_sigkill_of_a_rank_restarts_from_the_checkpoint(tmp_path: Path) -> None:
    summary, events = diagnoser_run(tmp_path, {"FAULT_KILL": "1:5"})  # the defaults restart it
    assert summary["status"] == "succeeded"
    assert_progress(tmp_path)
    (fail,) = of(events, "failure_detected")
    assert fail.how.value == "exit" and fail.exit_code not in (0, None)
    (diag,) = of(events, "diagnosis")  # the controller's own evidence explains the bare SIGKILL
    assert (diag.category.value, diag.subtype, diag.culprit_ranks) == ("unknown", "killed_by_signal", [1])
    evidence = (tmp_path / "run" / "attempt-001" / "logs" / "launcher-exit.log").read_text()
    assert "rank 1 (pid" in evidence and "killed by signal 9 (SIGKILL): no OOM kill recorded, not sent by the " \
        "scheduler or diagnoser" in evidence
    assert "rank 0 (pid" in evidence and "exitcode -15" in evidence  # the launcher's teardown
    assert "last progress: step" in evidence and "oom_kill" in evidence
    (decision,) = of(events, "decision")
    assert decision.action.value == "restart" and "confidence" in decision.reason
    starts = of(events, "attempt_started")
    assert [s.resume_step for s in starts] == [0, 3]


@has_torch
def test_transient_nccl_system_error_is_restarted_by_default(tmp_path: Path) -> None:
    summary, events = diagnoser_run(tmp_path, {"FAULT_NCCL": "0:5"})
    assert summary["status"] == "succeeded"
    assert_progress(tmp_path)
    (diag,) = of(events, "diagnosis")
    assert diag.category.value == "infra" and diag.subtype.startswith("nccl_")
    (decision,) = of(events, "decision")
    assert decision.action.value in ("restart", "retry_after_backoff") and decision.approved_by == "policy"
    assert len(of(events, "attempt_started")) == 2


@has_torch
def test_user_code_exception_stops_without_restart(tmp_path: Path) -> None:
    summary, events = diagnoser_run(tmp_path, {"FAULT_EXCEPTION": "1:4"})
    assert summary["status"] == "stopped"
    assert len(of(events, "attempt_started")) == 1  # never re-run a KeyError
    (diag,) = of(events, "diagnosis")
    assert (diag.category.value, diag.subtype) == ("user_code", "python_exception")
    assert diag.culprit_ranks == [1]  # the audit log names the rank, not only the node
    assert of(events, "decision")[0].action.value == "stop_and_notify"
    assert max(executed_steps(tmp_path)) == 3
    note = json.loads((tmp_path / "run" / "notification.json").read_text())
    assert "labels" in json.dumps(note["evidence"])


@has_torch
def test_hung_rank_is_detected_dumped_killed_and_recovered(tmp_path: Path) -> None:
    summary, events = diagnoser_run(tmp_path, {"FAULT_HANG": "1:5"}, nproc=3)
    assert summary["status"] == "succeeded"
    assert_progress(tmp_path)
    (fail,) = of(events, "failure_detected")
    assert fail.how.value == "hang" and fail.last_step == 4
    assert (fail.time - fail.last_progress_time).total_seconds() >= 10
    assert of(events, "attempt_finished")[0].status == "killed"
    (diag,) = of(events, "diagnosis")
    assert diag.subtype == "hang"
    assert of(events, "decision")[0].action.value in ("restart", "restart_excluding_nodes")
    logs = tmp_path / "run" / "attempt-001" / "logs"
    if (logs / "stacks").is_dir():  # py-spy installed: the outlier rank is named
        verdict = json.loads((tmp_path / "run" / "attempt-001" / "diagnosis.json").read_text())
        assert verdict["culprit"]["ranks"] == [1] and "wait_for_data" in verdict["root_cause"]
    assert "no progress line" in (logs / "watchdog.log").read_text()


@has_torch
def test_nan_loss_rolls_back_to_an_older_checkpoint_when_opted_in(tmp_path: Path) -> None:
    # weights go bad at step 5, the checkpoint of step 6 carries them, the loss is NaN at step 7
    summary, events = diagnoser_run(tmp_path, {"FAULT_NAN": "5"}, "--rollback-on-divergence")
    assert summary["status"] == "succeeded"
    runs = assert_progress(tmp_path)
    assert runs[4] == runs[6] == 2 and runs[7] == runs[9] == 1
    (diag,) = of(events, "diagnosis")
    assert (diag.subtype, diag.action.value) == ("nan_loss", "stop_and_notify")  # the verdict alone stops
    assert of(events, "decision")[0].action.value == "rollback_and_restart"
    assert of(events, "attempt_started")[1].resume_step == 3  # the newest (step 6, bad weights) is skipped


@has_torch
def test_transient_error_is_retried_and_a_corrupt_newest_checkpoint_skipped(tmp_path: Path) -> None:
    # the checkpoint of step 6 is written truncated (its marker too), then a transient infra error at 8
    summary, events = diagnoser_run(tmp_path, {"FAULT_CORRUPT": "6", "FAULT_TRANSIENT": "0:8"})
    assert summary["status"] == "succeeded"
    assert_progress(tmp_path)
    (diag,) = of(events, "diagnosis")
    assert (diag.category.value, diag.subtype) == ("infra", "storage_stale_handle")
    (decision,) = of(events, "decision")
    assert decision.action.value == "retry_after_backoff"
    assert "backoff" in of(events, "action_started")[0].detail
    second = of(events, "attempt_started")[1]
    assert second.resume_step == 3 and second.resume_path.endswith("step_000003")
    assert "skipped step_000006" in of(events, "action_finished")[0].detail
    assert 6 not in [c.step for c in of(events, "checkpoint_saved") if c.attempt == 1]


@has_torch
def test_ctrl_c_stops_the_job_cleanly(tmp_path: Path) -> None:
    env = {**os.environ, "TRAIN_STEPS_LOG": str(tmp_path / "steps.jsonl")}
    cmd = [sys.executable, "-m", "diagnoser.act.cli", "run", "--json", "--run-dir", str(tmp_path / "run"),
           "--kill-grace", "5s", "--", "torchrun", "--standalone", "--nproc-per-node", "2", str(TRAIN),
           "--steps", "100000", "--ckpt-dir", str(tmp_path / "ck"), "--ckpt-every", "1000", "--step-time", "0.05"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 150
    while time.time() < deadline and not executed_steps(tmp_path):
        time.sleep(0.5)
    assert executed_steps(tmp_path), "the job never started"
    pids = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert json.loads(out)["status"] == "stopped"
    events = read_audit(tmp_path / "run" / "audit.jsonl")
    assert events[-1].type == "run_finished" and events[-1].reason == "interrupted by SIGINT"
    assert of(events, "attempt_finished")[0].status == "killed" and not of(events, "failure_detected")
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"left behind: {alive}"


FAKE_TRAINER = """
import os, sys, time
start = int(os.environ.get("DIAGNOSER_RESUME_STEP") or 0) + 1
for s in range(start, 31):
    time.sleep(0.1)
    print(f"step {s}", flush=True)
"""


def test_controller_killed_mid_run_is_resumed_and_reattaches(tmp_path: Path) -> None:
    script = tmp_path / "fake.py"
    script.write_text(FAKE_TRAINER)
    cmd = [sys.executable, "-m", "diagnoser.act.cli", "run", "--json", "--run-dir", str(tmp_path / "run"), "--",
           sys.executable, str(script)]
    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    console = tmp_path / "run" / "attempt-001" / "console.log"
    deadline = time.time() + 60
    while time.time() < deadline and (not console.exists() or "step 5" not in console.read_text()):
        time.sleep(0.1)
    first.send_signal(signal.SIGKILL)  # the controller dies; the job keeps running
    first.wait(10)
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert second.returncode == 0, second.stderr[-2000:]
    events = read_audit(tmp_path / "run" / "audit.jsonl")
    assert [e.type for e in events if e.type in ("run_started", "attempt_started", "run_finished")] == [
        "run_started", "attempt_started", "run_finished"]  # re-attached: one run, one attempt
    assert events[-1].status == "succeeded"
    rank_log = (tmp_path / "run" / "attempt-001" / "logs" / "launcher.log").read_text()
    assert rank_log.count("step 30") == 1 and rank_log.count("step 1\n") == 1


HANG_ONCE = """
import os, sys, time
marker = sys.argv[1]
for s in range(1, 6):
    print(f"step {s}", flush=True)
    time.sleep(0.1)
    if s == 3 and not os.path.exists(marker):
        open(marker, "w").close()
        while True:
            time.sleep(1)  # stuck_in_io
"""


@pytest.mark.skipif(not __import__("shutil").which("py-spy"), reason="py-spy not installed")
def test_single_process_hang_is_dumped_killed_and_restarted(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(HANG_ONCE)
    cmd = [sys.executable, "-m", "diagnoser.act.cli", "run", "--json", "--run-dir", str(tmp_path / "run"),
           "--hang-timeout", "3s", "--kill-grace", "2s", "--", sys.executable, str(script), str(tmp_path / "m")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = read_audit(tmp_path / "run" / "audit.jsonl")
    assert [e.how.value for e in of(events, "failure_detected")] == ["hang"]
    assert of(events, "decision")[0].action.value == "restart"
    dump = (tmp_path / "run" / "attempt-001" / "logs" / "stacks" / "rank0.txt").read_text()
    # what the product reads from the dump, not py-spy's wording (thread names differ by version)
    stack = main_stack(dump)
    assert stack is not None and any("(job.py)" in f for f in stack.frames), dump
