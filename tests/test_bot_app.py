"""The running Slack app over real HTTP on loopback: signed slash commands and interactions,
rejected forgeries and replays, redaction, per-channel rate limit, verdict feedback."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("slack_bolt")

from bot_support import SECRET, action_body, command_body, slack_post, start_bot  # noqa: E402

from diagnoser.bot.security import sign  # noqa: E402
from diagnoser.models import Action, Category, Culprit, Diagnosis, Evidence  # noqa: E402

OPENAI = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx123456"
HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123"



@pytest.fixture
def logs(tmp_path: Path) -> Path:
    d = tmp_path / "logs" / "job-42"
    d.mkdir(parents=True)
    (d / "rank0.log").write_text(
        "2026-01-01T00:00:00Z step 10 loss 2.1\n"
        f"2026-01-01T00:00:01Z export OPENAI_API_KEY={OPENAI} HF_TOKEN={HF}\n"
        "2026-01-01T00:00:05Z Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    return d


def leaky(paths: list[str]) -> Diagnosis:
    """A verdict that cites a line with secrets in it (the redaction must catch them)."""
    return Diagnosis(category=Category.HARDWARE, subtype="gpu_xid_79", action=Action.DRAIN_AND_RESTART,
                     confidence=0.97, culprit=Culprit(nodes=["gpu-017"], ranks=[5]),
                     root_cause=f"GPU fell off the bus; token {HF} seen",
                     evidence=[Evidence(source="dmesg/gpu-017.log", line=812,
                                        text=f"NVRM: Xid 79 OPENAI_API_KEY={OPENAI}")],
                     runbook="runbooks/gpu-xid-79.md")


def test_diagnose_replies_in_a_thread_with_the_verdict(tmp_path, fake, logs) -> None:
    server, url = start_bot(tmp_path, fake, allowed_roots=[str(tmp_path / "logs")],
                            runbook_url="https://git.example/diagnoser/blob/main")
    try:
        status, body = slack_post(url, command_body(str(logs)), SECRET)
        assert status == 200 and "Diagnosing" in body
        parent = fake.wait("chat.postMessage")[0]
        assert parent["channel"] == "C1" and "thread_ts" not in parent
        reply = fake.wait("chat.postMessage", 2)[1]
        update = fake.wait("chat.update")[0]
        ts = update["ts"]
        assert reply["thread_ts"] == ts  # the verdict is a reply in the thread of the parent
        blocks = json.dumps(reply["blocks"])
        assert "user_code" in blocks and "stop_and_notify" in blocks and "Evidence" in blocks
        assert "rank0.log" in blocks and "feedback_correct" in blocks
        assert "user_code" in update["text"]
        assert OPENAI not in fake.raw() and HF not in fake.raw()
        assert len(fake.calls("chat.postMessage")) == 2  # no channel spam
    finally:
        server.stop()


def test_forged_unsigned_and_replayed_requests_are_rejected(tmp_path, fake, logs) -> None:
    server, url = start_bot(tmp_path, fake, allowed_roots=[str(tmp_path / "logs")])
    try:
        body = command_body(str(logs))
        old = int(time.time()) - 600
        cases = [
            slack_post(url, body, None),  # unsigned
            slack_post(url, body, "not-the-secret"),  # signed with the wrong secret
            slack_post(url, body, SECRET, signature="v0=" + "0" * 64),  # mis-signed
            slack_post(url, body, SECRET, ts=old),  # a replay: valid signature, stale timestamp
        ]
        stamp = str(int(time.time()))
        tampered = sign(SECRET, stamp, body)
        cases.append(slack_post(url, body.replace("C1", "C2"), SECRET, ts=int(stamp), signature=tampered))
        assert [c[0] for c in cases] == [401] * 5
        assert server.gate.rejected == 5
        time.sleep(0.3)
        assert fake.calls() == []  # nothing was posted, not even auth.test
        ok, _ = slack_post(url, body, SECRET)
        assert ok == 200
    finally:
        server.stop()


def test_bolt_verifies_signatures_behind_the_gate(tmp_path, fake) -> None:
    from slack_bolt.request import BoltRequest
    from slack_sdk import WebClient

    from diagnoser.bot.app import build_app
    from diagnoser.bot.config import load_bot_config

    env = {"SLACK_BOT_TOKEN": "xoxb-t", "SLACK_SIGNING_SECRET": SECRET}
    cfg = load_bot_config(None, {"data_dir": tmp_path}, env=env)
    bot = build_app(cfg, WebClient(token="xoxb-t", base_url=fake.base_url))
    body = command_body("x")
    resp = bot.bolt.dispatch(BoltRequest(body=body, headers={
        "x-slack-request-timestamp": str(int(time.time()) - 600),
        "x-slack-signature": sign(SECRET, str(int(time.time()) - 600), body)}))
    assert resp.status == 401


def test_paths_outside_the_allowed_roots_are_refused(tmp_path, fake, logs) -> None:
    server, url = start_bot(tmp_path, fake, allowed_roots=[str(tmp_path / "logs")])
    try:
        status, body = slack_post(url, command_body("/etc/passwd"), SECRET)
        assert status == 200 and "not below an allowed log root" in body
        status, body = slack_post(url, command_body(str(tmp_path / "logs" / ".." / "botdata")), SECRET)
        assert "not below an allowed log root" in body
        time.sleep(0.2)
        assert fake.calls("chat.postMessage") == []
    finally:
        server.stop()


def test_job_id_resolves_to_the_newest_attempt_of_a_run(tmp_path, fake) -> None:
    run = tmp_path / "runs" / "llama-7b" / "attempt-001" / "logs"
    run.mkdir(parents=True)
    (run / "rank0.log").write_text("x\n")
    seen: list[list[str]] = []

    def triage_fn(paths: list[str]) -> Diagnosis:
        seen.append(paths)
        return leaky(paths)

    server, url = start_bot(tmp_path, fake, triage_fn, runs_root=str(tmp_path / "runs"))
    try:
        status, _ = slack_post(url, command_body("llama-7b"), SECRET)
        assert status == 200
        fake.wait("chat.update")
        assert seen == [[str(run.resolve())]]
    finally:
        server.stop()


def test_secrets_never_reach_slack(tmp_path, fake, logs) -> None:
    server, url = start_bot(tmp_path, fake, leaky, allowed_roots=[str(tmp_path / "logs")])
    try:
        assert slack_post(url, command_body(str(logs)), SECRET)[0] == 200
        reply = fake.wait("chat.postMessage", 2)[1]
        fake.wait("chat.update")
        raw = fake.raw()
        assert OPENAI not in raw and HF not in raw and "[REDACTED]" in json.dumps(reply["blocks"])
        assert "gpu-017" in json.dumps(reply["blocks"]) and "gpu-xid-79.md" in json.dumps(reply["blocks"])
    finally:
        server.stop()


def test_rate_limit_per_channel(tmp_path, fake, logs) -> None:
    server, url = start_bot(tmp_path, fake, leaky, allowed_roots=[str(tmp_path / "logs")],
                            rate_burst=1, rate_per_min=1)
    try:
        assert "Diagnosing" in slack_post(url, command_body(str(logs)), SECRET)[1]
        fake.wait("chat.postMessage")
        status, body = slack_post(url, command_body(str(logs)), SECRET)
        assert status == 200 and "Too many" in body
        assert "Diagnosing" in slack_post(url, command_body(str(logs), channel="C2"), SECRET)[1]
        time.sleep(0.3)
        assert {p["channel"] for p in fake.calls("chat.postMessage")} == {"C1", "C2"}
        parents = [p for p in fake.calls("chat.postMessage") if p["channel"] == "C1" and "thread_ts" not in p]
        assert len(parents) == 1  # the second /diagnose in C1 was refused
    finally:
        server.stop()


def test_feedback_correct_and_wrong_feed_the_incident_memory(tmp_path, fake, logs) -> None:
    server, url = start_bot(tmp_path, fake, leaky, allowed_roots=[str(tmp_path / "logs")])
    try:
        slack_post(url, command_body(str(logs)), SECRET)
        reply = fake.wait("chat.postMessage", 2)[1]
        buttons = next(b for b in reply["blocks"] if b.get("block_id") == "feedback")["elements"]
        key = buttons[0]["value"]
        assert slack_post(url, action_body("feedback_correct", key, "U7"), SECRET)[0] == 200
        thanks = fake.wait("chat.postEphemeral")[0]
        assert thanks["user"] == "U7" and "confirmed" in thanks["text"]
        assert slack_post(url, action_body("feedback_wrong", key, "U8"), SECRET)[0] == 200
        picker = fake.wait("chat.postEphemeral", 2)[1]
        options = picker["blocks"][0]["accessory"]["options"]
        infra = next(o["value"] for o in options if o["value"].endswith("|infra"))
        assert slack_post(url, action_body("feedback_category", "", "U8", selected=infra), SECRET)[0] == 200
        fake.wait("chat.postEphemeral", 3)
        lines = [json.loads(x) for x in (tmp_path / "botdata" / "feedback.jsonl").read_text().splitlines()]
        assert [(x["status"], x["category"], x["confirmed_by"]) for x in lines] == [
            ("confirmed", "hardware", "slack:U7"), ("corrected", "infra", "slack:U8")]
        assert all(x["schema"] == "incident/v1" for x in lines)
        assert HF not in json.dumps(lines) and OPENAI not in json.dumps(lines)  # memory keeps no secrets
    finally:
        server.stop()
