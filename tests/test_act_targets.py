"""Action targets: culprits are exact nodes of this job, hostlists are counted expanded, and the
controller re-checks a decision's nodes before it drains or excludes."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from test_act_controller import Approve, Script, events, make, steps, verdict  # noqa: E402

from diagnoser.act.events import ActionFinished, DecisionMade  # noqa: E402
from diagnoser.act.policy import JobHistory, Policy, decide  # noqa: E402
from diagnoser.act.targets import check_targets, expand_nodes, job_targets  # noqa: E402
from diagnoser.models import Action as A  # noqa: E402
from diagnoser.models import Category  # noqa: E402

NOW = datetime(2026, 3, 1, tzinfo=UTC)
JOB = tuple(f"gpu-{i:03d}" for i in range(1, 101))


def test_hostlists_expand_and_count() -> None:
    assert len(expand_nodes(["gpu-[001-100],gpu-200"])) == 101
    assert expand_nodes(["n[1-2]", "n2", "n3"]) == ["n1", "n2", "n3"]
    assert len(expand_nodes(["x[1-100000][1-100000]"])) <= 100_001  # bounded, no product blow-up
    t = job_targets(["gpu-099", "gpu-200", "evil"], JOB)
    assert t.nodes == ("gpu-099",) and t.outside == ("gpu-200", "evil")
    assert "not node(s) of this job" in check_targets(["gpu-200"], JOB, 2)
    assert "more than the cap" in check_targets(["gpu-[001-003]"], JOB, 2)
    assert check_targets(["gpu-[001-002]"], JOB, 2) is None


def test_a_node_outside_the_job_is_never_a_target() -> None:
    v = verdict(Category.HARDWARE, "gpu_xid_79", A.DRAIN_AND_RESTART, nodes=("gpu-099",))
    d = decide(JobHistory("j", nodes=("n1", "n2")), v, Policy(), NOW)
    # no node action; the job keeps going (plain restart) and a human is told
    assert d.action is A.RESTART and d.notify and d.rule == "no_culprit" and d.nodes == ()
    assert "not a node of this job" in d.reason
    mixed = verdict(Category.HARDWARE, "ib", A.RESTART_EXCLUDING_NODES, nodes=("n2", "gpu-099"))
    d = decide(JobHistory("j", nodes=("n1", "n2")), mixed, Policy(), NOW)
    assert d.action is A.RESTART_EXCLUDING_NODES and d.nodes == ("n2",) and "gpu-099" in d.reason


def test_a_hostlist_culprit_is_counted_against_the_node_cap() -> None:
    v = verdict(Category.INFRA, "nccl_peer", A.RESTART_EXCLUDING_NODES, nodes=("gpu-[001-100],gpu-200",))
    for job_nodes in (JOB, None):
        d = decide(JobHistory("j", nodes=job_nodes), v, Policy(require_approval=frozenset()), NOW)
        assert d.action is A.RESTART and d.notify and d.rule == "node_cap" and "100" in d.reason and not d.nodes


def test_controller_does_not_drain_a_node_outside_the_job(tmp_path: Path) -> None:
    c, ex = make(tmp_path, [Script(steps(1, 2), exit_at=3, code=1), Script(steps(1, 2), exit_at=3)],
                 [verdict(Category.HARDWARE, "gpu_xid_79", A.DRAIN_AND_RESTART, nodes=("gpu-099",))],
                 approver=Approve(True))
    c.run()
    assert ex.drained == []
    d = events(c, DecisionMade)[0]
    assert d.nodes == [] and "not a node of this job" in d.reason


def test_a_decision_widened_in_the_audit_log_is_refused(tmp_path: Path) -> None:
    """A controller restarted on an audit log whose decision names other nodes re-checks them."""
    c, ex = make(tmp_path, [Script(steps(1, 2), exit_at=3, code=1)],
                 [verdict(Category.HARDWARE, "gpu_xid_79", A.DRAIN_AND_RESTART, nodes=("n2",))],
                 approver=Approve(True))
    orig = c._emit

    def tamper(ev):  # what a hand-edited or damaged audit line would say, written for real
        if isinstance(ev, DecisionMade) and ev.nodes:
            ev = ev.model_copy(update={"nodes": ["n[1-2]", "gpu-200"]})
        orig(ev)

    c._emit = tamper
    r = c.run()
    assert ex.drained == [] and r.status == "stopped"
    fin = events(c, ActionFinished)[0]
    assert not fin.ok and "not node(s) of this job" in fin.detail
    assert json.loads(c.layout.audit.read_text().splitlines()[-1])["type"] == "run_finished"
