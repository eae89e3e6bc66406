"""The restart policy: a pure function `decide(history, verdict, policy, now) -> Decision`.

Shaped like Ray Train's `FailurePolicy -> FailureDecision`: no I/O, no clock, no randomness (the
backoff jitter is a hash of the job id and the failure count, so the same inputs always give the
same decision and different jobs still spread out). The verdict proposes an action; the policy may
only keep it, make it more conservative, or add a delay: it never invents a destructive action the
evidence does not name.

Bias to restart: a stopped job idles every GPU until a person wakes up, so only a *confident
user-code* verdict stops the job. Everything uncertain restarts (plain, from the newest valid
checkpoint) under the budgets and the crash-loop breaker, with a notification (`Decision.notify`).

Rules, first match decides (`Decision.rule` names it):
 1. `low_confidence`  confidence < min_confidence -> plain restart + notify (`on_low_confidence:
                      escalate` holds the job for a human instead); never an exclusion on weak evidence.
 2. `verdict`         the verdict says escalate, or a non-user-code verdict says stop -> plain restart +
                      notify (a human is told; the job keeps going).
 3. `user_code`       a confident user-code verdict: stop_and_notify (re-running a KeyError burns
                      GPU-hours). A user-code rollback (corrupt checkpoint) goes on.
    `rollback_on_divergence`  opt-in (`rollback_on_divergence: true`): a NaN/Inf loss verdict rolls back to an
                      older checkpoint once instead of stopping (the PaLM/OPT practice of resuming before a
                      loss spike); the same divergence after a rollback stops the job for a human.
 4. `no_culprit`      restart_excluding_nodes / drain_and_restart without a culprit node of this job ->
                      plain restart + notify. Culprit names are expanded as hostlists and only the job's
                      own nodes (`JobHistory.nodes`) are kept (`act.targets`): a name in a log that is
                      not a node of this job is never acted on.
 5. `crash_loop`      the same signature (category, subtype, culprit) N times in a row -> give up (escalate:
                      stop and notify), whatever the category.
 6. `node_cap`        excluding/draining would take more than K distinct nodes per window -> plain restart +
                      notify (no further node leaves the job; the crash-loop breaker still watches).
 7. `max_restarts`    restarts of the run exhausted -> give up.
 8. `budget`          restarts of this category within the window exhausted -> give up.
 9. `verdict`         otherwise the verdict's action; retry_after_backoff gets an exponential delay
                      with jitter (exponent: retries in a row).

`Decision.action` is what runs when no human says yes; `on_approve` what runs when one does.
Give-up decisions (escalate) may be overridden by an approver. An action in `require_approval`
(default: drain) asks first and, without a yes (no approver configured, timeout, deny), runs the
next less invasive action that needs none: drain -> exclude -> plain restart; a rollback or backoff
that needs approval is held (escalate). `require_approval: [escalate]` holds every "restart +
notify" decision for a human. The controller asks only when someone can answer (an approver is
configured): an approval nobody can give is not waited for.

The mode applies last: `dry_run` decides without executing; `shadow` logs the decision and executes
the baseline a plain launcher would (restart within max_restarts).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator

from diagnoser.act.targets import job_targets
from diagnoser.durations import Seconds
from diagnoser.models import NODE_ACTIONS, Action, Category, Diagnosis

DIVERGENCE = frozenset({"nan_loss"})  # subtypes a rollback to an older checkpoint may get past
RESTARTS = frozenset({Action.RESTART, Action.RESTART_EXCLUDING_NODES, Action.DRAIN_AND_RESTART,
                      Action.RETRY_AFTER_BACKOFF, Action.ROLLBACK_AND_RESTART})


class Mode(StrEnum):
    ACTIVE = "active"  # decide and act
    DRY_RUN = "dry_run"  # decide and log; never act (no kill, no restart)
    SHADOW = "shadow"  # decide and log; act like a plain launcher (restart, no hang kill)


class Backoff(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    base_s: Seconds = Field(default=10.0, ge=0)
    factor: float = Field(default=2.0, ge=1)
    max_s: Seconds = Field(default=600.0, ge=0)
    jitter: float = Field(default=0.25, ge=0, le=1)  # +/- this fraction of the delay


def _default_budgets() -> dict[Category, int]:
    return {Category.HARDWARE: 5, Category.INFRA: 5, Category.USER_CODE: 2, Category.UNKNOWN: 3}


class Policy(BaseModel):
    """The knobs (config file `policy:` section; see the README)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Mode = Mode.ACTIVE
    min_confidence: float = Field(default=0.6, ge=0, le=1)
    on_low_confidence: Action = Action.RESTART  # a plain, budgeted restart + notify; escalate: hold for a human
    max_restarts: int = Field(default=20, ge=0)  # per run
    window_s: Seconds = Field(default=3600.0, gt=0)  # budgets and node cap count within this window
    budgets: dict[Category, int] = Field(default_factory=_default_budgets)  # restarts per window
    crash_loop: int = Field(default=3, ge=2)  # same signature this many times in a row -> escalate
    max_excluded_nodes: int = Field(default=2, ge=0)  # distinct nodes excluded/drained per window
    backoff: Backoff = Field(default_factory=Backoff)
    require_approval: frozenset[Action] = frozenset({Action.DRAIN_AND_RESTART})
    # a NaN/Inf loss is stopped for a human by default (lr, precision, data: restarting unchanged diverges
    # again); teams that resume before a spike and skip data opt in to one automatic rollback per divergence
    rollback_on_divergence: bool = False

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
    """What to do about one failure. `action` runs unless a human approves `on_approve` (asked only
    when `needs_approval` and an approver is configured); `notify`: tell a human even though the job goes on.
    `action` escalate means: stop the run and notify (gave up, or held for a human)."""

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
    notify: bool = False
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


