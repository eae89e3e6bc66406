"""Notifications from `diagnoser run`: one Slack thread per job (parent once, replies, in-place status),
and the plain webhook notifier; against local HTTP servers speaking Slack's wire format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("slack_sdk")

from bot_support import FakeSlack  # noqa: E402
from slack_sdk import WebClient  # noqa: E402

from diagnoser.act.controller import Status  # noqa: E402
from diagnoser.bot.notifier import SlackNotifier, WebhookNotifier  # noqa: E402
from diagnoser.bot.security import RateLimiter  # noqa: E402
from diagnoser.models import Action, Category, Diagnosis, Evidence  # noqa: E402

TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123"



def notifier(fake: FakeSlack, **kw) -> SlackNotifier:
    return SlackNotifier(WebClient(token="xoxb-test", base_url=fake.base_url), "COPS", **kw)


def test_one_thread_per_job_and_status_edits_the_parent(fake, tmp_path) -> None:
    n = notifier(fake, runbook_url="https://git.example/rb", state_file=tmp_path / "threads.json")
    d = Diagnosis(category=Category.INFRA, subtype="ib_link_down", action=Action.RESTART_EXCLUDING_NODES,
                  confidence=0.9, root_cause="IB port down on n3",
                  evidence=[Evidence(source="n3/dmesg", line=7, text=f"mlx5 port down {TOKEN}")],
                  runbook="runbooks/ib-link-down.md")
    n.post_failure("job-1", 1, "exit code 1")
    n.post_verdict("job-1", d)
    n.post_action("job-1", "restart_excluding_nodes", "without n3", attempt=1)
    n.update_status("job-1", "restarting (attempt 2)")
    n.post_failure("job-2", 1, "hang")
    posts, updates = fake.calls("chat.postMessage"), fake.calls("chat.update")
    parents = [p for p in posts if "thread_ts" not in p]
    assert [p["text"] for p in parents] == ["*job-1* — running", "*job-2* — running"]
    ts1 = json.loads((tmp_path / "threads.json").read_text())["job-1"]
    assert [p.get("thread_ts") for p in posts[1:4]] == [ts1] * 3  # failure, verdict, action in job-1's thread
    verdict = json.dumps(posts[2]["blocks"])
    assert "ib_link_down" in verdict and "<https://git.example/rb/runbooks/ib-link-down.md|" in verdict
    assert TOKEN not in fake.raw() and "[REDACTED]" in verdict
    assert updates == [{"channel": "COPS", "ts": ts1, "text": "*job-1* — restarting (attempt 2)",
                        "blocks": updates[0]["blocks"]}]
    # a restarted controller continues the same thread
    again = notifier(fake, state_file=tmp_path / "threads.json")
    again.post_action("job-1", "restart", "again")
    assert fake.calls("chat.postMessage")[-1]["thread_ts"] == ts1
    assert len([p for p in fake.calls("chat.postMessage") if "thread_ts" not in p]) == 2


def test_controller_hooks_notifier_and_listener(fake) -> None:
    n = notifier(fake)
    listen = n.status_listener("job-9")
    s = Status(phase="running", attempt=1)
    for _ in range(5):  # the controller calls its listener on every tick: only changes go out
        listen(s)
    listen(Status(phase="failed", attempt=1, message="exit code 1"))
    listen(Status(phase="failed", attempt=1, message="exit code 1"))
    n(Path("/runs/job-9"), {"job_id": "job-9", "attempt": 1, "action": "stop_and_notify", "reason": "user code",
                            "category": "user_code", "subtype": "python_exception", "confidence": 0.9,
                            "root_cause": "KeyError", "evidence": [{"source": "rank0.log", "line": 3,
                                                                    "text": f"KeyError {TOKEN}"}]})
    posts = fake.calls("chat.postMessage")
    assert [p["text"] for p in posts if "thread_ts" not in p] == ["*job-9* — running (attempt 1)"]
    assert [p["text"].split(" ")[0] for p in posts[1:]] == [":x:", ":gear:"]
    assert "KeyError" in posts[-1]["text"] and TOKEN not in fake.raw()
    assert [u["text"] for u in fake.calls("chat.update")] == [
        "*job-9* — failed (attempt 1): exit code 1",
        "*job-9* — stop_and_notify (attempt 1)"]


def test_rate_limited_channel_drops_instead_of_spamming(fake) -> None:
    t = [0.0]
    n = notifier(fake, limiter=RateLimiter(rate_per_min=1, burst=2, clock=lambda: t[0]))
    for i in range(5):
        n.post_action("job-3", "restart", f"try {i}")
    assert len(fake.calls("chat.postMessage")) == 2
    assert n.poster.limiter.dropped == {"COPS": 4}  # the parent and one reply went out


@pytest.mark.parametrize("kind", ["slack", "json"])
def test_webhook_notifier_posts_redacted_json(fake, kind) -> None:
    url = fake.base_url.replace("/api/", "/hooks/T1/B1/xyz")
    hook = WebhookNotifier(url, kind=kind)
    hook(Path("/runs/j"), {"job_id": "j", "attempt": 2, "action": "escalate", "reason": f"low confidence {TOKEN}",
                           "evidence": [{"source": "r0", "line": 1, "text": "Authorization: Bearer abcdefgh12345678"}]})
    (body,) = fake.calls()
    assert TOKEN not in fake.raw() and "abcdefgh12345678" not in fake.raw()
    if kind == "slack":
        assert body["text"].startswith("j: escalate (attempt 2)") and body["blocks"][0]["type"] == "section"
    else:
        assert body["schema"] == "diagnoser-notification/v1" and body["action"] == "escalate"
    assert WebhookNotifier("http://127.0.0.1:9/nothing", timeout_s=1).send({"job_id": "x"}) is False


def test_log_text_cannot_ping_the_channel_or_hide_secrets_from_redaction(fake) -> None:
    n = notifier(fake)
    url = "https://bucket.s3.amazonaws.com/ckpt?X-Amz-Date=1&X-Amz-Signature=deadbeefcafe0123456789"
    n.post_failure("job-5", 1, f"<!channel> <https://evil.example|click> fetch {url}")
    d = Diagnosis(category=Category.USER_CODE, subtype="x", action=Action.STOP_AND_NOTIFY, confidence=0.5,
                  root_cause="<!here> boom", evidence=[Evidence(source="r0", line=1, text=f"GET {url} <@U123>")])
    n.post_verdict("job-5", d)
    raw = fake.raw()
    assert "<!channel>" not in raw and "<!here>" not in raw and "<@U123>" not in raw and "<https://evil" not in raw
    assert "&lt;!channel&gt;" in raw and "deadbeefcafe0123456789" not in raw


def test_slack_hooks_from_the_bot_config(fake, tmp_path) -> None:
    from diagnoser.bot.config import load_bot_config
    from diagnoser.bot.wiring import slack_hooks

    cfg = load_bot_config(None, {"channel": "COPS", "data_dir": tmp_path, "approvers": ["U1"],
                                 "api_base_url": fake.base_url, "approval_default": "approve"},
                          env={"SLACK_BOT_TOKEN": "xoxb-x"})
    hooks = slack_hooks(tmp_path / "run", "job-7", timeout_s=0, cfg=cfg)
    a = hooks.approver
    assert (a.timeout_s, a.default_approve, a.approvers) == (900.0, True, ("U1",))
    hooks.notifier.post_action("job-7", "restart", "x")
    assert json.loads((tmp_path / "threads.json").read_text()).keys() == {"job-7"}
    assert fake.server.headers_seen[0]["Authorization"] == "Bearer xoxb-x"
