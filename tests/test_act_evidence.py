"""The controller's own evidence about how an attempt ended (`launcher-exit.log`): what it says, and
what the triage makes of it (a bare SIGKILL is a killed rank with no OOM and no scheduler signal, a
cgroup OOM kill is a host OOM), plus the wrapper recording signals the job's process group received."""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from diagnoser.act import evidence as ev
from diagnoser.act.clock import SystemClock
from diagnoser.act.executors import AttemptSpec, LocalExecutor
from diagnoser.triage import triage

T0 = datetime(2026, 3, 4, 5, 6, 0, tzinfo=UTC)
AT = T0 + timedelta(seconds=42)

# torchrun 2.x's ChildFailedError report after `kill -9` of rank 1 (as captured from a real run)
TORCHRUN_REPORT = """\
E0304 05:06:41.264000 1634 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) \
local_rank: 1 (pid: 1848) of binary: /usr/bin/python3
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
======================================================
train.py FAILED
------------------------------------------------------
Failures:
[1]:
  time      : 2026-03-04_05:06:41
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 1847)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 1847
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-03-04_05:06:41
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 1848)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 1848
======================================================
"""


def facts(**kw) -> ev.ExitFacts:
    ranks, first = ev.launcher_failures(TORCHRUN_REPORT)
    base = dict(at=AT, started=T0, launcher_pid=812, launcher_code=1, ranks=ranks, first=first,
                pids={812, 1847, 1848}, kernel_log_read=True, oom_before=ev.OomCounter("/cg/memory.events", 0),
                oom_after=ev.OomCounter("/cg/memory.events", 0), last_step=5, last_progress_at=AT)
    return ev.ExitFacts(**{**base, **kw})


def diagnose(tmp: Path, f: ev.ExitFacts) -> tuple[str, str, float, str]:
    logs = tmp / "logs"
    logs.mkdir(exist_ok=True)
    (logs / "launcher.log").write_text(TORCHRUN_REPORT)
    ev.write_exit_evidence(logs, f)
    d = triage([str(logs)])
    return d.category.value, d.subtype, d.confidence, d.action.value


def test_torchrun_report_gives_each_rank_and_the_first_failure() -> None:
    ranks, first = ev.launcher_failures(TORCHRUN_REPORT)
    assert {(r.rank, r.pid, r.code) for r in ranks} == {(0, 1847, -15), (1, 1848, -9)}
    assert first == ev.RankExit(1, 1848, -9)


def test_deepspeed_report_gives_the_failed_process() -> None:
    text = ("[2025-03-04 05:06:08,331] [INFO] [launch.py:347:main] Process 77120 exits with return code = -9\n"
            "[2025-03-04 05:06:08,331] [INFO] [launch.py:347:main] Process 77121 exits with return code = 0\n")
    ranks, first = ev.launcher_failures(text)
    assert ranks == [ev.RankExit(None, 77120, -9)] and first == ranks[0]


def test_exit_codes_and_signals_are_named() -> None:
    assert ev.describe_code(-9) == "killed by signal 9 (SIGKILL)"
    assert ev.describe_code(137) == "killed by signal 9 (SIGKILL)"
    assert ev.describe_code(1) == "exit code 1" and ev.signal_of(1) is None and ev.signal_of(-11) == 11


def test_bare_sigkill_is_a_killed_rank_not_no_signature(tmp_path: Path) -> None:
    text = "\n".join(ev.evidence_lines(facts()))
    assert "rank 1 (pid 1848) exitcode -9: killed by signal 9 (SIGKILL) (first failure)" in text
    assert "rank 0 (pid 1847) exitcode -15: killed by signal 15 (SIGTERM) (the launcher's teardown)" in text
    assert "oom_kill 0 -> 0" in text and "last progress: step 5" in text
    assert "killed by signal 9 (SIGKILL): no OOM kill recorded, not sent by the scheduler or diagnoser" in text
    category, subtype, confidence, action = diagnose(tmp_path, facts())
    assert (category, subtype, action) == ("unknown", "killed_by_signal", "restart") and confidence < 0.6


def test_cgroup_oom_kill_makes_it_a_host_oom(tmp_path: Path) -> None:
    f = facts(oom_after=ev.OomCounter("/cg/memory.events", 1))
    assert "oom_kill 0 -> 1 during the attempt: oom-kill event" in "\n".join(ev.evidence_lines(f))
    category, subtype, confidence, action = diagnose(tmp_path, f)
    assert (category, subtype, action) == ("user_code", "host_oom", "stop_and_notify") and confidence >= 0.8


def test_kernel_oom_of_a_job_pid_is_named(tmp_path: Path) -> None:
    dmesg = tmp_path / "dmesg"
    dmesg.mkdir()
    (dmesg / "n1.log").write_text("2026-03-04T05:06:40,000000+00:00 Out of memory: Killed process 1848 (python3) "
                                  "total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:0\n"
                                  "2026-03-04T05:06:40,000000+00:00 Out of memory: Killed process 4242 (other)\n")
    read, pids = ev.kernel_oom_pids(dmesg)
    text = "\n".join(ev.evidence_lines(facts(kernel_oom_pids=pids, kernel_log_read=read)))
    assert "the kernel OOM killer killed pid(s) [1848] of the job" in text and "no OOM kill recorded" not in text


