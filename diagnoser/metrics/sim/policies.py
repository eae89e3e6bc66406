"""Recovery policies the simulator compares: what happens between a failure and the restart.

A policy sees the true category and whether the fault is persistent (the simulator knows; a
policy may not use it unless it is the oracle) and returns a `Decision`: time spent diagnosing,
time waiting (backoff, a human), and whether the fault is removed (the bad node excluded, the bug
fixed). Detection latency and the restart itself are the same for every policy.

- naive: restart everything at once, never exclude a node; a crash loop runs until someone
  notices it (the fault's natural end: fleet health checks drain a lemon node, a user fixes a bug).
- diagnoser (its default policy): diagnose (`diagnosis_s`), predict a category from the confusion
  matrix, act: hardware -> drain the culprit and restart (assumes the culprit is localised when the
  category is right); infra -> retry after backoff; user_code -> stop and notify (a human answers,
  fixes a deterministic bug, restarts); unknown -> a plain restart, a human is notified but not
  waited for. The crash-loop breaker: the same persistent fault `crash_loop` times in a row (the
  same signature) -> give up, a human answers and acts as the oracle.
- oracle: knows the truth at once: excludes bad nodes, stops only for deterministic bugs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol

from diagnoser.metrics.sim.config import Confusion, SimConfig
from diagnoser.models import Action, Category


@dataclass(frozen=True)
class Decision:
    action: Action
    predicted: Category | None = None
    diagnosis_s: float = 0.0  # triage, and waiting for an approval
    backoff_s: float = 0.0  # counted as restart time
    stopped_s: float = 0.0  # job stopped: a human responds and fixes
    removes_fault: bool = False


class Policy(Protocol):
    name: str

    def decide(self, truth: Category, persistent: bool, cfg: SimConfig, rng: random.Random) -> Decision: ...


def _human(truth: Category, persistent: bool, cfg: SimConfig, answered_after: float) -> Decision:
    """A human looked at it (after `answered_after` s) and does the right thing."""
    if truth is Category.USER_CODE and persistent:
        return Decision(Action.STOP_AND_NOTIFY, stopped_s=answered_after + cfg.fix_s, removes_fault=True)
    if truth is Category.HARDWARE:
        return Decision(Action.DRAIN_AND_RESTART, stopped_s=answered_after, removes_fault=True)
    return Decision(Action.RESTART, stopped_s=answered_after)


class Naive:
    name = "naive"

    def decide(self, truth: Category, persistent: bool, cfg: SimConfig, rng: random.Random) -> Decision:
        return Decision(Action.RESTART)


class Oracle:
    name = "oracle"

    def decide(self, truth: Category, persistent: bool, cfg: SimConfig, rng: random.Random) -> Decision:
        if truth is Category.HARDWARE:
            return Decision(Action.DRAIN_AND_RESTART, truth, removes_fault=True)
        if truth is Category.USER_CODE and persistent:
            return Decision(Action.STOP_AND_NOTIFY, truth, stopped_s=cfg.human_response_s + cfg.fix_s,
                            removes_fault=True)
        return Decision(Action.RESTART, truth)


class Diagnoser:
    name = "diagnoser"

    def __init__(self, confusion: Confusion) -> None:
        self.confusion = confusion
        self._last: Category | None = None
        self._streak = 0

    def predict(self, truth: Category, rng: random.Random) -> Category:
        row = self.confusion.row(truth)
        x, acc = rng.random(), 0.0
        for cat, p in row:
            acc += p
            if x < acc:
                return cat
        return row[-1][0]

    def decide(self, truth: Category, persistent: bool, cfg: SimConfig, rng: random.Random) -> Decision:
        pred = self.predict(truth, rng)
        d = cfg.diagnosis_s
        # a persistent fault that was not removed repeats its signature; fresh faults differ (class,
        # subtype or culprit), and a removed one (its node drained) cannot come back
        self._streak = self._streak + 1 if persistent and pred is self._last else (1 if persistent else 0)
        self._last = pred if persistent else None
        if self._streak >= cfg.crash_loop:  # crash loop: give up, a human answers and acts
            h = _human(truth, persistent, cfg, cfg.human_response_s)
            dec = Decision(Action.ESCALATE, pred, d, stopped_s=h.stopped_s, removes_fault=h.removes_fault)
        elif pred is Category.HARDWARE:
            dec = Decision(Action.DRAIN_AND_RESTART, pred, d, removes_fault=truth is Category.HARDWARE)
        elif pred is Category.INFRA:
            dec = Decision(Action.RETRY_AFTER_BACKOFF, pred, d, backoff_s=cfg.backoff_s)
        elif pred is Category.USER_CODE:  # stop and notify: the human restarts after looking
            h = _human(truth, persistent, cfg, cfg.human_response_s)
            dec = Decision(Action.STOP_AND_NOTIFY, pred, d, stopped_s=h.stopped_s, removes_fault=h.removes_fault)
        else:  # unknown: restart within budget, a human is told
            dec = Decision(Action.RESTART, pred, d)
        if dec.removes_fault or dec.action is Action.ESCALATE:
            self._streak, self._last = 0, None
        return dec


def make_policy(name: str, confusion: Confusion | None = None) -> Policy:
    if name == "naive":
        return Naive()
    if name == "oracle":
        return Oracle()
    if name == "diagnoser":
        return Diagnoser(confusion or Confusion.perfect())
    raise ValueError(f"unknown policy {name!r} (naive, diagnoser, oracle)")


POLICIES = ("naive", "diagnoser", "oracle")
