"""The controller never loses a job it supervises, faults injected for real: a damaged launcher
record, an edited audit log, an audit path that is a directory, a full disk (a real tmpfs), a
controller killed during a backoff, and a daemon the job double-forks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_act_controller import Script, events, make, steps, verdict  # noqa: E402

from diagnoser.act.events import ActionStarted, AttemptStarted, read_audit  # noqa: E402
from diagnoser.act.executors import AttemptSpec, LocalExecutor  # noqa: E402
from diagnoser.models import Action, Category  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
# waits while a flag file exists, printing progress; then exits 0. Its pid file appears whole
# (written aside, then renamed): a test never reads it half-written
JOB = ("import os,sys,time\n"
       "open(sys.argv[2] + '.tmp', 'w').write(str(os.getpid())); os.replace(sys.argv[2] + '.tmp', sys.argv[2])\n"
       "i = 0\n"
       "while os.path.exists(sys.argv[1]):\n"
       "    i += 1; print(f'step {i} loss 1.0', flush=True); time.sleep(0.2)\n")


def _run(run_dir: Path, *job: str, extra: tuple[str, ...] = ()) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "diagnoser.act.cli", "run", "--run-dir", str(run_dir), "--json",
                             "--kill-grace", "2s", *extra, "--", *job], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait(cond, limit: float = 20.0) -> bool:
    deadline = time.time() + limit
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return bool(cond())


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture(autouse=True)
def _end_jobs(tmp_path: Path):
    """Whatever happens in a test, its jobs end with it (they run while their flag file exists)."""
    yield
    for flag in tmp_path.glob("keep-going"):
        flag.unlink()
    for pidfile in tmp_path.glob("*.pid"):
        try:
            pid = int(pidfile.read_text())
            if _alive(pid) and "python" in " ".join(psutil.Process(pid).cmdline()):
                os.kill(pid, signal.SIGKILL)
        except (ValueError, OSError, psutil.Error):
            pass


# the same job, which first reserves 1 MiB for its log (fallocate, KEEP_SIZE): when the test fills
# the disk, the controller's own write fails first, the case under test, not the job's next print
JOB_RESERVING_ITS_LOG = ("import ctypes,os\n"
                         "libc = ctypes.CDLL(None, use_errno=True)\n"
                         "libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]\n"
                         "if libc.fallocate(1, 1, 0, 1 << 20) != 0:\n"
                         "    raise OSError(ctypes.get_errno(), 'fallocate')\n" + JOB)


def _job(tmp_path: Path, script: str = JOB) -> tuple[Path, Path, tuple[str, ...]]:
    flag, pidfile = tmp_path / "keep-going", tmp_path / "job.pid"
    flag.touch()
    return flag, pidfile, (sys.executable, "-c", script, str(flag), str(pidfile))


def _start_and_kill_controller(tmp_path: Path) -> tuple[Path, Path, int, tuple[str, ...]]:
    """A controller starts the job, then dies (SIGKILL); the job keeps running."""
    flag, pidfile, job = _job(tmp_path)
    run_dir = tmp_path / "run"
    first = _run(run_dir, *job)
    audit = run_dir / "audit.jsonl"
    assert _wait(lambda: pidfile.exists() and audit.exists() and "attempt_started" in audit.read_text())
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=10)
    pid = int(pidfile.read_text())
    assert _alive(pid)
    return flag, run_dir, pid, job


@pytest.mark.parametrize("damage", ["corrupt", "missing", "pid 1"])
def test_a_damaged_launcher_record_is_recovered_and_the_job_supervised(tmp_path: Path, damage: str) -> None:
    flag, run_dir, pid, job = _start_and_kill_controller(tmp_path)
    record = run_dir / "attempt-001" / "launcher.json"
    if damage == "corrupt":
        record.write_text('{"attempt": 1, "handle": {"pid": ')
    elif damage == "missing":
        record.unlink()
    else:
        record.write_text(json.dumps({"attempt": 1, "handle": {"pid": 1, "create_time": 0, "exit_file": "x"}}))
    second = _run(run_dir, *job)
    time.sleep(1.5)
    assert second.poll() is None and _alive(pid)  # supervising, not giving up on it
    flag.unlink()  # the job finishes on its own
    out, err = second.communicate(timeout=60)
    summary = json.loads(out)
    assert summary["status"] == "succeeded", err
    assert "re-attached" in err
    assert [e.attempt for e in events_of(run_dir, AttemptStarted)] == [1]


def events_of(run_dir: Path, kind: type) -> list:
    return [e for e in read_audit(run_dir / "audit.jsonl") if isinstance(e, kind)]


def test_an_edited_audit_log_never_leaves_the_job_running_unsupervised(tmp_path: Path) -> None:
    flag, run_dir, pid, job = _start_and_kill_controller(tmp_path)
    now = datetime.now(UTC).isoformat()
    with open(run_dir / "audit.jsonl", "a") as fh:  # bogus lines: the attempt 'succeeded', the run 'finished'
        fh.write(json.dumps({"schema": "audit/v1", "time": now, "type": "attempt_finished", "attempt": 1,
                             "exit_code": 0, "status": "succeeded"}) + "\n")
        fh.write(json.dumps({"schema": "audit/v1", "time": now, "type": "run_finished", "status": "succeeded"}) + "\n")
        fh.write("{not json at all\n")
    second = _run(run_dir, *job[:-2], str(tmp_path / "no-such-flag"), str(tmp_path / "job2.pid"))  # exits at once
    out, err = second.communicate(timeout=60)
    assert json.loads(out)["status"] == "succeeded"
    assert flag.exists() and not _alive(pid)  # stopped by the controller, not ended by itself
    assert "stopped it cleanly" in err


def test_an_audit_path_that_is_a_directory_is_one_line_and_starts_nothing(tmp_path: Path) -> None:
    flag, pidfile, job = _job(tmp_path)
    (tmp_path / "run" / "audit.jsonl").mkdir(parents=True)
    proc = _run(tmp_path / "run", *job)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "cannot write the run directory" in err
    assert not pidfile.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_full_disk_stops_the_job_cleanly_with_one_line(tmp_path: Path) -> None:
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], check=False,
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        # the job's flag and pid files live outside the small disk; its log, in the run directory, has
        # its room reserved, so the job never dies of the full disk before the controller notices
        flag, pidfile, job = _job(tmp_path, JOB_RESERVING_ITS_LOG)
        proc = _run(mnt / "run", *job)
        assert _wait(lambda: pidfile.exists() and (mnt / "run" / "attempt-001" / "launcher.json").exists())
        pid = int(pidfile.read_text())
        with open(mnt / "filler", "wb") as fh:  # fill the disk for real
            try:
                while True:
                    fh.write(b"\0" * 65536)
                    fh.flush()
            except OSError:
                pass
        out, err = proc.communicate(timeout=60)
        assert proc.returncode != 0 and "Traceback" not in err, err
        assert "cannot write the run directory" in err and "stopped attempt 1" in err
        assert len([ln for ln in err.splitlines() if ln.startswith("diagnoser: cannot")]) == 1
        assert _wait(lambda: not _alive(pid), 10)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_controller_restarted_during_a_backoff_waits_the_rest(tmp_path: Path) -> None:
    v = verdict(Category.INFRA, "storage_stale_handle", Action.RETRY_AFTER_BACKOFF)
    c, _ = make(tmp_path, [Script(steps(1, 2), exit_at=3, code=1)], [v])

    class Crash(BaseException):
        pass

    def crash_in_backoff(status) -> None:
        if status.phase == "backoff":
            c.clock.advance(1.0)  # one second of the 4 s backoff went by, then the controller died
            raise Crash

    c.listener = crash_in_backoff
    with pytest.raises(Crash):
        c.run()
    (started,) = events(c, ActionStarted)
    assert started.delay_s == 4.0
    # a new controller, one second later on the wall clock
    c2, ex2 = make(tmp_path, [Script(steps(1, 2), exit_at=3)], [])
    c2.clock = ex2.clock = type(c.clock)(started.time + timedelta(seconds=1.0))
    assert c2.run().status == "succeeded"
    second = events(c2, AttemptStarted)[1]
    waited = (second.time - started.time).total_seconds()
    assert 3.9 <= waited <= 4.5  # the remaining 3 s were waited, not dropped, not restarted from 4


def test_a_double_forked_daemon_does_not_outlive_its_attempt(tmp_path: Path) -> None:
    daemon_pid = tmp_path / "daemon.pid"
    script = ("import os,sys,time\n"
              "if os.fork() == 0:\n"
              "    os.setsid()\n"
              "    if os.fork() == 0:\n"
              f"        open({str(daemon_pid)!r}, 'w').write(str(os.getpid())); time.sleep(300)\n"
              "    os._exit(0)\n"
              "os.wait(); time.sleep(0.5); print('done', flush=True)\n")
    ex = LocalExecutor()
    h = ex.start(AttemptSpec(1, (sys.executable, "-c", script), tmp_path / "console.log"))
    assert _wait(h.ended, 30) and h.exit_code == 0
    pid = int(daemon_pid.read_text())
    assert _wait(lambda: not _alive(pid), 10)
