"""Audit log -> timeline -> goodput, on hand-built logs whose numbers are computed by hand."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from diagnoser.act.events import (
    AUDIT_SCHEMA,
    AuditWriter,
    CheckpointSaved,
    FailureDetected,
    Progress,
    RunStarted,
    read_audit,
)
from diagnoser.metrics.goodput import build_report, run_metrics, sliding_ettr
from diagnoser.metrics.model import estimate_rf
from diagnoser.metrics.timeline import Phase, build_timeline, load_timelines, split_runs
from diagnoser.models import Category

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def ev(type_: str, t: float, **fields) -> dict:
    return {"schema": AUDIT_SCHEMA, "type": type_, "time": at(t), **fields}


def hand_log() -> list[dict]:
    """Two attempts, 10 s/step. Attempt 1 hangs (hardware, n3), attempt 2 resumes from step 200
    and crashes (user code); the run stops. See test_hand_timeline for the arithmetic."""
    nodes = ["n1", "n2", "n3", "n4"]
    return [
        ev("run_started", 0, job_id="job-1", command=["torchrun", "train.py"], nodes=nodes, gpus_per_node=8),
        ev("attempt_started", 0, attempt=1, nodes=nodes),
        ev("progress", 100, step=0),
        ev("progress", 1100, step=100),
        ev("checkpoint_saved", 2150, step=200, path="/ckpt/200", seconds=50),
        ev("progress", 2650, step=250),
        ev("failure_detected", 3250, attempt=1, how="hang", last_progress_time=at(2850)),
        ev("diagnosis", 3280, attempt=1, category="hardware", subtype="gpu_xid_79", action="drain_and_restart",
           confidence=0.97, culprit_nodes=["n3"], decided_by="rule", seconds=25),
        ev("decision", 3300, action="drain_and_restart", reason="Xid 79", approved_by="policy", nodes=["n3"]),
        ev("action_started", 3301, action="drain_and_restart"),
        ev("action_finished", 3305, action="drain_and_restart", ok=True),
        ev("attempt_finished", 3310, attempt=1, status="failed", exit_code=1),
        ev("attempt_started", 3400, attempt=2, nodes=["n1", "n2", "n4", "n5"], excluded_nodes=["n3"],
           resume_step=200),
        ev("progress", 4500, step=300),
        ev("checkpoint_saved", 5550, step=400, path="/ckpt/400", seconds=50),
        ev("failure_detected", 6050, attempt=2, how="exit", exit_code=1),
        ev("diagnosis", 6060, attempt=2, category="user_code", subtype="cuda_oom", action="stop_and_notify",
           confidence=0.9, decided_by="rule", seconds=8),
        ev("decision", 6070, action="stop_and_notify", reason="user code", approved_by="policy"),
        ev("attempt_finished", 6080, attempt=2, status="failed", exit_code=1),
        ev("run_finished", 6100, status="stopped", reason="user code"),
    ]


def write_log(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    return path


def test_hand_timeline(tmp_path):
    tl = load_timelines(write_log(tmp_path / "a.jsonl", hand_log()))[0]
    tot = tl.totals()
    # startup 0-100; productive 100-2100 and 3500-5500 (attempt 2 starts training 100 steps x 10 s
    # before its first progress at 4500); checkpoints 2100-2150, 5500-5550; lost work 2150-2850
    # (beyond step 200) and 5550-6050 (beyond step 400); hang detection 2850-3250; diagnosis
    # 3250-3300 and 6050-6070; restart 3300-3500; other 6070-6100.
    assert tl.seconds_per_step == pytest.approx(10.0)
    assert tl.wall_s == pytest.approx(6100)
    assert tot[Phase.STARTUP] == pytest.approx(100)
    assert tot[Phase.PRODUCTIVE] == pytest.approx(4000)
    assert tot[Phase.CHECKPOINT] == pytest.approx(100)
    assert tot[Phase.DETECTION] == pytest.approx(400)
    assert tot[Phase.DIAGNOSIS] == pytest.approx(70)
    assert tot[Phase.RESTART] == pytest.approx(200)
    assert tot[Phase.RECOMPUTE] == pytest.approx(1200)
    assert tot[Phase.OTHER] == pytest.approx(30)
    # contiguous, no gaps or overlaps
    ivs = tl.intervals
    assert ivs[0].start == 0 and ivs[-1].end == pytest.approx(tl.wall_s)
    assert all(a.end == pytest.approx(b.start) for a, b in zip(ivs, ivs[1:], strict=False))

    f1, f2 = tl.failures
    assert (f1.category, f1.subtype, f1.culprit_nodes) == (Category.HARDWARE, "gpu_xid_79", ["n3"])
    assert (f1.detection_s, f1.diagnosis_s, f1.restart_s, f1.recompute_s) == pytest.approx((400, 50, 200, 700))
    assert f1.resumed and f1.repair_s == pytest.approx(650)
    assert (f2.detection_s, f2.diagnosis_s, f2.recompute_s) == pytest.approx((0, 20, 500))
    assert not f2.resumed


def test_hand_metrics(tmp_path):
    tl = load_timelines(write_log(tmp_path / "a.jsonl", hand_log()))[0]
    m = run_metrics([tl])
    assert m.ettr == pytest.approx(4000 / 6100)
    assert m.tor == pytest.approx((4000 + 100 + 100) / 6100)
    assert m.gpus == 32 and m.failures == 2 and m.attempts == 2
    assert m.uptime_s == pytest.approx(2850 + 2650)  # attempt start -> failure
    assert m.mttf_s == pytest.approx(5500 / 2)
    assert m.mttr_s == pytest.approx(650)  # only the failure after which training resumed
    assert m.lost_s == pytest.approx({"detection": 400, "diagnosis": 70, "restart": 200, "recompute": 1200,
                                      "total": 1870})
    cats = {g.key: g for g in m.by_category}
    assert cats["hardware"].mttf_s == pytest.approx(5500) and cats["hardware"].failures == 1
    assert cats["user_code"].mttr_s is None
    assert sum(cats["hardware"].lost_s.values()) == pytest.approx(1350)
    assert [g.key for g in m.by_subtype] == ["hardware/gpu_xid_79", "user_code/cuda_oom"]
    assert [(n.node, n.failures, n.reused, n.lemon) for n in m.nodes] == [("n3", 1, 0, False)]


def test_sliding_ettr_matches_whole_run_with_full_window(tmp_path):
    tl = load_timelines(write_log(tmp_path / "a.jsonl", hand_log()))[0]
    assert sliding_ettr(tl, window_s=tl.wall_s, points=3) == [(pytest.approx(3050), pytest.approx(4000 / 6100))] * 3
    first = sliding_ettr(tl, window_s=1000, points=10)[0]
    assert first == (pytest.approx(500), pytest.approx(0.9))  # 0-1000: 100 s startup


def test_lemon_node_counted_and_reuse_flagged(tmp_path):
    nodes = ["a", "b", "bad"]
    events = [ev("run_started", 0, job_id="lemon", nodes=nodes, gpus_per_node=8)]
    t = 0
    for n in (1, 2, 3):
        events += [
            ev("attempt_started", t, attempt=n, nodes=nodes),
            ev("progress", t + 60, step=0),
            ev("progress", t + 600, step=100),
            ev("failure_detected", t + 700, how="exit", exit_code=139),
            ev("diagnosis", t + 710, category="hardware", subtype="gpu_xid_48", action="restart",
               culprit_nodes=["bad"]),
            ev("decision", t + 711, action="restart", reason="budget", approved_by="policy"),
        ]
        t += 800
    events.append(ev("run_finished", t, status="gave_up"))
    report = build_report(load_timelines(write_log(tmp_path / "l.jsonl", events)), lemon_threshold=2)
    (bad,) = report.total.nodes
    assert (bad.node, bad.failures, bad.lemon) == ("bad", 3, True)
    assert bad.reused == 2  # attempts 2 and 3 still ran on it after failure 1 named it
    assert report.total.by_category[0].failures == 3


def test_truncated_last_line_and_unknown_events_are_skipped(tmp_path):
    lines = [json.dumps(e) for e in hand_log()]
    lines.insert(3, json.dumps(ev("gpu_health_probe", 150, ok=True)))  # a future event type
    text = "\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2]  # crash mid-write
    path = tmp_path / "t.jsonl"
    path.write_text(text, encoding="utf-8")
    warnings: list[str] = []
    events = read_audit(path, warnings)
    assert len(events) == len(hand_log()) - 1
    assert any("unknown event type 'gpu_health_probe'" in w for w in warnings)
    assert any("truncated" in w and f"{path}:{len(lines)}" in w for w in warnings)
    tl = build_timeline(events, str(path))
    assert tl.status == "running"  # run_finished was the truncated line
    assert tl.wall_s == pytest.approx(6080)


def test_writer_appends_durably_after_a_truncated_line(tmp_path):
    path = tmp_path / "w.jsonl"
    with AuditWriter(path) as w:
        w.append(RunStarted(time=T0, job_id="j", nodes=["n1"], gpus_per_node=8))
        w.append(Progress(time=T0 + timedelta(seconds=5), step=1))
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('{"schema": "audit/v1", "type": "progr')  # crash mid-line
    with AuditWriter(path) as w:
        w.append(CheckpointSaved(time=T0 + timedelta(seconds=9), step=2, path="/c", seconds=1.5))
        w.append(FailureDetected(time=T0 + timedelta(seconds=10), how="hang", last_progress_time=T0))
    warnings: list[str] = []
    events = read_audit(path, warnings)
    assert [e.type for e in events] == ["run_started", "progress", "checkpoint_saved", "failure_detected"]
    assert len(warnings) == 1
    first = json.loads(path.read_text().splitlines()[0])
    assert first["schema"] == "audit/v1" and first["type"] == "run_started"
    assert first["time"].endswith("Z") or first["time"].endswith("+00:00")


def test_events_need_timezone_aware_times():
    with pytest.raises(ValueError):
        Progress(time=datetime(2026, 1, 1), step=1)


def test_directory_of_logs_and_several_runs_per_file(tmp_path):
    write_log(tmp_path / "a.jsonl", hand_log() + hand_log())
    (tmp_path / "sub").mkdir()
    write_log(tmp_path / "sub" / "b.jsonl", hand_log())
    tls = load_timelines(tmp_path)
    assert len(tls) == 3
    assert len(split_runs(read_audit(tmp_path / "a.jsonl"))) == 2
    report = build_report(tls)
    assert report.total.failures == 6
    assert report.total.ettr == pytest.approx(4000 / 6100)  # same run three times
    assert report.to_json_dict()["schema"] == "goodput/v1"


def test_rf_estimate_from_logs(tmp_path):
    tl = load_timelines(write_log(tmp_path / "a.jsonl", hand_log()))[0]
    est = estimate_rf([tl])
    node_days = (2850 * 4 + 2650 * 4) / 86400  # attempts' running time x their nodes
    assert est.failures == 1  # hardware + infra only; the user-code failure does not scale with nodes
    assert est.rf_per_1000_node_days == pytest.approx(1000 / node_days)
    assert est.low < est.rf_per_1000_node_days < est.high
    assert estimate_rf([tl], (Category.HARDWARE, Category.USER_CODE)).failures == 2


def test_rollback_discards_work_across_attempts(tmp_path):
    """Resuming from an older checkpoint loses work of two attempts, charged to the last failure."""
    events = [
        ev("run_started", 0, job_id="rb", nodes=["n1"], gpus_per_node=8),
        ev("attempt_started", 0, attempt=1, nodes=["n1"]),
        ev("progress", 0, step=0),
        ev("checkpoint_saved", 1000, step=100),
        ev("failure_detected", 1500, how="exit"),
        ev("decision", 1500, action="restart"),
        ev("attempt_started", 1500, attempt=2, nodes=["n1"]),  # resumes from newest: 100
        ev("progress", 1600, step=100),
        ev("checkpoint_saved", 2600, step=200),
        ev("failure_detected", 2700, how="exit"),
        ev("diagnosis", 2700, category="user_code", subtype="nan_loss", action="rollback_and_restart"),
        ev("decision", 2700, action="rollback_and_restart"),
        ev("attempt_started", 2700, attempt=3, nodes=["n1"], resume_step=100),
        ev("progress", 2800, step=100),
        ev("progress", 3800, step=200),
        ev("attempt_finished", 3800, status="succeeded", exit_code=0),
        ev("run_finished", 3800, status="succeeded"),
    ]
    tl = load_timelines(write_log(tmp_path / "r.jsonl", events))[0]
    f1, f2 = tl.failures
    assert f1.recompute_s == pytest.approx(500)  # 1000-1500 beyond step 100
    assert f2.recompute_s == pytest.approx(1100)  # 1600-2600 (steps 100-200) and 2600-2700
    assert tl.totals()[Phase.PRODUCTIVE] == pytest.approx(1000 + 1000)
