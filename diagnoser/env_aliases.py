"""The environment variables users set before the settings tree existed, and the key each one sets.

They stay valid next to `DIAGNOSER_<SECTION>__<KEY>`; where both are set the nested name wins. Earlier rows of one
key win over later ones (`DIAGNOSER_LLM_API_KEY` over `OPENAI_API_KEY`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from diagnoser.durations import parse_duration


def _colons(text: str) -> list[str]:
    return [p for p in text.split(":") if p]


# env var -> (dotted key, converter or None)
ALIASES: dict[str, tuple[str, Callable[[str], Any] | None]] = {
    "DIAGNOSER_LLM_BASE_URL": ("llm.base_url", None),
    "DIAGNOSER_LLM_MODEL": ("llm.model", None),
    "DIAGNOSER_LLM_API_KEY": ("llm.api_key", None),
    "OPENAI_API_KEY": ("llm.api_key", None),
    "DIAGNOSER_LLM_TIMEOUT": ("llm.timeout", None),
    "DIAGNOSER_LLM_MAX_TOKENS": ("llm.max_tokens", None),
    "DIAGNOSER_LLM_CONTEXT_TOKENS": ("llm.context_tokens", None),
    "DIAGNOSER_NO_REMOTE": ("llm.no_remote", None),
    "DIAGNOSER_LLM_CACHE_DIR": ("llm.cache_dir", None),
    "DIAGNOSER_LLM_BACKEND": ("llm.backend", None),
    "DIAGNOSER_RUN_DIR": ("run.run_dir", None),
    "DIAGNOSER_CHECKPOINT_DIR": ("run.checkpoint_dir", None),
    "DIAGNOSER_HANG_TIMEOUT": ("run.hang_timeout_s", parse_duration),
    "DIAGNOSER_STARTUP_TIMEOUT": ("run.startup_timeout_s", parse_duration),
    "DIAGNOSER_KILL_GRACE": ("run.kill_grace_s", parse_duration),
    "DIAGNOSER_APPROVAL_TIMEOUT": ("run.approval_timeout_s", parse_duration),
    "DIAGNOSER_APPROVAL_DEFAULT": ("run.approval_default", None),
    "DIAGNOSER_RUNBOOKS": ("run.runbooks", None),
    "DIAGNOSER_NOTIFY_COMMAND": ("run.notify_command", None),
    "DIAGNOSER_SLACK": ("run.slack", None),
    "DIAGNOSER_MODE": ("run.policy.mode", None),
    "DIAGNOSER_MIN_CONFIDENCE": ("run.policy.min_confidence", None),
    "DIAGNOSER_ON_LOW_CONFIDENCE": ("run.policy.on_low_confidence", None),
    "DIAGNOSER_MAX_RESTARTS": ("run.policy.max_restarts", None),
    "SLACK_BOT_TOKEN": ("bot.bot_token", None),
    "SLACK_SIGNING_SECRET": ("bot.signing_secret", None),
    "DIAGNOSER_SLURM_KERNEL_LOG_DIR": ("slurm.kernel_log_dir", None),
    "DIAGNOSER_SLURM_KERNEL_VIA_SRUN": ("slurm.kernel_via_srun", None),
    "DIAGNOSER_SLURM_TASK_OUTPUT": ("slurm.task_output", _colons),
    "DIAGNOSER_SLURM_MAX_DRAINS": ("slurm.max_drains", None),
    "DIAGNOSER_SLURM_DRAIN_WINDOW_S": ("slurm.drain_window_s", parse_duration),
    "DIAGNOSER_SLURM_POLL_S": ("slurm.poll_s", None),
    "DIAGNOSER_SLURM_OPS_LOG": ("slurm.ops_log", None),
    "DIAGNOSER_DRAIN_LOCK": ("slurm.drain_lock", None),
    "DIAGNOSER_SLURM_STATE_DIR": ("slurm.state_dir", None),
    "DIAGNOSER_SLURM_DRY_RUN": ("slurm.dry_run", None),
    "DIAGNOSER_STORE": ("memory.path", None),
}


def alias_values(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The nested values the old names set, and per dotted key the variable that set it."""
    from diagnoser.errors import ConfigError

    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name, (key, convert) in ALIASES.items():
        raw = env.get(name)
        if raw is None or raw == "" or key in origins:
            continue
        try:
            value = convert(raw) if convert else raw
        except ValueError as exc:
            raise ConfigError(f"{name}: {key}: {exc}") from None
        node = values
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
        origins[key] = name
    return values, origins
