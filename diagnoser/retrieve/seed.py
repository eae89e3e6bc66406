"""The seed memory: incidents a new store starts with, built from labelled failure texts.

Sources (assembled by `bench/build_seed.py` into `diagnoser/data/seed_incidents.jsonl`, which ships
with the package and is imported into every new store):
- each runbook's `examples.match` lines, one incident per runbook with its category/subtype/action;
- labelled failure texts, e.g. the evidence of log_fixtures/ scenarios with their expected verdicts
  (`LabelledText`), fed in by whoever builds the seed.
Seed incidents have status `seed`, a stable `origin` (`seed/<kind>/<name>`) so re-importing a newer
seed refreshes them instead of duplicating, and a fixed date so the file only changes with its inputs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources

from diagnoser.models import Action, Category, Culprit
from diagnoser.retrieve.incident import Incident, Status
from diagnoser.retrieve.runbook_index import RunbookDoc
from diagnoser.retrieve.signature import signature_text

SEED_RESOURCE = "data/seed_incidents.jsonl"
SEED_TIME = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class LabelledText:
    """A failure text with the verdict it deserves."""

    origin: str  # stable name, e.g. "seed/fixture/xid79-one-node"
    text: str  # raw evidence (masked here)
    category: str
    subtype: str
    action: str
    runbook: str | None = None
    root_cause: str = ""
    resolution: str | None = None
    culprit: Culprit | None = None


def seed_incident(item: LabelledText) -> Incident | None:
    """The seed incident for one labelled text (None if the text has no usable line)."""
    signature = signature_text(item.text)
    if not signature:
        return None
    return Incident(
        signature=signature, category=Category(item.category), subtype=item.subtype, action=Action(item.action),
        culprit=item.culprit or Culprit(), root_cause=item.root_cause, runbook=item.runbook,
        resolution=item.resolution, status=Status.SEED, confirmed_by="seed", first_seen=SEED_TIME,
        last_seen=SEED_TIME, origin=item.origin,
    )


def from_labelled(items: Iterable[LabelledText]) -> list[Incident]:
    """Seed incidents for labelled texts, skipping the ones without a usable line."""
    return [inc for inc in map(seed_incident, items) if inc is not None]


def runbook_texts(runbooks: Iterable[RunbookDoc]) -> list[LabelledText]:
    """One labelled text per runbook: its `examples.match` lines under its own verdict."""
    out = []
    for book in runbooks:
        if not book.examples:
            continue
        try:
            Category(book.category)
            Action(book.action)
        except ValueError:
            continue
        out.append(LabelledText(origin=f"seed/runbook/{book.id}", text="\n".join(book.examples),
                                category=book.category, subtype=book.subtype, action=book.action,
                                runbook=book.path, root_cause=book.title))
    return out


def shipped_seed() -> list[Incident]:
    """The seed memory shipped with the package ([] if the data file is absent)."""
    try:
        text = resources.files("diagnoser").joinpath(SEED_RESOURCE).read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError, NotADirectoryError):
        return []
    return [Incident.model_validate_json(line) for line in text.splitlines() if line.strip()]
