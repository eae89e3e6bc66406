"""Per-node kernel logs for the triage: `dmesg/<node>.log` under the output directory.

Two ways to reach a node's kernel log, configured by `KernelSource`:
- `log_dir`: a path per node, as a template with `{node}` (`/var/log/nodes/{node}/kern.log`,
  or a directory, whose `dmesg*`, `kern*`, `*.log` files are read); without `{node}` the node's
  name is appended as a directory. Works for nodes that are down, and from a login node that
  mounts the cluster's log store.
- `via_srun`: one step on each node, `srun -w NODE -N1 -n1 dmesg --time-format iso`, bounded by
  `--immediate` and a timeout. Needs the node to accept jobs (a drained or down node refuses)
  and a kernel that lets the job's user read dmesg.
Lines older than `since` (minus a slack) are dropped when their timestamp can be read; lines
without an absolute time are kept. At most `max_lines` per node (the newest).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from diagnoser.collect.timestamps import parse_time
from diagnoser.slurm.commands import SlurmCLI, SlurmError

SLACK = timedelta(minutes=2)
_PATTERNS = ("dmesg*", "kern*", "kernel*", "*.log", "messages*", "syslog*")


@dataclass(frozen=True)
class KernelSource:
    """Where kernel logs come from (both may be set: the log directory first, srun as fallback)."""

    log_dir: str | None = None
    via_srun: bool = False
    max_lines: int = 5000
    max_bytes: int = 8 << 20  # read at most this much of the end of each file
    timeout_s: float = 30.0
    parallel: int = 8  # nodes read at once (srun steps or files)

    @property
    def enabled(self) -> bool:
        return bool(self.log_dir) or self.via_srun


def _recent(lines: list[str], since: datetime | None, max_lines: int) -> list[str]:
    if since is not None:
        cutoff = since - SLACK
        keep = []
        for line in lines:
            t = parse_time(line, since.year)
            if t is None or t >= cutoff:
                keep.append(line)
        lines = keep
    return lines[-max_lines:]


def _read_tail(path: Path, max_bytes: int) -> list[str]:
    with open(path, "rb") as fh:
        size = fh.seek(0, 2)
        fh.seek(max(0, size - max_bytes))
        data = fh.read()
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[1:] if size > max_bytes and lines else lines  # the first line may be cut


def node_log_files(template: str, node: str) -> list[Path]:
    """The kernel log files of `node` under the configured template (may be empty)."""
    path = Path(template.replace("{node}", node)) if "{node}" in template else Path(template) / node
    if path.is_file():
        return [path]
    if path.is_dir():
        found: list[Path] = []
        for pattern in _PATTERNS:
            found += [p for p in sorted(path.glob(pattern)) if p.is_file() and p not in found]
        return found
    return []


def from_log_dir(template: str, node: str, since: datetime | None, source: KernelSource) -> list[str] | None:
    files = node_log_files(template, node)
    if not files:
        return None
    lines: list[str] = []
    for f in files:
        try:
            lines += _read_tail(f, source.max_bytes)
        except OSError:
            continue
    return _recent(lines, since, source.max_lines)


def from_srun(cli: SlurmCLI, node: str, since: datetime | None, source: KernelSource) -> list[str]:
    """`dmesg` on the node through a one-task job step (raises SlurmError when the node refuses)."""
    proc = cli.run("srun", "-w", node, "-N1", "-n1", "--immediate=10", "-t", "1", "-J", "diagnoser-dmesg",
                   "--quiet", "dmesg", "--time-format", "iso", timeout_s=source.timeout_s)
    return _recent(proc.stdout.splitlines(), since, source.max_lines)


def collect_kernel_logs(cli: SlurmCLI, nodes: list[str] | tuple[str, ...], out_dir: Path,
                        since: datetime | None, source: KernelSource) -> list[str]:
    """Write `out_dir/dmesg/<node>.log` for each node reachable; one note per node."""
    if not source.enabled:
        return ["kernel logs: no source configured (--kernel-log-dir or --kernel-via-srun)"]

    def one(node: str) -> str:
        lines: list[str] | None = None
        how = ""
        if source.log_dir:
            lines = from_log_dir(source.log_dir, node, since, source)
            how = "log dir"
        if lines is None and source.via_srun:
            try:
                lines = from_srun(cli, node, since, source)
                how = "srun dmesg"
            except SlurmError as exc:
                return f"{node}: kernel log not reachable through srun: {exc.message}"
        if lines is None:
            return f"{node}: no kernel log under {source.log_dir}"
        target = out_dir / "dmesg" / f"{node}.log"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")
        return f"{node}: {len(lines)} kernel lines ({how})"

    with ThreadPoolExecutor(max_workers=max(1, min(source.parallel, len(nodes)))) as pool:
        return list(pool.map(one, nodes))
