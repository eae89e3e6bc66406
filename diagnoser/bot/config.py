"""Configuration of the chat-ops bot: the `[bot]` section of the settings tree (`diagnoser/settings.py`).

Secrets (the bot token and the signing secret) come from the environment (`SLACK_BOT_TOKEN`,
`SLACK_SIGNING_SECRET`, or `DIAGNOSER_BOT__BOT_TOKEN` ...) or from the config file, never from the command
line, so they stay out of shell history and `ps`. The file is the settings file (`--config`,
`DIAGNOSER_BOT_CONFIG`, else `DIAGNOSER_CONFIG` / ~/.config/diagnoser/config.toml). Example::

    [bot]
    channel = "C0123456789"          # where `diagnoser run` notifications and approvals go
    approvers = ["U01ALICE", "U02BOB"]  # Slack user ids allowed to press Approve / Deny
    approval_timeout_s = 900
    approval_default = "deny"
    runs_root = "/shared/diagnoser-runs"   # `/diagnose <job id>` reads <runs_root>/<job id>
    allowed_roots = ["/shared/logs"]       # `/diagnose <path>` may only read below these
    runbook_url = "https://git.example.com/ml/diagnoser/blob/main/"

An old-format bot file (YAML with these keys at the top level) is still read, with a warning.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from diagnoser.durations import Seconds
from diagnoser.errors import ConfigError

ENV_CONFIG = "DIAGNOSER_BOT_CONFIG"
ENV_TOKEN = "SLACK_BOT_TOKEN"
ENV_SECRET = "SLACK_SIGNING_SECRET"


def default_data_dir() -> Path:
    """`<user data dir>/diagnoser/bot`: verdict cache, feedback fallback, thread map."""
    return Path(platformdirs.user_data_dir("diagnoser", appauthor=False)) / "bot"


class BotConfig(BaseModel):
    """Everything `diagnoser bot serve` and the Slack notifier/approver need."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bot_token: SecretStr | None = None
    signing_secret: SecretStr | None = None
    api_base_url: str | None = None  # Slack Web API base (default https://slack.com/api/); tests, proxies
    host: str = "127.0.0.1"  # put a TLS reverse proxy in front; Slack needs a public HTTPS URL
    port: int = Field(default=3000, ge=0, le=65535)
    path: str = "/slack/events"  # Request URL path for slash commands and interactivity
    channel: str | None = None
    approvers: tuple[str, ...] = ()  # Slack user ids; empty: nobody can approve (refusals only)
    approval_timeout_s: Seconds = Field(default=900.0, ge=0)
    approval_default: Literal["approve", "deny"] = "deny"
    max_skew_s: float = Field(default=300.0, gt=0)  # older signed requests are replays
    rate_per_min: float = Field(default=20.0, gt=0)  # messages per channel per minute (sustained)
    rate_burst: int = Field(default=10, ge=1)
    runs_root: Path | None = None
    allowed_roots: tuple[Path, ...] = ()
    runbook_url: str | None = None
    data_dir: Path = Field(default_factory=default_data_dir)
    store: Path | None = None  # incident store (default: the retrieve package's default)
    feedback: Literal["store", "jsonl"] = "store"  # jsonl: append incident/v1 lines to data_dir/feedback.jsonl

    def readable_roots(self) -> tuple[Path, ...]:
        """Where `/diagnose` may read logs: allowed_roots plus runs_root."""
        roots = list(self.allowed_roots) + ([self.runs_root] if self.runs_root else [])
        return tuple(Path(r).expanduser().resolve() for r in roots)

    def token(self) -> str:
        if self.bot_token is None or not self.bot_token.get_secret_value():
            raise ConfigError(f"no Slack bot token: set {ENV_TOKEN} or bot_token in the bot config file")
        return self.bot_token.get_secret_value()

    def secret(self) -> str:
        if self.signing_secret is None or not self.signing_secret.get_secret_value():
            raise ConfigError(f"no Slack signing secret: set {ENV_SECRET} or signing_secret in the bot config file")
        return self.signing_secret.get_secret_value()


def load_bot_config(file: Path | None = None, overrides: dict[str, Any] | None = None,
                    env: Mapping[str, str] | None = None) -> BotConfig:
    """The `[bot]` settings with non-secret overrides on top (None: not given)."""
    from diagnoser.settings import load_settings

    env = os.environ if env is None else env
    if file is None and env.get(ENV_CONFIG):
        file = Path(env[ENV_CONFIG])
    for key in ("bot_token", "signing_secret"):
        if overrides and key in overrides:
            raise ConfigError(f"{key} is never taken from options: use the environment or the config file")
    return load_settings(file, env=env, cli={"bot": overrides or {}}, legacy="bot").settings.bot
