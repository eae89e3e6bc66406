"""The slack-bolt App: `/diagnose`, Approve / Deny, and verdict feedback.

Bolt verifies every request's signature and timestamp itself (the WSGI server in `server` checks
them once more before Bolt sees the body). Listeners `ack()` first (Slack wants an answer within
3 s), then work; Bolt runs them on its thread pool.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slack_bolt import App
from slack_sdk import WebClient

from diagnoser.bot import blocks as bk
from diagnoser.bot.approver import answer, parse_value
from diagnoser.bot.config import BotConfig
from diagnoser.bot.feedback import FeedbackSink, VerdictCache
from diagnoser.bot.poster import SlackPoster
from diagnoser.bot.security import RateLimiter, below_roots
from diagnoser.classify.redact import redact
from diagnoser.models import Category, Diagnosis

log = logging.getLogger(__name__)
TriageFn = Callable[[list[str]], Diagnosis]
USAGE = "Usage: `/diagnose <job id | path>` (a run directory name under the runs root, or a log path)"


class TargetError(ValueError):
    """`/diagnose` was given something it may not or cannot read."""


def resolve_target(arg: str, cfg: BotConfig) -> tuple[str, list[str]]:
    """(job label, paths to triage) for a job id or a path; only below the configured roots."""
    arg = arg.strip()
    if not arg:
        raise TargetError(USAGE)
    roots = cfg.readable_roots()
    if cfg.runs_root is not None and "/" not in arg and arg not in (".", ".."):
        runs = Path(cfg.runs_root).expanduser().resolve()
        run = (runs / arg).resolve()  # a symlink named like a job may point anywhere: resolve, then check
        if run.is_dir() and run != runs and run.is_relative_to(runs):
            attempts = sorted((p for p in run.glob("*attempt-*") if (p / "logs").is_dir()
                               and (p / "logs").resolve().is_relative_to(runs)), key=lambda p: p.stat().st_mtime)
            return arg, [str(attempts[-1] / "logs") if attempts else str(run)]
        if (runs / arg).is_symlink() and not run.is_relative_to(runs):
            raise TargetError(f"`{arg}` leads outside the runs root; not read")
    path = below_roots(arg, roots)
    if path is None:
        raise TargetError(f"`{arg}` is not a known job id and not below an allowed log root")
    if not path.exists():
        raise TargetError(f"`{arg}`: no such file or directory")
    return path.name, [str(path)]


@dataclass
class BotApp:
    """The Bolt app with its collaborators (exposed for tests and for embedding)."""

    bolt: App
    config: BotConfig
    poster: SlackPoster
    verdicts: VerdictCache
    feedback: FeedbackSink


_TRIAGE_LOCK = threading.Lock()  # the triage keeps per-process state: one call at a time


def _confined_triage(roots: tuple[Path, ...]) -> TriageFn:
    """The triage the bot runs: it reads nothing outside `roots`, symlinks included."""
    def run(paths: list[str]) -> Diagnosis:
        from diagnoser.triage import triage

        with _TRIAGE_LOCK:
            return triage(paths, within=roots)
    return run


def build_app(cfg: BotConfig, client: WebClient | None = None, triage_fn: TriageFn | None = None,
              limiter: RateLimiter | None = None) -> BotApp:
    """The configured Bolt app. `client` defaults to a WebClient with the bot token (and api_base_url)."""
    if client is None:
        kwargs: dict[str, Any] = {"base_url": cfg.api_base_url} if cfg.api_base_url else {}
        client = WebClient(token=cfg.token(), **kwargs)
    limiter = limiter or RateLimiter(cfg.rate_per_min, cfg.rate_burst)  # admits commands per channel
    per_command = 3  # a /diagnose posts a parent, a thread reply and an update
    outgoing = RateLimiter(cfg.rate_per_min * per_command, cfg.rate_burst * per_command)
    bolt = App(client=client, signing_secret=cfg.secret(), token_verification_enabled=False,
               request_verification_enabled=True)
    bot = BotApp(bolt, cfg, SlackPoster(client, outgoing), VerdictCache(cfg.data_dir),
                 FeedbackSink(cfg.data_dir, cfg.store, cfg.feedback))
    run_triage = triage_fn or _confined_triage(cfg.readable_roots())
    approvers = set(cfg.approvers)

    @bolt.command("/diagnose")
    def diagnose(ack: Callable[..., None], command: dict[str, Any]) -> None:
        channel, user, arg = command.get("channel_id", ""), command.get("user_id", ""), command.get("text", "")
        try:
            job, paths = resolve_target(arg, cfg)
        except TargetError as exc:
            ack(text=str(exc))
            return
        if not limiter.allow(channel):
            ack(text="Too many diagnoser messages in this channel right now; try again in a minute.")
            return
        ack(text=f"Diagnosing `{job}`…")
        asked = f"*{bk.esc(job)}* — triaging… (asked by <@{user}>)"
        parent = bot.poster.post(channel, asked, [bk.section(asked)])
        if parent is None:
            return
        try:
            diagnosis = run_triage(paths)
        except Exception as exc:  # noqa: BLE001 - report any triage failure in the thread
            bot.poster.post(channel, f"Triage of {job} failed: {redact(str(exc))[:500]}", thread_ts=parent)
            failed = "triage failed"
            bot.poster.update(channel, parent, bk.status_text(job, failed), bk.status_blocks(job, failed))
            return
        key = bot.verdicts.put(diagnosis, job)
        text, blocks = bk.verdict_blocks(diagnosis, job, cfg.runbook_url, key)
        bot.poster.post(channel, text, blocks, thread_ts=parent)
        bot.poster.update(channel, parent, text, [bk.section(f"*{bk.esc(job)}* — {bk.verdict_line(diagnosis)}")])

    def decide(ack: Callable[..., None], body: dict[str, Any], approved: bool) -> None:
        ack()
        user = (body.get("user") or {}).get("id", "")
        channel = (body.get("channel") or {}).get("id", "")
        thread = (body.get("message") or {}).get("thread_ts")
        if user not in approvers:
            bot.poster.ephemeral(channel, user, "You are not on the approver list for diagnoser actions.",
                                 thread_ts=thread)
            return
        value = ((body.get("actions") or [{}])[0]).get("value", "")
        target = parse_value(value)
        if target is None or not answer(target[0], target[1], approved, f"slack:{user}",
                                        note=(body.get("user") or {}).get("username", "")):
            bot.poster.ephemeral(channel, user, "That request is no longer pending.", thread_ts=thread)

    @bolt.action(bk.APPROVE)
    def approve(ack: Callable[..., None], body: dict[str, Any]) -> None:
        decide(ack, body, True)

    @bolt.action(bk.DENY)
    def deny(ack: Callable[..., None], body: dict[str, Any]) -> None:
        decide(ack, body, False)

    def where(body: dict[str, Any]) -> tuple[str, str, str | None]:
        msg = body.get("message") or {}
        return ((body.get("channel") or {}).get("id", ""), (body.get("user") or {}).get("id", ""),
                msg.get("thread_ts") or msg.get("ts"))

    @bolt.action(bk.FEEDBACK_CORRECT)
    def correct(ack: Callable[..., None], body: dict[str, Any]) -> None:
        ack()
        channel, user, thread = where(body)
        found = bot.verdicts.get(((body.get("actions") or [{}])[0]).get("value", ""))
        if found is None:
            bot.poster.ephemeral(channel, user, "That verdict is no longer known.", thread_ts=thread)
            return
        went = bot.feedback.record(found[0], found[1], f"slack:{user}")
        bot.poster.ephemeral(channel, user, f"Thanks: verdict confirmed ({went}).", thread_ts=thread)

    @bolt.action(bk.FEEDBACK_WRONG)
    def wrong(ack: Callable[..., None], body: dict[str, Any]) -> None:
        ack()
        channel, user, thread = where(body)
        key = ((body.get("actions") or [{}])[0]).get("value", "")
        if bot.verdicts.get(key) is None:
            bot.poster.ephemeral(channel, user, "That verdict is no longer known.", thread_ts=thread)
            return
        text, blocks = bk.category_picker(key)
        bot.poster.ephemeral(channel, user, text, blocks, thread_ts=thread)

    @bolt.action(bk.FEEDBACK_CATEGORY)
    def pick(ack: Callable[..., None], body: dict[str, Any]) -> None:
        ack()
        channel, user, thread = where(body)
        action = (body.get("actions") or [{}])[0]
        key, _, value = str((action.get("selected_option") or {}).get("value", "")).partition("|")
        found = bot.verdicts.get(key)
        if found is None or value not in {c.value for c in Category}:
            bot.poster.ephemeral(channel, user, "That verdict is no longer known.", thread_ts=thread)
            return
        went = bot.feedback.record(found[0], found[1], f"slack:{user}", Category(value))
        bot.poster.ephemeral(channel, user, f"Thanks: recorded as {value} ({went}).", thread_ts=thread)

    return bot
