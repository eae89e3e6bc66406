"""One settings tree for every command: defaults < config file < environment < command-line options.

One TOML file (`$DIAGNOSER_CONFIG`, else `~/.config/diagnoser/config.toml`) with one section per area::

    [llm]            # triage's LLM stage (classify/config.py)
    base_url = "http://127.0.0.1:8080/v1"
    [run]            # `diagnoser run` / `slurm-run` / `slurm-hook` (act/config.py RunConfig)
    hang_timeout_s = 900
    [run.policy]
    min_confidence = 0.6
    [slurm]  [bot]  [metrics]  [serve]  [memory]  [mcp]

Every key also reads `DIAGNOSER_<SECTION>__<KEY>` (nested delimiter `__`, e.g. `DIAGNOSER_LLM__BASE_URL`,
`DIAGNOSER_RUN__POLICY__MODE`; lists as JSON), and the older names users rely on (`DIAGNOSER_LLM_BASE_URL`,
`DIAGNOSER_RUNBOOKS`, `SLACK_BOT_TOKEN` ...: `env_aliases.py`) keep working. A file in the old formats (a YAML
or TOML `diagnoser run` config or bot config with top-level keys) is read as its section, with a warning.
`diagnoser config show` prints the effective tree and where each value came from.
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, SettingsConfigDict, SettingsError

from diagnoser.act.config import RunConfig
from diagnoser.bot.config import BotConfig
from diagnoser.durations import Seconds
from diagnoser.env_aliases import ALIASES, alias_values
from diagnoser.errors import ConfigError

ENV_CONFIG = "DIAGNOSER_CONFIG"
ENV_PREFIX = "DIAGNOSER_"
SECTIONS = ("llm", "run", "slurm", "bot", "metrics", "serve", "memory", "mcp")
DEFAULT = "default"
CLI = "option"


def default_config_path() -> Path:
    return Path(platformdirs.user_config_dir("diagnoser")) / "config.toml"


def default_llm_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("diagnoser")) / "llm"


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LLMSettings(_Section):
    """The LLM stage's endpoint (off unless `base_url` is set somewhere)."""

    base_url: str | None = None
    model: str | None = None
    api_key: SecretStr | None = None  # better: api_key_env, so keys stay out of files
    api_key_env: str | None = None  # name of the env var that holds the key
    timeout: float = Field(default=60.0, gt=0)
    max_tokens: int = Field(default=512, gt=0)
    context_tokens: int = Field(default=8192, gt=0)
    no_remote: bool = False
    cache_dir: Path | None = Field(default_factory=default_llm_cache_dir)  # "none": no answer cache
    backend: Literal["openai", "langchain"] = "openai"
    max_retries: int = Field(default=0, ge=0)
    temperature: float = Field(default=0.0, ge=0)

    @field_validator("base_url", "model", "api_key_env", mode="before")
    @classmethod
    def _blank_is_none(cls, v: Any) -> Any:
        return None if isinstance(v, str) and not v.strip() else (v.strip() if isinstance(v, str) else v)

    @field_validator("cache_dir", mode="before")
    @classmethod
    def _cache_off(cls, v: Any) -> Any:
        if isinstance(v, str) and v.strip().lower() in ("", "none", "off"):
            return None
        return Path(v).expanduser() if isinstance(v, str) else v


class SlurmSettings(_Section):
    """`slurm-run`, `slurm-hook` and `run --executor slurm`."""

    kernel_log_dir: str | None = None  # per-node kernel logs, `{node}` is replaced
    kernel_via_srun: bool = False  # read dmesg on the nodes through srun
    task_output: tuple[str, ...] = ()  # task output patterns
    max_drains: int = Field(default=2, ge=0)  # nodes drained by diagnoser per window, cluster-wide
    drain_window_s: Seconds = Field(default=3600.0, gt=0)
    poll_s: float = Field(default=1.0, gt=0)
    ops_log: Path | None = None  # default: the user state dir's slurm-ops.jsonl
    drain_lock: Path | None = None  # default: drain.lock beside the operations log
    state_dir: Path | None = None  # slurm-hook's per-job audit logs
    dry_run: bool = False  # print scontrol calls instead of running them


def _path_list(value: Any) -> Any:
    """Directories as an env var gives them: `os.pathsep`-separated (like PATH) or a JSON list."""
    if isinstance(value, str):
        text = value.strip()
        return json.loads(text) if text.startswith("[") else [p for p in text.split(os.pathsep) if p]
    return value