GIVE_UP = ("crash_loop", "max_restarts", "budget")
FALLBACK = {Action.DRAIN_AND_RESTART: Action.RESTART_EXCLUDING_NODES, Action.RESTART_EXCLUDING_NODES: Action.RESTART}


def _give_up(rule: str, reason: str, verdict: Diagnosis, on_approve: Action) -> Decision:
    return Decision(Action.ESCALATE, rule, reason, verdict.action, needs_approval=True, on_approve=on_approve,
                    notify=True)


def _uncertain(rule: str, reason: str, verdict: Diagnosis) -> Decision:
    """Not sure enough to act on the verdict, not sure enough to stop: plain restart, tell a human."""
    return Decision(Action.RESTART, rule, f"{reason}; plain restart, a human is notified", verdict.action,
                    notify=True)


def _rollback_once(history: JobHistory, verdict: Diagnosis, policy: Policy) -> bool:
    """Opted-in rollback of a divergence, unless this run already rolled back from one."""
    return (policy.rollback_on_divergence and verdict.subtype in DIVERGENCE
            and verdict.action in (Action.STOP_AND_NOTIFY, Action.ROLLBACK_AND_RESTART)
            and not any(f.subtype in DIVERGENCE and f.action is Action.ROLLBACK_AND_RESTART
                        for f in history.failures))


