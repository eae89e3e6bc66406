"""`diagnoser serve` under load and faults: a full queue (429), LLM stage timeouts in the metrics, a
killed worker, SIGTERM mid-triage (and what the next server reports of that job), readiness with a broken
store, and the loopback-only rule without a token. Each test starts its own real server (uvicorn on a loopback port)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import psutil
import pytest
from serve_support import FIXTURES, REPO, TOKEN, XID79, Server, metric, tgz

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    base = tmp_path_factory.mktemp("serve-life")
    root = base / "root"
    shutil.copytree(FIXTURES / XID79, root / XID79)
    env = {"DIAGNOSER_STORE": str(base / "store"), "DIAGNOSER_LLM_BASE_URL": "", "DIAGNOSER_SERVE__TOKEN": TOKEN}
    yield {"root": root, "env": env}


def test_ready_checks_the_store(world: dict, tmp_path: Path) -> None:
    bad = tmp_path / "store"
    bad.write_text("not a store")
    server = Server(env={**world["env"], "DIAGNOSER_STORE": str(bad)}, probe="/healthz")
    try:
        deadline = time.monotonic() + 60
        while (r := httpx.get(server.url + "/readyz", timeout=5)).json()["checks"].get("rules") != "ok":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert r.status_code == 503 and r.json()["status"] == "not ready"
        assert "not an incident store" in r.json()["checks"]["store"]
    finally:
        server.stop()


class SlowEndpoint:
    """An OpenAI-compatible endpoint on loopback that answers too late (the LLM stage times out)."""

    def __init__(self, delay: float) -> None:
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("content-length", 0)))
                outer.requests += 1
                time.sleep(delay)
                try:
                    self.send_response(500)
                    self.end_headers()
                except OSError:
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None


def test_full_queue_gets_429_and_llm_timeouts_are_counted(world: dict) -> None:
    llm = SlowEndpoint(delay=4.0)
    env = {**world["env"], "DIAGNOSER_LLM_BASE_URL": llm.url, "DIAGNOSER_LLM_MODEL": "m",
           "DIAGNOSER_LLM_TIMEOUT": "1", "DIAGNOSER_LLM_CACHE_DIR": "off"}
    server = Server("--root", str(world["root"]), "--workers", "1", "--queue", "0", env=env)
    try:
        with server.client(TOKEN) as c:
            path = str(world["root"] / XID79)
            first = c.post("/v1/triage", json={"paths": [path], "async": True})
            assert first.status_code == 202
            r = c.post("/v1/triage", json={"paths": [path]})
            assert r.status_code == 429 and r.headers["retry-after"] == "5" and "retry later" in r.json()["detail"]
            r = c.post("/v1/triage/upload", files=[("files", ("j.tgz", tgz(FIXTURES / XID79)))])
            assert r.status_code == 429
            while (job := c.get(first.headers["location"]).json())["status"] == "pending":
                time.sleep(0.2)
            assert job["status"] == "done"
            assert any(n.startswith("LLM stage failed (timeout") for n in job["result"]["notes"])
            text = c.get("/metrics").text
            assert metric(text, "diagnoser_llm_stage_total", outcome="timeout") == 1
            assert metric(text, "diagnoser_llm_stage_total", outcome="ok") == 0
            assert c.post("/v1/triage", json={"paths": [path], "async": True}).status_code == 202  # room again
    finally:
        server.stop()
        llm.close()


def test_refuses_to_listen_beyond_loopback_without_a_token() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAGNOSER_SERVE__")}
    proc = subprocess.run([sys.executable, "-m", "diagnoser.cli", "serve", "--host", "0.0.0.0", "--port", "0"],
                          capture_output=True, text=True, env={**env, "PYTHONPATH": str(REPO)}, timeout=60)
    assert proc.returncode == 2 and "without a token" in proc.stderr


def test_a_killed_worker_fails_its_job_and_the_service_recovers(world: dict) -> None:
    llm = SlowEndpoint(delay=30.0)
    env = {**world["env"], "DIAGNOSER_LLM_BASE_URL": llm.url, "DIAGNOSER_LLM_MODEL": "m",
           "DIAGNOSER_LLM_TIMEOUT": "20", "DIAGNOSER_LLM_CACHE_DIR": "off"}
    server = Server("--root", str(world["root"]), "--workers", "1", env=env)
    try:
        with server.client(TOKEN) as c:
            path = str(world["root"] / XID79)
            first = c.post("/v1/triage", json={"paths": [path], "async": True})
            deadline = time.monotonic() + 30
            while llm.requests == 0:  # the worker is inside the triage, waiting for the model
                assert time.monotonic() < deadline
                time.sleep(0.1)
            workers = [p for p in psutil.Process(server.proc.pid).children(recursive=True)
                       if "spawn_main" in " ".join(p.cmdline())]
            assert workers
            for p in workers:
                p.kill()
            while (job := c.get(first.headers["location"]).json())["status"] == "pending":
                assert time.monotonic() < deadline + 30
                time.sleep(0.1)
            assert job["status"] == "failed" and "triage worker failed" in job["error"]
            llm.close()
            r = c.post("/v1/triage", json={"paths": [path]})  # a fresh pool answers
            assert r.status_code == 200 and r.json()["category"] == "hardware"
            assert metric(c.get("/metrics").text, "diagnoser_triage_requests_total", kind="path", status="error") == 1
    finally:
        server.stop()
        llm.close()


def test_sigterm_stops_running_triages_and_leaves_no_process_or_upload(world: dict, tmp_path: Path) -> None:
    llm = SlowEndpoint(delay=60.0)
    jobs = tmp_path / "jobs"
    env = {**world["env"], "TMPDIR": str(tmp_path), "DIAGNOSER_LLM_BASE_URL": llm.url, "DIAGNOSER_LLM_MODEL": "m",
           "DIAGNOSER_LLM_TIMEOUT": "50", "DIAGNOSER_LLM_CACHE_DIR": "off", "DIAGNOSER_SERVE__JOBS_DIR": str(jobs)}
    server = Server(env=env)
    try:
        with server.client(TOKEN) as c:
            archive = tgz(FIXTURES / XID79)
            r = c.post("/v1/triage/upload", params={"async": "true"}, files=[("files", ("j.tgz", archive))])
            assert r.status_code == 202
            cut_short = r.headers["location"]
            deadline = time.monotonic() + 30
            while llm.requests == 0:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        children = psutil.Process(server.proc.pid).children(recursive=True)
        assert children and list(tmp_path.glob("diagnoser-upload-*"))
        started = time.monotonic()
        server.proc.terminate()
        server.proc.wait(30)
        assert time.monotonic() - started < 15  # a running triage does not hold the shutdown
        gone, alive = psutil.wait_procs(children, timeout=10)
        assert not alive
        assert not list(tmp_path.glob("diagnoser-*"))
    finally:
        server.stop()
        llm.close()
    # the next server knows what became of it, and keeps what it finishes itself across its own restart
    env = {**world["env"], "DIAGNOSER_SERVE__JOBS_DIR": str(jobs)}
    server = Server(env=env)
    try:
        with server.client(TOKEN) as c:
            job = c.get(cut_short).json()
            assert job["status"] == "failed" and "service restarted" in job["error"] and job["result"] is None
            r = c.post("/v1/triage/upload", params={"async": "true"}, files=[("files", ("j.tgz", archive))])
            deadline = time.monotonic() + 60
            while (done := c.get(r.headers["location"]).json())["status"] == "pending":
                assert time.monotonic() < deadline
                time.sleep(0.1)
            assert done["status"] == "done"
    finally:
        server.stop()
    server = Server(env=env)
    try:
        with server.client(TOKEN) as c:
            assert c.get(r.headers["location"]).json() == done
            assert c.get(cut_short).json()["status"] == "failed"
    finally:
        server.stop()
