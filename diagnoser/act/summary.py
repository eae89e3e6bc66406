"""What `diagnoser run` shows: a live status line while it supervises, and a summary at the end.

The summary is computed from the audit log by the metrics package (timeline -> ETTR): the same
numbers `diagnoser report` gives for the run.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from diagnoser.act.controller import Status
from diagnoser.act.events import read_audit
from diagnoser.metrics.goodput import run_metrics
from diagnoser.metrics.timeline import build_timeline, split_runs


def summarize(audit: Path, result_status: str | None = None, reason: str = "") -> dict:
    """The last run of an audit log: attempts, failures by category, time lost, ETTR."""
    runs = [r for r in split_runs(read_audit(audit)) if r]
    if not runs:
        return {"status": result_status or "unknown", "reason": reason, "audit": str(audit)}
    tl = build_timeline(runs[-1], str(audit))
    m = run_metrics([tl])
    return {
        "schema": "run-summary/v1",
        "job_id": m.job_id,
        "status": m.status,
        "reason": reason,
        "attempts": m.attempts,
        "failures": m.failures,
        "failures_by_category": {g.key: g.failures for g in m.by_category},
        "wall_s": round(m.wall_s, 3),
        "productive_s": round(m.phase_s.get("productive", 0.0), 3),
        "time_lost_s": {k: round(v, 3) for k, v in m.lost_s.items()},
        "ettr": round(m.ettr, 4) if m.ettr is not None else None,
        "mttr_s": round(m.mttr_s, 3) if m.mttr_s is not None else None,
        "failure_list": [f.model_dump() for f in m.failure_list],
        "audit": str(audit),
    }


def render_summary(summary: dict, console: Console) -> None:
    table = Table(title=f"diagnoser run: {summary.get('job_id', '')} {summary['status']}", show_header=False,
                  title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("attempts", str(summary.get("attempts", 0)))
    by_cat = summary.get("failures_by_category") or {}
    table.add_row("failures", f"{summary.get('failures', 0)}" + (
        " (" + ", ".join(f"{k} {v}" for k, v in by_cat.items()) + ")" if by_cat else ""))
    lost = summary.get("time_lost_s") or {}
    table.add_row("time lost", f"{lost.get('total', 0):.1f} s" + (
        " (" + ", ".join(f"{k} {v:.1f}" for k, v in lost.items() if k != "total" and v) + ")" if lost else ""))
    table.add_row("wall time", f"{summary.get('wall_s', 0):.1f} s")
    ettr = summary.get("ettr")
    table.add_row("ETTR", f"{ettr:.1%}" if ettr is not None else "-")
    for f in summary.get("failure_list", []):
        table.add_row(f"  attempt {f['attempt']}", f"{f['how']} {f['category']}/{f['subtype']} -> {f['action']} "
                      f"(detect {f['detection_s']:.1f} s, diagnose {f['diagnosis_s']:.1f} s, "
                      f"restart {f['restart_s']:.1f} s)")
    if summary.get("reason"):
        table.add_row("reason", summary["reason"])
    table.add_row("audit log", summary.get("audit", ""))
    console.print(table)


class StatusLine:
    """A one-line live view of the controller's `Status` (rich renderable, re-rendered on refresh)."""

    def __init__(self, status: Status) -> None:
        self.status = status

    def __rich__(self) -> Text:
        s = self.status
        parts = [f"attempt {s.attempt}" if s.attempt else "", f"step {s.step}" if s.step is not None else ""]
        if s.last_progress_at is not None:
            ago = (datetime.now(UTC) - s.last_progress_at).total_seconds()
            parts.append(f"progress {ago:.0f}s ago")
        if s.failures:
            parts.append("failures " + ", ".join(f"{k} {v}" for k, v in s.failures.items()))
        text = Text("diagnoser ", style="bold")
        text.append(f"[{s.phase}] ", style="yellow" if s.phase not in ("running", "succeeded") else "green")
        text.append(" · ".join(p for p in parts if p))
        if s.message and s.phase != "running":
            text.append(f" · {s.message[:100]}", style="dim")
        return text
