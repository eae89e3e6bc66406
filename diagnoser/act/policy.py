"""The restart policy: a pure function `decide(history, verdict, policy, now) -> Decision`.

Shaped like Ray Train's `FailurePolicy -> FailureDecision`: no I/O, no clock, no randomness (the
backoff jitter is a hash of the job id and the failure count, so the same inputs always give the
same decision and different jobs still spread out). The verdict proposes an action; the policy may
only keep it, make it more conservative (escalate, stop), or add a delay: it never invents a
destructive action the evidence does not name.

Rules, first match decides (`Decision.rule` names it):
 1. `low_confidence`  confidence < min_confidence -> escalate (or a plain, budgeted restart when
                      `on_low_confidence: restart`); never an exclusion on weak evidence.
 2. `verdict`         the verdict itself says escalate.
 3. `user_code`       stop_and_notify, and any user-code verdict that asks for a plain restart,
                      backoff or exclusion -> stop_and_notify (re-running a KeyError burns GPU-hours).
                      A user-code rollback (NaN loss, corrupt checkpoint) goes on.
 4. `no_culprit`      restart_excluding_nodes / drain_and_restart without a culprit node of this job
                      -> escalate. Culprit names are expanded as hostlists and only the job's own
                      nodes (`JobHistory.nodes`) are kept (`act.targets`): a name in a log that is
                      not a node of this job is never acted on.
 5. `crash_loop`      the same signature (category, subtype, culprit) N times in a row -> escalate,
                      whatever the category.
 6. `node_cap`        excluding/draining would take more than K distinct nodes (counted after
                      hostlist expansion) per window -> escalate.
 7. `max_restarts`    restarts of the run exhausted -> escalate.
 8. `budget`          restarts of this category within the window exhausted -> escalate.
 9. `verdict`         otherwise the verdict's action; retry_after_backoff gets an exponential delay
                      with jitter (exponent: retries in a row).
Then `require_approval` marks actions that need a human (escalate always does), and the mode
applies: `dry_run` decides without executing; `shadow` logs the decision and executes the baseline
a plain launcher would (restart within max_restarts).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator

from diagnoser.act.targets import job_targets
from diagnoser.models import Action, Category, Diagnosis

RESTARTS = frozenset({Action.RESTART, Action.RESTART_EXCLUDING_NODES, Action.DRAIN_AND_RESTART,
                      Action.RETRY_AFTER_BACKOFF, Action.ROLLBACK_AND_RESTART})
NODE_ACTIONS = frozenset({Action.RESTART_EXCLUDING_NODES, Action.DRAIN_AND_RESTART})


class Mode(StrEnum):
    ACTIVE = "active"  # decide and act
    DRY_RUN = "dry_run"  # decide and log; never act (no kill, no restart)
    SHADOW = "shadow"  # decide and log; act like a plain launcher (restart, no hang kill)


class Backoff(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    base_s: float = Field(default=10.0, ge=0)
    factor: float = Field(default=2.0, ge=1)
    max_s: float = Field(default=600.0, ge=0)
    jitter: float = Field(default=0.25, ge=0, le=1)  # +/- this fraction of the delay


def _default_budgets() -> dict[Category, int]:
    return {Category.HARDWARE: 5, Category.INFRA: 5, Category.USER_CODE: 2, Category.UNKNOWN: 3}


class Policy(BaseModel):
    """The knobs (config file `policy:` section; see the README)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Mode = Mode.ACTIVE
    min_confidence: float = Field(default=0.6, ge=0, le=1)
    on_low_confidence: Action = Action.ESCALATE  # or restart: a plain restart, budgeted
    max_restarts: int = Field(default=20, ge=0)  # per run
    window_s: float = Field(default=3600.0, gt=0)  # budgets and node cap count within this window
    budgets: dict[Category, int] = Field(default_factory=_default_budgets)  # restarts per window
    crash_loop: int = Field(default=3, ge=2)  # same signature this many times in a row -> escalate
    max_excluded_nodes: int = Field(default=2, ge=0)  # distinct nodes excluded/drained per window
    backoff: Backoff = Field(default_factory=Backoff)
    require_approval: frozenset[Action] = frozenset({Action.DRAIN_AND_RESTART})

    @field_validator("on_low_confidence")
    @classmethod
    def _low(cls, v: Action) -> Action:
        if v not in (Action.ESCALATE, Action.RESTART):
            raise ValueError("on_low_confidence must be escalate or restart")
        return v


