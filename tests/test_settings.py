"""One settings tree: one file serves triage and run, env names old and new, origins, masking, old files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from diagnoser.act.config import build_config
from diagnoser.bot.config import load_bot_config
from diagnoser.classify.config import load_config
from diagnoser.durations import parse_duration
from diagnoser.errors import ConfigError
from diagnoser.settings import load_settings, origin_of

ROOT = Path(__file__).resolve().parents[1]
XID79 = ROOT / "log_fixtures" / "xid79-then-nccl-timeouts" / "logs"
ONE_FILE = """
[llm]
base_url = "http://127.0.0.1:9/v1"
model = "file-model"
timeout = 2
[run]
hang_timeout_s = 900
[run.policy]
mode = "shadow"
budgets = {infra = 1}
[bot]
channel = "COPS"
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A clean environment: no user config, no DIAGNOSER_/SLACK_/OPENAI_ variables from the caller."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DIAGNOSER_", "SLACK_", "OPENAI_"))}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "xdg"), XDG_CACHE_HOME=str(tmp_path / "cache"),
               PYTHONPATH=str(ROOT), **extra)
    return env


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diagnoser.cli", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def test_one_file_with_llm_and_run_serves_triage_and_run(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(ONE_FILE)
    env = _env(tmp_path, DIAGNOSER_CONFIG=str(cfg))
    triage = _cli(env, "triage", str(XID79), "--json")
    assert triage.returncode == 0, triage.stderr
    verdict = json.loads(triage.stdout)
    assert verdict["subtype"] == "gpu_xid_79"  # the rules' verdict stands
    assert any("LLM stage failed" in n for n in verdict["notes"])  # the [llm] endpoint was tried: nothing listens
    run = build_config(None, env=env)
    assert run.hang_timeout_s == 900 and run.policy.mode.value == "shadow" and run.policy.budgets["infra"] == 1
    cfg.write_text(ONE_FILE.replace("[run]\n", f'[run]\nrun_dir = "{tmp_path / "from-config"}"\n'))
    job = _cli(env, "run", "--json", "--", sys.executable, "-c", "print('step 1')")
    assert job.returncode == 0, job.stderr[-2000:]
    assert json.loads(job.stdout)["status"] == "succeeded" and (tmp_path / "from-config" / "audit.jsonl").is_file()
    assert load_bot_config(None, env=env).channel == "COPS"
    llm = load_config(env=env)
    assert (llm.base_url, llm.model, llm.timeout) == ("http://127.0.0.1:9/v1", "file-model", 2.0)


def test_an_old_yaml_run_config_still_works_for_run_and_no_longer_breaks_triage(tmp_path: Path) -> None:
    old = tmp_path / "policy.yaml"
    old.write_text("hang_timeout_s: 120\npolicy:\n  min_confidence: 0.7\n")
    env = _env(tmp_path, DIAGNOSER_CONFIG=str(old))
    triage = _cli(env, "triage", str(XID79), "--json")
    assert triage.returncode == 0, triage.stderr  # was rc 2: the YAML read as TOML [llm]
    assert "old-format run config" in triage.stderr and "config migrate" in triage.stderr
    cfg = build_config(None, env=env)
    assert cfg.hang_timeout_s == 120 and cfg.policy.min_confidence == 0.7
    migrated = _cli(env, "config", "migrate", str(old))
    assert migrated.returncode == 0 and not migrated.stderr, migrated.stderr
    typo = tmp_path / "typo.yaml"
    typo.write_text("hang_timeout_s: 120\nhang_timout: 5\n")
    bad = _cli(env, "config", "migrate", str(typo))
    assert bad.returncode == 2 and f"{typo}: run.hang_timout: unknown setting" in bad.stderr
    new = tmp_path / "new.toml"
    new.write_text(migrated.stdout)
    assert build_config(new, env={}) == cfg  # the migrated file means the same


