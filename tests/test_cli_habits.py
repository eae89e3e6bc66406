"""The command line behaves like a mature tool: --version, -h, completion, help that shows env hints and no Python
type labels, and ids that a pipe gets whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from diagnoser.cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "diagnoser.cli", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def test_version_short_help_and_completion() -> None:
    version = _run("--version")
    assert version.returncode == 0 and version.stdout.startswith("diagnoser ")
    top = _run("-h")
    assert top.returncode == 0 and "--install-completion" in top.stdout and "triage" in top.stdout
    assert "Exit status" in top.stdout
    assert _run("triage", "-h").returncode == 0


@pytest.mark.parametrize("command", [["triage"], ["run"], ["runbooks"], ["runbooks", "show"], ["incidents", "search"],
                                     ["slurm-run"], ["report"], ["config", "show"], ["bot", "serve"]])
def test_help_has_no_python_type_labels_and_keeps_bracketed_hints(command) -> None:
    out = _run(*command, "--help").stdout
    assert "<bool>" not in out and "<list[" not in out and "<str>" not in out and "<path>" not in out
    if command == ["triage"]:
        assert "[env: DIAGNOSER_RUNBOOKS]" in out and "[env: DIAGNOSER_LLM_BASE_URL]" in out
    if command == ["run"]:
        assert "[10m]" in out and "DIAGNOSER_HANG_TIMEOUT" in out


def test_incident_ids_are_whole_in_a_pipe(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    excerpt = tmp_path / "x.log"
    excerpt.write_text("NCCL WARN NET/IB : Got completion from peer 10.0.0.7 with error 12, opcode 0, len 0\n")
    added = runner.invoke(app, ["incidents", "add", str(excerpt), "--category", "infra", "--subtype",
                                "ib_completion_error_with_a_long_name", "--action", "restart", "--store", store])
    assert added.exit_code == 0, added.output
    for args in (["list"], ["search", "NET/IB completion error 12"]):
        out = runner.invoke(app, ["incidents", *args, "--store", store]).stdout  # not a terminal
        rows = [line.split("\t") for line in out.splitlines()]
        assert rows[0][0] == "id" and "…" not in out
        assert any(r[0].startswith("inc-") and len(r[0]) > 6 for r in rows[1:])
        assert any("ib_completion_error_with_a_long_name" in r for r in rows[1:])
