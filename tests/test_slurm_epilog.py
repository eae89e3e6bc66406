"""The epilog pattern for real: slurmctld runs `diagnoser slurm-hook --detach` when a job ends
(EpilogSlurmctld), and the hook requeues an opted-in job that failed on a transient error."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster, slurm_cluster_fixture

from diagnoser.act.events import read_audit
from diagnoser.slurm.commands import SlurmCLI

pytestmark = pytest.mark.slow
EPILOG = """#!/bin/sh
# slurmctld runs this with a bare environment (no PATH) when any job ends; diagnoser.slurm.epilog
# starts the hook in a session of its own and returns at once (the job stays COMPLETING till then)
export PATH=/usr/local/bin:/usr/bin:/bin SLURM_CONF={root}/etc/slurm.conf
exec {python} -m diagnoser.slurm.epilog --log {root}/hook/hook.log -- --state-dir {root}/hook \\
    --config {root}/etc/diagnoser.yaml --kernel-log-dir '{root}/kernel/{node}' --ops-log {root}/ops.jsonl
"""
cluster = slurm_cluster_fixture(epilog_body=EPILOG)


def test_epilog_hook_requeues_a_transient_failure(cluster: SlurmCluster, tmp_path: Path) -> None:
    (cluster.root / "etc" / "diagnoser.yaml").write_text(
        "policy:\n  backoff: {base_s: 1, jitter: 0}\n  require_approval: []\n")
    cli = SlurmCLI(env={"SLURM_CONF": str(cluster.conf)})
    marker = tmp_path / "failed-once"
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\n"
                      f"if [ ! -e {marker} ]; then touch {marker}; "
                      "echo \"OSError: [Errno 116] Stale file handle: '/nfs/data'\" >&2; exit 1; fi\necho step 1\n")
    ignored = cli.sbatch(["-o", str(tmp_path / "other-%j.out"), "--wrap", "exit 1"])  # not opted in
    job = cli.sbatch(["--comment=diagnoser", "-o", str(tmp_path / "out-%j.txt"), "--open-mode=append",
                      str(script)])
    audit = cluster.root / "hook" / f"job-{job}" / "audit.jsonl"
    deadline = time.monotonic() + 60
    events: list = []
    while time.monotonic() < deadline:
        events = read_audit(audit) if audit.exists() else []
        if events and events[-1].type == "run_finished":
            break
        time.sleep(0.5)
    log = (cluster.root / "hook" / "hook.log")
    assert events and events[-1].type == "run_finished", log.read_text() if log.exists() else "no hook log"
    assert events[-1].status == "succeeded"
    assert [e.action.value for e in events if e.type == "decision"] == ["retry_after_backoff"]
    rec = cli.show_job(job)
    assert rec is not None and rec.state == "COMPLETED" and rec.restarts == 1
    assert not (cluster.root / "hook" / f"job-{ignored}").exists()