PathList = Annotated[tuple[Path, ...], NoDecode, BeforeValidator(_path_list)]


class MetricsSettings(_Section):
    """Prometheus metrics of the controller and the service."""

    enabled: bool = False
    port: int = Field(default=9464, ge=0, le=65535)


class ServeSettings(_Section):
    """`diagnoser serve`: the HTTP API."""

    host: str = "127.0.0.1"
    port: int = Field(default=8642, ge=0, le=65535)
    token: SecretStr | None = None
    token_file: Path | None = None
    roots: PathList = ()  # triage by path reads only below these
    max_upload_bytes: int = Field(default=2 << 30, gt=0)
    workers: int = Field(default=2, ge=1, le=64)  # triage processes
    queue: int = Field(default=8, ge=0, le=10_000)  # triages waiting for a worker before 429
    store: Path | None = None  # incident store (default: DIAGNOSER_STORE, else the user data dir)
    jobs_dir: Path | None = None  # triage job records kept across restarts (default: the user state dir)


class MemorySettings(_Section):
    """The incident memory: a local store directory, or a chromadb server shared by a fleet."""

    server: str | None = None  # chromadb server URL, e.g. http://chroma.internal:8000
    path: Path | None = None  # store directory (default: the user data dir; DIAGNOSER_STORE)
    tenant: str = "default_tenant"
    database: str = "default_database"
    collection: str = "diagnoser-incidents"


class McpSettings(_Section):
    """`diagnoser mcp` / `diagnoser serve --mcp`."""

    roots: PathList = ()
    token: SecretStr | None = None  # streamable HTTP: every request needs `Authorization: Bearer <token>`
    token_file: Path | None = None


class Settings(BaseSettings):
    """The whole tree. Built by `load_settings`, which layers the sources itself to know each value's origin."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid",
                                      frozen=True, case_sensitive=False)

    llm: LLMSettings = Field(default_factory=LLMSettings)
    run: RunConfig = Field(default_factory=RunConfig)
    slurm: SlurmSettings = Field(default_factory=SlurmSettings)
    bot: BotConfig = Field(default_factory=BotConfig)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    serve: ServeSettings = Field(default_factory=ServeSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    mcp: McpSettings = Field(default_factory=McpSettings)

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                   file_secret_settings):
        return (init_settings,)  # load_settings merges file, environment and options itself


class _Environment(EnvSettingsSource):
    """pydantic-settings' `DIAGNOSER_<SECTION>__<KEY>` parsing over a given mapping (tests pass their own)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._given = {k.lower(): v for k, v in env.items() if k.upper().startswith(ENV_PREFIX)}
        super().__init__(Settings)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return self._given


@dataclass(frozen=True)
class Loaded:
    """The effective settings, where each leaf value came from, and the file that was read (if any)."""

    settings: Settings
    origins: dict[str, str] = field(default_factory=dict)  # dotted key -> file path / env var / option
    file: Path | None = None


def load_settings(file: Path | None = None, *, env: Mapping[str, str] | None = None,
                  cli: Mapping[str, Any] | None = None, legacy: str | None = None,
                  default_file: bool = True) -> Loaded:
    """Merge defaults < `file` (or $DIAGNOSER_CONFIG, or the default path when it exists) < environment <
    `cli` (nested by section; None values mean "not given"). `legacy` ("run" or "bot") names the section an
    old-format file of that command is read into. ConfigError (one line naming the file/env var and key)."""
    env = os.environ if env is None else env
    path = file or (Path(env[ENV_CONFIG]) if env.get(ENV_CONFIG) and default_file else None)
    if path is None and default_file and default_config_path().is_file():
        path = default_config_path()
    layers: list[tuple[dict[str, Any], Any]] = []  # (values, origin: str or a {dotted key: origin} map)
    if path is not None:
        layers.append((read_settings_file(path, legacy), str(path)))
    aliases, alias_origins = alias_values(env)
    layers.append((aliases, alias_origins))
    layers.append(_nested_env(env))
    layers.append((_drop_none(dict(cli or {})), CLI))
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for values, origin in layers:
        _deep_update(merged, values)
        for key in _leaves(values):
            origins[key] = origin.get(key, CLI) if isinstance(origin, dict) else origin
    return Loaded(validate(merged, origins), origins, path)


