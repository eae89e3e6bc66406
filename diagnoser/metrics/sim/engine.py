"""Discrete-event simulation of one long training run under a recovery policy.

The job alternates: RUN (Δt_cp of training) -> CKPT (w_cp, blocking) -> RUN ... A failure, while
the job runs, writes a checkpoint or restarts, loses the work since the last completed checkpoint,
then costs detection (exit or watchdog), the policy's decision (diagnosis, backoff, a stopped job)
and a restart (u0) before training resumes from that checkpoint. No failures arrive while the
job is down (detected, being diagnosed, stopped).

Failures: fresh ones per category are Poisson (rates from `SimConfig`, per node or per job); a
fraction are persistent faults (a lemon node, a deterministic bug) that fail again after
Exp(recur_mean_s) of running time until the policy removes them or they end by themselves
(a bug: noticed and fixed after naive_notice_s + fix_s; a lemon, or any other category made
persistent in the config: fleet health checks drain it after Exp(bad_node_heal_s)). All waiting
times are exponential, so the next event is redrawn after every state change. Randomness: one
stream for failures, one for the policy's draws.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from pydantic import BaseModel

from diagnoser.metrics.sim.config import SimConfig
from diagnoser.metrics.sim.policies import Policy
from diagnoser.models import Category

PHASES = ("productive", "checkpoint", "detection", "diagnosis", "restart", "recompute", "stopped")


@dataclass
class _Fault:
    category: Category
    rate: float  # recurrences per second of running
    ends_at: float  # when it goes away by itself


class SimResult(BaseModel):
    policy: str
    gpus: int
    nodes: int
    seed: int
    wall_s: float
    interval_s: float
    ettr: float
    failures: int
    failures_by_category: dict[str, int]
    lost_by_category: dict[str, float]  # seconds lost (all phases but productive/checkpoint)
    phase_s: dict[str, float]
    excluded_faults: int


class _Run:
    def __init__(self, cfg: SimConfig, policy: Policy, gpus: int, seed: int) -> None:
        self.cfg, self.policy, self.gpus, self.seed = cfg, policy, gpus, seed
        self.fail_rng = random.Random(f"{seed}:failures")
        self.policy_rng = random.Random(f"{seed}:policy")
        self.horizon = cfg.days * 86400.0
        self.interval = cfg.interval_s(gpus)
        self.base = {c: r for c, r in cfg.base_rates(gpus).items() if r > 0}
        self.base_total = sum(self.base.values())
        self.t = 0.0
        self.phase_s = dict.fromkeys(PHASES, 0.0)
        self.faults: list[_Fault] = []
        self.counts = dict.fromkeys((c.value for c in cfg.categories), 0)
        self.lost = dict.fromkeys((c.value for c in cfg.categories), 0.0)
        self.excluded = 0
        self._restart_cat = next(iter(cfg.categories))  # whose restart is running
        self.work = 0.0  # training since the last checkpoint
        self.writing = 0.0  # partial checkpoint write

    def run(self) -> SimResult:
        state, left = "run", self.interval
        while self.t < self.horizon:
            self.faults = [f for f in self.faults if f.ends_at > self.t]
            rate = self.base_total + sum(f.rate for f in self.faults)
            dt_fail = self.fail_rng.expovariate(rate) if rate > 0 else math.inf
            dt_end = min((f.ends_at for f in self.faults), default=math.inf) - self.t
            dt = min(dt_fail, left, dt_end, self.horizon - self.t)
            self._advance(state, dt)
            left -= dt
            if dt == dt_fail:
                self._fail()
                state, left = "restart", self.cfg.restart_s
            elif left <= 0.0:  # the phase ran out
                state, left = self._next_phase(state)
        self.phase_s["productive"] += self.work  # the horizon is not a failure: keep open work
        self.phase_s["checkpoint"] += self.writing
        return SimResult(
            policy=self.policy.name, gpus=self.gpus, nodes=self.cfg.nodes(self.gpus), seed=self.seed,
            wall_s=self.horizon, interval_s=self.interval, ettr=self.phase_s["productive"] / self.horizon,
            failures=sum(self.counts.values()), failures_by_category=self.counts, lost_by_category=self.lost,
            phase_s=self.phase_s, excluded_faults=self.excluded)

    def _advance(self, state: str, dt: float) -> None:
        self.t += dt
        if state == "run":
            self.work += dt
        elif state == "ckpt":
            self.writing += dt
        else:
            self.phase_s["restart"] += dt
            self.lost[self._restart_cat.value] += dt

    def _next_phase(self, state: str) -> tuple[str, float]:
        if state == "run" and self.cfg.checkpoint_write_s > 0:
            return "ckpt", self.cfg.checkpoint_write_s
        if state in ("run", "ckpt"):  # checkpoint complete: the work is safe
            self.phase_s["productive"] += self.work
            self.phase_s["checkpoint"] += self.writing
            self.work = self.writing = 0.0
        return "run", self.interval

    def _down(self, phase: str, seconds: float, category: Category) -> None:
        seconds = max(0.0, min(seconds, self.horizon - self.t))
        self.t += seconds
        self.phase_s[phase] += seconds
        self.lost[category.value] += seconds

    def _fail(self) -> None:
        cfg, rng = self.cfg, self.fail_rng
        x = rng.random() * (self.base_total + sum(f.rate for f in self.faults))
        fault = None
        for f in self.faults:
            x -= f.rate
            if x < 0:
                fault = f
                break
        if fault is None and not self.base:  # rounding: no fresh failures at all
            fault = self.faults[-1]
        if fault is None:
            cat = self._pick_base(x)
            rates = cfg.categories[cat]
            if rng.random() < rates.persistent_fraction:
                fault = _Fault(cat, 1.0 / rates.recur_mean_s, self.t + self._natural_end(cat))
                self.faults.append(fault)
        else:
            cat = fault.category
        self.counts[cat.value] += 1
        lost_work = self.work + self.writing
        self.work = self.writing = 0.0
        self.phase_s["recompute"] += lost_work
        self.lost[cat.value] += lost_work
        hang = rng.random() < cfg.categories[cat].hang_fraction
        self._down("detection", cfg.hang_detect_s if hang else cfg.exit_detect_s, cat)
        d = self.policy.decide(cat, fault is not None, cfg, self.policy_rng)
        if d.removes_fault and fault is not None and fault in self.faults:
            self.faults.remove(fault)
            self.excluded += 1
        self._down("diagnosis", d.diagnosis_s, cat)
        self._down("stopped", d.stopped_s, cat)
        self._down("restart", d.backoff_s, cat)
        self._restart_cat = cat

    def _pick_base(self, x: float) -> Category:
        for cat, r in self.base.items():
            x -= r
            if x < 0:
                return cat
        return next(reversed(self.base))

    def _natural_end(self, cat: Category) -> float:
        if cat is Category.USER_CODE:
            return self.cfg.naive_notice_s + self.cfg.fix_s
        return self.fail_rng.expovariate(1.0 / self.cfg.bad_node_heal_s)


def simulate(cfg: SimConfig, policy: Policy, gpus: int, seed: int = 0) -> SimResult:
    """One run of `cfg.days` of wall time at `gpus` GPUs."""
    return _Run(cfg, policy, gpus, seed).run()
