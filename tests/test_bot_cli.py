"""`diagnoser bot serve` as a process, secrets only from env/config, and feedback into the real store."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

pytest.importorskip("slack_bolt")

import typer  # noqa: E402
from bot_support import SECRET, FakeSlack, command_body, slack_post  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from diagnoser.bot.cli import register  # noqa: E402
from diagnoser.bot.feedback import FeedbackSink  # noqa: E402
from diagnoser.models import Action, Category, Diagnosis, Evidence  # noqa: E402

MAIN = "import typer; from diagnoser.bot.cli import register; app = typer.Typer(); register(app); app()"


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def test_serve_has_no_secret_options_and_needs_them_from_env(tmp_path, monkeypatch) -> None:
    for name in ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "DIAGNOSER_BOT_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()
    help_text = runner.invoke(_app(), ["bot", "serve", "--help"]).output
    assert "--token" not in help_text and "--signing-secret" not in help_text
    result = runner.invoke(_app(), ["bot", "serve", "--port", "0"])
    assert result.exit_code == 2 and "SLACK_" in result.output


def test_serve_process_answers_a_signed_slash_command(tmp_path) -> None:
    fake = FakeSlack()
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank0.log").write_text("RuntimeError: CUDA error: an illegal memory access was encountered\n")
    cfg = tmp_path / "bot.yaml"
    cfg.write_text(f"api_base_url: {fake.base_url}\nallowed_roots: [{logs}]\ndata_dir: {tmp_path / 'data'}\n"
                   "feedback: jsonl\n")
    env = {**os.environ, "SLACK_BOT_TOKEN": "xoxb-test", "SLACK_SIGNING_SECRET": SECRET}
    proc = subprocess.Popen([sys.executable, "-c", MAIN, "bot", "serve", "--config", str(cfg), "--port", "0"],
                            env=env, stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        deadline = time.monotonic() + 30
        while "listening on" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline() if proc.stderr else ""
            if not line and proc.poll() is not None:
                break
        m = re.search(r"http://127\.0\.0\.1:(\d+)(/\S+)", line)
        assert m, line
        url = f"http://127.0.0.1:{m.group(1)}{m.group(2)}"
        assert slack_post(url, command_body(str(logs)), "bad")[0] == 401
        status, body = slack_post(url, command_body(str(logs)), SECRET)
        assert status == 200 and "Diagnosing" in body
        reply = fake.wait("chat.postMessage", 2, timeout=30)[1]
        assert reply["thread_ts"] and reply["blocks"]
    finally:
        proc.terminate()
        proc.wait(10)
        fake.close()


def test_feedback_goes_into_the_incident_store(tmp_path) -> None:
    from diagnoser.retrieve.store import IncidentStore

    d = Diagnosis(category=Category.HARDWARE, subtype="gpu_xid_79", action=Action.DRAIN_AND_RESTART,
                  confidence=0.9, root_cause="GPU fell off the bus",
                  evidence=[Evidence(source="dmesg", line=1, text="NVRM: Xid (PCI:0000:3b:00): 79, fell off the bus")])
    sink = FeedbackSink(tmp_path / "data", tmp_path / "store", "store")
    went = sink.record(d, "job-1", "slack:U1", Category.INFRA)
    assert went.startswith("incident inc-")
    with IncidentStore.open(tmp_path / "store") as st:
        inc = st.get(went.split()[-1])
    assert inc is not None and (inc.category, inc.status.value, inc.confirmed_by, inc.source_job) == (
        Category.INFRA, "corrected", "slack:U1", "job-1")
    assert not (tmp_path / "data" / "feedback.jsonl").exists()
