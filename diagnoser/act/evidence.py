"""What the controller itself knows about how an attempt ended, as evidence for the triage.

A rank killed by SIGKILL leaves no traceback; the facts that explain it are outside the logs: the
exit status of each rank and of the launcher, whether the kernel's or the memory cgroup's OOM killer
fired, whether a signal reached the job's process group from outside (a scheduler, an operator)
before the failure, torchrun's error file, and the last step the job reached. `write_exit_evidence`
writes them as plain, timestamped lines to `<attempt>/logs/launcher-exit.log`, which the triage
reads like any log. The formats are the ones the rules match:

    <time> diagnoser: launcher (pid 812) exited with exit code 1 after 7.2 s
    <time> diagnoser: rank 1 (pid 1848) exitcode -9: killed by signal 9 (SIGKILL) (first failure)
    <time> diagnoser: OOM: no OOM kill of the job's processes in the kernel log; memory cgroup ... oom_kill 0 -> 0
    <time> diagnoser: signals: none reached the job's process group from outside before the failure
    <time> diagnoser: last progress: step 5 at <time>
    <time> diagnoser: rank 1 (pid 1848) killed by signal 9 (SIGKILL): no OOM kill recorded, not sent by the
           scheduler or diagnoser                      (runbook killed-by-signal: unknown, restart)
    <time> diagnoser: memory cgroup /job oom_kill 0 -> 1 during the attempt: oom-kill event; ...  (runbook host-oom)
"""

from __future__ import annotations

import json
import re
import signal
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

EVIDENCE_FILE = "launcher-exit.log"
ERROR_FILE = "torchelastic-error.json"  # in the attempt's directory, named by TORCHELASTIC_ERROR_FILE
ENV_ERROR_FILE = "TORCHELASTIC_ERROR_FILE"
CGROUP_ROOT = Path("/sys/fs/cgroup")
TEARDOWN = {signal.SIGTERM.value}  # what a launcher sends the surviving ranks after the first failure

# torchrun's ChildFailedError table ("rank : 1 (local_rank: 1)" then "exitcode : -9 (pid: 1848)")
_TABLE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)")
_ROOT = re.compile(r"Root Cause \(first observed failure\):(?:[^\n]*\n){1,4}?\s*rank\s*:\s*(\d+)")
_DEEPSPEED = re.compile(r"Process (\d+) exits with return code = (-?\d+)")
_KERNEL_OOM = re.compile(r"(?:Killed process|reaped process) (\d+)\b|oom-kill:[^\n]*\bpid=(\d+)")
# kernel lines about one process: they concern the job only when the pid is one of its processes
_PROCESS_LINE = re.compile(r"\S+\[(\d+)\]: segfault at|traps: \S+\[(\d+)\]|INFO: task \S+:(\d+) blocked for")
_OOM_LINE = re.compile(r"invoked oom-killer|oom-kill:|Out of memory: Kill|Memory cgroup out of memory|oom_reaper:|"
                       r"Killed process \d+")


@dataclass(frozen=True)
class RankExit:
    rank: int | None
    pid: int | None
    code: int


@dataclass(frozen=True)
class OomCounter:
    """The memory cgroup's count of OOM kills (cgroup v2 memory.events or v1 memory.oom_control)."""

    path: str
    count: int

    def to_json(self) -> dict:
        return {"path": self.path, "count": self.count}

    @classmethod
    def from_json(cls, data: object) -> OomCounter | None:
        if isinstance(data, dict) and isinstance(data.get("path"), str) and isinstance(data.get("count"), int):
            return cls(data["path"], data["count"])
        return None


@dataclass
class ExitFacts:
    at: datetime  # when the failure was detected
    started: datetime
    launcher_pid: int | None = None
    launcher_code: int | None = None
    ranks: list[RankExit] = field(default_factory=list)
    first: RankExit | None = None
    pids: set[int] = field(default_factory=set)  # every process of the attempt seen
    kernel_oom_pids: list[int] = field(default_factory=list)
    kernel_log_read: bool = False
    kernel_lines_left_out: int = 0  # about other processes on this host
    oom_before: OomCounter | None = None
    oom_after: OomCounter | None = None
    outside_signals: list[tuple[str, datetime]] = field(default_factory=list)
    sent_by_diagnoser: str | None = None  # e.g. "SIGTERM after a hang"
    last_step: int | None = None
    last_progress_at: datetime | None = None
    error_file: dict | None = None


def describe_code(code: int | None) -> str:
    if code is None:
        return "an unknown status"
    if code < 0 or code > 128 and code - 128 in _SIGNALS:
        n = -code if code < 0 else code - 128
        return f"killed by signal {n} ({_SIGNALS.get(n, '?')})"
    return f"exit code {code}"


