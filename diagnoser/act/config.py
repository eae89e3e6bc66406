"""Configuration of `diagnoser run`: the `[run]` section of the settings tree (`diagnoser/settings.py`).

defaults < config file (`--config`, $DIAGNOSER_CONFIG, ~/.config/diagnoser/config.toml) < environment
(`DIAGNOSER_RUN__<KEY>`, and the older `DIAGNOSER_HANG_TIMEOUT` ...) < command-line options::

    [run]
    run_dir = "runs/llama-70b"
    checkpoint_dir = "/ckpt/llama-70b"
    hang_timeout_s = 900
    slack = true                  # notifications and approvals in Slack (the [bot] section)
    [run.policy]
    min_confidence = 0.6
    budgets = {hardware = 5, infra = 5, user_code = 2, unknown = 3}
    require_approval = ["drain_and_restart"]

A file in the old format (YAML or TOML with these keys at the top level, `policy:` inside) is still read, as
the `[run]` section, with a warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from diagnoser.act.checkpoints import DIR_MARKERS
from diagnoser.act.logs import DEFAULT_PROGRESS
from diagnoser.act.policy import Policy
from diagnoser.durations import Seconds
from diagnoser.errors import ConfigError

if TYPE_CHECKING:  # settings imports this module (RunConfig is its [run] section)
    from diagnoser.settings import Settings

__all__ = ["ConfigError", "RunConfig", "build_config", "build_settings"]


class RunConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    run_dir: Path = Path("diagnoser-run")
    job_id: str | None = None  # default: the run directory's name
    checkpoint_dir: Path | None = None
    checkpoint_markers: tuple[str, ...] = DIR_MARKERS
    verify_load: bool = False  # also torch.load(weights_only=True) checkpoints (needs torch)
    checkpoint_poll_s: Seconds = Field(default=10.0, gt=0)
    resume_env: str = "DIAGNOSER_RESUME_FROM"
    hang_timeout_s: Seconds = Field(default=600.0, gt=0)
    startup_timeout_s: Seconds = Field(default=1800.0, gt=0)
    kill_grace_s: Seconds = Field(default=30.0, ge=0)
    failure_grace_s: Seconds = Field(default=30.0, ge=0)
    poll_s: float = Field(default=0.2, gt=0)
    progress_patterns: tuple[str, ...] = DEFAULT_PROGRESS
    progress_every_s: Seconds = Field(default=30.0, ge=0)  # audit progress events at most this often
    collect_stacks: bool = True
    stack_timeout_s: Seconds = Field(default=20.0, gt=0)
    collect_kernel: bool = True  # dmesg of this host since the attempt started
    collect: tuple[Path, ...] = ()  # more log paths for the triage (e.g. a torchrun --log-dir)
    runbooks: Path | None = None
    tee: bool = True  # add `--tee 3` to torchrun so every line names its rank
    max_rank_log_bytes: int = Field(default=64 << 20, ge=1024)
    max_raw_bytes: int = Field(default=256 << 20, ge=1024)
    approval_timeout_s: Seconds = Field(default=0.0, ge=0)
    approval_default: Literal["approve", "deny"] = "deny"
    approvers: tuple[str, ...] = ()  # OS users whose `diagnoser approve` counts (empty: whoever can write the run)
    notify_command: str | None = None  # run with DIAGNOSER_NOTIFY_FILE set on every notification
    slack: bool = False  # post the run to Slack and ask approvals there (the bot config: channel, approvers)
    bot_config: Path | None = None  # the bot's config file (default: DIAGNOSER_BOT_CONFIG)
    policy: Policy = Field(default_factory=Policy)


def build_config(file: Path | None = None, overrides: dict[str, Any] | None = None,
                 policy_overrides: dict[str, Any] | None = None, env: Mapping[str, str] | None = None) -> RunConfig:
    """The `[run]` settings with explicit overrides on top (None values mean 'not given')."""
    return build_settings(file, overrides, policy_overrides, env).run


def build_settings(file: Path | None = None, overrides: dict[str, Any] | None = None,
                   policy_overrides: dict[str, Any] | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """All settings, read once, with the `[run]` overrides on top: `diagnoser run` also needs `[metrics]`."""
    from diagnoser.settings import load_settings

    run = {k: v for k, v in (overrides or {}).items() if v is not None}
    policy = {k: v for k, v in (policy_overrides or {}).items() if v is not None}
    if policy:
        run["policy"] = policy
    return load_settings(file, env=env, cli={"run": run}, legacy="run").settings
