"""Approve / Deny round trips: SlackApprover posts buttons into the job thread, the test presses them
through the running app with Slack-signed `block_actions`, the approver returns who decided."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("slack_bolt")

from bot_support import SECRET, FakeSlack, action_body, slack_post, start_bot  # noqa: E402
from slack_sdk import WebClient  # noqa: E402

from diagnoser.act.approval import REQUEST_FILE, ApprovalRequest, ApprovalResponse  # noqa: E402
from diagnoser.bot.approver import SlackApprover  # noqa: E402
from diagnoser.bot.follow import AuditFollower  # noqa: E402
from diagnoser.bot.notifier import SlackNotifier  # noqa: E402
from diagnoser.models import Action  # noqa: E402

ALICE, MALLORY = "UALICE", "UMALLORY"



@pytest.fixture
def bot(tmp_path, fake):
    server, url = start_bot(tmp_path, fake, approvers=[ALICE], channel="COPS")
    yield url
    server.stop()


def approver(fake: FakeSlack, run_dir: Path, timeout_s: float = 10.0, default_approve: bool = False) -> SlackApprover:
    run_dir.mkdir(parents=True, exist_ok=True)
    notifier = SlackNotifier(WebClient(token="xoxb-test", base_url=fake.base_url), "COPS")
    return SlackApprover(notifier, run_dir, timeout_s, default_approve, approvers=(ALICE,), poll_s=0.05)


REQ = ApprovalRequest("llama-70b", 2, Action.DRAIN_AND_RESTART, Action.DRAIN_AND_RESTART, "require_approval",
                      "drain_and_restart needs approval", "hardware", "gpu_xid_79", 0.97, ("gpu-017",),
                      "GPU on gpu-017 fell off the bus")


def in_thread(appr: SlackApprover, req: ApprovalRequest = REQ) -> tuple[threading.Thread, list[ApprovalResponse]]:
    out: list[ApprovalResponse] = []
    t = threading.Thread(target=lambda: out.append(appr.request(req, cancelled=lambda: False)), daemon=True)
    t.start()
    return t, out


def buttons(fake: FakeSlack) -> tuple[dict, str]:
    """The approval message and its Approve button's value."""
    deadline = time.monotonic() + 10
    while not (found := [p for p in fake.calls("chat.postMessage") if "Approval needed" in p["text"]]):
        assert time.monotonic() < deadline, fake.calls()
        time.sleep(0.02)
    msg = found[0]
    actions = next(b for b in msg["blocks"] if b.get("block_id") == "approval")["elements"]
    assert [a["action_id"] for a in actions] == ["approval_approve", "approval_deny"]
    return msg, actions[0]["value"]


def test_allowed_user_approves_and_the_approver_returns_who(tmp_path, fake, bot) -> None:
    t, out = in_thread(approver(fake, tmp_path / "run"))
    msg, value = buttons(fake)
    parent = fake.calls("chat.postMessage")[0]
    assert "thread_ts" not in parent and msg["thread_ts"] == fake.wait("chat.update")[0]["ts"]  # in the job thread
    assert "<@UALICE>" in json.dumps(msg["blocks"]) and "gpu-017" in msg["text"]
    status, _ = slack_post(bot, action_body("approval_approve", value, ALICE, "COPS", "9.9", msg["thread_ts"]), SECRET)
    assert status == 200
    t.join(10)
    assert out == [ApprovalResponse(True, f"slack:{ALICE}", None, ALICE.lower())]
    final = next(u for u in fake.wait("chat.update", 3) if u["ts"] == "9.9" or "approved by" in u["text"])
    assert "approved by <@UALICE>" in json.dumps(final["blocks"]) and "approval_approve" not in json.dumps(final)
    assert "drain_and_restart approved (slack:UALICE)" in fake.calls("chat.update")[-1]["text"]  # the parent
    assert not (tmp_path / "run" / REQUEST_FILE).exists()
    # a late click on the decided request is refused
    slack_post(bot, action_body("approval_deny", value, ALICE, "COPS"), SECRET)
    assert "no longer pending" in fake.wait("chat.postEphemeral")[0]["text"]


def test_non_allowed_user_is_refused_then_timeout_gives_the_default(tmp_path, fake, bot) -> None:
    t, out = in_thread(approver(fake, tmp_path / "run", timeout_s=1.5, default_approve=True))
    _, value = buttons(fake)
    assert slack_post(bot, action_body("approval_approve", value, MALLORY, "COPS"), SECRET)[0] == 200
    refusal = fake.wait("chat.postEphemeral")[0]
    assert refusal["user"] == MALLORY and "not on the approver list" in refusal["text"]
    t.join(10)
    assert out[0].approved is True and out[0].by == "timeout:approve"
    assert any("timeout:approve" in u["text"] for u in fake.wait("chat.update", 3))


def test_deny_and_forged_clicks(tmp_path, fake, bot) -> None:
    t, out = in_thread(approver(fake, tmp_path / "run"))
    _, value = buttons(fake)
    body = action_body("approval_approve", value, ALICE, "COPS")
    assert slack_post(bot, body, "wrong-secret")[0] == 401  # a forged approval
    assert slack_post(bot, body, SECRET, ts=int(time.time()) - 400)[0] == 401  # a replayed one
    assert t.is_alive()
    assert slack_post(bot, action_body("approval_deny", value, ALICE, "COPS"), SECRET)[0] == 200
    t.join(10)
    assert (out[0].approved, out[0].by) == (False, f"slack:{ALICE}")


def test_a_real_controller_decision_is_approved_from_slack(tmp_path, fake, bot) -> None:
    from test_act_controller import Script, events, make, steps, verdict

    from diagnoser.act.events import DecisionMade
    from diagnoser.models import Category

    appr = approver(fake, tmp_path / "run")
    follower = AuditFollower(appr.notifier, tmp_path / "run", poll_s=0.05).start()
    c, ex = make(tmp_path, [Script(steps(1, 2), exit_at=3, code=1), Script(steps(1, 2), exit_at=3)],
                 [verdict(Category.HARDWARE, "gpu_xid_79", Action.DRAIN_AND_RESTART, nodes=("n2",))], approver=appr)
    result: list = []
    t = threading.Thread(target=lambda: result.append(c.run()), daemon=True)
    t.start()
    _, value = buttons(fake)
    assert slack_post(bot, action_body("approval_approve", value, ALICE, "COPS"), SECRET)[0] == 200
    t.join(30)
    assert result and result[0].status == "succeeded"
    d = events(c, DecisionMade)[0]
    assert (d.action, d.approved_by, d.nodes) == (Action.DRAIN_AND_RESTART, f"slack:{ALICE}", ["n2"])
    assert ex.drained == [("n2",)]
    follower.stop()
    posts = fake.calls("chat.postMessage")
    assert [p for p in posts if "thread_ts" not in p][0]["text"].startswith("*run*")  # one thread for the job
    assert len([p for p in posts if "thread_ts" not in p]) == 1
    replies = [p["text"] for p in posts if "thread_ts" in p]
    assert any(t.startswith(":x: attempt 1 failed: exit") for t in replies)
    assert any("hardware/gpu_xid_79 -> drain_and_restart" in t for t in replies)
    assert any("drain_and_restart nodes n2" in t and "approved by slack:UALICE" in t for t in replies)
    assert fake.calls("chat.update")[-1]["text"] == "*run* — finished: succeeded — the job exited 0"
