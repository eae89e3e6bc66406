"""The audit log of a supervised job, schema `audit/v1`: one JSON object per line, append-only.

The restart controller writes it (`AuditWriter.append`), `diagnoser report` reads it
(`read_audit`). Every line is one event with `"schema": "audit/v1"`, a `type` discriminator
and a timezone-aware `time` (when the event happened). Event order in the file is write order.

    {"schema":"audit/v1","time":"2026-01-01T00:00:00Z","type":"run_started","job_id":"j1",...}

Compatibility: readers ignore fields they do not know and skip (with a warning) event types they
do not know, so adding fields or events is a minor change; renaming or removing one needs a
schema bump. A crash while writing can leave a truncated last line: the reader skips it, and the
writer starts a fresh line before appending to such a file.

Times in the events that the metrics rely on:
- `progress` / `checkpoint_saved`: the step reached at `time`; progress may be sparse (every N
  steps, on checkpoint); `checkpoint_saved.seconds` is how long training was blocked writing it;
- `failure_detected.last_progress_time`: when the job last made progress (for a hang, the time
  it hung; the gap to `time` is detection latency);
- `attempt_started.resume_step`: the checkpoint step the attempt resumes from (work done beyond
  it earlier is recomputed).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from diagnoser.models import Action, Category, DecidedBy, Diagnosis

AUDIT_SCHEMA = "audit/v1"
log = logging.getLogger(__name__)


class _Event(BaseModel):
    """Common fields. Immutable; unknown fields are ignored so newer writers stay readable."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    schema_: str = Field(default=AUDIT_SCHEMA, alias="schema")
    time: AwareDatetime


class RunStarted(_Event):
    type: Literal["run_started"] = "run_started"
    job_id: str
    command: list[str] = Field(default_factory=list)
    nodes: list[str] = Field(default_factory=list)
    gpus_per_node: int = Field(default=1, ge=1)


class AttemptStarted(_Event):
    type: Literal["attempt_started"] = "attempt_started"
    attempt: int = Field(ge=1)
    nodes: list[str] = Field(default_factory=list)
    excluded_nodes: list[str] = Field(default_factory=list)
    resume_step: int | None = None  # checkpoint step resumed from; None: newest checkpoint (or 0)
    resume_path: str | None = None


class Progress(_Event):
    type: Literal["progress"] = "progress"
    step: int = Field(ge=0)
    attempt: int | None = None


class CheckpointSaved(_Event):
    type: Literal["checkpoint_saved"] = "checkpoint_saved"
    step: int = Field(ge=0)
    path: str = ""
    seconds: float | None = Field(default=None, ge=0)  # training blocked this long while writing
    attempt: int | None = None


class FailureHow(StrEnum):
    EXIT = "exit"  # a rank or the launcher exited non-zero
    HANG = "hang"  # no progress within the watchdog timeout


class FailureDetected(_Event):
    type: Literal["failure_detected"] = "failure_detected"
    attempt: int | None = None
    how: FailureHow
    exit_code: int | None = None
    last_progress_time: AwareDatetime | None = None
    last_step: int | None = None


class DiagnosisMade(_Event):
    """The verdict (`diagnosis/v1`, condensed) on the failure just detected."""

    type: Literal["diagnosis"] = "diagnosis"
    attempt: int | None = None
    category: Category
    subtype: str = "unknown"
    action: Action
    confidence: float = Field(default=0.0, ge=0.0, le=1.0)
    culprit_nodes: list[str] = Field(default_factory=list)
    culprit_ranks: list[int] = Field(default_factory=list)
    culprit_gpus: list[str] = Field(default_factory=list)
    decided_by: DecidedBy = DecidedBy.RULE
    seconds: float = Field(default=0.0, ge=0)  # time spent diagnosing

    @classmethod
    def of(cls, verdict: Diagnosis, time: datetime, attempt: int | None, seconds: float) -> DiagnosisMade:
        """The event for a verdict (the controller's and the Slurm hook's)."""
        c = verdict.culprit
        return cls(time=time, attempt=attempt, category=verdict.category, subtype=verdict.subtype,
                   action=verdict.action, confidence=verdict.confidence, culprit_nodes=list(c.nodes),
                   culprit_ranks=list(c.ranks), culprit_gpus=list(c.gpus), decided_by=verdict.decided_by,
                   seconds=round(max(0.0, seconds), 3))


