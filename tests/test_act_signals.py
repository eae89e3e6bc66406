"""The controller signals only what it started: a real process group, a pid 1 record (inside a
private pid namespace, so a regression cannot reach this machine's processes) and a reused pid."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from diagnoser.act.executors import AttemptSpec, LocalExecutor, LocalHandle
from diagnoser.act.procid import Identity, leader_mismatch


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait(cond, limit: float = 10.0) -> bool:
    deadline = time.time() + limit
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_attached_handle_stops_the_real_process_group_it_started(tmp_path: Path) -> None:
    ex = LocalExecutor()
    # a shell with a background child in the same process group
    h = ex.start(AttemptSpec(1, ("sh", "-c", "sleep 60 & echo $! > child.pid; wait"), tmp_path / "console.log",
                             cwd=tmp_path))
    assert _wait(lambda: (tmp_path / "child.pid").exists() and (tmp_path / "child.pid").read_text().strip())
    child = int((tmp_path / "child.pid").read_text())
    record = json.loads(json.dumps(h.record()))
    assert record["sid"] == record["pid"] == os.getpgid(child)  # pid + create time + session recorded
    again = ex.attach(record)
    assert again is not None and not again.ended()
    ex.stop(again, grace_s=2.0)
    assert _wait(lambda: _gone(child)) and _wait(h.ended)


def test_a_reused_pid_is_never_signalled(tmp_path: Path) -> None:
    """The record names a live, unrelated process group leader, but with another create time."""
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        ct = psutil.Process(bystander.pid).create_time()
        ex = LocalExecutor()
        record = {"pid": bystander.pid, "create_time": ct - 7.0, "sid": bystander.pid,
                  "exit_file": str(tmp_path / "exit.json"), "descendants": {}}
        h = ex.attach(record)
        assert h is not None
        assert h.ended() and h.alive() == 0  # not ours: the attempt is over, nothing to supervise
        assert h.signal(signal.SIGTERM) == 0 and "another process" in h.refused
        ex.stop(h, grace_s=0.2)
        time.sleep(0.3)
        assert bystander.poll() is None  # still running
        # a descendant record pointing at it (created before the leader) is refused too
        own = ex.start(AttemptSpec(1, ("sleep", "60"), tmp_path / "c.log"))
        own.record()
        rec = {**own.record(), "descendants": {str(bystander.pid): ct}}
        again = ex.attach(rec)
        ex.stop(again, grace_s=2.0)
        assert _wait(own.ended) and bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_session_mismatch_and_non_leaders_are_refused() -> None:
    proc = subprocess.Popen(["sleep", "60"])  # same session and group as this test: not a leader
    try:
        ident = Identity.of(proc.pid)
        assert ident is not None
        assert "no longer leads" in (leader_mismatch(Identity(proc.pid, ident.create_time, None)) or "")
        assert "refused" in (leader_mismatch(Identity(proc.pid, ident.create_time, 4242)) or "")
        assert "refused" in (leader_mismatch(Identity(os.getpid(), psutil.Process().create_time(), None)) or "")
        assert "refused" in (leader_mismatch(Identity(1, 0.0, 1)) or "")
        assert "refused" in (leader_mismatch(Identity(0, 0.0, 0)) or "")
    finally:
        proc.kill()
        proc.wait()


PID1_PROBE = textwrap.dedent("""
    import json, signal, subprocess, sys, time
    from pathlib import Path
    import psutil
    from diagnoser.act.executors import LocalExecutor, LocalHandle
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    time.sleep(0.2)
    ct = psutil.Process(1).create_time()
    tmp = Path(sys.argv[1])
    ex = LocalExecutor()
    record = {"pid": 1, "create_time": ct, "sid": 1, "exit_file": str(tmp / "exit.json"), "descendants": {}}
    (tmp / "launcher.json").write_text(json.dumps({"handle": record}))
    h = ex.attach(json.loads((tmp / "launcher.json").read_text())["handle"])
    if h is not None:
        ex.stop(h, grace_s=0.2)  # what a controller re-attaching to this record does
    time.sleep(0.3)
    out = {"attached": h is not None, "bystander_alive": bystander.poll() is None}
    try:
        direct = LocalHandle(1, ct, tmp / "exit.json", sid=1)
        out.update(direct_sent=direct.signal(signal.SIGTERM), refused=direct.refused)
    except TypeError as exc:
        out.update(direct_sent=None, refused=str(exc))
    time.sleep(0.3)
    out["bystander_alive"] = out["bystander_alive"] and bystander.poll() is None
    print(json.dumps(out), flush=True)
    bystander.kill()
