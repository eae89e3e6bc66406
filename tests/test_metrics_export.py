"""Prometheus metrics of a supervised run: a real `diagnoser run --metrics-port` of a small Python job
that fails once and is restarted, scraped over HTTP while it runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from serve_support import REPO, free_port, metric

from diagnoser.act.events import read_audit

JOB = """
import os, pathlib, sys, time
state, stop = pathlib.Path(os.environ["JOB_STATE"]), pathlib.Path(os.environ["JOB_STOP"])
if not state.exists():
    state.write_text("failed once")
    print("step 1", flush=True)
    time.sleep(0.3)
    sys.exit(3)
for step in range(2, 10_000):
    print(f"step {step}", flush=True)
    if stop.exists():
        sys.exit(0)
    time.sleep(0.2)
"""


@pytest.mark.slow
def test_run_exposes_decisions_and_time_to_restart(tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text(JOB)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "JOB_STATE": str(tmp_path / "state"),
           "JOB_STOP": str(tmp_path / "stop"), "DIAGNOSER_STORE": str(tmp_path / "store")}
    proc = subprocess.Popen([sys.executable, "-m", "diagnoser.cli", "run", "--json", "--run-dir", str(tmp_path / "run"),
                             "--metrics-port", str(port), "--backoff", "1s", "--", sys.executable, str(job)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/metrics"
    text = ""
    try:
        deadline = time.monotonic() + 120
        while metric(text, "diagnoser_time_to_restart_seconds_count") < 1 or not metric(text, "diagnoser_run_ettr",
                                                                                        job="run"):
            assert proc.poll() is None and time.monotonic() < deadline, text
            time.sleep(0.3)
            try:
                text = httpx.get(url, timeout=5).text
            except httpx.HTTPError:
                continue
    finally:
        (tmp_path / "stop").write_text("")
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert json.loads(out)["status"] == "succeeded"
    events = read_audit(tmp_path / "run" / "audit.jsonl")
    (decision,) = [e for e in events if e.type == "decision"]
    (diagnosis,) = [e for e in events if e.type == "diagnosis"]
    assert metric(text, "diagnoser_decisions_total", action=decision.action.value) == 1
    assert metric(text, "diagnoser_failures_total", category=diagnosis.category.value) == 1
    assert metric(text, "diagnoser_time_to_detect_seconds_count") == 1
    assert metric(text, "diagnoser_time_to_diagnose_seconds_count") == 1
    restart = metric(text, "diagnoser_time_to_restart_seconds_sum")
    started = [e.time for e in events if e.type == "attempt_started"]
    assert len(started) == 2 and 0 < restart <= (started[1] - diagnosis.time).total_seconds() + 5
    assert metric(text, "diagnoser_triage_seconds_count", via="controller") == 1
    ettr = metric(text, "diagnoser_run_ettr", job="run")
    assert 0 < ettr < 1
    assert f"metrics on http://127.0.0.1:{port}/metrics" in err


def test_llm_outcome_names_what_the_stage_did() -> None:
    from diagnoser.classify.config import LLMConfig
    from diagnoser.metrics_export import llm_outcome
    from diagnoser.models import Action, Category, Diagnosis

    def verdict(*notes: str) -> Diagnosis:
        return Diagnosis(category=Category.UNKNOWN, subtype="x", action=Action.ESCALATE, confidence=0.1,
                         root_cause="r", notes=list(notes))

    on = LLMConfig(base_url="http://127.0.0.1:1/v1", model="m")
    assert llm_outcome(LLMConfig(), verdict()) == "off"
    assert llm_outcome(on, verdict()) == "ok"
    assert llm_outcome(on, verdict("LLM stage failed (timeout: 1 s); verdict from rules + retrieval")) == "timeout"
    assert llm_outcome(on, verdict("LLM stage skipped: endpoint is remote; verdict from rules")) == "refused"
    assert llm_outcome(on, verdict("LLM stage failed (server error (5xx)); verdict from rules")) == "error"


def test_a_busy_metrics_port_is_a_one_line_error_before_the_job_starts(tmp_path: Path) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        marker = tmp_path / "started"
        proc = subprocess.run([sys.executable, "-m", "diagnoser.cli", "run", "--run-dir", str(tmp_path / "run"),
                               "--metrics-port", str(port), "--", sys.executable, "-c",
                               f"open({str(marker)!r}, 'w').close()"],
                              env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}" in proc.stderr
    assert not marker.exists()


def test_run_takes_the_metrics_port_from_the_settings_file_when_enabled(tmp_path, monkeypatch) -> None:
    from diagnoser.act.cli import _metrics_port
    from diagnoser.act.config import build_settings

    monkeypatch.delenv("DIAGNOSER_CONFIG", raising=False)
    on, off = tmp_path / "on.toml", tmp_path / "off.toml"
    on.write_text("[metrics]\nenabled = true\nport = 9555\n")
    off.write_text("[metrics]\nport = 9555\n")
    on_settings, off_settings = build_settings(on).metrics, build_settings(off).metrics
    assert _metrics_port(None, on_settings) == 9555
    assert _metrics_port(None, off_settings) is None  # a port alone does not turn the endpoint on
    assert _metrics_port(9600, on_settings) == 9600  # the option wins
