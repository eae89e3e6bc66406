"""LLM stage configuration (file < env < options), secret redaction and the --no-remote check."""

from __future__ import annotations

import pytest

from diagnoser.classify.config import ConfigError, load_config
from diagnoser.classify.redact import MASK, RemoteRefused, check_endpoint, is_loopback_host, redact


def write(tmp_path, text: str):
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_off_without_an_endpoint_even_with_an_api_key(tmp_path):
    cfg = load_config(env={"OPENAI_API_KEY": "sk-x"}, config_path=tmp_path / "missing.toml")
    assert not cfg.enabled and "no endpoint configured" in cfg.describe()


def test_file_then_env_then_options(tmp_path, monkeypatch):
    monkeypatch.setenv("GATEWAY_KEY", "from-env-var")
    path = write(tmp_path, '[llm]\nbase_url = "http://file:1/v1"\nmodel = "file-model"\ntimeout = 5\n'
                           'api_key_env = "GATEWAY_KEY"\ncontext_tokens = 16384\n')
    cfg = load_config(env={}, config_path=path)
    assert (cfg.base_url, cfg.model, cfg.timeout, cfg.api_key, cfg.context_tokens) == (
        "http://file:1/v1", "file-model", 5.0, "from-env-var", 16384)
    env = {"DIAGNOSER_LLM_BASE_URL": "http://env:2/v1", "DIAGNOSER_LLM_MODEL": "env-model",
           "OPENAI_API_KEY": "sk-env", "DIAGNOSER_LLM_TIMEOUT": "7.5", "DIAGNOSER_NO_REMOTE": "yes"}
    cfg = load_config(env=env, config_path=path)
    assert (cfg.base_url, cfg.model, cfg.api_key, cfg.timeout, cfg.no_remote) == (
        "http://env:2/v1", "env-model", "sk-env", 7.5, True)
    cfg = load_config(env=env, config_path=path, base_url="http://cli:3/v1", model="cli-model", no_remote=False)
    assert (cfg.base_url, cfg.model, cfg.no_remote, cfg.enabled) == ("http://cli:3/v1", "cli-model", False, True)
    assert "sk-env" not in repr(cfg)


def test_llm_none_turns_the_stage_off_whatever_is_configured(tmp_path):
    cfg = load_config(env={"DIAGNOSER_LLM_BASE_URL": "http://env:2/v1"}, config_path=tmp_path / "x.toml", llm="none")
    assert not cfg.enabled and "--llm none" in cfg.describe()


def test_config_path_from_env_and_cache_off(tmp_path):
    path = write(tmp_path, '[llm]\nbase_url = "http://127.0.0.1:9/v1"\ncache_dir = "none"\nbackend = "langchain"\n')
    cfg = load_config(env={"DIAGNOSER_CONFIG": str(path)})
    assert cfg.enabled and cfg.cache_dir is None and cfg.backend == "langchain"


@pytest.mark.parametrize(("text", "message"), [
    ('[llm]\ntimeout = "soon"\n', "timeout"),
    ("[llm]\nmax_tokens = -3\n", "max_tokens"),
    ('[llm]\nbackend = "grpc"\n', "backend"),
    ('[llm]\nbase_urll = "typo"\n', "unknown setting"),
    ("[llm\n", "config.toml"),
])
def test_bad_config_is_a_clear_error(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_config(env={}, config_path=write(tmp_path, text))


@pytest.mark.parametrize(("text", "secret"), [
    ("OPENAI_API_KEY=sk-proj-Zx8vQ2mN4pL6rT0yW3eA5sD7fG9h", "Zx8vQ2mN4pL6rT0yW3eA5sD7fG9h"),
    ("login with hf_QwErTyUiOpAsDfGhJkLzXcVbNm123456", "QwErTyUiOpAsDfGhJkLzXcVbNm123456"),
    ("aws_access_key_id = AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG"),
    ("token ghp_1234567890abcdefghijABCDEFGHIJ123456 used", "ghp_1234567890abcdefghij"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuv", "11ABCDEFG0123456789_abc"),
    ("-H 'Authorization: Bearer abc.def-123456789'", "abc.def-123456789"),
    ("Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sflKxwRJSMeKKF2QT4fwpMeJf36POk6", "sflKxwRJSMeKKF2QT4"),
    ("redis://trainer:S3cr3tP4ss@10.0.0.5:6379/0", "S3cr3tP4ss"),
    ("https://bucket.s3.amazonaws.com/ckpt?X-Amz-Signature=deadbeef0123&X-Amz-Expires=60", "deadbeef0123"),
    ("DB_PASSWORD=hunter2 python train.py", "hunter2"),
    ("python train.py --password hunter2 --epochs 3", "hunter2"),
    ("WANDB_API_KEY: 0123456789abcdef0123456789abcdef01234567", "0123456789abcdef01234567"),
    ("xoxb-123456789012-abcdefABCDEF", "abcdefABCDEF"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5v\n-----END OPENSSH PRIVATE KEY-----",
     "b3BlbnNzaC1rZXktdjEAAAAABG5v"),
    ("secret blob MIIEowIBAAKCAQEAuN3x9kJ8wzrN2Q7vY5b8c1d2e3f4g5h6i7j8k9l0", "MIIEowIBAAKCAQEAuN3x9kJ8"),
])
def test_secrets_are_redacted(text, secret):
    out = redact(text)
    assert secret not in out and MASK in out


@pytest.mark.parametrize("text", [
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.",
    "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:525",
    "commId 0x9f1c2e3d4b5a6978 - Init COMPLETE; sha 3f2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a",
    "num_tokens: 4096 tokens/s: 3512.4 max_tokens=512",
    "https://github.com/pytorch/pytorch/issues/197073",
])
def test_ordinary_log_text_is_left_alone(text):
    assert redact(text) == text


@pytest.mark.parametrize(("host", "ok"), [("127.0.0.1", True), ("127.8.9.10", True), ("localhost", True),
                                          ("[::1]", True), ("::1", True), ("10.0.0.1", False),
                                          ("192.0.2.10", False), ("2001:db8::1", False)])
def test_loopback_hosts(host, ok):
    assert is_loopback_host(host) is ok


def test_no_remote_refuses_and_remote_allowed_otherwise():
    with pytest.raises(RemoteRefused, match="not a loopback"):
        check_endpoint("https://192.0.2.10/v1", no_remote=True)
    check_endpoint("https://192.0.2.10/v1", no_remote=False)
    check_endpoint("http://localhost:8080/v1", no_remote=True)
    with pytest.raises(RemoteRefused):
        check_endpoint("not a url", no_remote=True)
