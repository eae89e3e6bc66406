"""Request and response bodies of the HTTP API (besides `diagnosis/v1` and `incident/v1` themselves)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from diagnoser.models import Action, Category, Diagnosis
from diagnoser.retrieve.incident import Outcome


class TriageRequest(BaseModel):
    """Triage logs already on the server's file system, below its configured roots."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    paths: list[str] = Field(min_length=1, max_length=1000, description="Files or directories below a root, or "
                             "job ids (a `diagnoser run` directory directly in a root: its newest attempt's logs)")
    async_: bool = Field(default=False, alias="async", description="Answer 202 + Location and run in the background")


class JobStatus(BaseModel):
    """A triage job: `pending` until a worker finished it, then `done` (with `result`) or `failed` (`error`)."""

    id: str
    kind: Literal["path", "upload"]
    status: Literal["pending", "done", "failed"]
    submitted: datetime
    finished: datetime | None = None
    seconds: float | None = None
    result: Diagnosis | None = None
    error: str | None = None


class FeedbackRequest(BaseModel):
    """A person's judgement of a verdict, as `diagnoser incidents confirm/correct`: give the stored
    incident's id, or the `diagnosis/v1` verdict itself."""

    model_config = ConfigDict(extra="forbid")

    verdict: Literal["confirm", "correct"]
    by: str = Field(min_length=1, max_length=200, description="Who vouches for the verdict")
    incident: str | None = Field(default=None, pattern=r"^inc-\d{5,}$")
    diagnosis: Diagnosis | None = None
    category: Category | None = None
    subtype: str | None = Field(default=None, max_length=200)
    action: Action | None = None
    resolution: str | None = Field(default=None, max_length=2000)
    outcome: Outcome = Outcome.UNKNOWN
    job: str | None = Field(default=None, max_length=200)


class Health(BaseModel):
    status: Literal["ok", "not ready"]
    checks: dict[str, str] = Field(default_factory=dict)
