"""The contracts of diagnoser: closed vocabularies and the versioned verdict schema.

Every string here is part of the public JSON contract (`diagnosis/v1`, see DESIGN.md):
change them only together with a schema version bump.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

DIAGNOSIS_SCHEMA = "diagnosis/v1"


class Category(StrEnum):
    """Who owns the fault."""

    HARDWARE = "hardware"
    INFRA = "infra"
    USER_CODE = "user_code"
    UNKNOWN = "unknown"


class Action(StrEnum):
    """What the restart controller should do about the failure."""

    RESTART = "restart"
    RESTART_EXCLUDING_NODES = "restart_excluding_nodes"
    DRAIN_AND_RESTART = "drain_and_restart"
    RETRY_AFTER_BACKOFF = "retry_after_backoff"
    ROLLBACK_AND_RESTART = "rollback_and_restart"
    STOP_AND_NOTIFY = "stop_and_notify"
    ESCALATE = "escalate"


# the actions that take nodes out of the job (drain, or exclude from the restart): what every check of a target guards
NODE_ACTIONS = frozenset({Action.RESTART_EXCLUDING_NODES, Action.DRAIN_AND_RESTART})


class Role(StrEnum):
    """How a signature relates to the root cause.

    root: can be the root cause. collateral: a consequence of a failure elsewhere
    (timeouts, launcher teardown); it decides only when nothing else fired.
    """

    ROOT = "root"
    COLLATERAL = "collateral"


class DecidedBy(StrEnum):
    """Which stage produced the verdict."""

    RULE = "rule"
    RETRIEVAL = "retrieval"
    LLM = "llm"
    NONE = "none"


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LogRecord(Frozen):
    """One normalised log event: a line, or a whole multi-line event such as a traceback.

    `line` is 1-based and points at the line that carries the failure (for a traceback,
    its exception line); `first_line` is where the event starts.
    """

    source: str
    line: int
    text: str
    time: datetime | None = None
    time_inferred: bool = False  # taken from an earlier line of the same file: a lower bound only
    time_not_after: datetime | None = None  # upper bound for an inferred time: the next timed line
    node: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    kind: str = "log"  # stderr | nccl | dmesg | syslog | scheduler | launcher | log
    first_line: int | None = None
    context: tuple[str, ...] = ()  # the event's other lines (traceback frames), bounded


class Evidence(Frozen):
    """A cited log line. `line` must exist in `source` (grounding)."""

    source: str
    line: int
    text: str


class SignatureMatch(Frozen):
    """A runbook signature that fired on a record, with what it extracted."""

    runbook_id: str
    record: LogRecord
    role: Role
    priority: int
    fields: dict[str, str] = Field(default_factory=dict)  # node, rank, gpu, peer, detail


class Culprit(Frozen):
    nodes: list[str] = Field(default_factory=list)
    ranks: list[int] = Field(default_factory=list)
    gpus: list[str] = Field(default_factory=list)


class FirstFailure(Frozen):
    source: str
    line: int
    time: datetime | None = None


class SimilarIncident(Frozen):
    id: str
    score: float
    category: Category
    action: Action
    subtype: str | None = None
    resolution: str | None = None


class InputWarning(Frozen):
    """A file that could not be read fully; the rest was still triaged."""

    source: str
    message: str


class ScanStats(Frozen):
    files: int = 0
    bytes: int = 0
    lines: int = 0
    matches: int = 0
    seconds: float = 0.0


class Diagnosis(Frozen):
    """The verdict, schema `diagnosis/v1`."""

    schema_: str = Field(default=DIAGNOSIS_SCHEMA, alias="schema")
    category: Category
    subtype: str
    action: Action
    confidence: float = Field(ge=0.0, le=1.0)
    culprit: Culprit = Field(default_factory=Culprit)
    root_cause: str
    evidence: list[Evidence] = Field(default_factory=list)
    first_failure: FirstFailure | None = None
    similar_incidents: list[SimilarIncident] = Field(default_factory=list)
    decided_by: DecidedBy = DecidedBy.RULE
    rule: str | None = None  # which rule decided: a runbook id, a catalog entry (`nvidia-xid.79`), `collectives.hang`
    runbook: str | None = None
    collateral: dict[str, int] = Field(default_factory=dict)  # runbook id -> count
    notes: list[str] = Field(default_factory=list)
    warnings: list[InputWarning] = Field(default_factory=list)
    stats: ScanStats = Field(default_factory=ScanStats)

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    def to_json_dict(self) -> dict:
        return self.model_dump(mode="json", by_alias=True)
