"""PNG figures (matplotlib, Agg backend): report timeline, what-if curve, simulated policies.

Each function writes one PNG and returns its path; matplotlib is imported lazily so the rest of
the metrics package works without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from diagnoser.metrics.timeline import LOST_PHASES, Phase, Timeline
from diagnoser.models import Category

if TYPE_CHECKING:
    from diagnoser.metrics.goodput import Report
    from diagnoser.metrics.model import WhatIfResult
    from diagnoser.metrics.sim import PolicyRow, ValidationRow

CATEGORY_COLOURS = {Category.HARDWARE: "#d62728", Category.INFRA: "#ff9f1c", Category.USER_CODE: "#9467bd",
                    Category.UNKNOWN: "#555555"}
_CAT_BY_NAME = {c.value: col for c, col in CATEGORY_COLOURS.items()}
PHASE_COLOURS = {Phase.PRODUCTIVE: "#2ca02c", Phase.CHECKPOINT: "#98df8a", Phase.STARTUP: "#c7c7c7",
                 Phase.OTHER: "#e5e5e5"}
PHASE_HATCH = {Phase.DETECTION: "////", Phase.DIAGNOSIS: "xxx", Phase.RESTART: "...", Phase.RECOMPUTE: "\\\\\\\\"}
POLICY_COLOURS = {"naive": "#d62728", "diagnoser": "#1f77b4", "oracle": "#2ca02c"}


TIME_UNITS = (("seconds", 1.0, 120.0), ("minutes", 60.0, 2 * 3600.0), ("hours", 3600.0, 3 * 86400.0),
              ("days", 86400.0, float("inf")))


def time_unit(span_s: float) -> tuple[str, float]:
    """The unit a time axis of `span_s` seconds reads best in: (name, seconds per unit). A 6-minute run is drawn in
    minutes (not 0.1 hours), a month in days."""
    for name, seconds, below in TIME_UNITS:
        if span_s < below:
            return name, seconds
    return TIME_UNITS[-1][0], TIME_UNITS[-1][1]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, format="png", dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    return p


def plot_report(timelines: list[Timeline], report: Report, path: str | Path, window_s: float | None = None,
                max_runs: int = 8) -> Path:
    """Three panels: attempts over time coloured by cause, lost time by category, sliding ETTR."""
    from matplotlib.patches import Patch

    from diagnoser.metrics.goodput import sliding_ettr

    plt = _pyplot()
    shown = timelines[:max_runs]
    rows = [(tl, a) for tl in shown for a in tl.attempts] or [(tl, None) for tl in shown]
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(11, 3.2 + 0.25 * len(rows) + 6),
                                        gridspec_kw={"height_ratios": [max(len(rows), 3), 3, 3]})
    ends = [iv.start + iv.seconds for tl in shown for iv in tl.intervals]
    unit, per = time_unit(max(ends, default=0.0))
    h = 1 / per
    ylabels = []
    for y, (tl, a) in enumerate(rows):
        ylabels.append(f"{tl.job_id} #{a.attempt}" if a else tl.job_id)
        cause = {f.index: f.category for f in tl.failures}
        ivs = [iv for iv in tl.intervals if a is None or iv.attempt == a.attempt]
        for iv in ivs:
            colour = CATEGORY_COLOURS[cause[iv.failure]] if iv.failure is not None else PHASE_COLOURS.get(
                iv.phase, "#cccccc")
            hatch = PHASE_HATCH.get(iv.phase)
            ax1.broken_barh([(iv.start * h, iv.seconds * h)], (y - 0.35, 0.7), facecolors=colour, hatch=hatch,
                            edgecolor="white" if hatch else "none", linewidth=0.3 if hatch else 0)
        for f in tl.failures:
            if a is not None and f.attempt == a.attempt:
                ax1.plot([f.time * h], [y], marker="v", color="black", markersize=5)
    ax1.set_yticks(range(len(rows)), ylabels, fontsize=8)
    ax1.invert_yaxis()
    ax1.set_xlabel(f"{unit} since run start")
    ax1.set_title("Attempts: productive (green), lost time coloured by failure cause")
    handles = [Patch(facecolor=PHASE_COLOURS[p], label=p.value) for p in (Phase.PRODUCTIVE, Phase.CHECKPOINT,
                                                                           Phase.STARTUP)]
    handles += [Patch(facecolor=c, label=k.value) for k, c in CATEGORY_COLOURS.items()]
    handles += [Patch(facecolor="white", edgecolor="black", hatch=h, label=p.value) for p, h in PHASE_HATCH.items()]
    ax1.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))

    cats = [g.key for g in report.total.by_category] or ["(no failures)"]
    left = [0.0] * len(cats)
    lost_unit, lost_per = time_unit(max((sum(g.lost_s.values()) for g in report.total.by_category), default=0.0))
    for p in LOST_PHASES:
        vals = [g.lost_s[p.value] / lost_per for g in report.total.by_category] or [0.0]
        ax2.barh(cats, vals, left=left, label=p.value, hatch=PHASE_HATCH[p], edgecolor="white",
                 color=[_CAT_BY_NAME.get(c, "#999999") for c in cats])
        left = [lo + v for lo, v in zip(left, vals, strict=True)]
    ax2.set_xlabel(f"{lost_unit} lost")
    ax2.set_title("Downtime by category (detection / diagnosis / restart / recompute)")
    ax2.legend(handles=[Patch(facecolor="white", edgecolor="black", hatch=PHASE_HATCH[p], label=p.value)
                        for p in LOST_PHASES], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))

    for tl in shown:
        pts = sliding_ettr(tl, window_s)
        ax3.plot([t * h for t, _ in pts], [e for _, e in pts], label=tl.job_id)
    ax3.set_ylim(0, 1.05)
    ax3.set_xlabel(f"{unit} since run start")
    ax3.set_ylabel("ETTR")
    ax3.set_title("ETTR over a sliding window")
    if len(shown) > 1:
        ax3.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)


def plot_whatif(result: WhatIfResult, path: str | Path) -> Path:
    """E[ETTR] over scale (given and optimal interval, and the exact renewal value), and MTTF with
    the optimal checkpoint interval."""
    plt = _pyplot()
    c = result.curve
    g = [p.gpus for p in c]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    ax1.plot(g, [p.ettr_at_optimal for p in c], "o-", label="E[ETTR], optimal interval")
    if result.params.checkpoint_interval_s:
        ax1.plot(g, [p.ettr for p in c], "s--", label=f"E[ETTR], interval {result.params.checkpoint_interval_s:.0f} s")
    ax1.plot(g, [p.renewal_ettr for p in c], ":", color="grey", label="exact (renewal), same interval")
    ax1.axvline(result.params.gpus, color="black", linewidth=0.6)
    ax1.set(xscale="log", ylim=(0, 1.02), xlabel="GPUs", ylabel="ETTR",
            title=f"r_f = {result.params.rf_per_1000_node_days:.2f} / 1,000 node-days, "
                  f"u0 = {result.params.restart_s:.0f} s, w_cp = {result.params.checkpoint_write_s:.0f} s")
    ax1.legend(fontsize=8)
    ax2.plot(g, [p.mttf_s / 3600 for p in c], "o-", label="MTTF (h)")
    ax2.plot(g, [p.optimal_interval_s / 3600 for p in c], "s-", label="optimal checkpoint interval (h)")
    ax2.set(xscale="log", yscale="log", xlabel="GPUs", title="MTTF = 1/(N·r_f), Δt* = sqrt(2·w_cp/(N·r_f))")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def plot_policies(rows: list[PolicyRow], path: str | Path, title: str = "Simulated ETTR by policy") -> Path:
    plt = _pyplot()
    scales = sorted({r.gpus for r in rows})
    policies = list(dict.fromkeys(r.policy for r in rows))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    width = 0.8 / max(len(policies), 1)
    for i, pol in enumerate(policies):
        got = {r.gpus: r for r in rows if r.policy == pol}
        xs = [j + i * width for j in range(len(scales))]
        ys = [got[s].ettr if s in got else 0 for s in scales]
        sds = [got[s].ettr_sd if s in got else 0 for s in scales]
        ax.bar(xs, ys, width, yerr=sds, color=POLICY_COLOURS.get(pol), label=pol, capsize=3)
        for x, y, sd in zip(xs, ys, sds, strict=True):
            ax.text(x, y + sd + 0.01, f"{y:.2f}", ha="center", fontsize=7)
    ax.set_xticks([j + width * (len(policies) - 1) / 2 for j in range(len(scales))], [f"{s:,}" for s in scales])
    ax.set(ylim=(0, 1.05), xlabel="GPUs", ylabel="ETTR", title=title)
    ax.legend()
    fig.tight_layout()
    return _save(fig, path)


def plot_validation(rows: list[ValidationRow], path: str | Path) -> Path:
    plt = _pyplot()
    g = [r.gpus for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(g, [r.analytic for r in rows], "o-", label="analytic E[ETTR] (first order)")
    ax.plot(g, [r.renewal for r in rows], ":", color="grey", label="exact renewal value")
    ax.plot(g, [r.simulated for r in rows], "x", markersize=9, color="black", label="simulated")
    for r in rows:
        ax.annotate(f"{100 * r.rel_error:.1f}%", (r.gpus, r.simulated), textcoords="offset points", xytext=(4, 6),
                    fontsize=7)
    ax.set(xscale="log", ylim=(0, 1.02), xlabel="GPUs", ylabel="ETTR",
           title="Simulator vs analytic model (its assumptions; optimal interval)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)
