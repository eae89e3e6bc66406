"""Configuration of `diagnoser run`: defaults < config file < environment < command-line options.

The config file (`--config`, or `DIAGNOSER_CONFIG`; YAML, or TOML by its `.toml` suffix) mirrors
`RunConfig`, with the policy under `policy:`:

    run_dir: runs/llama-70b
    checkpoint_dir: /ckpt/llama-70b
    hang_timeout_s: 900
    slack: true                  # notifications and approvals in Slack (bot config: DIAGNOSER_BOT_CONFIG)
    policy:
      min_confidence: 0.6
      budgets: {hardware: 5, infra: 5, user_code: 2, unknown: 3}
      require_approval: [drain_and_restart]

Every scalar option also reads `DIAGNOSER_<NAME>` (e.g. `DIAGNOSER_HANG_TIMEOUT`) through the CLI.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from diagnoser.act.checkpoints import DIR_MARKERS
from diagnoser.act.logs import DEFAULT_PROGRESS
from diagnoser.act.policy import Policy


class ConfigError(ValueError):
    """An unusable configuration; the message says which file/field."""


class RunConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    run_dir: Path = Path("diagnoser-run")
    job_id: str | None = None  # default: the run directory's name
    checkpoint_dir: Path | None = None
    checkpoint_markers: tuple[str, ...] = DIR_MARKERS
    verify_load: bool = False  # also torch.load(weights_only=True) checkpoints (needs torch)
    checkpoint_poll_s: float = Field(default=10.0, gt=0)
    resume_env: str = "DIAGNOSER_RESUME_FROM"
    hang_timeout_s: float = Field(default=600.0, gt=0)
    startup_timeout_s: float = Field(default=1800.0, gt=0)
    kill_grace_s: float = Field(default=30.0, ge=0)
    failure_grace_s: float = Field(default=30.0, ge=0)
    poll_s: float = Field(default=0.2, gt=0)
    progress_patterns: tuple[str, ...] = DEFAULT_PROGRESS
    progress_every_s: float = Field(default=30.0, ge=0)  # audit progress events at most this often
    collect_stacks: bool = True
    stack_timeout_s: float = Field(default=20.0, gt=0)
    collect_kernel: bool = True  # dmesg of this host since the attempt started
    collect: tuple[Path, ...] = ()  # more log paths for the triage (e.g. a torchrun --log-dir)
    runbooks: Path | None = None
    tee: bool = True  # add `--tee 3` to torchrun so every line names its rank
    max_rank_log_bytes: int = Field(default=64 << 20, ge=1024)
    max_raw_bytes: int = Field(default=256 << 20, ge=1024)
    approval_timeout_s: float = Field(default=0.0, ge=0)
    approval_default: Literal["approve", "deny"] = "deny"
    approvers: tuple[str, ...] = ()  # OS users whose `diagnoser approve` counts (empty: whoever can write the run)
    notify_command: str | None = None  # run with DIAGNOSER_NOTIFY_FILE set on every notification
    slack: bool = False  # post the run to Slack and ask approvals there (the bot config: channel, approvers)
    bot_config: Path | None = None  # the bot's config file (default: DIAGNOSER_BOT_CONFIG)
    policy: Policy = Field(default_factory=Policy)


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from exc
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not valid {'TOML' if path.suffix == '.toml' else 'YAML'}: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data


def build_config(file: Path | None = None, overrides: dict[str, Any] | None = None,
                 policy_overrides: dict[str, Any] | None = None) -> RunConfig:
    """Merge the config file with explicit overrides (None values mean 'not given')."""
    if file is None and os.environ.get("DIAGNOSER_CONFIG"):
        file = Path(os.environ["DIAGNOSER_CONFIG"])
    data = read_config_file(file) if file is not None else {}
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    policy = dict(data.get("policy") or {})
    policy.update({k: v for k, v in (policy_overrides or {}).items() if v is not None})
    data["policy"] = policy
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{file or 'options'}: {where}: {first['msg']}") from exc
