"""Rich rendering of goodput reports, what-if results and simulations for a terminal."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from diagnoser.metrics.goodput import GroupStats, Report, RunMetrics
from diagnoser.metrics.model import RfEstimate, WhatIfResult
from diagnoser.metrics.sim import PolicyRow, ValidationRow
from diagnoser.metrics.timeline import LOST_PHASES


def duration(seconds: float | None) -> str:
    """Compact human duration: 45s, 12m, 3.4h, 2.1d; '-' for None/inf."""
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "-"
    s = abs(seconds)
    if s < 90:
        return f"{seconds:.0f}s"
    if s < 5400:
        return f"{seconds / 60:.0f}m"
    if s < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def _table(*columns: str, title: str) -> Table:
    """Compact table that fits an 80-column terminal: light borders, first column not wrapped."""
    t = Table(title=title, box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False, title_justify="left",
              collapse_padding=True)
    for i, c in enumerate(columns):
        # the first column names things (nodes, categories): folded, never cut with '…'
        t.add_column(c, no_wrap=i > 0, overflow="fold", min_width=len(c), justify="left" if i == 0 else "right")
    return t


_SHORT = {"detection": "detect", "diagnosis": "diag", "restart": "restart", "recompute": "recomp"}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _runs_table(report: Report) -> Table:
    t = _table("job", "status", "GPUs", "wall", "attempts", "failures", "ETTR", "TOR", "MTTF", "MTTR", title="Runs")
    rows: list[RunMetrics] = [*report.runs, report.total] if len(report.runs) > 1 else report.runs
    for m in rows:
        t.add_row(m.job_id, m.status, f"{m.gpus:,}", duration(m.wall_s), str(m.attempts), str(m.failures),
                  _pct(m.ettr), _pct(m.tor), duration(m.mttf_s), duration(m.mttr_s),
                  style="bold" if m is report.total else None)
    return t


def _phase_table(m: RunMetrics, runs: int) -> Table:
    t = _table("where the time went", "time", "share", title="Wall time" + (f" ({runs} runs)" if runs > 1 else ""))
    for phase, seconds in m.phase_s.items():
        if seconds > 0:
            lost = phase in m.lost_s
            t.add_row(f"{phase}{' (lost)' if lost else ''}", duration(seconds), _pct(seconds / m.wall_s),
                      style="red" if lost else None)
    return t


def _groups_table(title: str, name: str, groups: list[GroupStats]) -> Table:
    t = _table(name, "n", "MTTF", "MTTR", *[_SHORT[p.value] for p in LOST_PHASES], "lost", title=title)
    for g in groups:
        t.add_row(g.key, str(g.failures), duration(g.mttf_s), duration(g.mttr_s),
                  *[duration(g.lost_s[p.value]) for p in LOST_PHASES], duration(sum(g.lost_s.values())))
    return t


def render_report(report: Report, console: Console) -> None:
    console.print(_runs_table(report))
    total = report.total
    if total.wall_s > 0:
        console.print(_phase_table(total, len(report.runs)))
    if total.by_category:
        console.print(_groups_table("Failures by category", "category", total.by_category))
        console.print(_groups_table("Failures by subtype", "subtype", total.by_subtype))
    else:
        console.print("[green]No failures recorded.[/green]")
    if total.nodes:
        t = _table("node", "failures", "reused after", "lemon", title="Culprit nodes")
        for n in total.nodes:
            t.add_row(n.node, str(n.failures), str(n.reused), "[red]yes[/red]" if n.lemon else "")
        console.print(t)
    for w in report.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")


def render_whatif(result: WhatIfResult, console: Console, rf: RfEstimate | None = None) -> None:
    p, pt = result.params, result.point
    if rf is not None:
        console.print(f"r_f from the audit logs: [bold]{rf.rf_per_1000_node_days:.2f}[/bold] per 1,000 node-days "
                      f"({rf.failures} {'/'.join(c.value for c in rf.categories)} failures in "
                      f"{rf.node_days:.1f} node-days; 95% ≈ {rf.low:.2f}-{rf.high:.2f})")
    console.print(f"[bold]{pt.gpus:,} GPUs[/bold] ({pt.nodes:,} nodes), r_f {p.rf_per_1000_node_days:.2f} per 1,000 "
                  f"node-days, restart {duration(p.restart_s)}, checkpoint write {duration(p.checkpoint_write_s)}")
    console.print(f"  MTTF {duration(pt.mttf_s)}   optimal checkpoint interval [bold]{duration(pt.optimal_interval_s)}"
                  f"[/bold]   E[ETTR] at it {_pct(pt.ettr_at_optimal)}")
    if p.checkpoint_interval_s:
        console.print(f"  at your interval {duration(pt.interval_s)}: E[ETTR] {_pct(pt.ettr)}")
    if not pt.first_order_ok:
        console.print(f"  [yellow]outside the first-order model's range (λ·(u0+Δt/2) = {pt.load:.2f}): the exact "
                      f"value under its assumptions is {_pct(pt.renewal_ettr)}[/yellow]")
    mine = p.checkpoint_interval_s is not None
    cols = ["GPUs", "nodes", "MTTF", "best interval", "E[ETTR]", *(["yours"] if mine else []), "exact"]
    t = _table(*cols, title="ETTR over scale")
    for c in result.curve:
        t.add_row(f"{c.gpus:,}", f"{c.nodes:,}", duration(c.mttf_s), duration(c.optimal_interval_s),
                  _pct(c.ettr_at_optimal), *([_pct(c.ettr)] if mine else []), _pct(c.renewal_ettr),
                  style="bold" if c.gpus == pt.gpus else None)
    console.print(t)
    console.print("[dim]exact: renewal value, same assumptions; where it departs from E[ETTR] "
                  "the first-order model no longer holds.[/dim]")


def render_simulation(rows: list[PolicyRow], console: Console, validation: list[ValidationRow] | None = None) -> None:
    t = _table("GPUs", "policy", "ETTR", "sd", "fails", "detect", "diag", "restart", "recomp", "stopped",
               title="Simulated ETTR (mean ± sd over seeds; lost hours per run)")
    for r in rows:
        lost = [f"{r.phase_s[k] / 3600:.1f}" for k in ("detection", "diagnosis", "restart", "recompute", "stopped")]
        t.add_row(f"{r.gpus:,}", r.policy, _pct(r.ettr), _pct(r.ettr_sd), f"{r.failures:.0f}", *lost)
    console.print(t)
    intervals = {r.gpus: r.interval_s for r in rows}
    console.print("checkpoint interval: " + ", ".join(f"{g:,} GPUs {duration(s)}" for g, s in intervals.items()))
    if validation:
        v = _table("GPUs", "interval", "λ(u0+Δ/2)", "analytic", "exact", "simulated", "error",
                   title="Simulator vs analytic E[ETTR] (the model's assumptions)")
        for r in validation:
            v.add_row(f"{r.gpus:,}", duration(r.interval_s), f"{r.load:.3f}", _pct(r.analytic), _pct(r.renewal),
                      _pct(r.simulated), f"[{'green' if r.within else 'red'}]{100 * r.rel_error:.1f}%[/]")
        console.print(v)