@dataclass(frozen=True)
class PastFailure:
    """A failure already decided in this job (oldest first in `JobHistory.failures`)."""

    time: datetime
    category: Category
    subtype: str
    nodes: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    action: Action | None = None  # what was executed for it (None: nothing, e.g. dry-run)

    @property
    def key(self) -> tuple:
        return signature(self.category, self.subtype, self.nodes, self.ranks)


@dataclass(frozen=True)
class JobHistory:
    """What the policy may know about the job: its earlier failures and node exclusions."""

    job_id: str = "job"
    failures: tuple[PastFailure, ...] = ()
    excluded: tuple[tuple[datetime, str], ...] = ()  # (when, node) excluded or drained
    nodes: tuple[str, ...] | None = None  # the job's own nodes (None: unknown; culprits not filtered)

    def restarts_since(self, since: datetime, category: Category | None = None) -> int:
        return sum(1 for f in self.failures if f.time >= since and f.action in RESTARTS
                   and (category is None or f.category == category))

    def streak(self, key: tuple) -> int:
        """How many of the latest failures, in a row, have this signature."""
        n = 0
        for f in reversed(self.failures):
            if f.key != key:
                break
            n += 1
        return n

    def retries_in_a_row(self, since: datetime) -> int:
        n = 0
        for f in reversed(self.failures):
            if f.time < since or f.action is not Action.RETRY_AFTER_BACKOFF:
                break
            n += 1
        return n

    def excluded_since(self, since: datetime) -> set[str]:
        return {node for t, node in self.excluded if t >= since}


@dataclass(frozen=True)
class Decision:
    """What to do about one failure. `action` is what runs (after approval when `needs_approval`:
    then `on_approve` runs if a human approves, stop_and_notify if not)."""

    action: Action
    rule: str
    reason: str
    proposed: Action  # the verdict's action
    delay_s: float = 0.0
    nodes: tuple[str, ...] = ()
    needs_approval: bool = False
    on_approve: Action | None = None
    execute: bool = True  # False in dry-run
    shadow_of: Action | None = None  # shadow mode: the policy's own action (logged, not executed)
    notes: tuple[str, ...] = field(default=())


def signature(category: Category, subtype: str, nodes: Iterable[str], ranks: Iterable[int]) -> tuple:
    """What makes two failures 'the same' for the crash-loop breaker: class and culprit."""
    culprit = tuple(sorted(set(nodes))) or tuple(sorted(set(ranks)))
    return (category.value, subtype, culprit)


