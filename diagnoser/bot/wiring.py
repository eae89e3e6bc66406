"""One call to give `diagnoser run` its Slack hooks: notifier, approver, audit follower."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from slack_sdk import WebClient

from diagnoser.act.config import ConfigError
from diagnoser.bot.approver import SlackApprover
from diagnoser.bot.config import BotConfig, load_bot_config
from diagnoser.bot.feedback import VerdictCache
from diagnoser.bot.follow import AuditFollower
from diagnoser.bot.notifier import SlackNotifier
from diagnoser.bot.security import RateLimiter


@dataclass
class SlackHooks:
    notifier: SlackNotifier  # Controller(notifier=...) is optional: the follower already posts decisions
    approver: SlackApprover  # Controller(approver=...)
    follower: AuditFollower  # start() before Controller.run(), stop() after


def slack_hooks(run_dir: Path, job_id: str | None = None, timeout_s: float | None = None,
                default_approve: bool | None = None, cfg: BotConfig | None = None,
                client: WebClient | None = None) -> SlackHooks:
    """Hooks from the bot config (env / `DIAGNOSER_BOT_CONFIG`); `timeout_s`/`default_approve`
    None or a timeout of 0 take the bot config's approval_timeout_s / approval_default."""
    cfg = cfg or load_bot_config()
    if not cfg.channel:
        raise ConfigError("the bot config names no channel for notifications")
    if client is None:
        client = WebClient(token=cfg.token(), **({"base_url": cfg.api_base_url} if cfg.api_base_url else {}))
    notifier = SlackNotifier(client, cfg.channel, RateLimiter(cfg.rate_per_min, cfg.rate_burst), cfg.runbook_url,
                             state_file=cfg.data_dir / "threads.json")
    approver = SlackApprover(notifier, run_dir, timeout_s or cfg.approval_timeout_s,
                             cfg.approval_default == "approve" if default_approve is None else default_approve,
                             cfg.approvers)
    follower = AuditFollower(notifier, run_dir, job_id, VerdictCache(cfg.data_dir))
    return SlackHooks(notifier, approver, follower)