def test_environment_old_and_nested_names_and_precedence(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(ONE_FILE)
    env = {"DIAGNOSER_LLM_MODEL": "alias-model", "DIAGNOSER_LLM__TIMEOUT": "7", "DIAGNOSER_HANG_TIMEOUT": "1h30m",
           "DIAGNOSER_RUN__POLICY__REQUIRE_APPROVAL": '["escalate"]', "SLACK_BOT_TOKEN": "xoxb-secret-1",
           "DIAGNOSER_SLURM_TASK_OUTPUT": "a/%t.out:b/%t.err", "DIAGNOSER_SERVE__ROOTS": '["/logs"]'}
    loaded = load_settings(cfg, env=env, cli={"llm": {"model": "cli-model", "base_url": None}})
    s = loaded.settings
    assert s.llm.model == "cli-model" and origin_of("llm.model", loaded) == "option"
    assert s.llm.timeout == 7 and origin_of("llm.timeout", loaded) == "DIAGNOSER_LLM__TIMEOUT"
    assert s.llm.base_url == "http://127.0.0.1:9/v1" and origin_of("llm.base_url", loaded) == str(cfg)
    assert s.run.hang_timeout_s == 5400 and origin_of("run.hang_timeout_s", loaded) == "DIAGNOSER_HANG_TIMEOUT"
    assert [a.value for a in s.run.policy.require_approval] == ["escalate"]
    assert s.slurm.task_output == ("a/%t.out", "b/%t.err") and s.serve.roots == (Path("/logs"),)
    assert origin_of("serve.port", loaded) == "default" and s.serve.port == 8642
    # the nested name wins over the old one
    both = load_settings(None, env={"DIAGNOSER_LLM_MODEL": "old", "DIAGNOSER_LLM__MODEL": "new"}, default_file=False)
    assert both.settings.llm.model == "new"


@pytest.mark.parametrize(("env", "named"), [
    ({"DIAGNOSER_LLM__TIMEOUT": "soon"}, "DIAGNOSER_LLM__TIMEOUT: llm.timeout"),
    ({"DIAGNOSER_HANG_TIMEOUT": "forever"}, "DIAGNOSER_HANG_TIMEOUT: run.hang_timeout_s"),
    ({"DIAGNOSER_SERVE__PORT": "99999"}, "DIAGNOSER_SERVE__PORT: serve.port"),
    ({"DIAGNOSER_RUN__COLLECT": "/a,/b"}, "DIAGNOSER_RUN__COLLECT: not valid JSON"),
    ({"DIAGNOSER_MEMORY__SERVERR": "x"}, "DIAGNOSER_MEMORY__SERVERR: memory.serverr: unknown setting"),
])
def test_a_bad_value_is_one_line_naming_the_variable_and_key(env, named) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(None, env=env, default_file=False)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_a_bad_file_value_names_the_file_and_key_and_exits_2(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[serve]\nport = 8642\nworkers = 0\n[nonsense]\nx = 1\n')
    with pytest.raises(ConfigError, match=r"c\.toml: nonsense: unknown section"):
        load_settings(cfg, env={})
    cfg.write_text('[serve]\nworkers = 0\n')
    result = _cli(_env(tmp_path, DIAGNOSER_CONFIG=str(cfg)), "config", "show")
    assert result.returncode == 2 and f"{cfg}: serve.workers:" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_config_show_says_where_each_value_came_from_and_masks_secrets(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(ONE_FILE + '[serve]\ntoken = "tok-in-file-123"\n'
                   '[memory]\nserver = "http://admin:hunter2pass@chroma.internal:8000"\n')
    env = _env(tmp_path, DIAGNOSER_CONFIG=str(cfg), OPENAI_API_KEY="sk-proj-Zx8vQ2mN4pL6rT0yW3eA5sD7fG9h",
               DIAGNOSER_LLM_MODEL="m2")
    result = _cli(env, "config", "show", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["file"] == str(cfg)
    assert data["origins"]["llm.model"] == "DIAGNOSER_LLM_MODEL" and data["settings"]["llm"]["model"] == "m2"
    assert data["origins"]["llm.api_key"] == "OPENAI_API_KEY"
    assert data["origins"]["run.policy.mode"] == str(cfg) and data["origins"]["serve.port"] == "default"
    text = _cli(env, "config", "show").stdout
    for secret in ("Zx8vQ2mN4pL6rT0yW3eA5sD7fG9h", "tok-in-file-123", "hunter2pass"):
        assert secret not in result.stdout and secret not in text
    assert 'model = "m2"' in text and "# DIAGNOSER_LLM_MODEL" in text


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90), ("90s", 90), ("10m", 600), ("1.5h", 5400), ("2d", 172800), ("1h30m", 5400),
    ("00:10:00", 600), ("10:30", 630), ("1-00:00:00", 86400), ("1-2", 93600), ("1-2:30", 95400),
])
def test_durations_in_our_forms_and_slurms(text, seconds) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "1 30", "-5", "1:2:3:4", "5x"])
def test_not_a_duration(text) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_slurm_executor_reads_the_slurm_section_and_the_old_variables(tmp_path: Path) -> None:
    from diagnoser.slurm.executor import executor_from_env

    cfg = tmp_path / "c.toml"
    cfg.write_text('[slurm]\nkernel_log_dir = "/var/log/nodes/{node}"\nmax_drains = 5\ndrain_lock = "/shared/d.lock"\n')
    env = {"DIAGNOSER_CONFIG": str(cfg), "DIAGNOSER_SLURM_MAX_DRAINS": "1", "DIAGNOSER_SLURM_TASK_OUTPUT": "o-%t.log",
           "DIAGNOSER_SLURM_POLL_S": "3"}
    ex = executor_from_env(tmp_path / "run", env=env)
    assert ex.kernel.log_dir == "/var/log/nodes/{node}" and ex.guard.max_nodes == 1  # the variable wins
    assert ex.guard.lock == Path("/shared/d.lock") and ex.task_output == ("o-%t.log",) and ex.poll_s == 3


def test_seconds_settings_take_durations_in_files_and_env(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[run]\nhang_timeout_s = "15m"\nkill_grace_s = "00:00:45"\n[run.policy]\nwindow_s = "1-00:00:00"\n'
                   '[run.policy.backoff]\nbase_s = "1m30s"\n[slurm]\ndrain_window_s = "2h"\n')
    s = load_settings(cfg, env={"DIAGNOSER_BOT__APPROVAL_TIMEOUT_S": "1h30m"}).settings
    assert (s.run.hang_timeout_s, s.run.kill_grace_s, s.run.policy.window_s, s.run.policy.backoff.base_s) == (
        900, 45, 86400, 90)
    assert s.slurm.drain_window_s == 7200 and s.bot.approval_timeout_s == 5400
    with pytest.raises(ConfigError, match=r"c\.toml: run\.hang_timeout_s: .*not a duration"):
        cfg.write_text('[run]\nhang_timeout_s = "soon"\n')
        load_settings(cfg, env={})
