"""`diagnoser run --slack`: the run's story goes into the job's Slack thread and approvals are asked there;
a real `diagnoser run` process against the local Slack Web API the bot tests use."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("slack_sdk")

from bot_support import FakeSlack  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from diagnoser.act.events import DecisionMade, read_audit  # noqa: E402
from diagnoser.cli import app  # noqa: E402

JOB = "import os, sys\nprint('step 1', flush=True)\nsys.exit(1 if os.environ['DIAGNOSER_ATTEMPT'] == '1' else 0)\n"



def start(fake: FakeSlack, tmp: Path, *options: str, approvers: tuple[str, ...] = ("U1",)) -> subprocess.Popen:
    (tmp / "job.py").write_text(JOB)
    (tmp / "bot.yaml").write_text(json.dumps({"channel": "COPS", "api_base_url": fake.base_url,
                                              "approvers": list(approvers), "data_dir": str(tmp / "bot")}))
    env = {**os.environ, "DIAGNOSER_BOT_CONFIG": str(tmp / "bot.yaml"), "SLACK_BOT_TOKEN": "xoxb-test"}
    cmd = [sys.executable, "-m", "diagnoser.act.cli", "run", "--json", "--slack", "--run-dir", str(tmp / "job-7"),
           "--kill-grace", "1s", *options, "--", sys.executable, str(tmp / "job.py")]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=120)
    assert out.strip(), err[-2000:]
    return json.loads(out)


def test_run_posts_its_story_into_the_job_thread(fake, tmp_path: Path) -> None:
    summary = finish(start(fake, tmp_path))
    assert summary["status"] == "succeeded"
    posts = fake.calls("chat.postMessage")
    parent = [p for p in posts if "thread_ts" not in p]
    assert len(parent) == 1 and parent[0]["channel"] == "COPS" and "job-7" in parent[0]["text"]
    replies = json.dumps([p for p in posts if p.get("thread_ts")])
    assert "exit" in replies and "restart" in replies  # the failure, the verdict and the decision
    assert "finished: succeeded" in json.dumps(fake.calls("chat.update")[-1])
    assert fake.server.headers_seen[0]["Authorization"] == "Bearer xoxb-test"


def test_approval_is_asked_in_slack_and_answered(fake, tmp_path: Path) -> None:
    proc = start(fake, tmp_path, "--require-approval", "escalate", "--approval-timeout", "60")
    deadline = time.monotonic() + 60
    request = tmp_path / "job-7" / "approval-request.json"
    while not request.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert request.exists(), proc.stderr.read() if proc.poll() is not None else "no approval request"
    buttons = [p for p in fake.wait("chat.postMessage", 2) if "approv" in json.dumps(p.get("blocks", "")).lower()]
    assert buttons, fake.calls("chat.postMessage")
    res = CliRunner().invoke(app, ["approve", str(tmp_path / "job-7"), "--by", "alice"])
    assert res.exit_code == 0, res.output
    assert finish(proc)["status"] == "succeeded"
    decision = next(e for e in read_audit(tmp_path / "job-7" / "audit.jsonl") if isinstance(e, DecisionMade))
    # the approver recorded is the OS user who ran `diagnoser approve` (--by is only a note)
    assert decision.action.value == "restart" and decision.approved_by == getpass.getuser()


def test_without_approvers_nobody_is_waited_for(fake, tmp_path: Path) -> None:
    proc = start(fake, tmp_path, "--require-approval", "escalate", "--approval-timeout", "60", approvers=())
    t0 = time.monotonic()
    out, err = proc.communicate(timeout=120)
    assert json.loads(out)["status"] == "stopped" and time.monotonic() - t0 < 50
    assert "nobody can approve" in err
    decision = next(e for e in read_audit(tmp_path / "job-7" / "audit.jsonl") if isinstance(e, DecisionMade))
    assert decision.action.value == "escalate" and "no approver configured" in decision.reason


def test_slack_without_a_channel_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "bot.yaml").write_text("approvers: [U1]\n")
    res = CliRunner().invoke(app, ["run", "--slack", "--bot-config", str(tmp_path / "bot.yaml"), "--run-dir",
                                   str(tmp_path / "r"), "--", sys.executable, "-c", "pass"],
                             env={"SLACK_BOT_TOKEN": "xoxb-test"})
    assert res.exit_code == 2 and "channel" in res.output