class DecisionMade(_Event):
    """What the policy decided to do (may differ from the verdict's action: budgets, breaker)."""

    type: Literal["decision"] = "decision"
    action: Action
    reason: str = ""
    approved_by: str | None = None  # "policy", or the human who approved in chat-ops
    nodes: list[str] = Field(default_factory=list)  # nodes excluded / drained


class ActionStarted(_Event):
    type: Literal["action_started"] = "action_started"
    action: Action
    detail: str = ""
    delay_s: float | None = Field(default=None, ge=0)  # a backoff waited from `time` before acting


class ActionFinished(_Event):
    type: Literal["action_finished"] = "action_finished"
    action: Action
    ok: bool
    detail: str = ""


class AttemptFinished(_Event):
    type: Literal["attempt_finished"] = "attempt_finished"
    attempt: int | None = None
    exit_code: int | None = None
    status: Literal["succeeded", "failed", "killed"] = "failed"


class RunFinished(_Event):
    type: Literal["run_finished"] = "run_finished"
    status: Literal["succeeded", "failed", "stopped", "gave_up"] = "succeeded"
    reason: str = ""


AuditEvent = Annotated[
    RunStarted | AttemptStarted | Progress | CheckpointSaved | FailureDetected | DiagnosisMade | DecisionMade
    | ActionStarted | ActionFinished | AttemptFinished | RunFinished,
    Field(discriminator="type"),
]
_ADAPTER: TypeAdapter[AuditEvent] = TypeAdapter(AuditEvent)
EVENT_TYPES = frozenset(m.model_fields["type"].default for m in (
    RunStarted, AttemptStarted, Progress, CheckpointSaved, FailureDetected, DiagnosisMade, DecisionMade,
    ActionStarted, ActionFinished, AttemptFinished, RunFinished))


def parse_event(obj: dict) -> AuditEvent:
    """Validate one decoded JSON object as an event (raises ValidationError / ValueError)."""
    return _ADAPTER.validate_python(obj)


def iter_events(lines: Iterable[str], source: str = "<audit>", warnings: list[str] | None = None
                ) -> Iterator[AuditEvent]:
    """Parse JSONL lines. Skips, with a warning, blank lines, a truncated or corrupt line, other
    schemas and unknown event types; warnings go to `warnings` (if given) and the logger."""
    def warn(msg: str) -> None:
        log.warning(msg)
        if warnings is not None:
            warnings.append(msg)

    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            warn(f"{source}:{n}: not a complete JSON object (truncated line?), skipped")
            continue
        if not isinstance(obj, dict) or not str(obj.get("schema", "")).startswith("audit/"):
            warn(f"{source}:{n}: not an audit/v1 event, skipped")
            continue
        if obj.get("type") not in EVENT_TYPES:
            warn(f"{source}:{n}: unknown event type {obj.get('type')!r}, skipped")
            continue
        try:
            yield parse_event(obj)
        except ValidationError as exc:
            warn(f"{source}:{n}: invalid {obj.get('type')} event ({exc.error_count()} errors), skipped")


def read_audit(path: str | Path, warnings: list[str] | None = None) -> list[AuditEvent]:
    """Read a whole audit log (see `iter_events` for what is skipped)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        return list(iter_events(fh, source=str(path), warnings=warnings))


def dump_event(event: AuditEvent) -> str:
    """One event as its JSON line (without the newline)."""
    return event.model_dump_json(by_alias=True, exclude_none=True)


class AuditWriter:
    """Append events to an audit log durably: one line per event, flushed and fsynced.

    Usage: `with AuditWriter(path) as w: w.append(Progress(time=now, step=100))`.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "ab")  # noqa: SIM115 - closed by close()/__exit__
        if self._fh.tell() > 0 and not self._ends_with_newline():
            self._fh.write(b"\n")  # isolate a line truncated by an earlier crash

    def _ends_with_newline(self) -> bool:
        with open(self.path, "rb") as fh:
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) == b"\n"

    def append(self, event: AuditEvent) -> None:
        self._fh.write(dump_event(event).encode("utf-8") + b"\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> AuditWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
