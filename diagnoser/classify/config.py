"""Where the LLM stage finds its endpoint: config file < environment < explicit overrides.

The stage is off unless a base URL is configured somewhere: diagnoser never sends logs to a
default cloud endpoint because an API key happens to be in the environment. `--llm none`
turns it off whatever else is set.

Config file (TOML, `~/.config/diagnoser/config.toml` or `$DIAGNOSER_CONFIG`)::

    [llm]
    base_url = "http://127.0.0.1:8080/v1"
    model = "qwen2.5-7b-instruct"
    api_key_env = "MY_GATEWAY_KEY"   # name of the env var holding the key (keys stay out of files)
    timeout = 60
    max_tokens = 512
    context_tokens = 8192
    no_remote = true
    backend = "openai"               # or "langchain"
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import platformdirs

BACKENDS = ("openai", "langchain")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class ConfigError(ValueError):
    """A config file or value that cannot be used; the message says which and why."""


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


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ConfigError(f"{name}: expected true/false, got {value!r}")


def _number(name: str, value: Any, kind: type) -> Any:
    try:
        number = kind(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name}: expected a number, got {value!r}") from exc
    if number <= 0:
        raise ConfigError(f"{name}: must be positive, got {value!r}")
    return number


def _coerce(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Validate and convert raw values (strings from env, anything from TOML)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        name = f"{where}: {key}"
        if key in ("base_url", "model", "api_key"):
            text = str(value).strip()
            out[key] = text or None
        elif key in ("timeout", "temperature"):
            out[key] = _number(name, value, float) if key == "timeout" else float(value)
        elif key in ("max_tokens", "context_tokens"):
            out[key] = _number(name, value, int)
        elif key == "max_retries":
            out[key] = max(0, int(value))
        elif key == "no_remote":
            out[key] = _bool(name, value)
        elif key == "cache_dir":
            text = str(value).strip()
            out[key] = None if text.lower() in ("", "none", "off") else Path(text).expanduser()
        elif key == "backend":
            if value not in BACKENDS:
                raise ConfigError(f"{name}: expected one of {', '.join(BACKENDS)}, got {value!r}")
            out[key] = value
        else:
            raise ConfigError(f"{name}: unknown setting")
    return out


def read_config_file(path: Path) -> dict[str, Any]:
    """The `[llm]` table of a TOML file ({} when the file does not exist)."""
    if not path.is_file():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    table = data.get("llm", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [llm] must be a table")
    table = dict(table)
    key_env = table.pop("api_key_env", None)
    if key_env:
        table.setdefault("api_key", os.environ.get(str(key_env)))
    return _coerce(table, str(path))


ENV_NAMES = {
    "base_url": "DIAGNOSER_LLM_BASE_URL",
    "model": "DIAGNOSER_LLM_MODEL",
    "timeout": "DIAGNOSER_LLM_TIMEOUT",
    "max_tokens": "DIAGNOSER_LLM_MAX_TOKENS",
    "context_tokens": "DIAGNOSER_LLM_CONTEXT_TOKENS",
    "no_remote": "DIAGNOSER_NO_REMOTE",
    "cache_dir": "DIAGNOSER_LLM_CACHE_DIR",
    "backend": "DIAGNOSER_LLM_BACKEND",
}


def read_env(env: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {k: env[v] for k, v in ENV_NAMES.items() if env.get(v) is not None}
    key = env.get("DIAGNOSER_LLM_API_KEY") or env.get("OPENAI_API_KEY")
    if key:
        values["api_key"] = key
    return _coerce(values, "environment")


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
    """Merge file, environment and explicit overrides (highest wins) into one config.

    `llm="none"` (the CLI's `--llm none`) turns the stage off; `no_remote=True` refuses any
    endpoint that is not on this machine. Other keyword overrides: any `LLMConfig` field.
    """
    env = os.environ if env is None else env
    path = config_path or (Path(env["DIAGNOSER_CONFIG"]) if env.get("DIAGNOSER_CONFIG") else default_config_path())
    values: dict[str, Any] = {}
    values.update(read_config_file(path))
    values.update(read_env(env))
    explicit = {"base_url": base_url, "model": model, "no_remote": no_remote, **overrides}
    values.update(_coerce({k: v for k, v in explicit.items() if v is not None}, "option"))
    config = LLMConfig(**values)
    if llm is not None and llm.strip().lower() in ("none", "off", "false", "0"):
        return replace(config, off_reason="turned off (--llm none): rules + retrieval only")
    if config.base_url is None:
        return replace(config, off_reason="no endpoint configured (set --llm-base-url or "
                                          "DIAGNOSER_LLM_BASE_URL): rules + retrieval only")
    return config
