"""The analytic goodput model (Meta, Kokolis et al. 2025) and a failure-rate estimate from logs.

Notation: N nodes, r_f failures per node per unit time (quoted per 1,000 node-days), u0 restart
overhead, Δt_cp checkpoint interval (training time between checkpoints), w_cp blocking checkpoint
write time. Assumptions: failures are a Poisson process of rate λ = N·r_f, each failure loses u0
plus the work since the last checkpoint (Δt_cp/2 on average), checkpoints block training.

    MTTF      = 1 / (N·r_f)
    E[ETTR]  ≈ (1 − N·r_f·(u0 + Δt_cp/2)) / (1 + w_cp/Δt_cp)       first order in λ·(u0 + Δt_cp)
    Δt_cp*    = sqrt(2·w_cp / (N·r_f))                             (Young's interval)

`renewal_ettr` is the exact value under the same assumptions (failures also during restarts),
from a renewal argument; it agrees with E[ETTR] when λ·(u0 + Δt_cp) is small and stays right
where the first-order formula goes negative (very large N): use it to see where the model holds.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from pydantic import BaseModel, ConfigDict, Field

from diagnoser.metrics.timeline import Timeline
from diagnoser.models import Category

DAY = 86400.0
# Meta RSC-1 / RSC-2 measured 6.5 / 2.34 failures per 1,000 node-days (Kokolis et al., HPCA 2025);
# 6.5 gives the DESIGN's MTTF figures at 16,384 GPUs (1.8 h) and 131,072 GPUs (14 min).
RF_LITERATURE = 6.5
RF_LITERATURE_LOW = 2.34
GPUS_PER_NODE = 8


def rf_per_second(rf_per_1000_node_days: float) -> float:
    return rf_per_1000_node_days / 1000.0 / DAY


def failure_rate(n_nodes: int, rf_per_1000_node_days: float) -> float:
    """λ = N·r_f, job failures per second."""
    return n_nodes * rf_per_second(rf_per_1000_node_days)


def mttf_s(n_nodes: int, rf_per_1000_node_days: float) -> float:
    lam = failure_rate(n_nodes, rf_per_1000_node_days)
    return math.inf if lam == 0 else 1.0 / lam


def expected_ettr(n_nodes: int, rf_per_1000_node_days: float, restart_s: float, interval_s: float,
                  write_s: float) -> float:
    """Meta's first-order E[ETTR], clamped to [0, 1]."""
    lam = failure_rate(n_nodes, rf_per_1000_node_days)
    if interval_s <= 0:  # checkpointing continuously: only free when writes cost nothing (Meta's w_cp ~ 0)
        return min(max(1.0 - lam * restart_s, 0.0), 1.0) if write_s <= 0 else 0.0
    value = (1.0 - lam * (restart_s + interval_s / 2.0)) / (1.0 + write_s / interval_s)
    return min(max(value, 0.0), 1.0)


def optimal_interval_s(n_nodes: int, rf_per_1000_node_days: float, write_s: float) -> float:
    lam = failure_rate(n_nodes, rf_per_1000_node_days)
    return math.inf if lam == 0 else math.sqrt(2.0 * write_s / lam)


def renewal_ettr(n_nodes: int, rf_per_1000_node_days: float, restart_s: float, interval_s: float,
                 write_s: float) -> float:
    """Exact long-run ETTR under the model's assumptions (Poisson failures at all times while the
    job holds its nodes, restart u0, blocking writes): λ·e^(−λ·u0)·Δ·q/(1−q), q = e^(−λ(Δ+w))."""
    lam = failure_rate(n_nodes, rf_per_1000_node_days)
    if interval_s + write_s <= 0:  # the limit of Δ -> 0 with free writes: only the restarts cost
        return math.exp(-lam * restart_s)
    if lam == 0:
        return interval_s / (interval_s + write_s)
    q = math.exp(-lam * (interval_s + write_s))
    return lam * math.exp(-lam * restart_s) * interval_s * q / -math.expm1(-lam * (interval_s + write_s))


