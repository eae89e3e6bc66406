"""Discrete-event simulation of long training runs: failures, detection, diagnosis, restarts.

`simulate(cfg, policy, gpus, seed)` runs one; `compare_policies` runs the three policies over
scales and seeds; `validate_model` checks the simulator against the analytic E[ETTR].
"""

from __future__ import annotations

import statistics

from pydantic import BaseModel

from diagnoser.metrics import model
from diagnoser.metrics.sim.config import (
    Confusion,
    SimConfig,
    load_config,
    load_confusion,
)
from diagnoser.metrics.sim.engine import SimResult, simulate
from diagnoser.metrics.sim.policies import POLICIES, make_policy

__all__ = ["POLICIES", "Confusion", "PolicyRow", "SimConfig", "SimResult", "ValidationRow", "compare_policies",
           "load_config", "load_confusion", "make_policy", "simulate", "validate_model"]


class PolicyRow(BaseModel):
    gpus: int
    policy: str
    ettr: float  # mean over seeds
    ettr_sd: float
    failures: float  # mean per run
    interval_s: float
    phase_s: dict[str, float]  # mean per run


def compare_policies(cfg: SimConfig, scales: list[int], seeds: int = 3, confusion: Confusion | None = None,
                     policies: tuple[str, ...] = POLICIES) -> list[PolicyRow]:
    """Every policy at every scale, `seeds` runs each (the same seeds for every policy)."""
    rows = []
    for g in scales:
        for name in policies:
            res = [simulate(cfg, make_policy(name, confusion), g, seed) for seed in range(seeds)]
            e = [r.ettr for r in res]
            rows.append(PolicyRow(
                gpus=g, policy=name, ettr=statistics.fmean(e), ettr_sd=statistics.stdev(e) if len(e) > 1 else 0.0,
                failures=statistics.fmean(r.failures for r in res), interval_s=res[0].interval_s,
                phase_s={k: statistics.fmean(r.phase_s[k] for r in res) for k in res[0].phase_s}))
    return rows


class ValidationRow(BaseModel):
    gpus: int
    interval_s: float
    load: float  # λ·(u0 + Δt_cp/2): the first-order model needs this small
    analytic: float  # Meta's E[ETTR]
    renewal: float  # exact under the same assumptions
    simulated: float
    rel_error: float  # |simulated − analytic| / analytic

    @property
    def within(self) -> bool:
        return self.rel_error <= 0.05


def validate_model(scales: list[int], rf: float = model.RF_LITERATURE, restart_s: float = 600.0,
                   write_s: float = 60.0, days: float = 60.0, seeds: int = 2, gpus_per_node: int = 8,
                   interval_s: float | None = None) -> list[ValidationRow]:
    """Simulate the analytic model's own world (see `SimConfig.model_assumptions`) at each scale
    at the optimal interval (or `interval_s`) and compare with E[ETTR] and the renewal value."""
    rows = []
    for g in scales:
        n = -(-g // gpus_per_node)
        dt = interval_s or model.optimal_interval_s(n, rf, write_s)
        cfg = SimConfig.model_assumptions(rf, restart_s, write_s, dt, days, gpus_per_node)
        sim = statistics.fmean(simulate(cfg, make_policy("naive"), g, s).ettr for s in range(seeds))
        analytic = model.expected_ettr(n, rf, restart_s, dt, write_s)
        rows.append(ValidationRow(
            gpus=g, interval_s=dt, load=model.failure_rate(n, rf) * (restart_s + dt / 2), analytic=analytic,
            renewal=model.renewal_ettr(n, rf, restart_s, dt, write_s), simulated=sim,
            rel_error=abs(sim - analytic) / analytic if analytic > 0 else float("inf")))
    return rows
