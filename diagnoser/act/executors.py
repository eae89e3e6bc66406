"""Where attempts run: one small interface, a local implementation (process group, torchrun).

`Executor` starts an attempt and stops it, plans a restart on fewer resources, and drains nodes;
`Handle` is one running attempt (its processes, its ranks, how it ended). Slurm and Kubernetes
executors implement the same two classes. A restart is `stop` (if still running) then `start`
with the same or a re-planned `AttemptSpec`.

Local: the command runs under `wrap.py` (records the exit status) as the leader of a new session
and process group; its output goes to a file (`O_APPEND`, never a pipe, so the job survives a
controller that dies and can be re-attached). torchrun starts its workers in sessions of their
own, so the handle also tracks every descendant (pid + start time, to be safe from pid reuse) and
signals them one by one: no process of an attempt outlives `stop`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import psutil

from diagnoser.act import launchers as ln
from diagnoser.act.clock import Clock, SystemClock
from diagnoser.act.launchers import flag_value
from diagnoser.act.procid import Identity, descendant_ok, find_wrapper, leader_mismatch, signal_group

__all__ = ["AttemptSpec", "Executor", "Handle", "LocalExecutor", "LocalHandle", "Placement", "flag_value"]
WRAPPER = Path(__file__).with_name("wrap.py")


@dataclass(frozen=True)
class AttemptSpec:
    """What to run for one attempt."""

    attempt: int
    command: tuple[str, ...]
    log_path: Path  # the attempt's combined stdout+stderr
    env: dict[str, str] = field(default_factory=dict)  # added to the controller's environment
    cwd: Path | None = None


@dataclass(frozen=True)
class Placement:
    """A restart on fewer resources: possible or not (and why), and the command/env to use."""

    ok: bool
    detail: str
    command: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    excluded_nodes: tuple[str, ...] = ()


class Handle(ABC):
    """One running attempt."""

    pid: int

    @abstractmethod
    def ended(self) -> bool:
        """Whether the launched command has exited (does not wait)."""

    @property
    @abstractmethod
    def exit_code(self) -> int | None:
        """Exit status once ended (negative: killed by that signal); None while running or unknown."""

    @abstractmethod
    def rank_pids(self) -> dict[int, int]:
        """Global rank -> pid of the live rank processes."""

    def main_pid(self) -> int | None:
        """The launched command's own process (e.g. torchrun, or a single-process job), if known."""
        return None

    @abstractmethod
    def signal(self, sig: int) -> int:
        """Send `sig` to every live process of the attempt; how many got it."""

    @abstractmethod
    def alive(self) -> int:
        """How many processes of the attempt are still alive (the launcher and its descendants)."""

    @abstractmethod
    def record(self) -> dict:
        """What a restarted controller needs to re-attach (JSON-serialisable)."""

    def known_pids(self) -> set[int]:
        """Every process of the attempt seen so far, alive or not (for matching kernel OOM kills)."""
        return set()

    def received_signals(self) -> list[tuple[str, float]]:
        """Signals the attempt's process group received from anyone, with their wall-clock time."""
        return []


