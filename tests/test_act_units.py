"""Checkpoint conventions, per-rank log routing, progress patterns, local exclusion planning,
the audit-state fold and the run lock (no training processes)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest

from diagnoser.act.attempts import choose_resume, job_env, render_command
from diagnoser.act.checkpoints import CheckpointStore, CheckpointWatcher
from diagnoser.act.config import ConfigError, build_config
from diagnoser.act.events import (
    ActionFinished,
    ActionStarted,
    AttemptStarted,
    DecisionMade,
    DiagnosisMade,
    FailureDetected,
    FailureHow,
    RunStarted,
)
from diagnoser.act.executors import LocalExecutor
from diagnoser.act.logs import LogRouter, ProgressMatcher
from diagnoser.act.runstate import LockedError, RunLock, load_state
from diagnoser.models import Action, Category

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def torch_like_zip(path: Path, payload: bytes = b"x" * 4096) -> None:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        z.writestr("archive/data/0", payload)


def step_dir(root: Path, step: int, marker: str | None = "COMPLETE", weights: bool = True) -> Path:
    d = root / f"step_{step:06d}"
    d.mkdir(parents=True)
    if weights:
        torch_like_zip(d / "model.pt")
    if marker:
        (d / marker).write_text("{}")
    return d


# ----------------------------------------------------------------------------- checkpoints
def test_newest_valid_dir_checkpoint_skips_partial_and_corrupt(tmp_path: Path) -> None:
    step_dir(tmp_path, 100)
    step_dir(tmp_path, 200, marker=".done")
    step_dir(tmp_path, 300, marker=None)  # partial write: no marker
    bad = step_dir(tmp_path, 400)
    data = (bad / "model.pt").read_bytes()
    (bad / "model.pt").write_bytes(data[: len(data) // 2])  # truncated, marker present
    (tmp_path / ".tmp-step_000500").mkdir()
    sel = CheckpointStore(tmp_path).select()
    assert sel.checkpoint is not None and sel.checkpoint.step == 200
    reasons = dict((c.step, why) for c, why in sel.skipped)
    assert "central directory" in reasons[400] or "not a complete" in reasons[400]
    assert "marker" in reasons[300]
    assert "skipped step_000400" in sel.describe()


def test_crc_mismatch_and_empty_file(tmp_path: Path) -> None:
    d = step_dir(tmp_path, 10)
    raw = bytearray((d / "model.pt").read_bytes())
    i = raw.index(b"x" * 64)
    raw[i:i + 8] = b"yyyyyyyy"
    (d / "model.pt").write_bytes(bytes(raw))
    e = step_dir(tmp_path, 20, weights=False)
    (e / "model.pt").write_bytes(b"")
    store = CheckpointStore(tmp_path)
    assert [(c.step, store.check(c).ok) for c in store.scan()] == [(10, False), (20, False)]
    assert "CRC" in store.check(store.scan()[0]).reason and "empty" in store.check(store.scan()[1]).reason


def test_marker_manifest_sizes(tmp_path: Path) -> None:
    d = step_dir(tmp_path, 5, marker=None)
    size = (d / "model.pt").stat().st_size
    (d / "COMPLETE").write_text(json.dumps({"files": {"model.pt": size + 1}}))
    store = CheckpointStore(tmp_path)
    assert not store.check(store.scan()[0]).ok
    (d / "COMPLETE").write_text(json.dumps({"files": {"model.pt": size}}))
    assert CheckpointStore(tmp_path).select().checkpoint is not None


def test_dcp_metadata_marker_and_files_convention(tmp_path: Path) -> None:
    dcp = tmp_path / "dcp" / "step-30"
    dcp.mkdir(parents=True)
    (dcp / "__0_0.distcp").write_bytes(b"shard")
    assert CheckpointStore(tmp_path / "dcp").select().checkpoint is None
    (dcp / ".metadata").write_bytes(b"meta")
    assert CheckpointStore(tmp_path / "dcp").select().checkpoint.step == 30
    files = tmp_path / "files"
    files.mkdir()
    torch_like_zip(files / "ckpt_100.pt")
    torch_like_zip(files / "ckpt_200.pt")
    (files / "ckpt_300.pt").write_bytes(b"PK\x03\x04 truncated")
    assert CheckpointStore(files).select().checkpoint.step == 200
    (files / "ckpt_100.pt.done").touch()  # the directory uses markers: every file needs one
    assert CheckpointStore(files).select().checkpoint.step == 100


def test_safetensors_length_check(tmp_path: Path) -> None:
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    good = struct.pack("<Q", len(header)) + header + b"\0" * 16
    (tmp_path / "model-10.safetensors").write_bytes(good)
    (tmp_path / "model-20.safetensors").write_bytes(good[:-4])
    store = CheckpointStore(tmp_path)
    assert store.select().checkpoint.step == 10
    assert "truncated" in store.check(store.scan()[-1]).reason


def test_rollback_and_abandoned_checkpoints(tmp_path: Path) -> None:
    for s in (3, 6, 9):
        step_dir(tmp_path, s)
    store = CheckpointStore(tmp_path)
    assert choose_resume(store, [], rollback=False).checkpoint.step == 9
    rb = choose_resume(store, [], rollback=True)
    assert rb.checkpoint.step == 6 and "rolled back" in rb.describe()
    assert choose_resume(store, [], rollback=True, below_step=6).checkpoint.step == 3
    later = datetime.now(UTC) + timedelta(seconds=5)
    sel = choose_resume(store, [(6, later)], rollback=False)  # step 9 predates the rollback to 6
    assert sel.checkpoint.step == 6 and "abandoned" in sel.describe()
    assert choose_resume(None, [], rollback=False).checkpoint is None


def test_watcher_reports_new_valid_checkpoints_once(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    w = CheckpointWatcher(store, since_mtime=time.time() - 5)
    step_dir(tmp_path, 1)
    step_dir(tmp_path, 2, marker=None)
    assert [c.step for c in w.final()] == [1]
    (tmp_path / "step_000002" / "COMPLETE").write_text("{}")
    assert [c.step for c in w.final()] == [2]
    assert w.final() == []
    w.close()


def test_resume_env_and_command_template(tmp_path: Path) -> None:
    step_dir(tmp_path, 7)
    ck = CheckpointStore(tmp_path).select().checkpoint
    env = job_env(ck, 3, tmp_path, "MY_RESUME", rollback_from=9)
    assert env["MY_RESUME"] == env["DIAGNOSER_RESUME_FROM"] == str(ck.path)
    assert env["DIAGNOSER_RESUME_STEP"] == "7" and env["DIAGNOSER_ROLLBACK"] == "1"
    assert env["DIAGNOSER_FAILED_STEP"] == "9"
    assert job_env(None, 1, tmp_path, "DIAGNOSER_RESUME_FROM")["DIAGNOSER_RESUME_FROM"] == ""
    cmd = render_command(("train.py", "--resume={resume}", "--tag", "a{attempt}s{resume_step}"), ck, 3)
    assert cmd == ("train.py", f"--resume={ck.path}", "--tag", "a3s7")


# ----------------------------------------------------------------------------- logs
def test_router_splits_ranks_rotates_and_cuts(tmp_path: Path) -> None:
    r = LogRouter(tmp_path, max_bytes=2048, rank_offset=4)
    lines = r.feed(b"[default0]:step 1\n[default1]:[rank5]: Traceback\nW1122 launcher line\n[rank7]: x\npart")
    assert [(ln.rank, ln.text) for ln in lines] == [(4, "step 1"), (5, "[rank5]: Traceback"),
                                                     (None, "W1122 launcher line"), (7, "x")]
    assert [(ln.rank, ln.text) for ln in r.feed(b"ial\n")] == [(None, "partial")]
    for i in range(100):
        r.feed(f"[default0]:line {i} ".encode() + b"z" * 40 + b"\n")
    r.feed(b"[default1]:" + b"q" * 100_000)  # a runaway line without newline is cut
    r.finish()
    r.close()
    assert (tmp_path / "rank4.log.1").exists() and (tmp_path / "rank4.log").stat().st_size <= 2048
    assert (tmp_path / "launcher.log").read_text().splitlines() == ["W1122 launcher line", "partial"]
    assert max(len(x) for x in (tmp_path / "rank5.log").read_text().splitlines()) <= 64 << 10


@pytest.mark.parametrize(("line", "step"), [
    ("step 120 loss 2.1", 120), ("[rank0]: step: 7 | loss 3", 7), ("global_step=300, lr=1e-4", 300),
    (" iteration     4200/  500000 | consumed samples: 1", 4200), ("iter 55 time 0.3s", 55),
    ("Epoch 0:  45%|####5     | 45/100 [00:10<00:12,  4.1it/s]", 45), ("x\r 10/100 [00:01<00:09]\r 11/100 [00:01", 11),
    ("[Rank 0] step=100, skipped=0, lr=[0.0001]", 100),
    ("  File \"train.py\", line 50, in train_step", None), ("saved checkpoint /ck/step_000006", None),
    ("optimizer.step()", None), ("3 steps done", None),
])
def test_default_progress_patterns(line: str, step: int | None) -> None:
    assert ProgressMatcher().step(line) == step


def test_custom_progress_pattern_needs_a_group() -> None:
    assert ProgressMatcher([r"it=(\d+)"]).step("it=12") == 12
    with pytest.raises(ValueError):
        ProgressMatcher([r"done"])


# ----------------------------------------------------------------------------- executors
def test_local_prepare_adds_tee_to_torchrun_only() -> None:
    ex = LocalExecutor(host="h1")
    cmd, note = ex.prepare(("torchrun", "--nproc-per-node", "2", "train.py"))
    assert cmd[:3] == ("torchrun", "--tee", "3") and note == ""
    assert ex.prepare(("torchrun", "--tee", "2", "t.py"))[0] == ("torchrun", "--tee", "2", "t.py")
    assert ex.prepare(("python", "-m", "torch.distributed.run", "t.py"))[0][3:5] == ("--tee", "3")
    assert ex.prepare(("python", "train.py"))[0] == ("python", "train.py")
    assert "max-restarts" in ex.prepare(("torchrun", "--max-restarts=3", "t.py"))[1]
    assert LocalExecutor(tee=False).prepare(("torchrun", "t.py"))[0] == ("torchrun", "t.py")
    assert ex.rank_offset(("torchrun", "--nproc-per-node=4", "--node-rank", "2", "t.py")) == 8


@pytest.mark.parametrize(("command", "env", "nodes", "ranks", "ok", "expect"), [
    (("torchrun", "--nproc-per-node", "4", "t.py"), {}, ("h1",), (1,), True, ("3", "0,2,3")),
    (("torchrun", "--nproc_per_node=4", "t.py"), {"CUDA_VISIBLE_DEVICES": "4,5,6,7,0"}, (), (2,), True,
     ("--nproc_per_node=4", "4,5,7,0")),  # a spare device keeps the world size
    (("torchrun", "--nproc-per-node", "2", "--node-rank", "1", "t.py"), {}, ("localhost",), (3,), True, ("1", "0")),
    (("torchrun", "--nproc-per-node", "4", "t.py"), {}, ("h2",), (1,), False, "only on h1"),
    (("torchrun", "--nproc-per-node", "4", "t.py"), {}, ("h1",), (), False, "no node"),
    (("python", "t.py"), {}, ("h1",), (0,), False, "--nproc-per-node"),
    (("torchrun", "--nproc-per-node", "1", "t.py"), {}, (), (0,), False, "no device would be left"),
    (("torchrun", "--nproc-per-node", "2", "t.py"), {}, (), (9,), False, "do not run on this node"),
])
def test_local_exclusion_planning(command, env, nodes, ranks, ok, expect) -> None:
    p = LocalExecutor(host="h1").exclude(command, env, nodes, ranks)
    assert p.ok is ok, p.detail
    if ok:
        nproc_arg, visible = expect
        assert nproc_arg in p.command and p.env["CUDA_VISIBLE_DEVICES"] == visible
    else:
        assert expect in p.detail


def test_local_handle_records_exit_and_kills_its_whole_tree(tmp_path: Path) -> None:
    from diagnoser.act.executors import AttemptSpec

    ex = LocalExecutor()
    script = ("import os,subprocess,sys,time\n"
              "subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)'], start_new_session=True,"
              " env={**os.environ,'RANK':'1'})\nprint('up', flush=True)\ntime.sleep(60)\n")
    h = ex.start(AttemptSpec(1, (sys.executable, "-c", script), tmp_path / "console.log", {"RANK": "0"}))
    deadline = time.time() + 20
    while len(h.rank_pids()) < 2 and time.time() < deadline:
        time.sleep(0.1)
    ranks = h.rank_pids()
    assert set(ranks) == {0, 1}
    again = ex.attach(json.loads(json.dumps(h.record())))
    assert again is not None and not again.ended()
    ex.stop(h, grace_s=2.0)
    assert h.ended() and h.exit_code == -15 and h.alive() == 0
    for pid in ranks.values():  # the worker in its own session is gone too (or a zombie of init)
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert again.ended() and again.exit_code == -15  # read from exit.json by a non-parent


def test_wrapper_reports_exit_code_and_missing_command(tmp_path: Path) -> None:
    from diagnoser.act.executors import WRAPPER, read_exit_file

    out = tmp_path / "exit.json"
    rc = subprocess.run([sys.executable, str(WRAPPER), str(out), "--", sys.executable, "-c", "raise SystemExit(3)"],
                        check=False).returncode
    assert rc == 3 and read_exit_file(out) == 3
    rc = subprocess.run([sys.executable, str(WRAPPER), str(out), "--", "/no/such/binary"], check=False,
                        capture_output=True).returncode
    assert rc == 127 and read_exit_file(out) == 127


# ----------------------------------------------------------------------------- state, lock, config
def test_fold_audit_into_state() -> None:
    t = [T0 + timedelta(seconds=i) for i in range(20)]
    events = [
        RunStarted(time=t[0], job_id="j"), AttemptStarted(time=t[1], attempt=1, resume_step=0),
        FailureDetected(time=t[2], attempt=1, how=FailureHow.EXIT, exit_code=1),
        DiagnosisMade(time=t[3], attempt=1, category=Category.USER_CODE, subtype="nan_loss",
                      action=Action.ROLLBACK_AND_RESTART, confidence=0.8),
        DecisionMade(time=t[4], action=Action.ROLLBACK_AND_RESTART),
        ActionStarted(time=t[5], action=Action.ROLLBACK_AND_RESTART),
        AttemptStarted(time=t[6], attempt=2, resume_step=3),
        ActionFinished(time=t[7], action=Action.ROLLBACK_AND_RESTART, ok=True),
    ]
    s = load_state(events)
    assert s.run_index == 1 and [a.n for a in s.attempts] == [1, 2]
    assert s.attempts[0].action_finished is not None and s.attempts[1].action_finished is None
    assert s.rollbacks() == [(3, t[6])]
    s2 = load_state([*events, RunStarted(time=t[9], job_id="j")])
    assert s2.run_index == 2 and s2.attempts == []


def test_run_lock_is_exclusive(tmp_path: Path) -> None:
    with RunLock(tmp_path / "controller.lock"):
        with pytest.raises(LockedError, match=str(os.getpid())):
            RunLock(tmp_path / "controller.lock").__enter__()
        code = ("import sys; from pathlib import Path; from diagnoser.act.runstate import RunLock, LockedError\n"
                "try:\n RunLock(Path(sys.argv[1])).__enter__()\nexcept LockedError: sys.exit(9)")
        assert subprocess.run([sys.executable, "-c", code, str(tmp_path / "controller.lock")]).returncode == 9
    with RunLock(tmp_path / "controller.lock"):
        pass


def test_config_file_env_and_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "d.yaml"
    f.write_text("hang_timeout_s: 99\npolicy:\n  budgets: {infra: 1}\n  min_confidence: 0.7\n")
    cfg = build_config(f, {"hang_timeout_s": None, "kill_grace_s": 3}, {"min_confidence": 0.9})
    assert cfg.hang_timeout_s == 99 and cfg.kill_grace_s == 3
    assert cfg.policy.min_confidence == 0.9 and cfg.policy.budgets == {Category.INFRA: 1}
    t = tmp_path / "d.toml"
    t.write_text("startup_timeout_s = 5\n[policy]\nmode = 'shadow'\n")
    monkeypatch.setenv("DIAGNOSER_CONFIG", str(t))
    assert build_config().policy.mode.value == "shadow"
    f.write_text("hang_timeout: 1\n")
    with pytest.raises(ConfigError, match="hang_timeout"):
        build_config(f)


def test_torchrun_log_dir_is_given_to_the_triage(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    os.utime(tmp_path / "old", (0, 0))
    (tmp_path / "r1" / "attempt_0" / "0").mkdir(parents=True)
    got = LocalExecutor().launcher_logs(("torchrun", "--log-dir", str(tmp_path), "t.py"),
                                        datetime.now(UTC) - timedelta(seconds=5))
    assert got == [tmp_path / "r1"]
    assert LocalExecutor().launcher_logs(("python", "t.py"), datetime.now(UTC)) == []


# ----------------------------------------------------------------------------- approval, CLI
def test_file_approver_reads_an_answer_or_times_out(tmp_path: Path) -> None:
    from diagnoser.act.approval import REQUEST_FILE, ApprovalRequest, FileApprover, respond
    from diagnoser.act.clock import FakeClock

    class AnsweringClock(FakeClock):
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            if (tmp_path / REQUEST_FILE).exists():
                respond(tmp_path, True, "alice", Action.RESTART_EXCLUDING_NODES, "n7 is flaky")

    req = ApprovalRequest("j", 2, Action.ESCALATE, Action.RESTART, "crash_loop", "3 in a row", "hardware", "xid", 0.9)
    got = FileApprover(tmp_path, timeout_s=60, clock=AnsweringClock()).request(req, lambda: False)
    from diagnoser.act.approval import os_user

    # `--by alice` is a note: the answer is recorded as the real OS user who gave it
    assert (got.approved, got.by, got.action) == (True, os_user(), Action.RESTART_EXCLUDING_NODES)
    assert "on behalf of alice" in got.note
    assert not (tmp_path / REQUEST_FILE).exists()
    clock = FakeClock()
    got = FileApprover(tmp_path, timeout_s=30, default_approve=True, clock=clock).request(req, lambda: False)
    assert got.approved and got.by == "timeout:approve" and clock.monotonic() >= 30
    got = FileApprover(tmp_path, timeout_s=30, clock=FakeClock()).request(req, lambda: True)
    assert not got.approved and got.by == "cancelled"


def test_cli_run_checkpoints_and_approve(tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from diagnoser.act.cli import register

    app = typer.Typer()
    register(app)
    runner = CliRunner()
    res = runner.invoke(app, ["run", "--json", "--run-dir", str(tmp_path / "run"), "--hang-timeout", "1m", "--",
                              sys.executable, "-c", "print('step 1'); print('step 2')"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["status"] == "succeeded" and summary["attempts"] == 1 and summary["failures"] == 0
    step_dir(tmp_path / "ck", 4)
    res = runner.invoke(app, ["checkpoints", "--json", str(tmp_path / "ck")])
    assert json.loads(res.stdout)["resume"].endswith("step_000004")
    res = runner.invoke(app, ["approve", str(tmp_path / "run")])
    assert res.exit_code == 2 and "no approval is pending" in res.output
    res = runner.invoke(app, ["run", "--mode", "nonsense", "--", "true"])
    assert res.exit_code != 0
