"""Triage jobs on disk: an async job's status and verdict survive a restart of the service.

One JSON file per job (`<jobs dir>/<id>.json`, written atomically: a temp file, then a rename). A job
still pending when the server that ran it stopped is reported `failed` ("the service restarted ...")
by the next server; a pending job whose server is still running (two services sharing the directory)
is left alone and re-read when polled. At most `keep` finished records stay (the newest by
submission). A disk error is logged and the job lives in memory only: the ledger never fails a triage.
"""

from __future__ import annotations

import json
import logging
import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import platformdirs
import psutil

from diagnoser import atomic

log = logging.getLogger(__name__)

JOB_ID = re.compile(r"^[0-9a-f]{32}$")  # uuid4().hex: the only names the ledger reads or writes
RESTARTED = "the service restarted before this triage finished; submit it again"
FIELDS = ("id", "kind", "submitted", "status", "finished", "seconds", "result", "error", "crashed")
STATUSES = ("pending", "done", "failed")
KINDS = ("path", "upload")


def default_jobs_dir() -> Path:
    """`<user state dir>/diagnoser/serve-jobs` (platformdirs)."""
    return Path(platformdirs.user_state_dir("diagnoser", appauthor=False)) / "serve-jobs"


def this_server() -> dict[str, float]:
    """Who owns a pending job: this process's pid and create time (a pid alone is reused)."""
    return {"pid": os.getpid(), "started": psutil.Process().create_time()}


def owner_alive(owner: Any) -> bool:
    try:
        return abs(psutil.Process(int(owner["pid"])).create_time() - float(owner["started"])) < 0.01
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False


class JobLedger:
    """Read and write job records (plain dicts with the FIELDS, plus `owner` while pending)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.me = this_server()
        self.usable = True
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)  # verdicts quote log lines
        except OSError as exc:
            self._disable(f"cannot create {self.dir}: {exc}")

    def _disable(self, why: str) -> None:
        log.warning("job ledger off (async jobs are kept in memory only): %s", why)
        self.usable = False

    def path(self, job_id: str) -> Path | None:
        return self.dir / f"{job_id}.json" if JOB_ID.match(job_id) else None

    def write(self, record: dict[str, Any]) -> None:
        target = self.path(record["id"]) if self.usable else None
        if target is None:
            return
        data = {k: record.get(k) for k in FIELDS}
        data["submitted"] = _iso(data["submitted"])
        data["finished"] = _iso(data["finished"])
        if data["status"] == "pending":
            data["owner"] = self.me
        try:  # 0600: verdicts quote log lines
            atomic.write_text(target, json.dumps(data), mode=0o600)
        except OSError as exc:  # disk full, read-only: the job stays in memory
            log.warning("job %s not saved to %s: %s", record["id"], self.dir, exc)

    def read(self, job_id: str) -> dict[str, Any] | None:
        """The record (datetimes parsed), or None when it is missing or unusable."""
        target = self.path(job_id)
        if target is None or not self.usable:
            return None
        try:
            data = json.loads(target.read_text(encoding="utf-8"))
            if (not isinstance(data, dict) or data.get("id") != job_id or data.get("status") not in STATUSES
                    or data.get("kind") not in KINDS or not isinstance(data.get("result") or {}, dict)
                    or not isinstance(data.get("seconds") or 0, int | float)
                    or not isinstance(data.get("error") or "", str)):
                raise ValueError("not a job record")
            data["submitted"] = datetime.fromisoformat(data["submitted"])
            data["finished"] = datetime.fromisoformat(data["finished"]) if data.get("finished") else None
            if data["submitted"].tzinfo is None:  # every record this ledger writes is in UTC: sortable
                raise ValueError("submitted without a time zone")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.warning("job record %s unusable, ignored: %s", target, exc)
            return None
        return data

    def settled(self, record: dict[str, Any]) -> dict[str, Any]:
        """A pending record whose server is gone is failed (and saved so); any other is returned as is."""
        if record["status"] == "pending" and not owner_alive(record.get("owner")):
            record.update(status="failed", error=RESTARTED, crashed=True)
            self.write(record)
        return record

    def remove(self, job_id: str) -> None:
        target = self.path(job_id)
        if target is not None and self.usable:
            try:
                target.unlink(missing_ok=True)
            except OSError as exc:  # a stale record costs disk, never the triage that trims it
                log.warning("job record %s not removed: %s", target, exc)

    def load(self, keep: int) -> list[dict[str, Any]]:
        """The records a new server starts with, oldest first: pending ones whose server is gone are
        marked failed (and saved so); beyond `keep`, the oldest finished records are deleted."""
        if not self.usable:
            return []
        records = []
        try:
            names = [f.stem for f in self.dir.glob("*.json")]
        except OSError as exc:
            self._disable(f"cannot list {self.dir}: {exc}")
            return []
        for name in names:
            record = self.read(name)
            if record is not None:
                records.append(self.settled(record))
        records.sort(key=lambda r: r["submitted"])
        finished = [r for r in records if r["status"] != "pending"]
        for old in finished[:max(0, len(finished) - keep)]:
            self.remove(old["id"])
            records.remove(old)
        return records


def _iso(value: Any) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value
