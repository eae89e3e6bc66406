"""Signatures, replay window, rate limit and secret handling of the bot's configuration."""

from __future__ import annotations

import pytest

pytest.importorskip("slack_sdk")

from slack_sdk.signature import SignatureVerifier  # noqa: E402

from diagnoser.act.config import ConfigError  # noqa: E402
from diagnoser.bot.config import load_bot_config  # noqa: E402
from diagnoser.bot.security import RateLimiter, sign, verify  # noqa: E402

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
BODY = ("token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
        "&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
        "&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN"
        "&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c")


def test_signature_matches_slack_sdk_and_rejects_tampering() -> None:
    ts = "1531420618"
    sig = sign(SECRET, ts, BODY)
    assert SignatureVerifier(SECRET, clock=_Clock(1531420618)).is_valid(BODY, ts, sig)
    assert verify(SECRET, ts, sig, BODY.encode(), now=1531420618 + 10).ok
    assert not verify(SECRET, ts, sig, BODY.encode() + b"x", now=1531420618).ok
    assert not verify("other-secret", ts, sig, BODY.encode(), now=1531420618).ok
    assert verify(SECRET, ts, sig, BODY.encode(), now=1531420618 + 301).reason.startswith("stale")
    assert verify(SECRET, None, None, BODY.encode()).reason == "unsigned request"
    assert verify(SECRET, "abc", sig, BODY.encode()).reason == "bad timestamp"


class _Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def now(self) -> float:
        return self.t


def test_rate_limiter_per_channel_refills() -> None:
    t = [0.0]
    lim = RateLimiter(rate_per_min=60, burst=2, clock=lambda: t[0])
    assert lim.allow("C1") and lim.allow("C1") and not lim.allow("C1")
    assert lim.allow("C2")  # another channel has its own bucket
    t[0] += 1.0
    assert lim.allow("C1") and not lim.allow("C1")
    assert lim.dropped == {"C1": 2}


def test_secrets_from_env_or_file_never_options(tmp_path) -> None:
    file = tmp_path / "bot.yaml"
    file.write_text("signing_secret: from-file\nchannel: C9\napprovers: [U1]\n")
    cfg = load_bot_config(file, env={"SLACK_BOT_TOKEN": "xoxb-env"})
    assert cfg.token() == "xoxb-env" and cfg.secret() == "from-file" and cfg.approvers == ("U1",)
    assert "xoxb-env" not in repr(cfg) and "from-file" not in str(cfg.model_dump())
    with pytest.raises(ConfigError, match="never taken from options"):
        load_bot_config(None, {"bot_token": "xoxb-cli"}, env={})
    with pytest.raises(ConfigError, match="SLACK_SIGNING_SECRET"):
        load_bot_config(None, env={}).secret()