def jitter_unit(job_id: str, n: int) -> float:
    """A deterministic pseudo-random number in [-1, 1] for (job, failure number)."""
    digest = hashlib.sha256(f"{job_id}:{n}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**63 - 1.0


def backoff_delay(history: JobHistory, policy: Policy, now: datetime) -> float:
    b = policy.backoff
    k = history.retries_in_a_row(now - timedelta(seconds=policy.window_s))
    delay = min(b.max_s, b.base_s * b.factor ** k)
    delay *= 1.0 + b.jitter * jitter_unit(history.job_id, len(history.failures))
    return round(max(0.0, min(delay, b.max_s)), 3)


def _escalate(rule: str, reason: str, verdict: Diagnosis, on_approve: Action | None) -> Decision:
    return Decision(Action.ESCALATE, rule, reason, verdict.action, on_approve=on_approve)


def _choose(history: JobHistory, verdict: Diagnosis, policy: Policy, now: datetime) -> Decision:
    proposed = verdict.action
    what = f"{verdict.category.value}/{verdict.subtype} -> {proposed.value} ({verdict.confidence:.2f})"
    action = proposed
    rule = "verdict"
    if verdict.confidence < policy.min_confidence:
        if policy.on_low_confidence is not Action.RESTART:
            return _escalate("low_confidence", f"confidence {verdict.confidence:.2f} < "
                             f"{policy.min_confidence:.2f}: {what}", verdict, Action.RESTART)
        action, rule = Action.RESTART, "low_confidence"
    elif proposed is Action.ESCALATE:
        return _escalate("verdict", f"the verdict asks for a human: {what}", verdict, Action.RESTART)
    elif proposed is Action.STOP_AND_NOTIFY or (
            verdict.category is Category.USER_CODE and proposed is not Action.ROLLBACK_AND_RESTART):
        return Decision(Action.STOP_AND_NOTIFY, "user_code",
                        f"a restart cannot fix this failure in the job itself: {what}", proposed)
    targets = job_targets(verdict.culprit.nodes, history.nodes)
    nodes = targets.nodes if action in NODE_ACTIONS else ()
    if action in NODE_ACTIONS and not nodes:
        why = (f"the culprit {targets.describe_outside()} is not a node of this job" if targets.outside
               else "the evidence names no culprit node")
        return _escalate("no_culprit", f"{proposed.value} but {why}: {what}", verdict, Action.RESTART)
    key = signature(verdict.category, verdict.subtype, verdict.culprit.nodes, verdict.culprit.ranks)
    streak = history.streak(key) + 1
    if streak >= policy.crash_loop:
        return _escalate("crash_loop", f"crash loop: the same failure {streak} times in a row "
                         f"({verdict.subtype}, culprit {list(key[2]) or 'none'}): {what}", verdict, action)
    since = now - timedelta(seconds=policy.window_s)
    if nodes:
        taken = history.excluded_since(since)
        total = taken | set(nodes)
        if len(total) > policy.max_excluded_nodes:
            return _escalate("node_cap", f"{proposed.value} of {list(nodes)} would take {len(total)} nodes out "
                             f"within {policy.window_s:.0f} s (cap {policy.max_excluded_nodes}): {what}",
                             verdict, Action.RESTART)
    total_restarts = sum(1 for f in history.failures if f.action in RESTARTS)
    if total_restarts >= policy.max_restarts:
        return _escalate("max_restarts", f"{total_restarts} restarts already (max {policy.max_restarts}): {what}",
                         verdict, action)
    budget = policy.budgets.get(verdict.category, 0)
    used = history.restarts_since(since, verdict.category)
    if used >= budget:
        return _escalate("budget", f"{verdict.category.value} restart budget spent ({used}/{budget} within "
                         f"{policy.window_s:.0f} s): {what}", verdict, action)
    delay = backoff_delay(history, policy, now) if action is Action.RETRY_AFTER_BACKOFF else 0.0
    reason = f"{what}" + (f"; backoff {delay:.1f} s" if delay else "")
    if nodes and targets.outside:
        reason += f"; not acting on {targets.describe_outside()} (not nodes of this job)"
    if rule == "low_confidence":
        reason = f"confidence {verdict.confidence:.2f} < {policy.min_confidence:.2f}: plain restart ({what})"
    return Decision(action, rule, reason, proposed, delay_s=delay, nodes=nodes)


def decide(history: JobHistory, verdict: Diagnosis, policy: Policy, now: datetime) -> Decision:
    """The decision for a new verdict, given the job's history (pure)."""
    d = _choose(history, verdict, policy, now)
    if d.action is Action.ESCALATE:
        d = replace(d, needs_approval=True)
    elif d.action in policy.require_approval:
        d = replace(d, needs_approval=True, on_approve=d.action)
    if policy.mode is Mode.DRY_RUN:
        return replace(d, execute=False, needs_approval=False, reason=f"dry-run, not executed: {d.reason}")
    if policy.mode is Mode.SHADOW:
        total_restarts = sum(1 for f in history.failures if f.action in RESTARTS)
        baseline = Action.RESTART if total_restarts < policy.max_restarts else Action.STOP_AND_NOTIFY
        return Decision(baseline, "shadow", f"shadow: policy would {d.action.value} ({d.rule}: {d.reason}); "
                        f"baseline {baseline.value}", verdict.action, shadow_of=d.action)
    return d
