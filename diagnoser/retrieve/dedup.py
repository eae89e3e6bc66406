"""Deduplication rules: how a new sighting, a confirmation or an imported incident folds into one.

One failure seen 500 times is one incident: the second and later sightings add to `count` and move
`last_seen`. Whose verdict wins is decided by how much it is vouched for: a person's confirmation or
correction beats the shipped seed, which beats an unconfirmed triage; at the same level the newer
one wins (rules and runbooks improve). An import folds another store's incidents in the same way,
and importing the same file twice changes nothing (`origin` / `merged_from` remember what came in).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from diagnoser.retrieve.incident import Incident, Outcome, Status

TRUST = {Status.UNCONFIRMED: 0, Status.SEED: 1, Status.CONFIRMED: 2, Status.CORRECTED: 2}
VERDICT_FIELDS = ("category", "subtype", "action", "culprit", "root_cause", "runbook", "status", "confirmed_by")


def merge(old: Incident, new: Incident, observe: bool) -> Incident:
    """`old` updated by `new` (same signature). `observe`: `new` is another sighting (count it);
    otherwise it only vouches for or corrects the verdict (confirming an incident by its id)."""
    update: dict = {}
    if observe and old.status is Status.SEED:  # the shipped seed is an example, not a sighting
        update.update(count=new.count, first_seen=new.first_seen, last_seen=new.last_seen)
    elif observe:
        update["count"] = old.count + new.count
        update["first_seen"] = min(old.first_seen, new.first_seen)
        update["last_seen"] = max(old.last_seen, new.last_seen)
    if TRUST[new.status] >= TRUST[old.status]:
        update.update({f: getattr(new, f) for f in VERDICT_FIELDS})
    if new.resolution:
        update["resolution"] = new.resolution
    if new.outcome is not Outcome.UNKNOWN:
        update["outcome"] = new.outcome
    if new.source_job:
        update["source_job"] = new.source_job
    if new.origin and new.origin != old.origin and new.origin not in old.merged_from:
        update["merged_from"] = [*old.merged_from, new.origin]
    return old.model_copy(update=update)


def refresh(old: Incident, snapshot: Incident) -> Incident:
    """`old` updated from a later snapshot of the same incident (an import of our own export,
    a journal replay): counts are not added twice, the newer snapshot's fields win."""
    if snapshot.last_seen < old.last_seen and snapshot.count <= old.count:
        return old
    update = {f: getattr(snapshot, f) for f in ("count", "last_seen", "resolution", "outcome", "source_job")}
    update["count"] = max(old.count, snapshot.count)
    if TRUST[snapshot.status] >= TRUST[old.status]:
        update.update({f: getattr(snapshot, f) for f in VERDICT_FIELDS})
    return old.model_copy(update=update)


def latest_snapshots(incidents: Iterable[Incident]) -> list[Incident]:
    """One incident per origin (or id): the last line of an export or journal wins."""
    latest: dict[str, Incident] = {}
    for inc in incidents:
        key = inc.origin or inc.id or f"fp:{inc.fingerprint}"
        latest.pop(key, None)
        latest[key] = inc
    return list(latest.values())


@dataclass(frozen=True)
class ImportReport:
    added: int = 0
    merged: int = 0
    skipped: int = 0
    unread: list[str] = field(default_factory=list)  # lines left out of an import file, one note each


@dataclass
class ImportPlan:
    new: list[Incident] = field(default_factory=list)
    changed: list[Incident] = field(default_factory=list)
    report: ImportReport = field(default_factory=ImportReport)


def plan_import(existing: Iterable[Incident], incoming: Iterable[Incident],
                assign: Callable[[Incident, set[str]], Incident]) -> ImportPlan:
    """What importing `incoming` into a store holding `existing` adds and changes.

    - an incident we already hold (same origin: our own export, a journal) is refreshed, not counted again;
    - one already folded into another (its origin is in some `merged_from`) is skipped;
    - one with a signature we hold is merged (counts add up, the more vouched verdict wins);
    - anything else is added, keeping its id when free (`assign(incident, taken_ids)`).
    """
    by_origin: dict[str, Incident] = {}
    by_fp: dict[str, Incident] = {}
    folded: set[str] = set()
    taken: set[str] = set()
    for inc in existing:
        taken.add(inc.id)
        by_origin[inc.origin] = inc
        by_fp[inc.fingerprint] = inc
        folded.update(inc.merged_from)
    new: dict[str, Incident] = {}
    changed: dict[str, Incident] = {}
    added = merged = skipped = 0
    for snap in latest_snapshots(incoming):
        fp = snap.fingerprint
        if snap.origin and snap.origin in folded:
            skipped += 1
            continue
        own = by_origin.get(snap.origin) if snap.origin else None
        old = own or by_fp.get(fp)
        if old is None:
            stored = new[fp] = by_fp[fp] = assign(snap, taken)
            by_origin[stored.origin] = stored
            added += 1
            continue
        stored = refresh(old, snap) if own is not None else merge(old, snap, observe=True)
        if stored == old:
            skipped += 1
            continue
        merged += 1
        by_fp[old.fingerprint] = stored
        by_origin[old.origin] = stored
        folded.update(stored.merged_from)
        (new if old.fingerprint in new else changed)[old.fingerprint] = stored
    return ImportPlan(list(new.values()), list(changed.values()), ImportReport(added, merged, skipped))
