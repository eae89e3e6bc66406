"""Typed records from Slurm's text output (pure functions, no I/O).

`scontrol show job -o` / `scontrol show node -o` / the jobcomp/filetxt log print one record per
line as `Key=Value` pairs separated by spaces; a few values contain spaces themselves (a node's
`Reason=`, a job's `Comment=`), so a value runs until the next ` Key=`. Times are the cluster's
local time without a zone (`2026-01-01T00:00:00`), or `Unknown`/`None`/`N/A`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from itertools import islice, product

# job states after which nothing runs any more (the job may still be requeued)
ENDED_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                          "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"})
PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT",
                            "RESV_DEL_HOLD", "CONFIGURING"})
# end states that are the scheduler's doing rather than the job's own exit status
SCHEDULER_ENDS = frozenset({"NODE_FAIL", "PREEMPTED", "TIMEOUT", "OUT_OF_MEMORY", "CANCELLED", "BOOT_FAIL",
                            "DEADLINE"})

_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_/:.]*)=")
_REASON_STAMP = re.compile(r"\s*\[(?P<user>[^@\]]+)@(?P<time>[\dT:-]+)\]\s*$")
_NO_TIME = {"", "Unknown", "None", "N/A", "(null)"}


def parse_kv(line: str) -> dict[str, str]:
    """`A=1 B=x y C=2` -> {'A': '1', 'B': 'x y', 'C': '2'} (a value runs until the next ` Key=`)."""
    matches = list(_KEY.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out.setdefault(m.group(1), line[m.end():end].strip())
    return out


def parse_time(value: str | None) -> datetime | None:
    """A Slurm timestamp as an aware datetime in the local zone (None for Unknown/None/N/A)."""
    if value is None or value.strip() in _NO_TIME:
        return None
    try:
        return datetime.fromisoformat(value.strip()).astimezone()
    except ValueError:
        return None


def parse_exit(value: str | None) -> tuple[int | None, int | None]:
    """`ExitCode=3:0` -> (3, 0): the exit status and the signal that ended it."""
    if not value or ":" not in value:
        return None, None
    code, _, sig = value.partition(":")
    return (int(code) if code.isdigit() else None, int(sig) if sig.isdigit() else None)


def _expand_one(expr: str) -> list[str]:
    parts = re.split(r"(\[[^\]]*\])", expr)
    choices: list[list[str]] = []
    for part in parts:
        if part.startswith("[") and part.endswith("]"):
            values: list[str] = []
            for item in part[1:-1].split(","):
                lo, _, hi = item.partition("-")
                if hi and lo.isdigit() and hi.isdigit():
                    width = len(lo)
                    values += [str(i).zfill(width) for i in range(int(lo), min(int(hi), int(lo) + 100_000) + 1)]
                elif item:
                    values.append(item)
            choices.append(values)
        elif part:
            choices.append([part])
    return ["".join(p) for p in islice(product(*choices), 100_000)] if choices else []  # bounded


def expand_hostlist(expr: str | None) -> list[str]:
    """`n[1-3,7],gpu-[01-02]` -> ['n1', 'n2', 'n3', 'n7', 'gpu-01', 'gpu-02'] ('(null)' -> [])."""
    if not expr or expr.strip() in _NO_TIME or expr.strip() == "None assigned":
        return []
    items, depth, cur = [], 0, ""
    for ch in expr.strip():
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        cur += ch
    items.append(cur)
    out: list[str] = []
    seen: set[str] = set()
    for item in items:
        for host in _expand_one(item.strip()):
            if host not in seen:
                seen.add(host)
                out.append(host)
    return out


def join_hostlist(nodes: list[str] | tuple[str, ...] | set[str]) -> str:
    """Nodes as a comma list Slurm accepts (sorted, unique)."""
    return ",".join(sorted(set(nodes), key=_natural))


def _natural(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


@dataclass(frozen=True)
class JobRecord:
    """One job as `scontrol show job -o` (or the jobcomp log) describes it."""

    job_id: str
    name: str = ""
    state: str = ""
    reason: str = ""
    exit_code: int | None = None
    exit_signal: int | None = None
    restarts: int = 0
    requeue: bool = False
    nodes: tuple[str, ...] = ()
    node_list: str = ""
    num_nodes: int | None = None
    batch_host: str = ""
    excluded: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    partition: str = ""
    std_out: str = ""
    std_err: str = ""
    work_dir: str = ""
    command: str = ""
    user: str = ""
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    raw: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES

    @property
    def pending(self) -> bool:
        return self.state in PENDING_STATES

    @property
    def running(self) -> bool:
        return not self.ended and not self.pending

    @property
    def failed_completing(self) -> bool:
        """COMPLETING (epilogs still running) with a non-zero ExitCode: its processes are done and
        it failed (its final state shows only when the epilogs finish)."""
        return self.state == "COMPLETING" and bool(self.exit_code or self.exit_signal)

    @property
    def status(self) -> int | None:
        """The job's end as a process exit status: negative for a signal; non-zero for every end
        other than COMPLETED even when Slurm recorded 0 (a NODE_FAIL or TIMEOUT is no success)."""
        if not self.ended and not self.failed_completing:
            return None
        if self.exit_signal:
            return -self.exit_signal
        code = self.exit_code or 0
        if self.state != "COMPLETED" and code == 0:
            return 1
        return code


def job_from_kv(kv: dict[str, str]) -> JobRecord:
    code, sig = parse_exit(kv.get("ExitCode"))
    user = kv.get("UserId", "")
    nodes_expr = kv.get("NodeList", "")
    num = kv.get("NumNodes", kv.get("NodeCnt", ""))
    return JobRecord(
        job_id=kv.get("JobId", ""), name=kv.get("JobName", kv.get("Name", "")),
        state=kv.get("JobState", "").split()[0] if kv.get("JobState") else "", reason=kv.get("Reason", ""),
        exit_code=code, exit_signal=sig, restarts=int(kv["Restarts"]) if kv.get("Restarts", "").isdigit() else 0,
        requeue=kv.get("Requeue") == "1", nodes=tuple(expand_hostlist(nodes_expr)), node_list=nodes_expr,
        num_nodes=int(num.split("-")[0]) if num.split("-")[0].isdigit() else None,
        batch_host=kv.get("BatchHost", ""), excluded=tuple(expand_hostlist(kv.get("ExcNodeList"))),
        required=tuple(expand_hostlist(kv.get("ReqNodeList"))), partition=kv.get("Partition", ""),
        std_out=kv.get("StdOut", ""), std_err=kv.get("StdErr", ""), work_dir=kv.get("WorkDir", ""),
        command=kv.get("Command", ""), user=user.split("(")[0],
        submit_time=parse_time(kv.get("SubmitTime")), start_time=parse_time(kv.get("StartTime")),
        end_time=parse_time(kv.get("EndTime")), raw=kv)


def parse_job(text: str) -> JobRecord | None:
    """The first job record in `scontrol show job -o` output (None when there is none)."""
    for line in text.splitlines():
        if line.startswith("JobId="):
            return job_from_kv(parse_kv(line))
    return None


@dataclass(frozen=True)
class NodeRecord:
    """One node as `scontrol show node -o` describes it."""

    name: str
    state: str = ""  # e.g. IDLE+DRAIN, DOWN*, MIXED
    reason: str = ""  # without the trailing [user@time]
    reason_user: str = ""
    reason_time: datetime | None = None
    partitions: tuple[str, ...] = ()
    raw: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def flags(self) -> set[str]:
        return set(self.state.rstrip("*").split("+"))

    @property
    def drained(self) -> bool:
        """Drained or draining: the scheduler places no new job on it."""
        return bool(self.flags & {"DRAIN", "DRAINED", "DRAINING"})

    @property
    def usable(self) -> bool:
        """Could take a new job (not drained, down, failing or unresponsive)."""
        bad = {"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "FUTURE", "NOT_RESPONDING",
               "POWERED_DOWN", "POWERING_DOWN", "INVAL", "MAINTENANCE", "REBOOT_ISSUED", "REBOOT_REQUESTED"}
        return not (self.flags & bad) and not self.state.endswith("*")


def node_from_kv(kv: dict[str, str]) -> NodeRecord:
    reason = kv.get("Reason", "")
    user, when = "", None
    m = _REASON_STAMP.search(reason)
    if m:
        user, when = m.group("user"), parse_time(m.group("time"))
        reason = reason[: m.start()].strip()
    return NodeRecord(name=kv.get("NodeName", ""), state=kv.get("State", ""), reason=reason, reason_user=user,
                      reason_time=when, partitions=tuple(p for p in kv.get("Partitions", "").split(",") if p),
                      raw=kv)


def parse_nodes(text: str) -> list[NodeRecord]:
    """Every node record in `scontrol show node -o` output."""
    return [node_from_kv(parse_kv(line)) for line in text.splitlines() if line.startswith("NodeName=")]


def parse_sacct(text: str) -> list[dict[str, str]]:
    """`sacct -P` (pipe-separated, with a header line) -> one dict per row."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0].split("|")
    return [dict(zip(header, line.split("|"), strict=False)) for line in lines[1:]]


def jobcomp_lines(text: str, job_id: str, since: datetime | None = None) -> list[str]:
    """The jobcomp/filetxt lines of one job (a requeued job has one per run), optionally only the
    runs that started at or after `since`."""
    out = []
    for line in text.splitlines():
        if not line.startswith(f"JobId={job_id} "):
            continue
        if since is not None:
            start = parse_time(parse_kv(line).get("StartTime"))
            if start is not None and start < since.replace(microsecond=0):
                continue
        out.append(line)
    return out
