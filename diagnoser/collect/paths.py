"""What a file's path says about its contents: the node, the rank, the kind of log.

Clusters lay logs out as `<node>/rank5.log`, `dmesg/<node>.log`, `dmesg-<node>.log`,
`logs/rank_005.txt`, `slurm-4242.out` ... Only names that look like hosts count as nodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath

KERNEL_KINDS = {"dmesg", "kern", "kernel", "syslog", "journal", "messages", "journalctl"}
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


def _kind(parts: list[str]) -> str:
    lowered = [p.lower() for p in parts]
    for part in lowered:
        tokens = set(re.split(r"[-_.]", part))
        if tokens & KERNEL_KINDS:
            return "dmesg"
    name = lowered[-1] if lowered else ""
    if re.match(r"(?:sacct|scontrol|squeue|sinfo|seff)\b", name) or re.search(r"[._-](?:sacct|scontrol)\b", name):
        return "scheduler_record"  # a table about the job (Start/End columns), not timed events
    if "nccl" in name:
        return "nccl"
    if name.startswith("slurm") or name.endswith(".out") and "slurm" in name:
        return "scheduler"
    if "err" in re.split(r"[-_.]", name):
        return "stderr"
    return "log"


def path_info(relative: PurePath) -> PathInfo:
    """Infer node, rank and kind from a path relative to the root the user named."""
    parts = list(relative.parts)
    if not parts:
        return PathInfo(None, None, "log")
    stem = PurePath(parts[-1]).stem
    kind = _kind(parts)
    node = _stem_host(stem)
    if node is None:
        for directory in reversed(parts[:-1]):
            if looks_like_host(directory):
                node = directory
                break
    rank_match = _RANK.search(stem)
    rank = int(rank_match.group(1)) if rank_match else None
    return PathInfo(node, rank, kind)
