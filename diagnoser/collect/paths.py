"""What a file's path says about its contents: the node, the rank, the kind of log.

Clusters lay logs out as `<node>/rank5.log`, `dmesg/<node>.log`, `dmesg-<node>.log`,
`logs/rank_005.txt`, `slurm-4242.out` ... Only names that look like hosts count as nodes.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePath

# platform logs: the kernel's, and the BMC's event log (`ipmitool sel elist` saved as bmc-<node>.log, ipmi-sel.txt)
KERNEL_KINDS = {"dmesg", "kern", "kernel", "syslog", "journal", "messages", "journalctl", "bmc", "ipmi"}
_KIND_WORDS = KERNEL_KINDS | {"nccl", "stderr", "stdout", "slurm", "log", "logs", "torchrun", "launcher",
                              "err", "out", "output", "console", "node", "host"}
_HOST = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*\d$", re.IGNORECASE)
_NOT_HOSTS = re.compile(r"^(?:rank|task|proc|worker|local|attempt|run|job|step|epoch|slurm|log|logs)[-_]?\d+$|"
                        r"^(?:python|cuda|nccl|torch|py)\d|"
                        # Slurm tools' outputs are named after the job, not a host: sacct-4242.txt
                        r"^(?:sacct|scontrol|squeue|sinfo|sbatch|srun|seff|sstat|jobcomp|slurmctld|slurmd|slurmdbd)\b",
                        re.IGNORECASE)
_RANK = re.compile(r"(?:^|[^a-z])(?:rank|task)[-_]?0*(\d{1,6})(?![0-9])", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class PathInfo:
    node: str | None
    rank: int | None
    kind: str  # dmesg | nccl | scheduler | scheduler_record | stderr | log


def looks_like_host(name: str) -> bool:
    return bool(_HOST.match(name)) and not _NOT_HOSTS.match(name) and len(name) <= 63


def _stem_host(stem: str) -> str | None:
    """`dmesg-gpu-017` -> `gpu-017`; `gpu-017` -> `gpu-017`; `rank5` -> None."""
    parts = re.split(r"[._]", stem)
    for part in parts:
        words = part.split("-")
        # drop leading/trailing kind words: dmesg-gpu-017, gpu-017-dmesg
        while words and words[0].lower() in _KIND_WORDS:
            words = words[1:]
        while words and words[-1].lower() in _KIND_WORDS:
            words = words[:-1]
        candidate = "-".join(words)
        if candidate and looks_like_host(candidate) and not _RANK.search(candidate):
            return candidate
    return None


_WORDS = re.compile(r"[-_.]")
_RECORD_TOOL = re.compile(r"(?:sacct|scontrol|squeue|sinfo|seff)\b")
_RECORD_SUFFIX = re.compile(r"[._-](?:sacct|scontrol)\b")


def _kernel_token(part: str) -> bool:
    return not KERNEL_KINDS.isdisjoint(_WORDS.split(part.lower()))


@lru_cache(maxsize=4096)
def _directory_facts(directories: tuple[str, ...]) -> tuple[bool, str | None]:
    """(a directory names a kernel log, the innermost directory that looks like a host): the same
    for every file of a directory, so worked out once per directory."""
    kernel = any(_kernel_token(d) for d in directories)
    host = next((d for d in reversed(directories) if looks_like_host(d)), None)
    return kernel, host


def _kind(name: str, kernel_directory: bool) -> str:
    if kernel_directory or _kernel_token(name):
        return "dmesg"
    name = name.lower()
    if _RECORD_TOOL.match(name) or _RECORD_SUFFIX.search(name):
        return "scheduler_record"  # a table about the job (Start/End columns), not timed events
    if "nccl" in name:
        return "nccl"
    if name.startswith("slurm") or name.endswith(".out") and "slurm" in name:
        return "scheduler"
    if "err" in _WORDS.split(name):
        return "stderr"
    return "log"


def path_info(relative: PurePath) -> PathInfo:
    """Infer node, rank and kind from a path relative to the root the user named."""
    return path_info_of(relative.parts)


def path_info_of(parts: tuple[str, ...]) -> PathInfo:
    """`path_info` of a relative path given as its parts (no Path object needed)."""
    if not parts:
        return PathInfo(None, None, "log")
    name = parts[-1]
    dot = name.rfind(".")
    stem = name[:dot] if 0 < dot < len(name) - 1 else name  # PurePath(name).stem
    kernel_directory, directory_host = _directory_facts(parts[:-1])
    kind = _kind(name, kernel_directory)
    node = _stem_host(stem) or directory_host
    rank_match = _RANK.search(stem)
    rank = int(rank_match.group(1)) if rank_match else None
    return PathInfo(sys.intern(node) if node else None, rank, kind)  # a node's files share its name
