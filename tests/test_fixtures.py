"""Every log_fixtures scenario gets the verdict a senior engineer would give, grounded in its logs."""

from pathlib import Path

import pytest
import yaml

from diagnoser.collect.text import clean_line
from diagnoser.triage import triage

FIXTURES = sorted(p for p in (Path(__file__).parents[1] / "log_fixtures").iterdir() if (p / "expected.yaml").exists())


def test_there_are_enough_scenarios():
    assert len(FIXTURES) >= 12


@pytest.mark.parametrize("scenario", FIXTURES, ids=lambda p: p.name)
def test_fixture_verdict(scenario):
    expected = yaml.safe_load((scenario / "expected.yaml").read_text())
    logs = scenario / "logs"
    d = triage([str(logs)], workers=1)
    got = (d.category.value, d.subtype, d.action.value)
    assert got == (expected["category"], expected["subtype"], expected["action"]), d.root_cause
    culprit = expected.get("culprit") or {}
    assert set(culprit.get("nodes", [])) <= set(d.culprit.nodes)
    assert set(culprit.get("ranks", [])) <= set(d.culprit.ranks)
    assert set(culprit.get("gpus", [])) <= set(d.culprit.gpus)
    if expected.get("first_failure_source"):
        assert d.first_failure.source == expected["first_failure_source"]
    assert d.subtype not in expected.get("not_subtypes", [])
    # grounding: every cited line exists, at that line number, in that file
    for e in d.evidence:
        lines = (logs / e.source).read_bytes().split(b"\n")
        actual = clean_line(lines[e.line - 1].decode("utf-8", "replace"))
        assert any(seg.strip("…") in actual for seg in e.text.split("\r")), (e.source, e.line)