class Executor(ABC):
    """Starts, stops and re-places attempts of one job."""

    name: str = "executor"
    can_drain: bool = False  # whether `drain` can work at all (checked before deciding to drain)
    local_evidence: bool = False  # attempts run on this host: exit codes, OOM counters, signals are visible

    @abstractmethod
    def nodes(self) -> list[str]:
        """The nodes the job runs on."""

    def job_nodes(self) -> list[str]:
        """Every name under which a node of this job may appear in its logs (culprits are kept only
        when they are one of these)."""
        return self.nodes()

    @abstractmethod
    def start(self, spec: AttemptSpec) -> Handle:
        """Launch an attempt."""

    @abstractmethod
    def attach(self, record: dict) -> Handle | None:
        """Re-attach to an attempt started by an earlier controller (None if it cannot)."""

    def rediscover(self, attempt_dir: Path) -> tuple[Handle | None, dict]:
        """Find a live attempt whose `launcher.json` is missing or damaged: (handle, its record)."""
        return None, {}

    def stop(self, handle: Handle, grace_s: float, clock: Clock | None = None) -> int | None:
        """SIGTERM every process, SIGKILL what is left after `grace_s`; return the exit code."""
        clock = clock or SystemClock()
        handle.signal(signal.SIGTERM)
        deadline = clock.monotonic() + grace_s
        while handle.alive() and clock.monotonic() < deadline:
            clock.sleep(0.1)
        if handle.alive():
            handle.signal(signal.SIGKILL)
            deadline = clock.monotonic() + 5.0
            while handle.alive() and clock.monotonic() < deadline:
                clock.sleep(0.05)
        return handle.exit_code

    def restart(self, handle: Handle | None, spec: AttemptSpec, grace_s: float, clock: Clock | None = None) -> Handle:
        """Stop the attempt if it still runs, then start the next one."""
        if handle is not None and handle.alive():
            self.stop(handle, grace_s, clock)
        return self.start(spec)

    def restart_excluding_nodes(self, handle: Handle | None, spec: AttemptSpec, nodes: tuple[str, ...],
                                ranks: tuple[int, ...], grace_s: float,
                                clock: Clock | None = None) -> tuple[Handle | None, Placement]:
        """Restart without the culprits; (None, placement) when the executor cannot (placement says why)."""
        placement = self.exclude(spec.command, spec.env, nodes, ranks)
        if not placement.ok:
            return None, placement
        new = AttemptSpec(spec.attempt, placement.command, spec.log_path, placement.env, spec.cwd)
        return self.restart(handle, new, grace_s, clock), placement

    @abstractmethod
    def exclude(self, command: tuple[str, ...], env: dict[str, str], nodes: tuple[str, ...],
                ranks: tuple[int, ...]) -> Placement:
        """Plan a restart without the culprit nodes (or, locally, the culprit ranks' devices)."""

    @abstractmethod
    def drain(self, nodes: tuple[str, ...], reason: str) -> tuple[bool, str]:
        """Take nodes out of the scheduler's service with a reason: (done, detail)."""

    def prepare(self, command: tuple[str, ...]) -> tuple[tuple[str, ...], str]:
        """Adjust the user's command before the first attempt (e.g. per-rank output); (command, note)."""
        return command, ""

    def rank_offset(self, command: tuple[str, ...]) -> int:
        """Added to launcher-local rank prefixes to get global ranks."""
        return 0

    def collect_kernel(self, since: datetime, out_dir: Path) -> str:
        """Copy the nodes' kernel logs since `since` under `out_dir` for the triage; a note."""
        return ""

    def launcher_logs(self, command: tuple[str, ...], since: datetime) -> list[Path]:
        """Log files the launcher itself wrote for this attempt (e.g. torchrun --log-dir)."""
        return []


