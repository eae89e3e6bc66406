"""Where the LLM stage finds its endpoint: the `[llm]` section of the settings tree (`diagnoser/settings.py`).

The stage is off unless a base URL is configured somewhere: diagnoser never sends logs to a
default cloud endpoint because an API key happens to be in the environment. `--llm none`
turns it off whatever else is set.

Settings file (TOML, `~/.config/diagnoser/config.toml` or `$DIAGNOSER_CONFIG`)::

    [llm]
    base_url = "http://127.0.0.1:8080/v1"
    model = "qwen2.5-7b-instruct"
    api_key_env = "MY_GATEWAY_KEY"   # name of the env var holding the key (keys stay out of files)
    timeout = 60
    max_tokens = 512
    context_tokens = 8192
    no_remote = true
    backend = "openai"               # or "langchain"

Environment: `DIAGNOSER_LLM__<KEY>`, or the older `DIAGNOSER_LLM_BASE_URL`, `DIAGNOSER_LLM_MODEL`,
`DIAGNOSER_LLM_TIMEOUT`, `DIAGNOSER_NO_REMOTE`, `DIAGNOSER_LLM_API_KEY` / `OPENAI_API_KEY` ...
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import platformdirs

from diagnoser.errors import ConfigError

BACKENDS = ("openai", "langchain")
_OFF = "no endpoint configured (set --llm-base-url or DIAGNOSER_LLM_BASE_URL): rules + retrieval only"
# the variables that can configure the stage; without one of them (and without a settings file) it is off
_LLM_ENV = ("DIAGNOSER_LLM", "DIAGNOSER_NO_REMOTE", "OPENAI_API_KEY")

__all__ = ["BACKENDS", "ConfigError", "LLMConfig", "load_config"]


def default_config_path() -> Path:
    return Path(platformdirs.user_config_dir("diagnoser")) / "config.toml"


def default_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("diagnoser")) / "llm"


@dataclass(frozen=True)
class LLMConfig:
    """Everything the LLM stage needs to reach one OpenAI-compatible endpoint.

    `base_url is None` means the stage is off (`off_reason` says why). `model is None` asks the
    endpoint (`GET /models`) and uses the first model it serves.
    """

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 60.0
    max_tokens: int = 512
    context_tokens: int = 8192
    no_remote: bool = False
    cache_dir: Path | None = field(default_factory=default_cache_dir)  # None: no cache
    backend: str = "openai"
    max_retries: int = 0  # client-side retries per request; failures fall back to the rules
    temperature: float = 0.0
    off_reason: str | None = None

    @property
    def enabled(self) -> bool:
        return self.base_url is not None and self.off_reason is None

    def describe(self) -> str:
        """One line for notes and logs (never the key)."""
        if not self.enabled:
            return f"LLM stage off: {self.off_reason or 'no endpoint configured'}"
        return f"{self.model or '(first model served)'} at {self.base_url}"


def load_config(
    *,
    config_path: Path | None = None,
    env: Mapping[str, str] | None = None,
    base_url: str | None = None,
    model: str | None = None,
    llm: str | None = None,
    no_remote: bool | None = None,
    **overrides: Any,
) -> LLMConfig:
    """The `[llm]` settings (file < environment < these explicit overrides) as the stage's config.

    `llm="none"` (the CLI's `--llm none`) turns the stage off; `no_remote=True` refuses any
    endpoint that is not on this machine. Other keyword overrides: any `LLMConfig` field.
    """
    env = os.environ if env is None else env
    explicit = {"base_url": base_url, "model": model, "no_remote": no_remote, **overrides}
    explicit = {k: v for k, v in explicit.items() if v is not None}
    if llm is not None and llm.strip().lower() in ("none", "off", "false", "0"):
        return LLMConfig(off_reason="turned off (--llm none): rules + retrieval only")
    path = config_path or (Path(env["DIAGNOSER_CONFIG"]) if env.get("DIAGNOSER_CONFIG") else default_config_path())
    if not explicit and not path.is_file() and not any(k.startswith(_LLM_ENV) for k in env):
        return LLMConfig(off_reason=_OFF)  # nothing can turn the stage on: skip loading the settings tree
    from diagnoser.settings import load_settings

    section = load_settings(path if path.is_file() else None, env=env, cli={"llm": explicit},
                            default_file=False).settings.llm
    values = section.model_dump(exclude={"api_key", "api_key_env"})
    key = section.api_key.get_secret_value() if section.api_key else None
    if key is None and section.api_key_env:
        key = env.get(section.api_key_env) or os.environ.get(section.api_key_env)
    config = LLMConfig(**values, api_key=key or None)
    return config if config.base_url is not None else replace(config, off_reason=_OFF)
