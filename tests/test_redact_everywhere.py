"""Secrets in logs never leave redacted-less: triage --json and the human view, diagnosis.json and
notification.json of the controller, incident signatures in the store, and the new secret forms."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from test_act_controller import Script, make, steps  # noqa: E402

from diagnoser.act.hooks import default_notifier  # noqa: E402
from diagnoser.classify.redact import redact, redact_diagnosis  # noqa: E402
from diagnoser.cli import app  # noqa: E402
from diagnoser.models import Action, Category, Culprit, Diagnosis, Evidence  # noqa: E402
from diagnoser.retrieve.incident import from_diagnosis  # noqa: E402

SECRETS = {
    "xapp-1-A0123456789-1234567890123-abcdefabcdef0123": "SLACK_APP_TOKEN={}",
    "xoxe.xoxp-1-Mi0yLTExMjM0NTY3ODkwLTEy": "refresh token {} rotated",
    "xoxe-1-My0xLTEyMzQ1Njc4OTAtMTIzNDU2Nzg5MA": "SLACK_REFRESH={}",
    "S3cr3tPass": "mysql -u root -p{} -h db -P 3306 runs",
    "0123abcdsecret": "machine api.wandb.ai login trainer password {}",
    "correct horse battery staple": 'db_password="{}" retries=3',
    "pa/ss@w0rd": "postgres://trainer:{}@db.internal:5432/runs",
}


@pytest.mark.parametrize("secret,template", SECRETS.items())
def test_new_secret_forms_are_redacted(secret: str, template: str) -> None:
    out = redact(template.format(secret))
    assert secret not in out and "[REDACTED]" in out
    for word in secret.split():  # no piece of a quoted password survives
        assert len(word) < 5 or word not in out


def test_ordinary_lines_are_left_alone() -> None:
    for line in ("password authentication failed for user bob", "https://host:8080/path",
                 "num_tokens: 4096", "mysql -P 3306 -h db"):
        assert redact(line) == line


LEAKY = ("Traceback (most recent call last):\n"
         '  File "train.py", line 10, in <module>\n'
         "    conn = connect(url)\n"
         "sqlalchemy.exc.OperationalError: could not connect to postgres://trainer:pa/ss@w0rd@db.internal:5432/runs "
         "with SLACK_APP_TOKEN=xapp-1-A0123456789-1234567890123-abcdefabcdef0123 after mysql -uroot -pS3cr3tPass\n")


def _leaks(text: str) -> list[str]:
    return [s for s in ("pa/ss@w0rd", "w0rd@db", "xapp-1-A0123456789", "S3cr3tPass") if s in text]


def test_triage_json_and_human_view_are_redacted(tmp_path: Path) -> None:
    (tmp_path / "rank0.log").write_text("[rank0]: step 1\n" + "".join(f"[rank0]: {ln}\n" for ln in LEAKY.splitlines()))
    runner = CliRunner()
    as_json = runner.invoke(app, ["triage", str(tmp_path), "--json", "--llm", "none"])
    assert as_json.exit_code == 0, as_json.output
    d = json.loads(as_json.stdout)
    assert "OperationalError" in json.dumps(d["evidence"])  # the line is still cited
    assert _leaks(as_json.stdout) == []
    human = runner.invoke(app, ["triage", str(tmp_path), "--llm", "none"])
    assert human.exit_code == 0 and "OperationalError" in human.output and _leaks(human.output) == []


def _leaky_verdict() -> Diagnosis:
    line = LEAKY.splitlines()[-1]
    return Diagnosis(category=Category.USER_CODE, subtype="python_exception", action=Action.STOP_AND_NOTIFY,
                     confidence=0.9, culprit=Culprit(), root_cause=f"the job raised: {line}",
                     evidence=[Evidence(source="rank0.log", line=4, text=line)])


def test_controller_writes_no_secret_to_diagnosis_or_notification(tmp_path: Path) -> None:
    c, _ = make(tmp_path, [Script(steps(1, 2), exit_at=3, code=1)], [_leaky_verdict()])
    c.notifier = default_notifier(None)
    c.run()
    diagnosis = (c.layout.root / "attempt-001" / "diagnosis.json").read_text()
    note = (c.layout.root / "notification.json").read_text()
    assert "OperationalError" in diagnosis and "OperationalError" in note
    assert _leaks(diagnosis) == [] and _leaks(note) == [] and _leaks(c.layout.audit.read_text()) == []


def test_incident_signatures_are_stored_redacted() -> None:
    inc = from_diagnosis(_leaky_verdict())
    assert _leaks(inc.signature) == [] and _leaks(inc.root_cause) == []
    assert _leaks(inc.model_dump_json()) == []
    assert redact_diagnosis(_leaky_verdict()).evidence[0].text.count("[REDACTED]") >= 3