def test_outside_signal_and_diagnosers_own_kill(tmp_path: Path) -> None:
    outside = "\n".join(ev.evidence_lines(facts(outside_signals=[("SIGTERM", AT - timedelta(seconds=1))])))
    assert "received SIGTERM at" in outside and "from outside diagnoser (scheduler or operator)" in outside
    assert "killed by signal 9 (SIGKILL): the job received SIGTERM from outside diagnoser" in outside
    hang = "\n".join(ev.evidence_lines(facts(sent_by_diagnoser="SIGTERM after the hang was detected")))
    assert "signals sent by diagnoser: SIGTERM after the hang" in hang and "no OOM kill recorded" not in hang


def test_unreadable_sources_are_said_not_guessed() -> None:
    text = "\n".join(ev.evidence_lines(facts(kernel_log_read=False, oom_before=None, oom_after=None,
                                             launcher_code=None, last_step=None)))
    assert "kernel log not read (" in text and "memory cgroup counters not readable" in text
    assert "status unknown" in text and "last progress: none" in text


def test_single_process_job_killed_by_signal(tmp_path: Path) -> None:
    f = facts(ranks=[], first=None, launcher_code=-9)
    assert "the process (pid 812) killed by signal 9 (SIGKILL): no OOM kill recorded" in "\n".join(
        ev.evidence_lines(f))


def test_error_file_message_and_traceback_become_lines() -> None:
    data = {"message": {"message": "KeyError: 'labels'", "extraInfo": {
        "py_callstack": "Traceback (most recent call last):\n  File \"train.py\", line 3\nKeyError: 'labels'\n"}}}
    text = "\n".join(ev.evidence_lines(facts(error_file=data)))
    assert "torchrun error file: KeyError: 'labels'" in text


@pytest.mark.parametrize("layout", ["v1", "v2"])
def test_oom_counter_reads_this_process_cgroup(tmp_path: Path, layout: str) -> None:
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    v2 = next((ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")), None)
    v1 = next((ln.split(":", 2)[2] for ln in lines if "memory" in ln.split(":", 2)[1].split(",")), None)
    path = v1 if layout == "v1" else v2
    if path is None:
        pytest.skip(f"no cgroup {layout} memory entry for this process")
    target = tmp_path / ("memory" if layout == "v1" else "") / path.lstrip("/")
    target.mkdir(parents=True, exist_ok=True)
    name = "memory.oom_control" if layout == "v1" else "memory.events"
    (target / name).write_text("oom 3\noom_kill 2\n" if layout == "v2" else "under_oom 0\noom_kill 2\n")
    got = ev.oom_counter(os.getpid(), root=tmp_path)
    assert got is not None and got.count == 2 and got.path.endswith(name)
    assert ev.OomCounter.from_json(got.to_json()) == got


def test_wrapper_records_signals_the_group_received(tmp_path: Path) -> None:
    code = "import signal, time; signal.signal(signal.SIGUSR1, lambda *a: print('usr1', flush=True)); time.sleep(20)"
    ex = LocalExecutor(tee=False)
    h = ex.start(AttemptSpec(1, (sys.executable, "-c", code), tmp_path / "console.log"))
    time.sleep(1.0)
    before = time.time()
    os.killpg(h.pid, signal.SIGUSR1)  # e.g. Slurm's --signal=USR1 warning to the whole step
    time.sleep(0.3)
    ex.stop(h, 5.0, SystemClock())
    got = h.received_signals()
    assert [name for name, _ in got][:2] == ["SIGUSR1", "SIGTERM"]
    assert before <= got[0][1] <= got[1][1]
    assert h.pid in h.known_pids()


def test_kernel_lines_about_other_processes_on_the_host_are_left_out(tmp_path: Path) -> None:
    dmesg = tmp_path / "dmesg"
    dmesg.mkdir()
    log = dmesg / "n1.log"
    log.write_text(
        "2026-03-04T05:06:01,0+00:00 python[4242]: segfault at 4 ip 00007fe2 sp 00007fe2 error 6 in libpython3.11.so\n"
        "2026-03-04T05:06:02,0+00:00 python[1848]: segfault at 0 ip 00007fe2 sp 00007fe2 error 4 in libtorch_cpu.so\n"
        "2026-03-04T05:06:03,0+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus.\n"
        "2026-03-04T05:06:04,0+00:00 java invoked oom-killer: gfp_mask=0x140cca, order=0, oom_score_adj=0\n"
        "2026-03-04T05:06:04,0+00:00 Out of memory: Killed process 5151 (java) total-vm:1kB, anon-rss:1kB\n")
    assert ev.scope_kernel_logs(dmesg, {812, 1847, 1848}) == 3
    kept = log.read_text()
    assert "python[1848]: segfault" in kept and "Xid" in kept  # the job's own process; a host-wide GPU event
    assert "4242]: segfault" not in kept and "oom-killer" not in kept and "5151" not in kept
    text = "\n".join(ev.evidence_lines(facts(kernel_lines_left_out=3)))
    assert "3 line(s) about other processes on this host left out" in text
    # an OOM kill of one of the job's processes stays, with its whole report
    log.write_text("x invoked oom-killer: gfp_mask=0x0\nOut of memory: Killed process 1848 (python3) total-vm:1kB\n")
    assert ev.scope_kernel_logs(dmesg, {1848}) == 0
