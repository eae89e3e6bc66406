"""`diagnoser serve` settings (env < options, token rules) and upload names, without a server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from diagnoser.serve.config import ServeConfigError, load_serve_config
from diagnoser.serve.uploads import UploadError, safe_relpath


def test_defaults_env_and_options(tmp_path: Path) -> None:
    cfg = load_serve_config(env={})
    assert (cfg.host, cfg.port, cfg.token, cfg.roots, cfg.workers) == ("127.0.0.1", 8642, None, (), 2)
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    env = {"DIAGNOSER_SERVE__PORT": "9000", "DIAGNOSER_SERVE__ROOTS": f"{a}{os.pathsep}{b}",
           "DIAGNOSER_SERVE__MAX_UPLOAD_BYTES": "1000", "DIAGNOSER_SERVE__WORKERS": "3",
           "DIAGNOSER_SERVE__TOKEN": " t0k "}
    cfg = load_serve_config(env=env)
    assert (cfg.port, cfg.roots, cfg.max_upload_bytes, cfg.workers, cfg.token) == (9000, (a, b), 1000, 3, "t0k")
    cfg = load_serve_config({"port": 9100, "roots": (a,), "workers": None}, env=env)  # options win, None: not given
    assert (cfg.port, cfg.roots, cfg.workers) == (9100, (a,), 3)


def test_token_file_and_the_loopback_rule(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("from-file\n")
    cfg = load_serve_config({"host": "0.0.0.0"}, env={"DIAGNOSER_SERVE__TOKEN_FILE": str(token)})
    assert cfg.token == "from-file"
    for host in ("0.0.0.0", "10.1.2.3", "gpu-017.example.com", "::"):
        with pytest.raises(ServeConfigError, match="without a token"):
            load_serve_config({"host": host}, env={})
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        assert load_serve_config({"host": host}, env={}).token is None
    token.write_text("  \n")
    with pytest.raises(ServeConfigError, match="is empty"):
        load_serve_config(env={"DIAGNOSER_SERVE__TOKEN_FILE": str(token)})
    with pytest.raises(ServeConfigError, match="No such file"):
        load_serve_config(env={"DIAGNOSER_SERVE__TOKEN_FILE": str(tmp_path / "none")})


@pytest.mark.parametrize(("key", "value", "message"), [
    ("DIAGNOSER_SERVE__PORT", "http", "DIAGNOSER_SERVE__PORT: serve.port: .*integer"),
    ("DIAGNOSER_SERVE__PORT", "70000", "DIAGNOSER_SERVE__PORT: serve.port: .*less than or equal to 65535"),
    ("DIAGNOSER_SERVE__WORKERS", "0", "DIAGNOSER_SERVE__WORKERS: serve.workers: .*greater than or equal to 1"),
    ("DIAGNOSER_SERVE__MAX_UPLOAD_BYTES", "-1", "DIAGNOSER_SERVE__MAX_UPLOAD_BYTES: serve.max_upload_bytes"),
    ("DIAGNOSER_SERVE__ROOTS", "/no/such/dir", "is not a directory")])
def test_bad_settings_are_one_line_errors(key: str, value: str, message: str) -> None:
    with pytest.raises(ServeConfigError, match=message) as err:
        load_serve_config(env={key: value})
    assert "\n" not in str(err.value)


def test_the_settings_file_serve_section_is_read_and_env_and_options_win(tmp_path) -> None:
    roots = [tmp_path / "a", tmp_path / "b"]
    for r in roots:
        r.mkdir()
    cfg_file = tmp_path / "config.toml"
    cfg_file.write_text(f'[serve]\nport = 9001\nworkers = 3\nroots = ["{roots[0]}"]\n[llm]\nmodel = "m"\n')
    env = {"DIAGNOSER_CONFIG": str(cfg_file)}
    cfg = load_serve_config(env=env)
    assert (cfg.port, cfg.workers, cfg.roots) == (9001, 3, (roots[0],))
    env["DIAGNOSER_SERVE__ROOTS"] = os.pathsep.join(map(str, roots))  # like PATH
    assert load_serve_config(env=env).roots == tuple(roots)
    assert load_serve_config({"port": 9100, "workers": None}, env=env).port == 9100


def test_upload_names_stay_inside() -> None:
    assert str(safe_relpath("gpu-017/rank0.log")) == "gpu-017/rank0.log"
    assert str(safe_relpath("./logs/./rank0.log")) == "logs/rank0.log"
    assert str(safe_relpath("logs\\rank0.log")) == "logs/rank0.log"
    for bad in ("", "/etc/passwd", "../x", "a/../../x", "a//b", ".", "logs/"):
        with pytest.raises(UploadError):
            safe_relpath(bad)


def test_triage_does_not_import_the_service_stack(tmp_path) -> None:
    import subprocess
    import sys

    fixture = Path(__file__).resolve().parent.parent / "log_fixtures" / "xid79-then-nccl-timeouts"
    code = ("import sys; from diagnoser.cli import app\n"
            f"try:\n    app(['triage', '--json', {str(fixture)!r}])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('fastapi', 'uvicorn', 'starlette', 'prometheus_client', 'diagnoser.serve',"
            " 'mcp', 'pydantic_settings') if m in sys.modules), file=sys.stderr)")
    # no settings file: plain triage does not load the settings tree either
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAGNOSER_")} | {"XDG_CONFIG_HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                          env=env)
    assert '"category": "hardware"' in proc.stdout
    assert proc.stderr.strip().splitlines()[-1] == "[]"
