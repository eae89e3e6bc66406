"""Replay the trust probe set: bad inputs, hostile inputs, controller faults, bot requests.

Every probe injects its fault for real (a truncated gzip, a NUL block, a symlink out of a root, a
launcher record naming pid 1 or a reused pid, a controller killed mid-run, a filled tmpfs, the same
signed Slack request sent twice ...) and checks what a user relies on: a verdict or a one-line
error (never a traceback), no escape sequence or secret in the output, no signal to a process that
is not the job's, no job left running unsupervised. It prints tried / handled / failed per area.

    python bench/trust_probes.py [--area bad_input] [--json]

Probes that need root (tmpfs, other OS users) or slack_bolt report `skipped` where unavailable.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
ERROR = "[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered"
SECRETS = {"xapp": "SLACK_APP_TOKEN=xapp-1-A0123456789-1234567890123-abcdefabcdef0123",
           "xoxe": "refresh xoxe.xoxp-1-Mi0yLTExMjM0NTY3ODkwLTEy",
           "mysql": "mysql -u root -pS3cr3tPass -h db",
           "netrc": "machine api.wandb.ai login trainer password 0123abcdsecret",
           "quoted": 'db_password="correct horse battery staple"',
           "url": "postgres://trainer:pa/ss@w0rd@db.internal:5432/runs",
           "openai": "OPENAI_API_KEY=sk-proj-AbCdEfGhIjKlMnOpQrStUvWx123456",
           "bearer": "Authorization: Bearer abcdef0123456789abcdef"}
LEAK = ("xapp-1-A0123456789", "Mi0yLTExMjM0NTY3ODkwLTEy", "S3cr3tPass", "0123abcdsecret", "horse battery",
        "pa/ss@w0rd", "AbCdEfGhIjKlMnOpQrStUvWx123456", "abcdef0123456789abcdef")
Probe = Callable[[Path], "str | None"]  # None: handled; a string: what went wrong; "skip: ..." skipped
PROBES: dict[str, list[tuple[str, Probe]]] = {}


def probe(area: str, name: str) -> Callable[[Probe], Probe]:
    def add(fn: Probe) -> Probe:
        PROBES.setdefault(area, []).append((name, fn))
        return fn
    return add


def triage(*args: str, stdin: bytes | None = None, closed: bool = False) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "diagnoser.cli", "triage", *args, "--llm", "none"]
    if closed:
        cmd = ["sh", "-c", '"$@" <&-', "sh", *cmd]
    return subprocess.run(cmd, input=stdin, capture_output=True, env=ENV, timeout=120, check=False)


def clean(res: subprocess.CompletedProcess, want_verdict: bool = True) -> str | None:
    """A verdict (exit 0) or a one-line error; never a traceback or a terminal escape."""
    out, err = res.stdout.decode(errors="replace"), res.stderr.decode(errors="replace")
    if "Traceback" in out + err:
        return "traceback"
    if "\x1b" in out or "\x07" in out:
        return "escape sequence reached the terminal"
    if want_verdict and res.returncode != 0:
        return f"exit {res.returncode}: {err.strip()[:120]}"
    if not want_verdict and (res.returncode == 0 or err.strip().count("\n")):
        return f"expected a one-line error, got exit {res.returncode}: {err.strip()[:120]}"
    return None


def rank_log(d: Path, name: str = "rank0.log", body: bytes | None = None) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(body if body is not None else f"[rank0]: step 1\n{ERROR}\n".encode())
    return d


# --------------------------------------------------------------------------------- bad input
def _gz(damage: str) -> Probe:
    def run(tmp: Path) -> str | None:
        rank_log(tmp)
        data = gzip.compress("".join(f"[rank1]: step {i} loss {i * 0.37 % 7:.4f}\n" for i in range(20000)).encode())
        half = len(data) // 2
        data = data[:half] if damage == "truncated" else data[:half] + bytes(range(256)) * 4 + data[half + 1024:]
        (tmp / "rank1.log.gz").write_bytes(data)
        res = triage(str(tmp), "--json")
        return clean(res) or (None if "damaged compressed" in res.stdout.decode() else "no warning for the .gz")
    return run


for _damage in ("truncated", "corrupt"):
    probe("bad_input", f"{_damage} .gz beside good logs")(_gz(_damage))


def _nul(size: int) -> Probe:
    def run(tmp: Path) -> str | None:
        rank_log(tmp, body=b"\0" * size + f"[rank0]: step 1\n{ERROR}\n".encode())
        res = triage(str(tmp), "--json")
        return clean(res) or (None if "illegal_memory" in res.stdout.decode() else "the rank log was not read")
    return run


for _size in (512, 4096, 9000):
    probe("bad_input", f"NUL block of {_size} B at the head of a rank log")(_nul(_size))


@probe("bad_input", "gzip on stdin")
def _(tmp: Path) -> str | None:
    res = triage("-", "--json", stdin=gzip.compress(f"{ERROR}\n".encode()))
    return clean(res) or (None if "illegal_memory" in res.stdout.decode() else "gzip on stdin not decompressed")


@probe("bad_input", "binary on stdin")
def _(tmp: Path) -> str | None:
    return clean(triage("-", stdin=bytes(range(256)) * 64), want_verdict=False)


@probe("bad_input", "closed stdin")
def _(tmp: Path) -> str | None:
    return clean(triage("-", closed=True), want_verdict=False)


@probe("bad_input", "only a binary file")
def _(tmp: Path) -> str | None:
    (tmp / "core.log").write_bytes(os.urandom(20000))
    return clean(triage(str(tmp)), want_verdict=False)


@probe("bad_input", "missing path")
def _(tmp: Path) -> str | None:
    return clean(triage(str(tmp / "nope")), want_verdict=False)


@probe("bad_input", "empty file")
def _(tmp: Path) -> str | None:
    (tmp / "rank0.log").write_bytes(b"")
    return clean(triage(str(tmp)), want_verdict=False)


@probe("bad_input", "5,000 broken symlinks: warnings capped")
def _(tmp: Path) -> str | None:
    rank_log(tmp)
    for i in range(5000):
        os.symlink(f"/nonexistent/{i}", tmp / f"bad{i}.log")
    res = triage(str(tmp), "--json")
    return clean(res) or (None if len(res.stdout) < 20_000 else f"{len(res.stdout)} B of JSON")


@probe("bad_input", "directory symlink loop")
def _(tmp: Path) -> str | None:
    rank_log(tmp)
    os.symlink(tmp, tmp / "loop")
    return clean(triage(str(tmp)))


@probe("bad_input", "invalid UTF-8 and a 5 MB line")
def _(tmp: Path) -> str | None:
    rank_log(tmp, body=b"\xff\xfe" * 100 + b"x" * (5 << 20) + f"\n{ERROR}\n".encode())
    return clean(triage(str(tmp)))


# ----------------------------------------------------------------------------- hostile input
for _fname in ("rank0-[bold red]x[reset].log", "rank0-\x1b[31mred.log", "rank0-\x1b]0;title\x07.log"):
    def _name_probe(tmp: Path, fname: str = _fname) -> str | None:
        rank_log(tmp, fname)
        return clean(triage(str(tmp)))
    probe("hostile_input", f"file name {_fname!r}")(_name_probe)


@probe("hostile_input", "escape sequences inside log lines")
def _(tmp: Path) -> str | None:
    rank_log(tmp, body=f"[rank0]: step 1\n\x1b[2J\x1b]0;owned\x07{ERROR}\n".encode())
    return clean(triage(str(tmp)))


for _kind, _line in SECRETS.items():
    def _secret_probe(tmp: Path, line: str = _line) -> str | None:
        rank_log(tmp, body=f"[rank0]: step 1\n[rank0]: ValueError: cannot connect ({line})\n".encode())
        outs = [triage(str(tmp), "--json"), triage(str(tmp))]
        leaked = [s for r in outs for s in LEAK if s in r.stdout.decode(errors="replace")]
        return clean(outs[0]) or (f"leaked {leaked[0]}" if leaked else None)
    probe("hostile_input", f"secret in a log: {_kind}")(_secret_probe)


def _decide(nodes: tuple[str, ...], job: tuple[str, ...]) -> str:
    from datetime import UTC, datetime

    from diagnoser.act.policy import JobHistory, Policy, decide
    from diagnoser.models import Action, Category, Culprit, Diagnosis

    v = Diagnosis(category=Category.HARDWARE, subtype="x", action=Action.RESTART_EXCLUDING_NODES, confidence=0.95,
                  culprit=Culprit(nodes=list(nodes)), root_cause="r")
    return decide(JobHistory("j", nodes=job), v, Policy(), datetime.now(UTC)).action.value


@probe("hostile_input", "hostlist culprit gpu-[001-100],gpu-200")
def _(tmp: Path) -> str | None:
    got = _decide(("gpu-[001-100],gpu-200",), tuple(f"gpu-{i:03d}" for i in range(1, 101)))
    return None if got == "escalate" else f"decided {got}"


@probe("hostile_input", "culprit node outside the job")
def _(tmp: Path) -> str | None:
    got = _decide(("gpu-099",), ("n1", "n2"))
    return None if got == "escalate" else f"decided {got}"


@probe("hostile_input", "launcher record naming pid 1")
def _(tmp: Path) -> str | None:
    from diagnoser.act.executors import LocalExecutor, LocalHandle

    if LocalExecutor().attach({"pid": 1, "create_time": 0.0, "exit_file": str(tmp / "x")}) is not None:
        return "attached to pid 1"
    h = LocalHandle(1, 0.0, tmp / "x", sid=1)
    return None if h.signal(0) == 0 and "refused" in h.refused else "pid 1 was signalled"


@probe("hostile_input", "launcher record naming a reused pid")
def _(tmp: Path) -> str | None:
    import psutil

    from diagnoser.act.executors import LocalExecutor

    other = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        ct = psutil.Process(other.pid).create_time() - 5
        h = LocalExecutor().attach({"pid": other.pid, "create_time": ct, "sid": other.pid, "exit_file": str(tmp / "x")})
        LocalExecutor().stop(h, 0.2)
        time.sleep(0.2)
        return None if other.poll() is None else "an unrelated process group was killed"
    finally:
        other.kill()
        other.wait()


# ------------------------------------------------------------------------- controller faults
JOB = ("import os,sys,time\nopen(sys.argv[2],'w').write(str(os.getpid()))\n"
       "while os.path.exists(sys.argv[1]): print('step 1 loss 1.0', flush=True); time.sleep(0.2)\n")


def _controller(run_dir: Path, flag: Path, pidfile: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "diagnoser.act.cli", "run", "--run-dir", str(run_dir), "--json",
                             "--kill-grace", "2s", "--", sys.executable, "-c", JOB, str(flag), str(pidfile)],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait(cond: Callable[[], bool], limit: float = 20.0) -> bool:
    deadline = time.time() + limit
    while time.time() < deadline and not cond():
        time.sleep(0.05)
    return cond()


def _killed_controller(tmp: Path, damage: Callable[[Path], None], finish: bool = True) -> str | None:
    flag, pidfile, run = tmp / "flag", tmp / "job.pid", tmp / "run"
    flag.touch()
    first = _controller(run, flag, pidfile)
    try:
        if not _wait(lambda: pidfile.exists() and "attempt_started" in (run / "audit.jsonl").read_text()
                     if (run / "audit.jsonl").exists() else False):
            return "the first controller did not start the job"
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        pid = int(pidfile.read_text())
        damage(run)
        second = _controller(run, flag if finish else tmp / "absent", tmp / "job2.pid")
        time.sleep(1.0)
        flag.unlink(missing_ok=True) if finish else None
        out, err = second.communicate(timeout=60)
        if "Traceback" in err:
            return "traceback"
        if _alive(pid):
            return "the job was left running unsupervised"
        return None if json.loads(out or "{}").get("status") == "succeeded" else f"run ended: {err.strip()[-150:]}"
    finally:
        flag.unlink(missing_ok=True)


for _label, _fn in (("corrupt launcher.json", lambda r: (r / "attempt-001/launcher.json").write_text("{")),
                    ("missing launcher.json", lambda r: (r / "attempt-001/launcher.json").unlink()),
                    ("launcher.json naming pid 1", lambda r: (r / "attempt-001/launcher.json").write_text(
                        json.dumps({"handle": {"pid": 1, "create_time": 0, "exit_file": "x"}})))):
    probe("controller_faults", _label)(lambda tmp, fn=_fn: _killed_controller(tmp, fn))


def _bogus_audit(run: Path) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    with open(run / "audit.jsonl", "a") as fh:
        fh.write(json.dumps({"schema": "audit/v1", "time": now, "type": "run_finished", "status": "succeeded"}) + "\n")
        fh.write("{garbage\n")


probe("controller_faults", "bogus audit lines")(lambda tmp: _killed_controller(tmp, _bogus_audit, finish=False))


@probe("controller_faults", "audit path is a directory")
def _(tmp: Path) -> str | None:
    (tmp / "run" / "audit.jsonl").mkdir(parents=True)
    (tmp / "flag").touch()
    p = _controller(tmp / "run", tmp / "flag", tmp / "job.pid")
    out, err = p.communicate(timeout=60)
    (tmp / "flag").unlink()
    if "Traceback" in err or p.returncode == 0 or err.strip().count("\n"):
        return f"not one line: {err.strip()[:150]}"
    return None if not (tmp / "job.pid").exists() else "a job was started"


@probe("controller_faults", "full disk under the run directory (tmpfs)")
def _(tmp: Path) -> str | None:
    mnt = tmp / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                                           capture_output=True, check=False).returncode:
        return "skip: cannot mount a tmpfs"
    flag, pidfile = tmp / "flag", tmp / "job.pid"
    flag.touch()
    try:
        p = _controller(mnt / "run", flag, pidfile)
        if not _wait(pidfile.exists):
            return "the job did not start"
        with open(mnt / "filler", "wb") as fh:
            try:
                while True:
                    fh.write(b"\0" * 65536)
                    fh.flush()
            except OSError:
                pass
        out, err = p.communicate(timeout=60)
        if "Traceback" in err:
            return "traceback"
        return None if _wait(lambda: not _alive(int(pidfile.read_text())), 10) else "the job kept running"
    finally:
        flag.unlink(missing_ok=True)
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@probe("controller_faults", "double-forked daemon outlives its attempt")
def _(tmp: Path) -> str | None:
    from diagnoser.act.executors import AttemptSpec, LocalExecutor

    pidf = tmp / "daemon.pid"
    script = (f"import os,time\nif os.fork()==0:\n os.setsid()\n if os.fork()==0:\n  open({str(pidf)!r},'w')"
              ".write(str(os.getpid())); time.sleep(300)\n os._exit(0)\nos.wait(); time.sleep(0.5)\n")
    h = LocalExecutor().start(AttemptSpec(1, (sys.executable, "-c", script), tmp / "console.log"))
    _wait(h.ended, 30)
    pid = int(pidf.read_text())
    if _wait(lambda: not _alive(pid), 10):
        return None
    os.kill(pid, signal.SIGKILL)
    return "the daemon survived the attempt"


@probe("controller_faults", "controller restarted during a backoff")
def _(tmp: Path) -> str | None:
    from datetime import timedelta

    from test_act_controller import Script, events, make, steps, verdict

    from diagnoser.act.events import ActionStarted, AttemptStarted
    from diagnoser.models import Action, Category

    v = verdict(Category.INFRA, "storage_stale_handle", Action.RETRY_AFTER_BACKOFF)
    c, _ = make(tmp, [Script(steps(1, 2), exit_at=3, code=1)], [v])

    class Crash(BaseException):
        pass

    def crash(status) -> None:
        if status.phase == "backoff":
            raise Crash

    c.listener = crash
    with contextlib.suppress(Crash):
        c.run()
    (started,) = events(c, ActionStarted)
    c2, ex2 = make(tmp, [Script(steps(1, 2), exit_at=3)], [])
    c2.clock = ex2.clock = type(c.clock)(started.time + timedelta(seconds=1.0))  # back one second later
    c2.run()
    waited = (events(c2, AttemptStarted)[1].time - started.time).total_seconds()
    return None if waited >= 3.9 else f"only {waited:.1f} s of a 4 s backoff were waited"


DRAINER = ("import sys,time\nfrom pathlib import Path\nfrom diagnoser.slurm.commands import SlurmCLI\n"
           "from diagnoser.slurm.drain import DrainGuard, drain_nodes\n"
           "while not Path(sys.argv[2]).exists(): time.sleep(0.001)\n"
           "r = drain_nodes(SlurmCLI(), [sys.argv[1]], 'diagnoser: x race', DrainGuard(2, 600), Path(sys.argv[3]))\n"
           "print(r.ok)\n")


@probe("controller_faults", "four concurrent drains against a cap of 2 (real Slurm)")
def _(tmp: Path) -> str | None:
    try:
        from slurm_cluster import SlurmCluster, missing_binaries
    except ImportError:
        return "skip: tests/slurm_cluster.py not found"
    if missing_binaries():
        return "skip: Slurm not installed"
    from diagnoser.slurm.commands import SlurmCLI

    with SlurmCluster(tmp / "cluster") as cluster:
        env = {**ENV, **cluster.env}
        go = tmp / "go"
        procs = [subprocess.Popen([sys.executable, "-c", DRAINER, n, str(go), str(tmp / "ops.jsonl")], env=env,
                                  stdout=subprocess.PIPE) for n in cluster.node_names]
        time.sleep(2.0)
        go.touch()
        for p in procs:
            p.communicate(timeout=120)
        drained = [n.name for n in SlurmCLI(env=cluster.env).show_nodes() if n.drained]
    return None if len(drained) <= 2 else f"{len(drained)} nodes drained against a cap of 2"


# ------------------------------------------------------------------------------ bot requests
def _bot(tmp: Path, **overrides: object):
    try:
        from bot_support import FakeSlack, start_bot
    except ImportError:
        return None
    fake = FakeSlack()
    server, url = start_bot(tmp, fake, **overrides)
    return fake, server, url


def _bot_probe(text_of: Callable[[Path], str], setup: Callable[[Path], dict], expect: str) -> Probe:
    def run(tmp: Path) -> str | None:
        try:
            import slack_bolt  # noqa: F401
        except ImportError:
            return "skip: slack_bolt not installed"
        from bot_support import SECRET, command_body, slack_post

        started = _bot(tmp, **setup(tmp))
        fake, server, url = started
        try:
            status, body = slack_post(url, command_body(text_of(tmp)), SECRET)
            time.sleep(0.3)
            if "OUTSIDE-MARKER" in fake.raw():
                return "content from outside the roots was posted"
            return None if expect in body else f"answered {status}: {body[:120]}"
        finally:
            server.stop()
            fake.close()
    return run


def _outside(tmp: Path) -> Path:
    return rank_log(tmp / "elsewhere", body=b"[rank0]: torch.OutOfMemoryError: CUDA out of memory OUTSIDE-MARKER\n")


def _symlinked_run(tmp: Path) -> dict:
    (tmp / "runs").mkdir()
    os.symlink(_outside(tmp), tmp / "runs" / "evil")
    return {"runs_root": str(tmp / "runs")}


def _roots(tmp: Path) -> dict:
    _outside(tmp)
    rank_log(tmp / "logs")
    return {"allowed_roots": [str(tmp / "logs")]}


probe("bot_requests", "job id that is a symlink out of runs_root")(
    _bot_probe(lambda t: "evil", _symlinked_run, "outside the runs root"))
probe("bot_requests", "absolute path outside the roots")(
    _bot_probe(lambda t: "/etc/passwd", _roots, "not below an allowed log root"))
probe("bot_requests", "path climbing out with ..")(
    _bot_probe(lambda t: str(t / "logs" / ".." / "elsewhere"), _roots, "not below an allowed log root"))


@probe("bot_requests", "walker symlink out of an allowed root")
def _(tmp: Path) -> str | None:
    from diagnoser.triage import triage as run_triage

    rank_log(tmp / "logs")
    os.symlink(_outside(tmp), tmp / "logs" / "link")
    d = run_triage([str(tmp / "logs")], within=((tmp / "logs").resolve(),))
    return "followed the symlink" if "OUTSIDE-MARKER" in d.model_dump_json() else None


def _signed(tmp: Path, variant: str) -> str | None:
    try:
        import slack_bolt  # noqa: F401
    except ImportError:
        return "skip: slack_bolt not installed"
    from bot_support import SECRET, command_body, slack_post

    fake, server, url = _bot(tmp, **_roots(tmp))
    try:
        body, stamp = command_body(str(tmp / "logs")), int(time.time())
        if variant == "replay":
            slack_post(url, body, SECRET, ts=stamp)
            status = slack_post(url, body, SECRET, ts=stamp)[0]
        elif variant == "stale":
            status = slack_post(url, body, SECRET, ts=stamp - 600)[0]
        elif variant == "unsigned":
            status = slack_post(url, body, None)[0]
        else:
            status = slack_post(url, body, "wrong-secret")[0]
        return None if status == 401 else f"accepted ({status})"
    finally:
        server.stop()
        fake.close()


for _variant in ("replay", "stale", "unsigned", "wrong secret"):
    probe("bot_requests", f"{_variant} signed request")(lambda tmp, v=_variant: _signed(tmp, v))


# ------------------------------------------------------------------------------------ runner
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--area", choices=sorted(PROBES), action="append")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict[str, dict] = {}
    for area in args.area or list(PROBES):
        row = results[area] = {"tried": 0, "handled": 0, "failed": 0, "skipped": 0, "failures": []}
        for name, fn in PROBES[area]:
            with tempfile.TemporaryDirectory(prefix="probe-") as d:
                try:
                    why = fn(Path(d))
                except Exception as exc:  # noqa: BLE001 - a probe that crashes is a failure, reported
                    why = f"{type(exc).__name__}: {exc}"
            if why is not None and why.startswith("skip:"):
                row["skipped"] += 1
                continue
            row["tried"] += 1
            row["handled" if why is None else "failed"] += 1
            if why is not None:
                row["failures"].append({"probe": name, "why": why})
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        print(f"{'area':20} {'tried':>6} {'handled':>8} {'failed':>7} {'skipped':>8}")
        for area, r in results.items():
            print(f"{area:20} {r['tried']:>6} {r['handled']:>8} {r['failed']:>7} {r['skipped']:>8}")
            for f in r["failures"]:
                print(f"    failed: {f['probe']}: {f['why']}")
        total = {k: sum(r[k] for r in results.values()) for k in ("tried", "handled", "failed", "skipped")}
        print(f"{'total':20} {total['tried']:>6} {total['handled']:>8} {total['failed']:>7} {total['skipped']:>8}")
    return 1 if any(r["failed"] for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