class WhatIfParams(BaseModel):
    """Inputs of `diagnoser whatif`; durations in seconds. Defaults: assumptions, edit them."""

    model_config = ConfigDict(extra="forbid")

    gpus: int = Field(default=16384, ge=1)
    gpus_per_node: int = Field(default=GPUS_PER_NODE, ge=1)
    rf_per_1000_node_days: float = Field(default=RF_LITERATURE, gt=0)
    restart_s: float = Field(default=600.0, ge=0)  # assumed: reschedule + init + checkpoint load
    checkpoint_write_s: float = Field(default=60.0, ge=0)  # assumed: blocking write (0: free, as Meta's model)
    checkpoint_interval_s: float | None = Field(default=None, gt=0)  # None: the optimal interval


class WhatIfPoint(BaseModel):
    gpus: int
    nodes: int
    mttf_s: float
    optimal_interval_s: float
    interval_s: float
    ettr: float  # E[ETTR] at interval_s
    ettr_at_optimal: float
    renewal_ettr: float  # exact under the same assumptions, at interval_s
    load: float  # λ·(u0 + Δt_cp/2) at interval_s: the first-order model needs it small
    first_order_ok: bool  # E[ETTR] within 5% of the exact value


class WhatIfResult(BaseModel):
    params: WhatIfParams
    point: WhatIfPoint
    curve: list[WhatIfPoint]
    rf_source: str = "given"


def whatif_point(p: WhatIfParams, gpus: int | None = None) -> WhatIfPoint:
    g = gpus or p.gpus
    n = math.ceil(g / p.gpus_per_node)
    opt = optimal_interval_s(n, p.rf_per_1000_node_days, p.checkpoint_write_s)
    dt = p.checkpoint_interval_s or opt
    args = (n, p.rf_per_1000_node_days, p.restart_s)
    ettr, exact = expected_ettr(*args, dt, p.checkpoint_write_s), renewal_ettr(*args, dt, p.checkpoint_write_s)
    return WhatIfPoint(
        gpus=g, nodes=n, mttf_s=mttf_s(n, p.rf_per_1000_node_days), optimal_interval_s=opt, interval_s=dt,
        ettr=ettr, ettr_at_optimal=expected_ettr(*args, opt, p.checkpoint_write_s), renewal_ettr=exact,
        load=failure_rate(n, p.rf_per_1000_node_days) * (p.restart_s + dt / 2),
        first_order_ok=abs(ettr - exact) <= 0.05 * exact)


def scale_grid(lo: int = 1024, hi: int = 131072) -> list[int]:
    """Powers of two from lo to hi GPUs."""
    out, g = [], lo
    while g <= hi:
        out.append(g)
        g *= 2
    return out


def whatif(p: WhatIfParams, scales: list[int] | None = None, rf_source: str = "given") -> WhatIfResult:
    curve = [whatif_point(p, g) for g in sorted(set((scales or scale_grid()) + [p.gpus]))]
    return WhatIfResult(params=p, point=whatif_point(p), curve=curve, rf_source=rf_source)


class RfEstimate(BaseModel):
    failures: int
    node_days: float
    rf_per_1000_node_days: float
    low: float  # approximate 95% interval (Poisson)
    high: float
    categories: list[Category]


def _chi2_quantile(p: float, dof: float) -> float:
    """Wilson–Hilferty approximation of the chi-square quantile."""
    z = NormalDist().inv_cdf(p)
    return dof * (1.0 - 2.0 / (9.0 * dof) + z * math.sqrt(2.0 / (9.0 * dof))) ** 3


DEFAULT_RF_CATEGORIES = (Category.HARDWARE, Category.INFRA)


def estimate_rf(timelines: list[Timeline], categories: tuple[Category, ...] = DEFAULT_RF_CATEGORIES
                ) -> RfEstimate:
    """r_f from audit logs: failures of `categories` per node-day the attempts ran.

    By default hardware and infra failures: the ones that scale with the node count (user-code
    failures do not). Raises ValueError when the logs hold no running time."""
    node_s = sum(max(a.end - a.start, 0.0) * max(len(a.nodes), 1) for tl in timelines for a in tl.attempts)
    if node_s <= 0:
        raise ValueError("the audit logs hold no running time to estimate r_f from")
    k = sum(1 for tl in timelines for f in tl.failures if f.category in categories)
    node_days = node_s / DAY
    low = 0.0 if k == 0 else _chi2_quantile(0.025, 2 * k) / 2
    high = _chi2_quantile(0.975, 2 * k + 2) / 2
    scale = 1000.0 / node_days
    return RfEstimate(failures=k, node_days=node_days, rf_per_1000_node_days=k * scale, low=low * scale,
                      high=high * scale, categories=list(categories))
