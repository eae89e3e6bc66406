"""The cluster-wide drain cap under concurrency, against a real loopback Slurm cluster: several
real processes drain at the same instant (a rack failure ending several jobs), sharing one lock."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster, slurm_cluster_fixture

from diagnoser.slurm.commands import SlurmCLI
from diagnoser.slurm.drain import DrainGuard, drain_nodes

pytestmark = pytest.mark.slow
cluster = slurm_cluster_fixture()

DRAINER = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from diagnoser.slurm.commands import SlurmCLI
    from diagnoser.slurm.drain import DrainGuard, drain_nodes
    node, go, ops = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    cli = SlurmCLI()
    while not go.exists():
        time.sleep(0.001)
    r = drain_nodes(cli, [node], f"diagnoser: gpu_xid_79 race-{node}", DrainGuard(max_nodes=2, window_s=600), ops)
    print(json.dumps({"node": node, "ok": r.ok, "drained": r.drained, "detail": r.detail}), flush=True)
""")


@pytest.fixture
def cli(cluster: SlurmCluster, monkeypatch) -> SlurmCLI:
    cluster.resume_all()
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    yield SlurmCLI(env={"SLURM_CONF": str(cluster.conf)})
    cluster.resume_all()


def test_concurrent_drains_never_exceed_the_cap(cli: SlurmCLI, cluster: SlurmCluster, tmp_path: Path,
                                                monkeypatch) -> None:
    script = tmp_path / "drainer.py"
    script.write_text(DRAINER)
    go = tmp_path / "go"
    ops = tmp_path / "ops.jsonl"  # the lock is drain.lock beside it: shared by all four
    env = {**cluster.env, "PYTHONPATH": ":".join(sys.path)}
    procs = [subprocess.Popen([sys.executable, str(script), n, str(go), str(ops)], env=env, stdout=subprocess.PIPE,
                              text=True) for n in cluster.node_names]
    time.sleep(2.0)  # all four are waiting at the barrier
    go.touch()
    results = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs]
    drained = [n.name for n in cli.show_nodes() if n.drained]
    assert len(drained) == 2, (drained, results)
    assert sum(r["ok"] for r in results) == 2
    assert all("drain cap" in r["detail"] for r in results if not r["ok"])
    assert (tmp_path / "drain.lock").exists()


def test_a_hostlist_is_counted_expanded_and_drained_all_or_nothing(cli: SlurmCLI, tmp_path: Path) -> None:
    guard = DrainGuard(max_nodes=2, window_s=600, lock=tmp_path / "drain.lock")
    wide = drain_nodes(cli, ["n[1-4]"], "diagnoser: gpu_xid_79 job9-a1", guard, tmp_path / "ops.jsonl")
    assert not wide.ok and "4 node(s)" in wide.detail
    assert not any(n.drained for n in cli.show_nodes())
    two = drain_nodes(cli, ["n[1-2]"], "diagnoser: gpu_xid_79 job9-a2", guard, tmp_path / "ops.jsonl")
    assert two.ok and two.drained == ["n1", "n2"]