_SIGNALS = {s.value: s.name for s in signal.Signals}


def signal_of(code: int | None) -> int | None:
    if code is None:
        return None
    if code < 0:
        return -code
    return code - 128 if code > 128 and code - 128 in _SIGNALS else None


# ------------------------------------------------------------------------------------- reading facts
def oom_counter(pid: int, root: Path = CGROUP_ROOT) -> OomCounter | None:
    """The OOM-kill counter of `pid`'s memory cgroup, if the cgroup files are readable."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        rel = path.lstrip("/")
        if controllers == "":  # cgroup v2 (unified, maybe mounted under unified/ in hybrid mode)
            candidates = [root / rel / "memory.events", root / "unified" / rel / "memory.events"]
        elif "memory" in controllers.split(","):
            candidates = [root / "memory" / rel / "memory.oom_control"]
        else:
            continue
        for candidate in candidates:
            count = read_oom_kill(candidate)
            if count is not None:
                return OomCounter(str(candidate), count)
    return None


def read_oom_kill(path: Path) -> int | None:
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
    except OSError:
        return None
    return None


def launcher_failures(console: str) -> tuple[list[RankExit], RankExit | None]:
    """Ranks' exit codes as the launcher reported them (torchrun's failure table, DeepSpeed's
    'Process N exits with return code = C'), and the first failure torchrun names."""
    ranks: dict[int | None, RankExit] = {}
    for m in _TABLE.finditer(console):
        ranks[int(m.group(1))] = RankExit(int(m.group(1)), int(m.group(3)), int(m.group(2)))
    for m in _DEEPSPEED.finditer(console):
        code = int(m.group(2))
        if code != 0:
            ranks.setdefault(-int(m.group(1)), RankExit(None, int(m.group(1)), code))
    root = _ROOT.search(console)
    first = ranks.get(int(root.group(1))) if root else None
    if first is None:
        failed = [r for r in ranks.values() if signal_of(r.code) not in TEARDOWN]
        first = failed[0] if len(failed) == 1 else None
    return list(ranks.values()), first


def kernel_oom_pids(dmesg_dir: Path) -> tuple[bool, list[int]]:
    """(whether any kernel log was collected, pids the kernel OOM killer killed in it)."""
    files = sorted(dmesg_dir.glob("*.log")) if dmesg_dir.is_dir() else []
    pids: list[int] = []
    for f in files:
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        pids += [int(m.group(1) or m.group(2)) for m in _KERNEL_OOM.finditer(text)]
    return bool(files), pids


def scope_kernel_logs(dmesg_dir: Path, pids: set[int]) -> int:
    """Leave out kernel lines about other processes on this host (a segfault, a hung task, an OOM kill
    of a pid that is not the job's): on a shared host they are not this job's evidence. Host-wide
    lines (GPU, NIC, memory errors) stay. Returns how many lines were left out."""
    if not pids or not dmesg_dir.is_dir():
        return 0
    dropped = 0
    for f in sorted(dmesg_dir.glob("*.log")):
        try:
            lines = f.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        killed = {int(m.group(1) or m.group(2)) for m in _KERNEL_OOM.finditer("\n".join(lines))}
        foreign_oom = bool(killed) and not killed & pids
        keep = []
        for line in lines:
            m = _PROCESS_LINE.search(line)
            pid = next((int(g) for g in m.groups() if g), None) if m else None
            if (pid is not None and pid not in pids) or (foreign_oom and _OOM_LINE.search(line)):
                dropped += 1
                continue
            keep.append(line)
        if len(keep) != len(lines):
            f.write_text("".join(x + "\n" for x in keep), encoding="utf-8")
    return dropped


def read_error_file(path: Path) -> dict | None:
    """torchrun's error file (`@record` / TORCHELASTIC_ERROR_FILE): {"message": {...}} or {"message": "..."}."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# --------------------------------------------------------------------------------------- writing
def _stamp(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="milliseconds")


def _who(r: RankExit) -> str:
    pid = f" (pid {r.pid})" if r.pid is not None else ""
    return f"rank {r.rank}{pid}" if r.rank is not None else f"the process{pid}"


def evidence_lines(f: ExitFacts) -> list[str]:
    """The evidence as text lines (without timestamps)."""
    out = []
    took = (f.at - f.started).total_seconds()
    pid = f" (pid {f.launcher_pid})" if f.launcher_pid else ""
    if f.launcher_code is None:
        out.append(f"diagnoser: launcher{pid} still running or status unknown when the failure was detected, "
                   f"{took:.1f} s after the start")
    else:
        out.append(f"diagnoser: launcher{pid} exited with {describe_code(f.launcher_code)} after {took:.1f} s")
    for r in f.ranks:
        tag = " (first failure)" if r == f.first else (
            " (the launcher's teardown)" if f.first is not None and signal_of(r.code) in TEARDOWN else "")
        out.append(f"diagnoser: {_who(r)} exitcode {r.code}: {describe_code(r.code)}{tag}")
    oom_pids = sorted(set(f.kernel_oom_pids) & f.pids) if f.pids else sorted(set(f.kernel_oom_pids))
    kernel = ("kernel log not read (dmesg not permitted, or collection off)" if not f.kernel_log_read else
              f"the kernel OOM killer killed pid(s) {oom_pids} of the job" if oom_pids else
              "no OOM kill of the job's processes in the kernel log")
    cgroup_fired = bool(f.oom_before and f.oom_after and f.oom_after.count > f.oom_before.count)
    if f.oom_after is None:
        cgroup = "memory cgroup counters not readable"
    elif f.oom_before is None:
        cgroup = f"memory cgroup {f.oom_after.path} oom_kill {f.oom_after.count} (no count at the start)"
    else:
        cgroup = f"memory cgroup {f.oom_after.path} oom_kill {f.oom_before.count} -> {f.oom_after.count}"
    out.append(f"diagnoser: OOM: {kernel}; {cgroup}")
    if f.kernel_lines_left_out:
        out.append(f"diagnoser: kernel log: {f.kernel_lines_left_out} line(s) about other processes on this host "
                   "left out")
    if f.outside_signals:
        sigs = ", ".join(f"{name} at {_stamp(t)}" for name, t in f.outside_signals)
        out.append(f"diagnoser: signals: the job's process group received {sigs} from outside diagnoser "
                   "(scheduler or operator) before the failure")
    else:
        out.append("diagnoser: signals: none reached the job's process group from outside before the failure")
    if f.sent_by_diagnoser:
        out.append(f"diagnoser: signals sent by diagnoser: {f.sent_by_diagnoser}")
    if f.last_step is not None:
        when = f" at {_stamp(f.last_progress_at)}" if f.last_progress_at else ""
        out.append(f"diagnoser: last progress: step {f.last_step}{when}")
    else:
        out.append("diagnoser: last progress: none (no progress line before the failure)")
    if f.error_file:
        out += _error_file_lines(f.error_file)
    out += _summary(f, bool(oom_pids), cgroup_fired)
    return out


def _summary(f: ExitFacts, kernel_oom: bool, cgroup_oom: bool) -> list[str]:
    """One line for the rules: what killed the first failed process, as far as diagnoser can tell."""
    first = f.first
    if first is None and f.launcher_code is not None and signal_of(f.launcher_code) and not f.ranks:
        first = RankExit(None, f.launcher_pid, f.launcher_code)  # not a distributed launcher: the job itself
    sig = signal_of(first.code) if first else None
    if first is None or sig is None:
        return []
    what = f"{_who(first)} killed by signal {sig} ({_SIGNALS.get(sig, '?')})"
    if cgroup_oom:
        assert f.oom_before and f.oom_after
        return [f"diagnoser: memory cgroup {f.oom_after.path} oom_kill {f.oom_before.count} -> {f.oom_after.count} "
                f"during the attempt: oom-kill event; {what}"]
    if kernel_oom:
        return [f"diagnoser: {what}: the kernel OOM killer fired (see the kernel log)"]
    if f.outside_signals:
        names = ", ".join(sorted({name for name, _ in f.outside_signals}))
        return [f"diagnoser: {what}: the job received {names} from outside diagnoser (scheduler or operator)"]
    if f.sent_by_diagnoser:
        return []
    return [f"diagnoser: {what}: no OOM kill recorded, not sent by the scheduler or diagnoser"]


def _error_file_lines(data: dict) -> list[str]:
    msg = data.get("message")
    if isinstance(msg, dict):
        text = str(msg.get("message") or "")
        extra = msg.get("extraInfo") or {}
        trace = str(extra.get("py_callstack") or "") if isinstance(extra, dict) else ""
    else:
        text, trace = str(msg or ""), ""
    lines = [f"diagnoser: torchrun error file: {text.strip().splitlines()[0] if text.strip() else '(empty)'}"]
    if trace:  # the traceback's last lines name the exception
        lines += [f"diagnoser: torchrun error file: {t}" for t in trace.strip().splitlines()[-3:]]
    return lines


def write_exit_evidence(logs_dir: Path, facts: ExitFacts) -> Path:
    """Write `launcher-exit.log` (one timestamped line each, at the failure's time) for the triage."""
    logs_dir.mkdir(parents=True, exist_ok=True)
    path = logs_dir / EVIDENCE_FILE
    stamp = _stamp(facts.at)
    path.write_text("".join(f"{stamp} {line}\n" for line in evidence_lines(facts)), encoding="utf-8")
    return path
