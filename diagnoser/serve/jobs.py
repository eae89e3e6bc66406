"""Triage jobs: a bounded pool of worker processes and the table of submitted jobs.

Every triage (synchronous or not) is a job. At most `workers` run at once and `queue` more wait;
beyond that `submit` raises `QueueFull` (HTTP 429). A finished job keeps its result for polling
(the newest `keep` jobs), also across a restart when a ledger (ledger.py) is given; its upload
directory is deleted when it finishes.
"""

from __future__ import annotations

import logging
import multiprocessing
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from diagnoser.metrics_export import Metrics
from diagnoser.serve import work
from diagnoser.serve.ledger import FIELDS, JobLedger

log = logging.getLogger(__name__)


class QueueFull(RuntimeError):
    """Every worker is busy and the queue is full."""


@dataclass
class Job:
    id: str
    kind: str  # path | upload
    submitted: datetime
    status: Literal["pending", "done", "failed"] = "pending"
    finished: datetime | None = None
    seconds: float | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    crashed: bool = False  # the worker died (not the logs' fault)
    cleanup: Path | None = None  # the upload directory, deleted when the job ends
    foreign: bool = False  # pending in another running server that shares the ledger: re-read when polled
    future: Future = field(default_factory=Future, repr=False)

    def record(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in FIELDS}

    @classmethod
    def restored(cls, record: dict[str, Any]) -> Job:
        """A job of an earlier (or another) server, from its ledger record."""
        job = cls(**{k: record[k] for k in FIELDS if record.get(k) is not None})
        if job.status == "pending":
            job.foreign = True
        else:
            job.future.set_result(job)
        return job


class Jobs:
    def __init__(self, workers: int, queue: int, metrics: Metrics, store: Path | None = None,
                 keep: int = 1000, ledger: JobLedger | None = None) -> None:
        self.workers, self.capacity, self.metrics, self.keep = workers, workers + queue, metrics, keep
        self.store = str(store) if store else None
        self.ledger = ledger
        self._lock = threading.Lock()
        self._active = 0
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        for record in ledger.load(keep) if ledger else []:  # the previous server's jobs, oldest first
            self._jobs[record["id"]] = Job.restored(record)
        self._pool = self._new_pool()
        self.warm = self._pool.submit(work.ready)  # readiness: a worker started and loaded the rules

    def _new_pool(self) -> ProcessPoolExecutor:
        # spawn: the server's threads (uvicorn, the event loop) must not be forked into workers
        return ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=work.setup, initargs=(self.store,))

    @property
    def active(self) -> int:
        return self._active

    def submit(self, kind: str, paths: list[str], within: list[str] | None, cleanup: Path | None = None) -> Job:
        """Queue a triage; QueueFull when `workers + queue` triages are already running or waiting."""
        with self._lock:
            if self._active >= self.capacity:
                raise QueueFull(f"{self._active} triages running or queued (limit {self.capacity}); retry later")
            self._active += 1
            job = Job(uuid.uuid4().hex, kind, datetime.now(UTC), cleanup=cleanup)
            self._jobs[job.id] = job
            while len(self._jobs) > self.keep:
                oldest = next(iter(self._jobs.values()))
                if oldest.status == "pending":
                    break
                self._jobs.popitem(last=False)
                if self.ledger:
                    self.ledger.remove(oldest.id)
        if self.ledger:
            self.ledger.write(job.record())
        started = time.monotonic()
        try:
            try:
                inner = self._pool.submit(work.triage_job, paths, within)
            except BrokenProcessPool:  # a worker died (e.g. killed for memory): a fresh pool
                self._pool = self._new_pool()
                inner = self._pool.submit(work.triage_job, paths, within)
        except BaseException:
            with self._lock:
                self._active -= 1
                self._jobs.pop(job.id, None)
            if self.ledger:
                self.ledger.remove(job.id)
            raise
        inner.add_done_callback(lambda f: self._finish(job, f, started))
        return job

    def _finish(self, job: Job, inner: Future, started: float) -> None:
        try:
            out = inner.result()
        except (Exception, CancelledError) as exc:  # a crashed worker fails this job, not the service
            log.error("triage job %s failed: %s: %s", job.id, type(exc).__name__, exc)
            out = {"ok": False, "error": f"triage worker failed ({type(exc).__name__})"}
            job.crashed = True
        job.seconds = time.monotonic() - started
        job.finished = datetime.now(UTC)
        if out["ok"]:
            job.status, job.result = "done", out["diagnosis"]
            from diagnoser.models import Diagnosis

            self.metrics.triaged(Diagnosis.model_validate(out["diagnosis"]), job.seconds, "service", out["llm"])
        else:
            job.status, job.error = "failed", out["error"]
        self.metrics.requests.labels(job.kind, "ok" if out["ok"] else "error").inc()
        if job.cleanup is not None:
            shutil.rmtree(job.cleanup, ignore_errors=True)
        if self.ledger:
            self.ledger.write(job.record())
        with self._lock:
            self._active -= 1
        job.future.set_result(job)

    def get(self, job_id: str) -> Job | None:
        job = self._jobs.get(job_id)
        if job is not None and job.foreign and self.ledger:
            record = self.ledger.read(job_id)
            if record is not None and self.ledger.settled(record)["status"] != "pending":
                job = self._jobs[job_id] = Job.restored(record)
        return job

    def close(self) -> None:
        """Stop now: queued triages are cancelled, running ones' processes terminated (a 1 GB triage
        must not hold up a restart of the service)."""
        processes = list((getattr(self._pool, "_processes", None) or {}).values())  # the executor's own map
        self._pool.shutdown(wait=False, cancel_futures=True)
        for p in processes:
            if p.is_alive():
                p.terminate()
        for job in list(self._jobs.values()):  # the process may exit before the jobs' callbacks run
            if job.status == "pending" and job.cleanup is not None:
                shutil.rmtree(job.cleanup, ignore_errors=True)
