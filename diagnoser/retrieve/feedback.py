"""A person's judgement of a verdict into the incident memory: confirm it, or correct it.

One function behind `diagnoser incidents confirm/correct` and `POST /v1/feedback`: the target is
a stored incident (by id) or a `diagnosis/v1` verdict (stored, or merged into the incident with
the same signature).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from diagnoser.models import Diagnosis
from diagnoser.retrieve.incident import Incident, Outcome, Status, from_diagnosis

if TYPE_CHECKING:
    from diagnoser.retrieve.store import IncidentStore


def vouch(store: IncidentStore, target: str | Diagnosis, status: Status, by: str, resolution: str | None = None,
          outcome: Outcome = Outcome.UNKNOWN, job: str | None = None, **verdict: Any) -> Incident:
    """Mark `target` confirmed or corrected by `by`; `verdict` may set category, subtype, action.
    KeyError: no incident with that id. ValueError: a verdict with nothing to remember."""
    verdict = {k: v.value if hasattr(v, "value") else v for k, v in verdict.items() if v}
    if isinstance(target, Diagnosis):
        return store.vouch(from_diagnosis(target, status=status, confirmed_by=by, resolution=resolution,
                                          outcome=outcome, source_job=job, **verdict))
    fields: dict[str, Any] = {"status": status, "confirmed_by": by, **verdict}
    fields.update({k: v for k, v in (("resolution", resolution), ("source_job", job)) if v})
    if outcome is not Outcome.UNKNOWN:
        fields["outcome"] = outcome
    return store.update(target, **fields)
