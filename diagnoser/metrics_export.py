"""Prometheus metrics of the service (`diagnoser serve`) and the controller (`diagnoser run --metrics-port`).

Names (all prefixed `diagnoser_`):
- `failures_total{category}`: failures diagnosed (controller: each failure; service: each triage verdict);
- `decisions_total{action}`: what the controller's policy decided to do (after budgets and breaker);
- `time_to_detect_seconds`, `time_to_diagnose_seconds`, `time_to_restart_seconds`: per failure of a
  supervised run, from the same timeline `diagnoser report` builds (`metrics.timeline`);
- `run_ettr{job}`: effective training time ratio of the supervised run so far;
- `llm_stage_total{outcome}`: ok | timeout | refused | error | off, per triage the service ran;
- `triage_seconds{via}`: triage latency (via: service | controller);
- `triage_requests_total{kind,status}` (service): triages by kind (path, upload) and status (ok, error).

Nothing here names a host, a path or log text: labels are closed sets (plus the run's job id).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE  # noqa: F401 - re-exported for the service
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server

if TYPE_CHECKING:
    from diagnoser.act.events import AuditEvent
    from diagnoser.classify.config import LLMConfig
    from diagnoser.models import Diagnosis

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
REPAIR_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
LLM_OUTCOMES = ("ok", "timeout", "refused", "error", "off")


class Metrics:
    """One registry with every diagnoser metric (a fresh one per server or controller)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.failures = Counter("diagnoser_failures", "Failures diagnosed, by category", ["category"], registry=r)
        self.decisions = Counter("diagnoser_decisions", "Controller decisions, by action", ["action"], registry=r)
        self.detect = Histogram("diagnoser_time_to_detect_seconds", "Failure to detection", registry=r,
                                buckets=REPAIR_BUCKETS)
        self.diagnose = Histogram("diagnoser_time_to_diagnose_seconds", "Detection to decision", registry=r,
                                  buckets=REPAIR_BUCKETS)
        self.restart = Histogram("diagnoser_time_to_restart_seconds", "Decision to training resumed", registry=r,
                                 buckets=REPAIR_BUCKETS)
        self.ettr = Gauge("diagnoser_run_ettr", "Effective training time ratio of the supervised run", ["job"],
                          registry=r)
        self.llm = Counter("diagnoser_llm_stage", "LLM stage outcomes per triage", ["outcome"], registry=r)
        self.triage_seconds = Histogram("diagnoser_triage_seconds", "Triage latency", ["via"], registry=r,
                                        buckets=LATENCY_BUCKETS)
        self.requests = Counter("diagnoser_triage_requests", "Service triages by kind and status",
                                ["kind", "status"], registry=r)
        for outcome in LLM_OUTCOMES:  # every outcome is exported from the start (0 until it happens)
            self.llm.labels(outcome)

    def exposition(self) -> bytes:
        """The text format a Prometheus server scrapes."""
        return generate_latest(self.registry)

    def serve(self, port: int, host: str = "127.0.0.1") -> tuple[str, int]:
        """Expose /metrics on a background HTTP server; returns the bound (host, port)."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return server.server_address[0], server.server_address[1]

    def triaged(self, diagnosis: Diagnosis, seconds: float, via: str, llm: str | None = None) -> None:
        """One finished triage: its verdict, its latency and (service) the LLM stage's outcome."""
        self.failures.labels(diagnosis.category.value).inc()
        self.triage_seconds.labels(via).observe(seconds)
        if llm is not None:
            self.llm.labels(llm).inc()


def llm_outcome(config: LLMConfig, diagnosis: Diagnosis) -> str:
    """ok | timeout | refused | error | off: what the LLM stage did for this verdict (see classify/stage.py:
    a stage that did not answer leaves one note that says why)."""
    if not config.enabled:
        return "off"
    for note in diagnosis.notes:
        if note.startswith("LLM stage skipped:"):
            return "refused"  # --no-remote refused the endpoint
        if note.startswith("LLM stage failed (timeout"):
            return "timeout"
        if note.startswith(("LLM stage failed", "LLM stage error", "LLM stage skipped")):
            return "error"
    return "ok"


class RunObserver:
    """Folds the controller's audit events into the metrics (hooked at `Controller._emit`, the one place
    every event passes). Times come from the run's timeline, as `diagnoser report` computes them."""

    FOLD_EVERY_S = 2.0  # ETTR follows progress at most this often (a fold rebuilds the run's timeline)

    def __init__(self, metrics: Metrics, job_id: str) -> None:
        self.metrics, self.job_id = metrics, job_id
        self.events: list[AuditEvent] = []
        self._diagnosed: set[int] = set()
        self._restarted: set[int] = set()
        self._folded = 0.0  # monotonic time of the last fold (progress refolds at most every FOLD_EVERY_S)

    def __call__(self, event: AuditEvent) -> None:
        self.events.append(event)
        m = self.metrics
        if event.type == "run_started":
            self.events = [event]  # a resumed controller starts a new run
        elif event.type == "diagnosis":
            m.failures.labels(event.category.value).inc()
            m.triage_seconds.labels("controller").observe(event.seconds)
        elif event.type == "decision":
            m.decisions.labels(event.action.value).inc()
        waiting = len(self._restarted) < len(self._diagnosed)  # a restart not yet seen resuming
        if event.type in ("decision", "attempt_started", "attempt_finished", "run_finished") or (
                event.type in ("progress", "checkpoint_saved")
                and (waiting or time.monotonic() - self._folded >= self.FOLD_EVERY_S)):
            self._fold()

    def _fold(self) -> None:
        self._folded = time.monotonic()
        from diagnoser.metrics.goodput import run_metrics
        from diagnoser.metrics.timeline import build_timeline

        tl = build_timeline(self.events, self.job_id)
        for f in tl.failures:
            if f.index not in self._diagnosed and f.action is not None:
                self._diagnosed.add(f.index)
                self.metrics.detect.observe(f.detection_s)
                self.metrics.diagnose.observe(f.diagnosis_s)
            if f.index not in self._restarted and f.resumed:
                self._restarted.add(f.index)
                self.metrics.restart.observe(f.restart_s)
        ettr = run_metrics([tl]).ettr
        if ettr is not None:
            self.metrics.ettr.labels(self.job_id).set(round(ettr, 4))
