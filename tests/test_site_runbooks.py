"""Site runbooks add to the shipped ones and replace them by id; the shipped verdicts stay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from diagnoser.cli import app
from diagnoser.prefilter.runbooks import load_runbooks, shipped_runbook_dir

ROOT = Path(__file__).resolve().parents[1]
XID79 = ROOT / "log_fixtures" / "xid79-then-nccl-timeouts" / "logs"
runner = CliRunner()

NEW = """---
id: site-lustre-quota
title: 'Lustre project quota exceeded (site)'
category: infra
subtype: lustre_quota
action: stop_and_notify
priority: 70
confidence: 0.9
signatures:
  - 'LustreError: .*disk quota exceeded for project (?P<detail>\\d+)'
examples:
  match:
    - 'LustreError: 11-0: scratch-OST0004: disk quota exceeded for project 4242'
---
# Lustre project quota exceeded

## How to fix
Ask storage@ for more quota on the project.
"""

OVERRIDE = (ROOT / "runbooks" / "cuda-oom.md").read_text().replace("subtype: cuda_oom", "subtype: cuda_oom_site")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    d = tmp_path / "site-runbooks"
    d.mkdir()
    (d / "lustre-quota.md").write_text(NEW)
    (d / "our-cuda-oom.md").write_text(OVERRIDE)
    return d


def _triage(*args: str) -> dict:
    result = runner.invoke(app, ["triage", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_site_runbooks_add_and_override_and_say_so(site: Path) -> None:
    shipped = load_runbooks(catalogs=False)
    listed = runner.invoke(app, ["runbooks", "--json", "--runbooks", str(site)])
    books = {b["id"]: b for b in json.loads(listed.stdout)}
    assert len([b for b in books.values() if b["source"].endswith(".md")]) == len(shipped) + 1
    assert books["site-lustre-quota"]["source"] == str(site / "lustre-quota.md")
    assert books["site-lustre-quota"]["overrides"] is None
    assert books["cuda-oom"]["source"] == str(site / "our-cuda-oom.md")
    assert books["cuda-oom"]["overrides"] == str(shipped_runbook_dir() / "cuda-oom.md")
    assert books["gpu-xid-79"]["source"] == str(shipped_runbook_dir() / "gpu-xid-79.md")
    assert books["nvidia-xid.79"]["source"].endswith("catalog/nvidia-xid.yaml")  # the catalogs stay too


def test_the_xid79_fixture_diagnoses_as_before_with_a_site_directory(site: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    before = _triage(str(XID79))
    for how in ("option", "env"):
        if how == "env":
            monkeypatch.setenv("DIAGNOSER_RUNBOOKS", str(site))
        after = _triage(str(XID79), *(["--runbooks", str(site)] if how == "option" else []))
        assert (after["subtype"], after["action"], after["culprit"], after["rule"]) == (
            "gpu_xid_79", "drain_and_restart", before["culprit"], before["rule"])
    log = tmp_path / "job" / "rank0.log"
    log.parent.mkdir()
    log.write_text("[rank0]: step 10\n[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 "
                   "GiB\nLustreError: 11-0: scratch-OST0004: disk quota exceeded for project 4242\n")
    verdict = _triage(str(log), "--runbooks", str(site))
    assert verdict["subtype"] in ("cuda_oom_site", "lustre_quota")
    assert verdict["subtype"] != "cuda_oom"  # the shipped runbook is replaced
    only_new = tmp_path / "quota.log"
    only_new.write_text("LustreError: 11-0: scratch-OST0004: disk quota exceeded for project 4242\n")
    assert _triage(str(only_new), "--runbooks", str(site))["rule"] == "site-lustre-quota"


def test_runbooks_show_and_a_missing_id() -> None:
    shown = runner.invoke(app, ["runbooks", "show", "gpu-xid-79"])
    assert shown.exit_code == 0 and "fell off the bus" in shown.output and "gpu-xid-79.md" in shown.output
    missing = runner.invoke(app, ["runbooks", "show", "xid-79"])
    assert missing.exit_code == 1 and "gpu-xid-79" in missing.output  # not found: 1, like `incidents show`


def test_an_entry_a_job_wide_analysis_gives_says_so_instead_of_signatures() -> None:
    shown = runner.invoke(app, ["runbooks", "show", "nccl.network-choice-differs-across-nodes"])
    assert shown.exit_code == 0 and "given by: prefilter/consistency.py" in shown.output
    assert "signature:" not in shown.output


def test_runbook_ids_are_never_cut_in_a_pipe() -> None:
    out = runner.invoke(app, ["runbooks"]).stdout  # CliRunner's stdout is not a terminal
    ids = [line.split("\t")[0] for line in out.splitlines()[1:]]
    assert "gpu-xid-48-dbe" in ids and "gpu-xid-92-94-95-ecc" in ids and not any("…" in i for i in ids)
