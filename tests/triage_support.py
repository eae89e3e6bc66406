"""Triage a job laid out from a {relative path: text} mapping (directories name nodes, as a cluster's would)."""

from pathlib import Path

from diagnoser.models import Diagnosis
from diagnoser.triage import triage


def triage_files(root: Path, files: dict[str, str]) -> Diagnosis:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return triage([str(root)], workers=1)
