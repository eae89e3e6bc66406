"""The `Incident` record: one failure class seen on a cluster, with its verdict and what came of it.

An incident is keyed by its masked failure signature (see `signature.py`): the same failure seen
500 times is one incident with `count=500` and the time it was last seen. Its JSON form (`incident/v1`)
is the line format of `export`/`import` and of the store's own journal.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator

from diagnoser.classify.redact import redact
from diagnoser.models import Action, Category, Culprit, Diagnosis, SimilarIncident
from diagnoser.retrieve.signature import fingerprint, signature_text

INCIDENT_SCHEMA = "incident/v1"
ID_PATTERN = re.compile(r"^inc-(\d{5,})$")


class Status(StrEnum):
    """How much a human vouched for the verdict."""

    UNCONFIRMED = "unconfirmed"  # stored automatically after a triage
    CONFIRMED = "confirmed"  # a person said the verdict was right
    CORRECTED = "corrected"  # a person replaced the verdict
    SEED = "seed"  # shipped with diagnoser (runbook examples, fixtures)


class Outcome(StrEnum):
    """Did the recovery action work?"""

    WORKED = "worked"
    FAILED = "failed"
    UNKNOWN = "unknown"


def utcnow() -> datetime:
    return datetime.now(UTC)


def format_id(number: int) -> str:
    return f"inc-{number:05d}"


def id_number(incident_id: str) -> int | None:
    m = ID_PATTERN.match(incident_id)
    return int(m.group(1)) if m else None


class Incident(BaseModel):
    """A past failure: masked signature, verdict, resolution and outcome, provenance and counts."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    schema_: str = Field(default=INCIDENT_SCHEMA, alias="schema")
    id: str = ""  # assigned by the store: inc-00042
    signature: str = Field(min_length=1)
    category: Category
    subtype: str
    action: Action
    culprit: Culprit = Field(default_factory=Culprit)
    root_cause: str = ""
    runbook: str | None = None
    resolution: str | None = None
    outcome: Outcome = Outcome.UNKNOWN
    status: Status = Status.UNCONFIRMED
    confirmed_by: str | None = None
    source_job: str | None = None
    first_seen: datetime = Field(default_factory=utcnow)
    last_seen: datetime = Field(default_factory=utcnow)
    count: int = Field(default=1, ge=1)
    origin: str = ""  # "<store uuid>/<id>" where it was first recorded; keeps imports idempotent
    merged_from: list[str] = Field(default_factory=list)  # origins of imported duplicates folded in

    @field_validator("signature", "root_cause", "resolution")
    @classmethod
    def _redacted(cls, value: str | None) -> str | None:
        """The store keeps (and `incidents export` shares) no secret: redacted on every way in."""
        return redact(value) if value else value

    @field_validator("schema_")
    @classmethod
    def _known_schema(cls, value: str) -> str:
        """A record of another schema version may mean other things by the same fields: refuse it."""
        if value != INCIDENT_SCHEMA:
            raise ValueError(f"schema {value!r} is unknown; this diagnoser reads {INCIDENT_SCHEMA} "
                             f"(export it with the diagnoser version that wrote it)")
        return value

    @field_validator("first_seen", "last_seen")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        return value if value.tzinfo else value.replace(tzinfo=UTC)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.signature)

    @property
    def vouched(self) -> bool:
        """A person (or the shipped seed) stands behind the verdict."""
        return self.status is not Status.UNCONFIRMED

    def to_json_dict(self) -> dict:
        return self.model_dump(mode="json", by_alias=True)

    def similar(self, score: float) -> SimilarIncident:
        """The `similar_incidents` entry of a diagnosis/v1 verdict."""
        return SimilarIncident(id=self.id, score=round(max(0.0, min(1.0, score)), 4), category=self.category,
                               action=self.action, subtype=self.subtype, resolution=self.resolution)


def from_diagnosis(diagnosis: Diagnosis, *, status: Status = Status.UNCONFIRMED, confirmed_by: str | None = None,
                   resolution: str | None = None, outcome: Outcome = Outcome.UNKNOWN, source_job: str | None = None,
                   **verdict: str) -> Incident:
    """An incident from a `diagnosis/v1` verdict; `verdict` may override category, subtype, action.

    The signature is the masked text of the verdict's evidence lines (its root cause if it cites
    none). ValueError if neither gives a usable line.
    """
    text = "\n".join(e.text for e in diagnosis.evidence) or diagnosis.root_cause
    signature = signature_text(text)
    if not signature:
        raise ValueError("the verdict cites no evidence line and no root cause: nothing to remember")
    seen = diagnosis.first_failure.time if diagnosis.first_failure and diagnosis.first_failure.time else utcnow()
    return Incident(
        signature=signature, category=verdict.get("category") or diagnosis.category,
        subtype=verdict.get("subtype") or diagnosis.subtype, action=verdict.get("action") or diagnosis.action,
        culprit=diagnosis.culprit, root_cause=diagnosis.root_cause, runbook=diagnosis.runbook, resolution=resolution,
        outcome=outcome, status=status, confirmed_by=confirmed_by, source_job=source_job, first_seen=seen,
        last_seen=seen,
    )