def validate(values: dict[str, Any], origins: Mapping[str, str] | str) -> Settings:
    """The typed tree; a ValidationError becomes one line naming who set the key (`origins`: dotted key -> file,
    variable or option; or one origin for all)."""
    try:
        return Settings(**values)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        source = origins if isinstance(origins, str) else _origin_of(where, origins)
        message = "unknown setting" if first["type"] == "extra_forbidden" else first["msg"]
        raise ConfigError(f"{source}: {where}: {message}") from None


def read_settings_file(path: Path, legacy: str | None = None, warn: bool = True) -> dict[str, Any]:
    """The file's sections; an old-format file (top-level keys of one command) as that command's section."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None
    is_toml = path.suffix == ".toml" or (path.suffix not in (".yaml", ".yml", ".json") and _looks_toml(text))
    try:
        data = tomllib.loads(text) if is_toml else yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not valid {'TOML' if is_toml else 'YAML'}: {exc}".splitlines()[0]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    old = [k for k in data if k not in SECTIONS]
    if not old:
        for name, table in data.items():
            if not isinstance(table, dict):
                raise ConfigError(f"{path}: [{name}] must be a table")
        return data
    kind = legacy or _legacy_kind(data)
    if kind is None or any(k in SECTIONS for k in data):
        raise ConfigError(f"{path}: {old[0]}: unknown section (expected {', '.join(f'[{s}]' for s in SECTIONS)})")
    if warn:
        _warn_once(path, f"diagnoser: warning: {path} is an old-format {kind} config (top-level keys); read as "
                         f"its [{kind}] section. Convert it with `diagnoser config migrate {path} --section {kind}`.")
    return {kind: data}


def _looks_toml(text: str) -> bool:
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return False
    return True


def _legacy_kind(data: dict[str, Any]) -> str | None:
    """The command whose settings the top-level keys are (most keys in common); None when none."""
    models = (("run", RunConfig), ("bot", BotConfig))
    overlap = {kind: len(set(data) & set(model.model_fields)) for kind, model in models}
    kind = max(overlap, key=lambda k: overlap[k])
    return kind if overlap[kind] else None


_WARNED: set[str] = set()


def _warn_once(path: Path, message: str) -> None:
    if str(path) not in _WARNED:
        _WARNED.add(str(path))
        sys.stderr.write(message + "\n")


def _nested_env(env: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """`DIAGNOSER_<SECTION>__<KEY>` values and, per dotted key, the variable that set it."""
    names = {k: v for k, v in env.items() if k.upper().startswith(ENV_PREFIX) and "__" in k}
    try:
        values = _Environment(names)()
    except SettingsError:
        for name, value in names.items():
            try:
                _Environment({name: value})()
            except SettingsError:
                raise ConfigError(f"{name}: not valid JSON for a list or table: {value!r}") from None
        raise
    origins = {}
    for key in _leaves(values):
        parts = key.split(".")
        for n in range(len(parts), 0, -1):  # the variable may set a whole table (JSON)
            name = ENV_PREFIX + "__".join(parts[:n]).upper()
            if any(k.upper() == name for k in names):
                origins[key] = name
                break
    return values, origins


def _drop_none(values: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in values.items():
        if isinstance(value, dict):
            value = _drop_none(value)
            if not value:
                continue
        if value is not None:
            out[key] = value
    return out


def _deep_update(target: dict[str, Any], values: Mapping[str, Any]) -> None:
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _deep_update(target[key], value)
        else:
            target[key] = value.copy() if isinstance(value, dict) else value


def _leaves(values: Mapping[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key, value in values.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.extend(_leaves(value, dotted + "."))
        else:
            out.append(dotted)
    return out


def _origin_of(key: str, origins: Mapping[str, str]) -> str:
    """Who set `key` (or the table holding it, or a key below it)."""
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in origins:
            return origins[".".join(parts[:n])]
    below = [o for k, o in origins.items() if k.startswith(key + ".")]
    return below[0] if below else "settings"


def origin_of(key: str, loaded: Loaded) -> str:
    """Where the effective value of a dotted key came from: a file path, an env var, `option` or `default`."""
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        found = loaded.origins.get(".".join(parts[:n]))
        if found:
            return found
    return DEFAULT


__all__ = ["ALIASES", "ConfigError", "Loaded", "Settings", "load_settings", "origin_of", "read_settings_file",
           "validate"]