class LocalHandle(Handle):
    """An attempt on this host: the wrapper process, its process group and all descendants."""

    def __init__(self, pid: int, create_time: float, exit_file: Path, popen: subprocess.Popen | None = None,
                 sid: int | None = None) -> None:
        self.pid = pid
        self.pgid = pid
        self.create_time = create_time
        self.identity = Identity(pid, create_time, sid)
        self.refused = ""  # why the last signal did not go to the process group
        self.exit_file = exit_file
        self._popen = popen
        self._known: dict[int, float] = {}  # descendant pid -> create time
        self._ranks: dict[int, int | None] = {}  # pid -> RANK from its environment
        self._code: int | None = None
        self._ended = False

    def _proc(self, pid: int, create_time: float) -> psutil.Process | None:
        """The live process recorded as (pid, create_time): the leader only if its whole identity
        (create time, session) still matches; a descendant only if created after the leader."""
        if pid == self.pid:
            if leader_mismatch(self.identity) is not None:
                return None
            try:
                return psutil.Process(pid)
            except psutil.Error:
                return None
        return descendant_ok(pid, create_time, self.identity)

    def refresh(self) -> None:
        """Learn new descendants (workers may live in their own sessions)."""
        root = self._proc(self.pid, self.create_time)
        if root is None:
            return
        try:
            for child in root.children(recursive=True):
                try:
                    self._known.setdefault(child.pid, child.create_time())
                except psutil.Error:
                    continue
        except psutil.Error:
            return

    def ended(self) -> bool:
        if self._ended:
            return True
        if self._popen is not None:
            rc = self._popen.poll()
            if rc is None:
                return False
            self._code = rc
        elif self._proc(self.pid, self.create_time) is not None:
            return False
        else:
            self._code = read_exit_file(self.exit_file)
        self._ended = True
        return True

    @property
    def exit_code(self) -> int | None:
        if self._ended and self._code is None:
            self._code = read_exit_file(self.exit_file)
        return self._code

    def rank_pids(self) -> dict[int, int]:
        self.refresh()
        out: dict[int, int] = {}
        live = {pid: p for pid, ct in self._known.items() if (p := self._proc(pid, ct)) is not None}
        for pid, p in live.items():
            if pid not in self._ranks:
                try:
                    env = p.environ()
                    self._ranks[pid] = int(env["RANK"]) if env.get("RANK", "").isdigit() else None
                except (psutil.Error, OSError):
                    self._ranks[pid] = None
            rank = self._ranks[pid]
            if rank is None:
                continue
            try:
                parent = p.ppid()
            except psutil.Error:
                continue
            if parent in live and self._ranks.get(parent) == rank:
                continue  # a dataloader worker of that rank, not the rank itself
            out[rank] = pid
        return out

    def main_pid(self) -> int | None:
        root = self._proc(self.pid, self.create_time)
        try:
            children = root.children() if root is not None else []
        except psutil.Error:
            return None
        return children[0].pid if children else None

    def signal(self, sig: int) -> int:
        self.refresh()
        sent = 0
        ok, self.refused = signal_group(self.identity, sig)  # never a group whose leader is not ours
        sent += ok
        for pid, ct in list(self._known.items()):
            p = self._proc(pid, ct)
            if p is None:
                continue
            try:
                p.send_signal(sig)
                sent += 1
            except psutil.Error:
                continue
        return sent

    def alive(self) -> int:
        self.refresh()
        n = 0 if self.ended() else 1
        return n + sum(1 for pid, ct in self._known.items() if self._proc(pid, ct) is not None)

    def record(self) -> dict:
        return {"pid": self.pid, "create_time": self.create_time, "sid": self.identity.sid,
                "exit_file": str(self.exit_file), "descendants": {str(k): v for k, v in self._known.items()}}

    def known_pids(self) -> set[int]:
        return {self.pid, *self._known}

    def received_signals(self) -> list[tuple[str, float]]:
        try:
            data = json.loads(self.exit_file.read_text())
            return [(str(s["signal"]), float(s["time"])) for s in data.get("signals") or []]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return []