""")


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="needs root and unshare")
def test_a_pid_1_record_is_refused_inside_a_private_pid_namespace(tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(PID1_PROBE)
    # pid 1 of the namespace is a shell that outlives the probe; kill(-1) there cannot leave it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c",
                           f'"{sys.executable}" "{script}" "{tmp_path}"; true'],
                          capture_output=True, text=True, timeout=60, env=env, check=False)
    if "Operation not permitted" in proc.stderr and not proc.stdout:
        pytest.skip("no pid namespaces here")
    lines = proc.stdout.strip().splitlines()
    assert lines, f"the probe itself was signalled (kill(-1) reached it): {proc.stderr.strip()[-300:]}"
    out = json.loads(lines[-1])
    assert out == {"attached": False, "direct_sent": 0, "refused": out["refused"], "bystander_alive": True}
    assert "refused" in out["refused"]


def test_local_handle_records_session(tmp_path: Path) -> None:
    h = LocalExecutor().start(AttemptSpec(1, ("sleep", "30"), tmp_path / "c.log"))
    try:
        assert isinstance(h, LocalHandle) and h.identity.sid == h.pid
    finally:
        LocalExecutor().stop(h, 1.0)


# ------------------------------------------------------------------ who may approve (real OS users)
def test_approve_records_the_real_os_user_and_checks_the_approver_list(request) -> None:
    """`diagnoser approve` run for real as two OS users: only the listed one's answer counts, under
    its own name whatever `--by` says; a hand-written answer by another user is discarded."""
    import pwd
    import shutil

    from diagnoser.act.approval import REQUEST_FILE, RESPONSE_FILE, read_response

    if os.geteuid() != 0:
        pytest.skip("needs root to act as another OS user")
    try:
        other = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no 'nobody' user")
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="diag-approve-", dir="/tmp"))  # pytest's own tmp is private to root
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    run = base / "run"
    run.mkdir()
    os.chmod(base, 0o755)
    os.chmod(run, 0o777)
    (run / REQUEST_FILE).write_text(json.dumps({"action": "escalate", "rule": "x", "reason": "y",
                                                "approvers": ["root"]}))
    os.chmod(run / REQUEST_FILE, 0o644)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    cmd = [sys.executable, "-m", "diagnoser.act.cli", "approve", str(run), "--by", "root"]
    # the other user cannot read this interpreter's home: a system python with the same packages
    import sysconfig

    site = sysconfig.get_paths()["purelib"]
    other_env = {**env, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), site])}
    other_py = "/usr/bin/python3"
    probe = subprocess.run(["su", "-s", "/bin/sh", "nobody", "-c", f"cd / && PYTHONPATH={other_env['PYTHONPATH']} "
                            f"{other_py} -c 'import diagnoser.act.cli'"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("the other user cannot import diagnoser here")

    def as_nobody() -> None:
        os.setgid(other.pw_gid)
        os.setuid(other.pw_uid)

    refused = subprocess.run([other_py, *cmd[1:]], env=other_env, capture_output=True, text=True,
                             preexec_fn=as_nobody, check=False, cwd="/")
    assert refused.returncode != 0 and "nobody may not answer" in refused.stderr
    assert not (run / RESPONSE_FILE).exists()
    # a forged answer file written by that user, naming root, is not accepted
    forged = subprocess.run([other_py, "-c", f"open({str(run / RESPONSE_FILE)!r}, 'w').write("
                             "'{\"approved\": true, \"by\": \"root\"}')"], preexec_fn=as_nobody, check=False, cwd="/")
    assert forged.returncode == 0 and read_response(run / RESPONSE_FILE, ("root",)) is None
    ok = subprocess.run([*cmd[:-2], "--by", "alice"], env=env, capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    got = read_response(run / RESPONSE_FILE, ("root",))
    assert got is not None and got.approved and got.by == "root" and "on behalf of alice" in got.note
