"""A real Slurm cluster on loopback for tests and benches: munged + slurmctld + one slurmd per node.

Expects Debian's `slurm-wlm` and `munge` (`apt-get install -y slurm-wlm munge`); installs nothing.
Everything lives under one directory (config, state, spool, logs, munge socket and key); no systemd,
no system paths. Nodes `n1..nN` are logical nodes on this host (NodeHostname=localhost,
NodeAddr=127.0.0.1, one port each); ports are picked free at start, so several clusters (other
engineers, parallel tests) can coexist. Every wait is bounded; `stop()` kills what is left.

    with SlurmCluster(tmp_path) as c:          # or the `slurm_cluster` fixture factory below
        job = c.sbatch("--wrap", "hostname")   # clients need c.env (SLURM_CONF)

By hand: `python tests/slurm_cluster.py start DIR` / `stop DIR` (see bench/slurm_cluster.sh).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo")
CRED_EXPIRE_S = 10
STATE_FILE = "cluster.json"


class ClusterError(RuntimeError):
    """The cluster could not start (the message quotes the daemon's own error)."""


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]


def _which(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_port_range(n: int) -> int:
    """A base port with n consecutive free ports (random start, a few tries)."""
    for _ in range(50):
        base = _free_port()
        if base + n < 65000 and all(_port_free(base + i) for i in range(n)):
            return base
    raise ClusterError(f"no {n} consecutive free ports on 127.0.0.1")


def _tail(path: Path, lines: int = 8) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class SlurmCluster:
    """One loopback cluster rooted at `root` (created if needed)."""

    def __init__(self, root: Path, nodes: int = 4, cpus: int = 2, epilog_slurmctld: str | None = None) -> None:
        self.root = Path(root).resolve()
        self.node_names = [f"n{i}" for i in range(1, nodes + 1)]
        self.cpus = cpus
        self.conf = self.root / "etc" / "slurm.conf"
        self.jobcomp = self.root / "log" / "jobcomp.txt"
        self.kernel_dir = self.root / "kernel"  # <kernel_dir>/<node>/dmesg.log: injected kernel logs
        self.epilog_slurmctld = epilog_slurmctld  # a script slurmctld runs when a job ends (read at start)
        self.procs: dict[str, subprocess.Popen] = {}

    # ------------------------------------------------------------------------------ config
    @property
    def env(self) -> dict[str, str]:
        """The environment for Slurm clients (sbatch, scontrol ...) of this cluster."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def write_config(self) -> None:
        for d in ("etc", "state", "spool", "log", "munge", "run", "jobs"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        os.chmod(self.root / "munge", 0o755)  # munged refuses a socket dir others can write to
        for node in self.node_names:
            (self.root / "spool" / node).mkdir(exist_ok=True)
            (self.kernel_dir / node).mkdir(parents=True, exist_ok=True)
        key = self.root / "etc" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o600)
        os.chmod(self.root / "etc", 0o755)
        ctld_port = _free_port()
        base = _free_port_range(len(self.node_names))
        last = base + len(self.node_names) - 1
        names = f"n[1-{len(self.node_names)}]" if len(self.node_names) > 1 else "n1"
        r = self.root
        self.conf.write_text(f"""\
ClusterName=diagtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={r}/munge/munge.socket.2,cred_expire={CRED_EXPIRE_S}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
JobRequeue=1
ReturnToService=1
SchedulerParameters=sched_interval=2
SlurmdTimeout=30
SlurmctldTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
JobCompType=jobcomp/filetxt
JobCompLoc={self.jobcomp}
AccountingStorageType=accounting_storage/none
{f"EpilogSlurmctld={self.epilog_slurmctld}" if self.epilog_slurmctld else ""}
JobAcctGatherType=jobacct_gather/none
NodeName={names} NodeHostname=localhost NodeAddr=127.0.0.1 Port={base}-{last} CPUs={self.cpus} \
RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={names} Default=YES MaxTime=INFINITE State=UP
""")

    # ---------------------------------------------------------------------------- lifecycle
    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.stderr", "ab")  # noqa: SIM115 - owned by the child
        self.procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                            env=self.env, start_new_session=True)
        log.close()

    def _check_alive(self, name: str, logfile: Path) -> None:
        p = self.procs[name]
        if p.poll() is not None:
            raise ClusterError(f"{name} exited with status {p.returncode}: "
                               f"{_tail(self.root / 'log' / f'{name}.stderr', 4)} {_tail(logfile, 4)}")

    def start(self, timeout_s: float = 60.0) -> SlurmCluster:
        """Write the config, start the daemons, wait (bounded) until every node is idle."""
        missing = missing_binaries()
        if missing:
            raise ClusterError(f"not installed: {', '.join(missing)} (apt-get install -y slurm-wlm munge)")
        self.write_config()
        r = self.root
        self._spawn("munged", [_which("munged"), "-F", "--force", f"--socket={r}/munge/munge.socket.2",
                               f"--key-file={r}/etc/munge.key", f"--pid-file={r}/run/munged.pid",
                               f"--log-file={r}/log/munged.log", f"--seed-file={r}/run/munged.seed"])
        deadline = time.monotonic() + timeout_s
        while not (r / "munge" / "munge.socket.2").exists():
            self._check_alive("munged", r / "log" / "munged.log")
            if time.monotonic() > deadline:
                raise ClusterError("munged did not create its socket in time")
            time.sleep(0.2)
        self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        for node in self.node_names:
            self._spawn(f"slurmd-{node}", [_which("slurmd"), "-D", "-f", str(self.conf), "-N", node])
        self.save_state()
        try:
            self.wait_idle(max(1.0, deadline - time.monotonic()))
            self.warm_up(max(1.0, deadline - time.monotonic()))
        except ClusterError:
            self.stop()
            raise
        return self

    def warm_up(self, timeout_s: float) -> None:
        """One step on every node before the tests: a node that just registered can still fail
        (or lose) the first job launched on it, which a test would take for a job failure."""
        nodes = ",".join(self.node_names)
        try:
            proc = subprocess.run(["srun", "-N", str(len(self.node_names)), "-w", nodes, "-t", "1", "-J",
                                   "warm-up", "true"], capture_output=True, text=True, env=self.env,
                                  timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise ClusterError(f"warm-up step on {nodes} did not finish within {timeout_s:.0f} s") from None
        if proc.returncode != 0:
            raise ClusterError(f"warm-up step on {nodes} failed: {proc.stderr.strip()[-500:]}")
        self.wait_idle(timeout_s)

    def wait_idle(self, timeout_s: float = 60.0, nodes: list[str] | None = None) -> None:
        """Until the nodes report idle (bounded; raises with the daemons' last log lines)."""
        want = set(nodes or self.node_names)
        deadline = time.monotonic() + timeout_s
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            for name in ("slurmctld", *(f"slurmd-{n}" for n in self.node_names)):
                if name in self.procs:
                    self._check_alive(name, self.root / "log" / f"{name}.log")
            states = self.node_states()
            # "idle*" is idle but not responding: slurmd has not (re-)registered yet
            if want <= {n for n, s in states.items() if s.lower() == "idle"}:
                return
            time.sleep(0.25)
        raise ClusterError(f"nodes not idle after {timeout_s:.0f} s: {states}; slurmctld: "
                           f"{_tail(self.root / 'log' / 'slurmctld.log', 6)}")

    def node_states(self) -> dict[str, str]:
        try:
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True,
                                 env=self.env, timeout=10, check=False).stdout
        except subprocess.TimeoutExpired:
            return {}
        return dict(line.split(None, 1) for line in out.splitlines() if len(line.split(None, 1)) == 2)

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM the daemons (and their job processes), wait bounded, SIGKILL what is left."""
        procs = self.procs or self._load_procs()
        for name, p in procs.items():
            if name != "munged":
                _signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for name, p in procs.items():
            if name == "munged":
                continue
            while _running(p) and time.monotonic() < deadline:
                time.sleep(0.2)
        for p in procs.values():
            _signal_group(p, signal.SIGKILL if _running(p) else signal.SIGTERM)
        for p in procs.values():
            end = time.monotonic() + 5
            while _running(p) and time.monotonic() < end:
                time.sleep(0.2)
            _signal_group(p, signal.SIGKILL)
        self._kill_job_leftovers()
        self.procs = {}
        (self.root / STATE_FILE).unlink(missing_ok=True)

    def _kill_job_leftovers(self) -> None:
        """slurmstepd and job processes live in sessions of their own: find them by our config path."""
        needle = str(self.root).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                environ = (entry / "environ").read_bytes() if b"slurmstepd" in cmdline else b""
            except OSError:
                continue
            if needle in cmdline or needle in environ:
                with contextlib.suppress(OSError):
                    os.kill(int(entry.name), signal.SIGKILL)

    def save_state(self) -> None:
        data = {name: p.pid for name, p in self.procs.items()}
        (self.root / STATE_FILE).write_text(json.dumps({"pids": data, "conf": str(self.conf)}))

    def _load_procs(self) -> dict[str, _Pid]:
        try:
            data = json.loads((self.root / STATE_FILE).read_text())
        except (OSError, ValueError):
            return {}
        return {name: _Pid(pid) for name, pid in data.get("pids", {}).items()}

    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------------------ helpers
    def run(self, *argv: str, timeout_s: float = 20.0, check: bool = True) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster."""
        proc = subprocess.run(list(argv), capture_output=True, text=True, env=self.env, timeout=timeout_s,
                              check=False)
        if check and proc.returncode != 0:
            raise ClusterError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def sbatch(self, *args: str) -> str:
        return self.run("sbatch", "--parsable", *args).stdout.strip().split(";")[0]

    def inject_kernel_line(self, node: str, line: str) -> Path:
        """Append a line to the node's kernel log (`<kernel_dir>/<node>/dmesg.log`)."""
        path = self.kernel_dir / node / "dmesg.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line.rstrip("\n") + "\n")
        return path

    def resume_all(self) -> None:
        """Undo drains/downs left by a test, then wait until idle."""
        for node, state in self.node_states().items():
            if state.rstrip("*").lower() != "idle":
                self.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
        self.wait_idle(30)

    def cancel_all(self) -> None:
        self.run("scancel", "--full", "-u", "root", check=False)


class _Pid:
    """A daemon started by an earlier process (`start` from the command line, `stop` later)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def poll(self) -> int | None:
        return None if _pid_alive(self.pid) else 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _running(p: subprocess.Popen | _Pid) -> bool:
    return p.poll() is None


def _signal_group(p: subprocess.Popen | _Pid, sig: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(p.pid, sig)


# --------------------------------------------------------------------------------- pytest glue
def slurm_cluster_fixture(scope: str = "module", epilog_body: str | None = None):
    """A pytest fixture factory: `cluster = slurm_cluster_fixture()` in a test module yields a
    started `SlurmCluster` (skips when Slurm is not installed, unless DIAGNOSER_REQUIRE_SLURM=1).
    `epilog_body`: a shell script slurmctld runs when a job ends (`EpilogSlurmctld`); `{root}` and
    `{python}` in it are replaced by the cluster's directory and this interpreter."""
    import pytest

    @pytest.fixture(scope=scope)
    def _cluster(tmp_path_factory) -> Iterator[SlurmCluster]:
        missing = missing_binaries()
        if missing:
            if os.environ.get("DIAGNOSER_REQUIRE_SLURM") == "1":
                pytest.fail(f"Slurm not installed: {missing} (apt-get install -y slurm-wlm munge)")
            pytest.skip(f"Slurm not installed: {missing} (apt-get install -y slurm-wlm munge)")
        root = tmp_path_factory.mktemp("slurm")
        epilog = None
        if epilog_body is not None:
            epilog = root / "etc" / "epilog.sh"
            epilog.parent.mkdir(parents=True, exist_ok=True)
            epilog.write_text(epilog_body.replace("{root}", str(root)).replace("{python}", sys.executable))
            epilog.chmod(0o755)
        c = SlurmCluster(root, epilog_slurmctld=str(epilog) if epilog else None)
        c.start()
        try:
            yield c
        finally:
            c.stop()

    return _cluster


def main(argv: list[str]) -> int:
    """`slurm_cluster.py start|stop|status DIR [--nodes N]`."""
    if len(argv) < 2 or argv[0] not in ("start", "stop", "status"):
        print("usage: slurm_cluster.py start|stop|status DIR [--nodes N]", file=sys.stderr)
        return 2
    nodes = int(argv[argv.index("--nodes") + 1]) if "--nodes" in argv else 4
    c = SlurmCluster(Path(argv[1]), nodes=nodes)
    if argv[0] == "start":
        t0 = time.monotonic()
        try:
            c.start()
        except ClusterError as exc:
            print(f"slurm_cluster: {exc}", file=sys.stderr)
            return 1
        print(f"started in {time.monotonic() - t0:.1f} s; export SLURM_CONF={c.conf}")
        return 0
    if argv[0] == "status":
        print(json.dumps(c.node_states()))
        return 0
    c.stop()
    print("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
