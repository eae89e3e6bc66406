"""`diagnoser run -- srun ...` inside an sbatch script on a real loopback Slurm cluster: srun is recognised,
`--label` splits the tasks' output into per-rank files, and the failing task is the culprit."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster, slurm_cluster_fixture

from diagnoser.act.events import read_audit

pytestmark = pytest.mark.slow
cluster = slurm_cluster_fixture()
ROOT = Path(__file__).resolve().parents[1]
TASK = ("import os, time; r = int(os.environ['SLURM_PROCID']); print('step 1', flush=True); time.sleep(0.5); "
        "batch = {'input_ids': 1}; batch['labels'] if r == 1 else None; print('done', flush=True)")


def test_srun_in_an_sbatch_script_is_supervised_per_rank(cluster: SlurmCluster, tmp_path: Path) -> None:
    cluster.cancel_all()
    cluster.resume_all()
    run_dir = tmp_path / "run"
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH -N1\n#SBATCH -n2\n"
                      f"export PYTHONPATH={ROOT}\n"
                      f"{sys.executable} -m diagnoser.act.cli run --json --run-dir {run_dir} --kill-grace 2s "
                      f"--startup-timeout 60s -- srun -n 2 {sys.executable} -c \"{TASK}\" > {tmp_path / 'out.json'}\n"
                      "exit $?\n")
    script.chmod(0o755)
    job = cluster.sbatch("-o", str(tmp_path / "slurm-%j.out"), str(script))
    audit = run_dir / "audit.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if audit.exists() and any(e.type == "run_finished" for e in read_audit(audit)):
            break
        time.sleep(0.5)
    out = (tmp_path / "out.json").read_text() if (tmp_path / "out.json").exists() else ""
    slurm_out = "".join(p.read_text() for p in tmp_path.glob("slurm-*.out"))
    assert out.strip(), f"job {job}: {slurm_out[-2000:]}"
    assert json.loads(out)["status"] == "stopped", slurm_out[-2000:]  # a KeyError: user code, never re-run
    attempt = run_dir / "attempt-001"
    record = json.loads((attempt / "launcher.json").read_text())
    assert record["command"][:2] == ["srun", "--label"]
    logs = attempt / "logs"
    assert "KeyError" in (logs / "rank1.log").read_text() and "done" in (logs / "rank0.log").read_text()
    assert "KeyError" not in (logs / "rank0.log").read_text()
    diagnosis = json.loads((attempt / "diagnosis.json").read_text())
    assert (diagnosis["category"], diagnosis["culprit"]["ranks"]) == ("user_code", [1])
    assert os.path.exists(logs / "launcher-exit.log")
