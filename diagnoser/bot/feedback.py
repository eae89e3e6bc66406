"""Verdict feedback (Correct / Wrong → category) into the incident memory.

Each verdict the bot posts is kept in `<data_dir>/verdicts/<key>.json` (the key rides on the
buttons, so feedback survives a bot restart). Feedback goes to the incident store
(`diagnoser.retrieve.store.IncidentStore.vouch`, status confirmed/corrected, `confirmed_by` the
Slack user); with `feedback: jsonl`, or when the store cannot be opened, it is appended to
`<data_dir>/feedback.jsonl` as `incident/v1` lines that `diagnoser incidents import` reads.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import uuid
from pathlib import Path

from diagnoser.models import Category, Diagnosis

log = logging.getLogger(__name__)
KEY = re.compile(r"^[0-9a-f]{16}$")


class VerdictCache:
    """Posted verdicts by key, on disk."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = Path(data_dir) / "verdicts"

    def put(self, diagnosis: Diagnosis, job: str) -> str:
        """Keep a redacted copy of the verdict; the key for its feedback buttons."""
        from diagnoser.bot.poster import scrub

        diagnosis = Diagnosis.model_validate(scrub(diagnosis.to_json_dict()))
        self.dir.mkdir(parents=True, exist_ok=True)
        key = uuid.uuid4().hex[:16]
        (self.dir / f"{key}.json").write_text(json.dumps({"job": job, "diagnosis": diagnosis.to_json_dict()}),
                                              encoding="utf-8")
        return key

    def get(self, key: str) -> tuple[Diagnosis, str] | None:
        if not KEY.match(key):
            return None
        try:
            data = json.loads((self.dir / f"{key}.json").read_text(encoding="utf-8"))
            return Diagnosis.model_validate(data["diagnosis"]), str(data.get("job") or "")
        except (OSError, ValueError, KeyError):
            return None


class FeedbackSink:
    """Records a person's judgement of a verdict (see the module docstring)."""

    def __init__(self, data_dir: Path, store: Path | None = None, mode: str = "store") -> None:
        self.data_dir = Path(data_dir)
        self.store = store
        self.mode = mode
        self._lock = threading.Lock()

    @property
    def jsonl(self) -> Path:
        return self.data_dir / "feedback.jsonl"

    def record(self, diagnosis: Diagnosis, job: str, user: str, category: Category | None = None) -> str:
        """Confirm (`category` None) or correct the verdict; returns where it went."""
        from diagnoser.retrieve.incident import Status, from_diagnosis

        status = Status.CONFIRMED if category is None else Status.CORRECTED
        override = {"category": category} if category is not None else {}
        incident = from_diagnosis(diagnosis, status=status, confirmed_by=user, source_job=job or None, **override)
        with self._lock:
            if self.mode == "store":
                try:
                    from diagnoser.retrieve.backend import open_store

                    with open_store(self.store) as st:
                        return f"incident {st.vouch(incident).id}"
                except Exception as exc:  # noqa: BLE001 - fall back to the import file
                    if type(exc).__name__ == "Spooled":  # kept for the memory server: not lost, not twice
                        return "the incident spool (the memory server is unreachable)"
                    log.warning("incident store unavailable (%s); writing %s", exc, self.jsonl)
            self.jsonl.parent.mkdir(parents=True, exist_ok=True)
            with self.jsonl.open("a", encoding="utf-8") as f:
                f.write(json.dumps(incident.to_json_dict(), ensure_ascii=False) + "\n")
            return str(self.jsonl)
