"""Triage a job laid out from a {relative path: text} mapping (directories name nodes, as a cluster's would)."""

from pathlib import Path

from diagnoser.models import Diagnosis
from diagnoser.triage import triage


def watchdog_timeout(rank: int, when: str = "1120 03:14:07", seq: int = 8812) -> str:
    """One rank's PyTorch NCCL watchdog timeout line (the collateral every peer of a failed rank prints)."""
    return (f"[rank{rank}]:[E{when}.512093 ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught collective "
            f"operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, "
            "Timeout(ms)=600000) ran for 600041 milliseconds before timing out.\n")


def triage_files(root: Path, files: dict[str, str]) -> Diagnosis:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return triage([str(root)], workers=1)