def _choose(history: JobHistory, verdict: Diagnosis, policy: Policy, now: datetime) -> Decision:
    proposed = verdict.action
    what = f"{verdict.category.value}/{verdict.subtype} -> {proposed.value} ({verdict.confidence:.2f})"
    user_code = verdict.category is Category.USER_CODE
    if verdict.confidence < policy.min_confidence:
        first = _uncertain("low_confidence", f"confidence {verdict.confidence:.2f} < {policy.min_confidence:.2f}: "
                           f"{what}", verdict)
        if policy.on_low_confidence is Action.ESCALATE:
            first = replace(first, action=Action.ESCALATE, needs_approval=True, on_approve=Action.RESTART,
                            reason=f"confidence {verdict.confidence:.2f} < {policy.min_confidence:.2f}: {what}; "
                            "held for a human (on_low_confidence: escalate)")
    elif proposed is Action.ESCALATE or (proposed is Action.STOP_AND_NOTIFY and not user_code):
        first = _uncertain("verdict", f"the verdict asks for a human: {what}", verdict)
    elif user_code and _rollback_once(history, verdict, policy):
        first = Decision(Action.ROLLBACK_AND_RESTART, "rollback_on_divergence",
                         f"{what}; first divergence of this run: roll back to an older checkpoint "
                         "(rollback_on_divergence)", proposed, notify=True)
    elif user_code and (proposed is not Action.ROLLBACK_AND_RESTART or verdict.subtype in DIVERGENCE):
        return Decision(Action.STOP_AND_NOTIFY, "user_code",
                        f"a restart cannot fix this failure in the job itself: {what}", proposed, notify=True)
    elif proposed in NODE_ACTIONS and not (targets := job_targets(verdict.culprit.nodes, history.nodes)).nodes:
        why = (f"the culprit {targets.describe_outside()} is not a node of this job" if targets.outside
               else "the evidence names no culprit node")
        first = _uncertain("no_culprit", f"{proposed.value} but {why}: {what}", verdict)
    else:
        targets = job_targets(verdict.culprit.nodes, history.nodes)
        outside = f"; not acting on {targets.describe_outside()} (not nodes of this job)" \
            if proposed in NODE_ACTIONS and targets.outside else ""
        first = Decision(proposed, "verdict", what + outside, proposed,
                         nodes=tuple(targets.nodes) if proposed in NODE_ACTIONS else ())
    action = first.on_approve if first.action is Action.ESCALATE else first.action
    assert action is not None
    key = signature(verdict.category, verdict.subtype, verdict.culprit.nodes, verdict.culprit.ranks)
    streak = history.streak(key) + 1
    if streak >= policy.crash_loop:
        return _give_up("crash_loop", f"crash loop: the same failure {streak} times in a row "
                        f"({verdict.subtype}, culprit {list(key[2]) or 'none'}): {what}", verdict, action)
    since = now - timedelta(seconds=policy.window_s)
    if first.nodes:
        total = history.excluded_since(since) | set(first.nodes)
        if len(total) > policy.max_excluded_nodes:
            first = _uncertain("node_cap", f"{proposed.value} of {list(first.nodes)} would take {len(total)} nodes "
                               f"out within {policy.window_s:.0f} s (cap {policy.max_excluded_nodes}): {what}",
                               verdict)
            action = Action.RESTART
    total_restarts = sum(1 for f in history.failures if f.action in RESTARTS)
    if total_restarts >= policy.max_restarts:
        return _give_up("max_restarts", f"{total_restarts} restarts already (max {policy.max_restarts}): {what}",
                        verdict, action)
    budget = policy.budgets.get(verdict.category, 0)
    used = history.restarts_since(since, verdict.category)
    if used >= budget:
        return _give_up("budget", f"{verdict.category.value} restart budget spent ({used}/{budget} within "
                        f"{policy.window_s:.0f} s): {what}", verdict, action)
    if action is Action.RETRY_AFTER_BACKOFF:
        delay = backoff_delay(history, policy, now)
        first = replace(first, delay_s=delay, reason=f"{first.reason}; backoff {delay:.1f} s")
    return first


def _gate(d: Decision, policy: Policy) -> Decision:
    """Apply `require_approval`: ask first; without a yes run the next less invasive action."""
    if d.action is Action.ESCALATE:
        return d
    gated = policy.require_approval
    if d.notify and Action.ESCALATE in gated:  # the operator wants uncertain failures held for a human
        return replace(d, action=Action.ESCALATE, needs_approval=True, on_approve=d.action,
                       reason=f"{d.reason}; held: escalations need approval")
    if d.action not in gated:
        return d
    fallback: Action | None = d.action
    while fallback is not None and fallback in gated:
        fallback = FALLBACK.get(fallback)
    wanted = d.action
    if fallback is None:
        return replace(d, action=Action.ESCALATE, needs_approval=True, on_approve=wanted, notify=True,
                       reason=f"{d.reason}; {wanted.value} needs approval")
    nodes = d.nodes if fallback in NODE_ACTIONS else ()
    return replace(d, action=fallback, nodes=nodes, needs_approval=True, on_approve=wanted, notify=True,
                   reason=f"{d.reason}; {wanted.value} needs approval, else {fallback.value}")


def decide(history: JobHistory, verdict: Diagnosis, policy: Policy, now: datetime) -> Decision:
    """The decision for a new verdict, given the job's history (pure)."""
    d = _gate(_choose(history, verdict, policy, now), policy)
    if policy.mode is Mode.DRY_RUN:
        return replace(d, execute=False, needs_approval=False, reason=f"dry-run, not executed: {d.reason}")
    if policy.mode is Mode.SHADOW:
        total_restarts = sum(1 for f in history.failures if f.action in RESTARTS)
        baseline = Action.RESTART if total_restarts < policy.max_restarts else Action.STOP_AND_NOTIFY
        return Decision(baseline, "shadow", f"shadow: policy would {d.action.value} ({d.rule}: {d.reason}); "
                        f"baseline {baseline.value}", verdict.action, shadow_of=d.action)
    return d
