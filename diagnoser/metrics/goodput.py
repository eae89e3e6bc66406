"""Goodput metrics from timelines: ETTR, TOR, MTTF/MTTR per category and subtype, lemon nodes.

Definitions (seconds; see `timeline.Phase` for where each second goes):
- ETTR = productive / wall time.
- TOR (training overhead ratio) = T_optimal / T_observed, with T_optimal the time the same work
  would take without failures (productive + checkpoint writes + the first startup) and
  T_observed the wall time: TOR isolates what failures cost, ETTR counts every overhead.
- uptime = the time attempts ran (attempt start -> failure or end); MTTF = uptime / failures,
  per category and subtype the same uptime over that group's failures (competing risks).
- MTTR = mean of failure -> training resumed (detection + diagnosis + restart) over the failures
  after which training resumed; lost time also counts the recomputed work.
- lemon nodes: nodes named as culprit in >= `lemon_threshold` failures; `reused` counts the later
  attempts that still ran on a node after it was first named (the crash loop Meta warns about).
Several runs together: times add up; ETTR and TOR are weighted by GPUs (GPU-time ratios).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable

from pydantic import BaseModel, Field

from diagnoser.metrics.timeline import LOST_PHASES, Failure, Phase, Timeline

REPORT_SCHEMA = "goodput/v1"


class GroupStats(BaseModel):
    key: str
    failures: int
    mttf_s: float | None
    mttr_s: float | None
    lost_s: dict[str, float]  # detection, diagnosis, restart, recompute (sums)


class NodeStats(BaseModel):
    node: str
    failures: int
    reused: int  # later attempts in the same run that still included it
    lemon: bool


class FailureRecord(BaseModel):
    attempt: int
    time_s: float  # since the run started
    how: str
    category: str
    subtype: str
    action: str | None
    culprit_nodes: list[str]
    detection_s: float
    diagnosis_s: float
    restart_s: float
    recompute_s: float
    resumed: bool


class RunMetrics(BaseModel):
    job_id: str
    source: str
    status: str
    gpus: int
    wall_s: float
    attempts: int
    failures: int
    ettr: float | None
    tor: float | None
    uptime_s: float
    mttf_s: float | None
    mttr_s: float | None
    phase_s: dict[str, float]
    lost_s: dict[str, float]
    by_category: list[GroupStats]
    by_subtype: list[GroupStats]
    nodes: list[NodeStats]
    failure_list: list[FailureRecord] = Field(default_factory=list)  # single runs only


class Report(BaseModel):
    schema_: str = Field(default=REPORT_SCHEMA, alias="schema")
    runs: list[RunMetrics]
    total: RunMetrics
    warnings: list[str] = Field(default_factory=list)

    def to_json_dict(self) -> dict:
        return self.model_dump(mode="json", by_alias=True)


def _uptime(tl: Timeline) -> float:
    return sum(max(a.end - a.start, 0.0) for a in tl.attempts)


def _lost(failures: list[Failure]) -> dict[str, float]:
    return {
        Phase.DETECTION.value: sum(f.detection_s for f in failures),
        Phase.DIAGNOSIS.value: sum(f.diagnosis_s for f in failures),
        Phase.RESTART.value: sum(f.restart_s for f in failures),
        Phase.RECOMPUTE.value: sum(f.recompute_s for f in failures),
    }


def _mttr(failures: list[Failure]) -> float | None:
    done = [f.repair_s for f in failures if f.resumed]
    return sum(done) / len(done) if done else None


def _groups(failures: list[Failure], uptime: float, key: Callable[[Failure], str]) -> list[GroupStats]:
    by: dict[str, list[Failure]] = defaultdict(list)
    for f in failures:
        by[key(f)].append(f)
    out = [GroupStats(key=k, failures=len(fs), mttf_s=uptime / len(fs), mttr_s=_mttr(fs), lost_s=_lost(fs))
           for k, fs in by.items()]
    return sorted(out, key=lambda g: -sum(g.lost_s.values()))


def node_stats(timelines: list[Timeline], lemon_threshold: int = 2) -> list[NodeStats]:
    """Failures per culprit node across runs, most first; `reused`: attempts that still ran on
    the node after it was first named as a culprit in that run."""
    counts: Counter[str] = Counter()
    reused: Counter[str] = Counter()
    for tl in timelines:
        first: dict[str, int] = {}  # node -> attempt of the first failure naming it
        for f in tl.failures:
            counts.update(set(f.culprit_nodes))
            for n in f.culprit_nodes:
                first.setdefault(n, f.attempt)
        for a in tl.attempts:
            reused.update(n for n in set(a.nodes) if n in first and a.attempt > first[n])
    return [NodeStats(node=n, failures=c, reused=reused[n], lemon=c >= lemon_threshold)
            for n, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def run_metrics(timelines: list[Timeline], lemon_threshold: int = 2, job_id: str | None = None) -> RunMetrics:
    """Metrics of one run, or of several runs together (`job_id` names the group)."""
    if not timelines:
        raise ValueError("no runs")
    phase = dict.fromkeys((p.value for p in Phase), 0.0)
    weighted = dict.fromkeys(Phase, 0.0)
    wall = wall_w = 0.0
    for tl in timelines:
        for p, s in tl.totals().items():
            phase[p.value] += s
            weighted[p] += s * tl.n_gpus
        wall += tl.wall_s
        wall_w += tl.wall_s * tl.n_gpus
    failures = [f for tl in timelines for f in tl.failures]
    uptime = sum(_uptime(tl) for tl in timelines)
    optimal = weighted[Phase.PRODUCTIVE] + weighted[Phase.CHECKPOINT] + weighted[Phase.STARTUP]
    one = timelines[0] if len(timelines) == 1 else None
    return RunMetrics(
        job_id=job_id or (one.job_id if one else "all"), source=one.source if one else f"{len(timelines)} runs",
        status=one.status if one else "-", gpus=max(tl.n_gpus for tl in timelines), wall_s=wall,
        attempts=sum(len(tl.attempts) for tl in timelines), failures=len(failures),
        ettr=weighted[Phase.PRODUCTIVE] / wall_w if wall_w > 0 else None,
        tor=optimal / wall_w if wall_w > 0 else None,
        uptime_s=uptime, mttf_s=uptime / len(failures) if failures else None, mttr_s=_mttr(failures),
        phase_s=phase, lost_s={p.value: phase[p.value] for p in LOST_PHASES} | {"total": sum(
            phase[p.value] for p in LOST_PHASES)},
        by_category=_groups(failures, uptime, lambda f: f.category.value),
        by_subtype=_groups(failures, uptime, lambda f: f"{f.category.value}/{f.subtype}"),
        nodes=node_stats(timelines, lemon_threshold),
        failure_list=[_record(f) for f in one.failures] if one else [])


def _record(f: Failure) -> FailureRecord:
    return FailureRecord(
        attempt=f.attempt, time_s=f.time, how=f.how.value, category=f.category.value, subtype=f.subtype,
        action=f.action.value if f.action else None, culprit_nodes=f.culprit_nodes, detection_s=f.detection_s,
        diagnosis_s=f.diagnosis_s, restart_s=f.restart_s, recompute_s=f.recompute_s, resumed=f.resumed)


def build_report(timelines: list[Timeline], lemon_threshold: int = 2, warnings: list[str] | None = None) -> Report:
    runs = [run_metrics([tl], lemon_threshold) for tl in timelines]
    return Report(runs=runs, total=run_metrics(timelines, lemon_threshold, job_id="all"), warnings=warnings or [])


def sliding_ettr(tl: Timeline, window_s: float | None = None, points: int = 200) -> list[tuple[float, float]]:
    """(window centre s, ETTR within the window) over the run; window default: wall / 10."""
    if tl.wall_s <= 0:
        return []
    w = min(window_s or tl.wall_s / 10, tl.wall_s)
    prod = [(iv.start, iv.end) for iv in tl.intervals if iv.phase is Phase.PRODUCTIVE]
    n = max(points, 2)
    out = []
    for i in range(n):
        lo = (tl.wall_s - w) * i / (n - 1)
        hi = lo + w
        got = sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in prod)
        out.append((lo + w / 2, got / w))
    return out