def read_exit_file(path: Path) -> int | None:
    try:
        return int(json.loads(path.read_text())["returncode"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class LocalExecutor(Executor):
    """This host. `tee`: ask the launcher to prefix each line with its rank (`launchers.prepare`)."""

    name = "local"
    local_evidence = True

    def __init__(self, tee: bool = True, host: str | None = None) -> None:
        self.tee = tee
        self.host = host or socket.gethostname()

    def nodes(self) -> list[str]:
        return [self.host]

    def job_nodes(self) -> list[str]:
        return list(dict.fromkeys([self.host, self.host.split(".")[0], "localhost", "127.0.0.1"]))

    def prepare(self, command: tuple[str, ...]) -> tuple[tuple[str, ...], str]:
        """Per-rank line prefixes for the recognised launcher (see `launchers`), unless `tee` is off."""
        if not self.tee:
            return command, ""
        return ln.prepare(command)

    def rank_offset(self, command: tuple[str, ...]) -> int:
        return ln.rank_offset(command)

    def start(self, spec: AttemptSpec) -> Handle:
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        exit_file = spec.log_path.with_name("exit.json")
        exit_file.unlink(missing_ok=True)
        env = {**os.environ, **spec.env}
        with open(spec.log_path, "ab") as log:
            popen = subprocess.Popen([sys.executable, str(WRAPPER), str(exit_file), "--", *spec.command],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                     cwd=spec.cwd, start_new_session=True)
        ident = Identity.of(popen.pid) or Identity(popen.pid, 0.0, popen.pid)
        return LocalHandle(popen.pid, ident.create_time, exit_file, popen, ident.sid)

    def attach(self, record: dict) -> Handle | None:
        """A handle on a recorded attempt; None when the record cannot name a process of ours
        (malformed, or pid <= 1). A leader whose identity no longer matches is never signalled."""
        try:
            pid, create_time = int(record["pid"]), float(record["create_time"])
            sid = int(record["sid"]) if record.get("sid") is not None else pid  # started as a session leader
            h = LocalHandle(pid, create_time, Path(record["exit_file"]), sid=sid)
            known = {int(k): float(v) for k, v in (record.get("descendants") or {}).items()}
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        if pid <= 1:
            return None
        h._known.update({k: v for k, v in known.items() if k > 1})
        return h

    def rediscover(self, attempt_dir: Path) -> tuple[Handle | None, dict]:
        ident = find_wrapper(str(WRAPPER), attempt_dir / "exit.json")
        if ident is None:
            return None, {}
        record = {"pid": ident.pid, "create_time": ident.create_time, "sid": ident.sid,
                  "exit_file": str(attempt_dir / "exit.json"), "descendants": {}}
        return self.attach(record), record

    def exclude(self, command: tuple[str, ...], env: dict[str, str], nodes: tuple[str, ...],
                ranks: tuple[int, ...]) -> Placement:
        local_names = {self.host, self.host.split(".")[0], "localhost", "127.0.0.1"}
        foreign = [n for n in nodes if n not in local_names]
        if foreign:
            return Placement(False, f"local executor: the job runs only on {self.host}; cannot exclude {foreign}")
        if not ranks:
            return Placement(False, f"local executor: excluding {self.host} would leave no node, and no culprit "
                             "rank names a device to leave out")
        launcher = ln.recognise(command)
        names = ln.NPROC[ln.TORCHRUN]
        idx, nproc_s = flag_value(command, names) if launcher.kind == ln.TORCHRUN else (None, None)
        if idx is None or not (nproc_s or "").isdigit():
            return Placement(False, f"local executor: the {launcher.kind} command has no numeric --nproc-per-node "
                             "to shrink; cannot restart on fewer devices")
        nproc = int(nproc_s or 0)
        offset = self.rank_offset(command)
        local = sorted({r - offset for r in ranks if 0 <= r - offset < nproc})
        if not local:
            return Placement(False, f"local executor: culprit ranks {list(ranks)} do not run on this node")
        visible = env.get("CUDA_VISIBLE_DEVICES") or os.environ.get("CUDA_VISIBLE_DEVICES")
        devices = [d.strip() for d in visible.split(",") if d.strip()] if visible else [str(i) for i in range(nproc)]
        bad = {devices[i] for i in local if i < len(devices)}
        keep = [d for d in devices if d not in bad]
        new_nproc = min(nproc, len(keep))
        if new_nproc <= 0:
            return Placement(False, "local executor: no device would be left after excluding the culprit ranks")
        new_cmd = ln.set_flag(command, idx, names, str(new_nproc))
        detail = (f"excluded local rank(s) {local} (device(s) {sorted(bad)}) on {self.host}: "
                  f"CUDA_VISIBLE_DEVICES={','.join(keep)}, --nproc-per-node {nproc} -> {new_nproc}"
                  + ("; the job must accept the smaller world size" if new_nproc < nproc else ""))
        return Placement(True, detail, new_cmd, {**env, "CUDA_VISIBLE_DEVICES": ",".join(keep)})

    def drain(self, nodes: tuple[str, ...], reason: str) -> tuple[bool, str]:
        return False, f"local executor: no scheduler to drain {list(nodes)} in"

    def collect_kernel(self, since: datetime, out_dir: Path) -> str:
        from diagnoser.act.attempts import collect_kernel_log

        return collect_kernel_log(since, out_dir, self.host)

    def launcher_logs(self, command: tuple[str, ...], since: datetime) -> list[Path]:
        """Per-rank files the launcher wrote for this attempt: torchrun/accelerate `--log-dir D` writes
        D/<run id>/attempt_<k>/<local rank>/std{out,err}.log (the run directories written since the
        attempt started); DeepSpeed `--enable_each_rank_log D` writes D/<time>_rank<N>.log."""
        launcher = ln.recognise(command)
        log_dir = ln.launcher_value(command, launcher, ln.RANK_LOG_DIR)
        if not log_dir or log_dir == "None" or not Path(log_dir).is_dir():
            return []
        cutoff = since.timestamp() - 1
        return sorted(p for p in Path(log_dir).iterdir() if p.stat().st_mtime >= cutoff
                      and (p.is_dir() or launcher.kind == ln.DEEPSPEED and p.suffix == ".log"))
