"""The MCP server, called with the `mcp` SDK's own client over stdio and over streamable HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")
pytest.importorskip("chromadb")

import httpx2  # noqa: E402  (the mcp SDK's HTTP client)
from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from net_support import free_port, stop, wait_http  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "log_fixtures" / "ecc-xid94-dmesg-T" / "logs"
TOOLS = {"triage", "search_incidents", "get_runbook", "explain_verdict"}


def _env(store: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIAGNOSER_", "OPENAI_"))}
    env.update(PYTHONPATH=str(ROOT), DIAGNOSER_STORE=str(store), DIAGNOSER_LLM="none")
    return env


def _server_args(*extra: str, command: tuple[str, ...] = ("mcp",)) -> list[str]:
    return ["-m", "diagnoser.cli", *command, "--root", str(ROOT / "log_fixtures"), *extra]


async def _session_calls(session: ClientSession, store: Path) -> dict:
    """The calls every transport must answer; returns what the assertions need."""
    await session.initialize()
    out: dict = {"tools": {t.name: t for t in (await session.list_tools()).tools}}
    out["triage"] = await session.call_tool("triage", {"paths": [str(FIXTURE)]})
    out["outside"] = await session.call_tool("triage", {"paths": [str(ROOT / "diagnoser")]})
    out["dotdot"] = await session.call_tool("triage", {"paths": [str(ROOT / "log_fixtures" / ".." / "tests")]})
    out["search"] = await session.call_tool("search_incidents", {"query": "NVRM: Xid (PCI:0000:4e:00): 94, pid=1"})
    out["runbook"] = await session.call_tool("get_runbook", {"runbook_id": "gpu-xid-79"})
    out["no_runbook"] = await session.call_tool("get_runbook", {"runbook_id": "no-such-runbook"})
    out["explain"] = await session.call_tool("explain_verdict", {"diagnosis": out["triage"].structured_content})
    out["explain_bad"] = await session.call_tool("explain_verdict", {})
    out["bad_k"] = await session.call_tool("search_incidents", {"query": "x", "k": 0})
    return out


def _cli_verdict(store: Path) -> dict:
    got = subprocess.run([sys.executable, "-m", "diagnoser.cli", "triage", "--json", str(FIXTURE)],
                         capture_output=True, text=True, env=_env(store), timeout=120, check=True)
    return json.loads(got.stdout)


def _record(store: Path, text: str) -> str:
    """Record an incident in the store the way a user does (`diagnoser incidents add`); its id."""
    got = subprocess.run([sys.executable, "-m", "diagnoser.cli", "incidents", "add", "-", "--category", "infra",
                          "--subtype", "lustre_eio", "--action", "retry_after_backoff", "--json"],
                         input=text, capture_output=True, text=True, env=_env(store), timeout=120, check=True)
    return json.loads(got.stdout)["id"]


def _text(result) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


def _check(out: dict, store: Path) -> None:
    assert set(out["tools"]) == TOOLS
    assert out["tools"]["triage"].input_schema["properties"]["paths"]["type"] == "array"
    assert out["tools"]["search_incidents"].input_schema["properties"]["k"]["type"] == "integer"
    verdict = out["triage"]
    assert not verdict.is_error, _text(verdict)
    cli = _cli_verdict(store)
    got = verdict.structured_content
    assert got["schema"] == "diagnosis/v1"
    assert (got["category"], got["subtype"], got["action"]) == (cli["category"], cli["subtype"], cli["action"])
    assert (got["category"], got["action"]) == ("hardware", "drain_and_restart")
    for refused in (out["outside"], out["dotdot"]):
        assert refused.is_error and "not below an allowed log root" in _text(refused)
        assert "Traceback" not in _text(refused)
    search = out["search"]
    assert not search.is_error, _text(search)
    assert search.structured_content["results"], "the seed memory knows Xid 94"
    assert out["runbook"].structured_content["id"] == "gpu-xid-79"
    assert "What to check" in out["runbook"].structured_content["body"]
    assert out["no_runbook"].is_error and "no runbook or catalog entry with id 'no-such-runbook'" in _text(
        out["no_runbook"])
    explained = out["explain"].structured_content
    assert explained["decided_by"] == "rule" and explained["rule"] == got["rule"]
    assert explained["entry"]["id"] == got["rule"] and explained["entry"]["body"]
    assert [e["line"] for e in explained["evidence"]] == [e["line"] for e in got["evidence"]]
    assert out["explain_bad"].is_error and "exactly one of" in _text(out["explain_bad"])
    assert out["bad_k"].is_error


def test_stdio_transport(tmp_path):
    store = tmp_path / "store"
    params = StdioServerParameters(command=sys.executable, args=_server_args("--store", str(store)),
                                   env=_env(store), cwd=str(tmp_path))

    async def main() -> dict:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            out = await _session_calls(session, store)
            # an incident recorded by another process after the server started is found, and explained
            inc = _record(store, "LustreError: 11-0: scratch-OST0004-osc: operation ost_write failed: rc = -5")
            out["found"] = await session.call_tool("search_incidents", {"query": "LustreError: ost_write failed "
                                                                                 "rc = -5", "k": 3})
            out["inc"] = inc
            out["explain_inc"] = await session.call_tool("explain_verdict", {"incident_id": inc})
            out["explain_none"] = await session.call_tool("explain_verdict", {"incident_id": "inc-99999"})
            return out

    out = anyio.run(main)
    _check(out, store)
    ids = [r["incident"]["id"] for r in out["found"].structured_content["results"]]
    assert ids[0] == out["inc"]
    explained = out["explain_inc"].structured_content
    assert explained["incident"] == out["inc"] and explained["verdict"]["subtype"] == "lustre_eio"
    assert "ost_write failed" in explained["evidence"][0]["text"]
    assert out["explain_none"].is_error and "no incident 'inc-99999'" in _text(out["explain_none"])


def test_streamable_http_transport_as_serve_mcp(tmp_path):
    # `diagnoser serve --mcp` is the same server as `diagnoser mcp`
    store = tmp_path / "store"
    port = free_port()
    proc = subprocess.Popen([sys.executable, *_server_args("--store", str(store), "--transport", "streamable-http",
                                                           "--port", str(port), command=("serve", "--mcp"))],
                            env=_env(store), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        wait_http(url, proc)

        async def main() -> dict:
            async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
                return await _session_calls(session, store)

        _check(anyio.run(main), store)
    finally:
        stop(proc)


def test_streamable_http_requires_the_token(tmp_path):
    # with a token set, a request without it never reaches the tools; the SDK client with it works
    store = tmp_path / "store"
    token_file = tmp_path / "mcp.token"
    token_file.write_text("s3cret-mcp-token\n", encoding="utf-8")
    port = free_port()
    env = {**_env(store), "DIAGNOSER_MCP__TOKEN_FILE": str(token_file)}
    proc = subprocess.Popen([sys.executable, *_server_args("--store", str(store), "--transport", "streamable-http",
                                                           "--port", str(port))],
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        wait_http(url, proc)
        init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        for auth in (None, "Bearer wrong-token", "Basic czNjcmV0LW1jcC10b2tlbg=="):
            req = urllib.request.Request(url, data=init, headers=headers | ({"Authorization": auth} if auth else {}))
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(req, timeout=10)
            assert refused.value.code == 401 and refused.value.headers["WWW-Authenticate"] == "Bearer"

        async def main() -> list[str]:
            client = httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret-mcp-token"})
            async with client, streamable_http_client(url, http_client=client) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                return sorted(t.name for t in (await session.list_tools()).tools)

        assert set(anyio.run(main)) == TOOLS
    finally:
        stop(proc)


def test_http_beyond_loopback_needs_a_token(tmp_path):
    got = subprocess.run([sys.executable, *_server_args("--transport", "streamable-http", "--host", "0.0.0.0",
                                                        "--port", str(free_port()))],
                         capture_output=True, text=True, env=_env(tmp_path / "store"), timeout=60)
    assert got.returncode == 2 and "without a token" in got.stderr


def test_roots_must_exist(tmp_path):
    got = subprocess.run([sys.executable, "-m", "diagnoser.cli", "mcp", "--root", str(tmp_path / "nope")],
                         capture_output=True, text=True, env=_env(tmp_path / "store"), timeout=60)
    assert got.returncode == 2 and "is not a directory" in got.stderr


def test_no_roots_refuses_every_path(tmp_path):
    from diagnoser.mcp_server import tools
    from diagnoser.mcp_server.config import McpSettings

    with pytest.raises(tools.ToolFailure, match="no log roots are configured"):
        tools.triage([str(FIXTURE)], McpSettings(roots=()))


def test_triage_import_does_not_import_mcp():
    code = ("import sys, diagnoser.cli; from diagnoser.cli import app; "
            "assert 'mcp' not in sys.modules and 'diagnoser.mcp_server' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True, timeout=60)


def test_roots_from_environment(tmp_path, monkeypatch):
    from diagnoser.mcp_server.config import load_settings

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    monkeypatch.setenv("DIAGNOSER_MCP__ROOTS", f"{a}{os.pathsep}{b}")
    assert load_settings().roots == (a.resolve(), b.resolve())
    assert load_settings([str(b)]).roots == (b.resolve(),)  # the command line wins


def test_answers_are_redacted():
    from diagnoser.mcp_server import explain
    from diagnoser.mcp_server.config import McpSettings

    secret = "hf_" + "A1b2C3d4E5f6G7h8I9j0K1l2"
    verdict = {"schema": "diagnosis/v1", "category": "user_code", "subtype": "python_exception",
               "action": "stop_and_notify", "confidence": 0.9, "root_cause": f"login failed with {secret}",
               "evidence": [{"source": "rank0.log", "line": 3, "text": f"HF_TOKEN={secret}"}]}
    out = json.dumps(explain.explain_verdict(None, verdict, McpSettings()))
    assert secret not in out and "[REDACTED]" in out
