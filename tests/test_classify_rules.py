"""`diagnoser rules propose`: draft runbooks from LLM-diagnosed incidents, verified before writing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from diagnoser.classify.cli import register
from diagnoser.classify.rules import ProposeError, candidates, message_of, propose_rule
from diagnoser.models import Action, Category, DecidedBy, Diagnosis, Evidence, FirstFailure
from diagnoser.prefilter.runbooks import default_runbook_dir, load_runbooks, parse_runbook

FIXTURES = Path(__file__).parents[1] / "log_fixtures"
NOVEL = ("[rank3]:[2026-03-04 05:06:00,123] RuntimeError: Triton Error [CUDA]: an illegal instruction was "
         "encountered in kernel _fwd_kernel_0d1d2d3d")
XID = "[Tue Mar  4 05:06:07 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


def incident(tmp_path: Path, line: str) -> Path:
    logs = tmp_path / "incident" / "gpu-03"
    logs.mkdir(parents=True)
    (logs / "rank3.log").write_text(f"[rank3]:[2026-03-04 05:05:00,000] step 10 loss 2.1\n{line}\n")
    return tmp_path / "incident"


def verdict(line: str, subtype: str = "triton_illegal_instruction", decided_by: DecidedBy = DecidedBy.LLM,
            category: Category = Category.USER_CODE) -> Diagnosis:
    return Diagnosis(category=category, subtype=subtype, action=Action.STOP_AND_NOTIFY, confidence=0.8,
                     root_cause="A Triton kernel executed an illegal instruction on rank 3",
                     evidence=[Evidence(source="gpu-03/rank3.log", line=2, text=line)],
                     first_failure=FirstFailure(source="gpu-03/rank3.log", line=2), decided_by=decided_by,
                     notes=["LLM explanation: a custom kernel bug; restarting will hit it again"])


def test_signature_candidates_mask_the_variable_parts():
    assert message_of(NOVEL).startswith("RuntimeError: Triton Error")
    cands = candidates("Mar  4 05:06:07 gpu-node-112 kernel: [88231.004512] mlx5_core 0000:c1:00.0: "
                       "mlx5_health_try_recover:327: health recovery flow aborted, PCI reads still not working")
    assert cands[0] == "health recovery flow aborted, PCI reads still not working"
    whole = re.compile(cands[-1])
    assert whole.search("mlx5_core 0000:a1:00.1: mlx5_health_try_recover:12: health recovery flow aborted, "
                        "PCI reads still not working")


def test_a_verified_draft_is_written_for_review(tmp_path):
    logs = incident(tmp_path, NOVEL)
    draft = propose_rule(verdict(NOVEL), [logs], tmp_path / "drafts", FIXTURES)
    assert draft.path == tmp_path / "drafts" / "triton-illegal-instruction.md"
    book = parse_runbook(draft.path)
    assert book.subtype == "triton_illegal_instruction" and book.action == Action.STOP_AND_NOTIFY
    assert any(r.search(message_of(NOVEL)) for r in book.compiled)
    assert draft.incident_matches == 1 and draft.fixture_files > 50 and draft.examples_checked > 100
    text = draft.path.read_text()
    assert "DRAFT" in text and "TODO(reviewer)" in text and "## How to fix" in text
    # once moved in, its own example is won by it (priority above the generic matches)
    others = [b for b in load_runbooks() if any(r.search(NOVEL) for r in b.compiled)]
    assert all(book.priority > b.priority for b in others)
    assert not list(default_runbook_dir().glob("triton-illegal-instruction*"))


def test_a_signature_that_matches_other_scenarios_is_rejected(tmp_path):
    logs = incident(tmp_path, XID)
    with pytest.raises(ProposeError, match="false match|matches an example"):
        propose_rule(verdict(XID, subtype="gpu_mystery_fault", category=Category.HARDWARE), [logs],
                     tmp_path / "drafts", FIXTURES, write=False)


def test_only_llm_verdicts_are_learned_from(tmp_path):
    logs = incident(tmp_path, NOVEL)
    with pytest.raises(ProposeError, match="decided by rule"):
        propose_rule(verdict(NOVEL, decided_by=DecidedBy.RULE), [logs], tmp_path / "drafts", FIXTURES)


def test_drafts_never_go_into_the_runbook_directory(tmp_path):
    logs = incident(tmp_path, NOVEL)
    with pytest.raises(ProposeError, match="never written into the runbook directory"):
        propose_rule(verdict(NOVEL), [logs], default_runbook_dir() / "drafts", FIXTURES)


def test_cli_rules_propose(tmp_path):
    app = typer.Typer()
    register(app)

    @app.command("noop")
    def noop() -> None:  # a second command keeps typer from collapsing the group
        pass

    logs = incident(tmp_path, NOVEL)
    (tmp_path / "verdict.json").write_text(json.dumps(verdict(NOVEL).to_json_dict()))
    runner = CliRunner()
    out = tmp_path / "drafts"
    result = runner.invoke(app, ["rules", "propose", str(tmp_path / "verdict.json"), str(logs), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "draft written" in result.output and (out / "triton-illegal-instruction.md").is_file()
    again = runner.invoke(app, ["rules", "propose", str(tmp_path / "verdict.json"), str(logs), "--out", str(out)])
    assert again.exit_code == 1 and "exists" in again.output
    bad = runner.invoke(app, ["rules", "propose", str(tmp_path / "nope.json"), str(logs)])
    assert bad.exit_code == 2
