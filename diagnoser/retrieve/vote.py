"""The neighbour vote: when no rule decides, do the most similar past incidents agree on a verdict?

Each neighbour votes for its category with weight `score² × trust` (trust: 1.0 for a verdict a person
confirmed or corrected, 0.8 for the shipped seed, 0.5 for an unconfirmed triage). The vote's
confidence is the best score among the winning category's neighbours times the winning share of
the weight, so it is high only when a close neighbour exists *and* the neighbourhood agrees.
Below `THRESHOLD` the vote abstains (the verdict stays `unknown`).

`THRESHOLD = 0.4` was calibrated with `bench/retrieval_eval.py` (threshold sweep): it is the lowest
value at which every calibration set reached a category precision of at least 0.9 —
synthetic incidents 0.99 precision / 91% coverage (same phrasing) and 0.95 / 36% (another phrasing
of the failure), the real excerpts of ../shared/bench by leave-one-out 1.0 / 16%, and 0.91 / 55%
with the shipped seed memory in the store. Below 0.4 the real set's precision falls (0.75 at 0.3).
Re-measured on the 1,079-case corpus scored leave-one-repo-out (bench/corpus_eval.py, 2026-11-27):
0.3 adds 11 decisions, 5 right; 0.2 adds 40, 16 right (40%), fewer than naming the commonest category
of the same cases would get, so the neighbours of a case this far from any past incident are noise.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from diagnoser.models import Action, Category
from diagnoser.retrieve.incident import Incident, Status

THRESHOLD = 0.4
MIN_SCORE = 0.2  # neighbours less similar than this do not vote at all
TRUST = {Status.CONFIRMED: 1.0, Status.CORRECTED: 1.0, Status.SEED: 0.8, Status.UNCONFIRMED: 0.5}


class Vote(BaseModel):
    """What the neighbours agree on, and how sure that makes us."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    category: Category
    subtype: str
    action: Action
    confidence: float = Field(ge=0.0, le=1.0)
    support: list[str] = Field(default_factory=list)  # ids of the incidents that voted for it
    resolution: str | None = None  # the best supporting incident's resolution, if any


def tally(neighbours: Sequence[tuple[Incident, float]]) -> Vote | None:
    """The winning verdict and its confidence, whatever the threshold (None if nobody votes)."""
    voters = [(inc, s) for inc, s in neighbours if s >= MIN_SCORE]
    if not voters:
        return None
    weight: dict[Category, float] = defaultdict(float)
    for inc, s in voters:
        weight[inc.category] += s * s * TRUST[inc.status]
    total = sum(weight.values())
    category = max(weight, key=lambda c: (weight[c], max(s for i, s in voters if i.category is c)))
    supporters = [(inc, s) for inc, s in voters if inc.category is category]
    pairs: dict[tuple[str, Action], float] = defaultdict(float)
    for inc, s in supporters:
        pairs[(inc.subtype, inc.action)] += s * s * TRUST[inc.status]
    subtype, action = max(pairs, key=lambda p: pairs[p])
    best = max(supporters, key=lambda x: x[1])
    confidence = best[1] * weight[category] / total
    resolution = next((i.resolution for i, _ in sorted(supporters, key=lambda x: -x[1]) if i.resolution), None)
    return Vote(category=category, subtype=subtype, action=action, confidence=round(min(1.0, confidence), 4),
                support=[i.id for i, _ in supporters], resolution=resolution)


def neighbour_vote(neighbours: Sequence[tuple[Incident, float]], threshold: float = THRESHOLD) -> Vote | None:
    """The neighbours' verdict if it is confident enough to decide, else None.

    A vote for `unknown` never decides: retrieval only adds verdicts, it never overrides the
    absence of one.
    """
    vote = tally(neighbours)
    if vote is None or vote.category is Category.UNKNOWN or vote.confidence < threshold:
        return None
    return vote
