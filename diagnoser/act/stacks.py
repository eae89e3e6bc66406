"""Python stacks of a hung job's ranks, taken with py-spy before the job is killed.

One `py-spy dump --pid P` per rank, in parallel, each bounded by a timeout, written to
`<attempt>/stacks/rank<N>.txt`: the triage groups dumps named like that and names the ranks whose
stack differs from the rest (where the job is stuck). Without py-spy nothing is collected (the
reason is returned for the audit detail).
"""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

MAX_PARALLEL = 8


@dataclass(frozen=True)
class StackResult:
    files: tuple[Path, ...]
    detail: str


def pyspy_path() -> str | None:
    return shutil.which("py-spy")


def _dump(pyspy: str, pid: int, out: Path, timeout_s: float) -> str | None:
    """Dump one process; None on success, else the problem."""
    try:
        proc = subprocess.run([pyspy, "dump", "--pid", str(pid)], capture_output=True, timeout=timeout_s,
                              check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"pid {pid}: py-spy timed out after {timeout_s:g} s"
    except OSError as exc:
        return f"pid {pid}: {exc}"
    if proc.returncode != 0 or not proc.stdout:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"pid {pid}: py-spy exit {proc.returncode}: {err[-1] if err else ''}"
    out.write_bytes(proc.stdout)
    return None


def collect_stacks(rank_pids: dict[int, int], out_dir: Path, timeout_s: float = 20.0) -> StackResult:
    """Dump every rank's stack into `out_dir/rank<N>.txt`."""
    if not rank_pids:
        return StackResult((), "no rank processes found to dump")
    pyspy = pyspy_path()
    if pyspy is None:
        return StackResult((), "py-spy not installed: no stacks collected (pip install py-spy)")
    out_dir.mkdir(parents=True, exist_ok=True)
    targets = {rank: (pid, out_dir / f"rank{rank}.txt") for rank, pid in sorted(rank_pids.items())}
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(targets))) as pool:
        futures = {rank: pool.submit(_dump, pyspy, pid, path, timeout_s) for rank, (pid, path) in targets.items()}
        problems = [p for f in futures.values() if (p := f.result()) is not None]
    files = tuple(path for _, path in targets.values() if path.exists())
    detail = f"py-spy: {len(files)}/{len(targets)} rank stacks"
    if problems:
        detail += "; " + "; ".join(problems[:3])
    return StackResult(files, detail)
