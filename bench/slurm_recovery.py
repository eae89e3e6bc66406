"""Recovery through a real Slurm cluster on loopback, and diagnoser's collection overhead per job.

    python bench/slurm_recovery.py [--trials 5] [--out bench/out]

Starts its own cluster (tests/slurm_cluster.py: munged, slurmctld, slurmd n1..n4; EpilogSlurmctld
set to `diagnoser slurm-hook --detach` for opted-in jobs). Measured:

1. recovery: a task dies; the time from its death (the task writes the time, then exits 1) to the
   requeued job running again (the next run's first line writes the time). Split, for the
   controller (`SlurmExecutor`), into detection (-> failure_detected), diagnosis (-> decision:
   collection + triage + policy) and requeue -> running. Cases:
     restart   a transient stale file handle (retry_after_backoff with a 0 s backoff)
     drain     Xid 79 on the node of rank 1 (drain_and_restart: drain, exclude, requeue)
     hook      the same transient, through the epilog hook instead of a watching controller
   at the executor's poll interval of 1.0 s (default) and 0.3 s.
2. collection: `collect_job` on finished jobs (record, completion log, node records, per-task
   files, kernel logs from a log dir or through `srun dmesg`): seconds per job; and the
   controller's Slurm calls per minute while a job runs.
Writes <out>/slurm_recovery.json. Never part of the test run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from slurm_cluster import SlurmCluster  # noqa: E402

from diagnoser.act.config import RunConfig  # noqa: E402
from diagnoser.act.controller import Controller  # noqa: E402
from diagnoser.act.events import read_audit  # noqa: E402
from diagnoser.act.policy import Backoff, Policy  # noqa: E402
from diagnoser.slurm.collect import CollectOptions, collect_job  # noqa: E402
from diagnoser.slurm.commands import SlurmCLI  # noqa: E402
from diagnoser.slurm.drain import DrainGuard  # noqa: E402
from diagnoser.slurm.executor import SlurmExecutor  # noqa: E402
from diagnoser.slurm.nodelogs import KernelSource  # noqa: E402

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus."
EPILOG = """#!/bin/sh
export PATH=/usr/local/bin:/usr/bin:/bin SLURM_CONF={root}/etc/slurm.conf
exec {python} -m diagnoser.slurm.epilog --log {root}/hook/hook.log -- --state-dir {root}/hook \\
    --config {root}/etc/diagnoser.yaml --kernel-log-dir '{root}/kernel/{{node}}' --ops-log {root}/ops.jsonl
"""


def _script(d: Path, case: str) -> Path:
    """Run 1 fails (the failing task writes `fail <time>`); run 2 writes `start <time>` first."""
    marker, times = d / "failed-once", d / "times.txt"
    if case == "drain":
        fail = ("srun bash -c 'if [ \"$SLURM_PROCID\" = 1 ]; then echo \"fail $(date +%s.%N) $SLURMD_NODENAME\" "
                f">> {times}; echo \"rank 1: CUDA error: unspecified launch failure\" >&2; exit 1; fi; sleep 0.2'")
        nodes = "#SBATCH -N2\n"
    else:
        fail = (f"srun bash -c 'echo \"fail $(date +%s.%N)\" >> {times}; "
                "echo \"OSError: [Errno 116] Stale file handle: /nfs/data\" >&2; exit 1'")
        nodes = "#SBATCH -N1\n"
    body = (f"#!/bin/bash\n{nodes}if [ -e {marker} ]; then echo \"start $(date +%s.%N)\" >> {times}; "
            f"echo step 1; exit 0; fi\ntouch {marker}\n{fail}\nexit $?\n")
    path = d / "job.sbatch"
    path.write_text(body)
    path.chmod(0o755)
    return path


def _times(d: Path) -> tuple[float, float, str]:
    fail = start = 0.0
    node = ""
    for line in (d / "times.txt").read_text().splitlines():
        parts = line.split()
        if parts[0] == "fail":
            fail = float(parts[1])
            node = parts[2] if len(parts) > 2 else ""
        elif parts[0] == "start":
            start = float(parts[1])
    return fail, start, node


def controller_trial(c: SlurmCluster, cli: SlurmCLI, d: Path, case: str, poll_s: float) -> dict:
    script = _script(d, case)
    run_dir = d / "run"
    policy = Policy(require_approval=frozenset(), backoff=Backoff(base_s=0.0, jitter=0.0))
    cfg = RunConfig(run_dir=run_dir, collect_stacks=False, failure_grace_s=5, poll_s=0.2, hang_timeout_s=120,
                    startup_timeout_s=120, progress_every_s=0, policy=policy)
    cli = SlurmCLI(env=cli.env)  # its own call counter
    ex = SlurmExecutor(run_dir, cli, KernelSource(log_dir=str(c.kernel_dir / "{node}")),
                       guard=DrainGuard(4, 600), ops_log=d / "ops.jsonl", poll_s=poll_s)
    if case == "drain":  # the job is pinned to n[1-2]: rank 1 runs on n2, whose kernel log has the Xid
        c.inject_kernel_line("n2", f"[{time.strftime('%a %b %e %H:%M:%S %Y')}] {XID}")
    ctl = Controller(cfg, ["sbatch", "-w", "n[1-2]", str(script)] if case == "drain" else ["sbatch", str(script)],
                     executor=ex)
    timer = threading.Timer(90, ctl.request_stop, args=("bench time limit",))
    timer.start()
    t0 = time.monotonic()
    try:
        result = ctl.run()
    finally:
        timer.cancel()
    wall = time.monotonic() - t0
    events = read_audit(result.audit)
    fail, start, _ = _times(d)
    detected = next(e.time.timestamp() for e in events if e.type == "failure_detected")
    decided = next(e.time.timestamp() for e in events if e.type == "decision")
    diag = next(e for e in events if e.type == "diagnosis")
    calls = ex.cli.calls
    return {"case": case, "poll_s": poll_s, "status": result.status, "recovery_s": round(start - fail, 3),
            "detect_s": round(detected - fail, 3), "diagnose_s": round(decided - detected, 3),
            "triage_s": diag.seconds, "requeue_to_running_s": round(start - decided, 3), "subtype": diag.subtype,
            "slurm_calls": calls, "wall_s": round(wall, 2)}


def steady_calls(c: SlurmCluster, cli: SlurmCLI, d: Path, poll_s: float, seconds: int = 20) -> dict:
    """Slurm calls per minute while a healthy job runs under the controller (no failure)."""
    script = d / "steady.sbatch"
    script.write_text(f"#!/bin/bash\n#SBATCH -N1\nfor i in $(seq 1 {seconds}); do echo step $i; sleep 1; done\n")
    cli = SlurmCLI(env=cli.env)
    ex = SlurmExecutor(d / "run", cli, poll_s=poll_s)
    cfg = RunConfig(run_dir=d / "run", collect_stacks=False, poll_s=0.2, progress_every_s=0)
    t0 = time.monotonic()
    result = Controller(cfg, ["sbatch", str(script)], executor=ex).run()
    wall = time.monotonic() - t0
    return {"case": "steady", "poll_s": poll_s, "status": result.status, "wall_s": round(wall, 1),
            "slurm_calls": cli.calls, "slurm_calls_per_min": round(cli.calls / wall * 60, 1)}


def hook_trial(c: SlurmCluster, cli: SlurmCLI, d: Path) -> dict:
    script = _script(d, "restart")
    job = cli.sbatch(["--comment=diagnoser", "-o", str(d / "out-%j.txt"), "--open-mode=append", str(script)])
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        rec = cli.show_job(job)
        if rec is not None and rec.state == "COMPLETED":
            break
        time.sleep(0.3)
    fail, start, _ = _times(d)
    events = read_audit(c.root / "hook" / f"job-{job}" / "audit.jsonl")
    decided = next(e.time.timestamp() for e in events if e.type == "decision")
    return {"case": "hook", "status": rec.state if rec else "?", "recovery_s": round(start - fail, 3),
            "detect_and_diagnose_s": round(decided - fail, 3), "requeue_to_running_s": round(start - decided, 3)}


def collection_bench(c: SlurmCluster, cli: SlurmCLI, d: Path, n: int) -> list[dict]:
    for node in c.node_names:
        c.inject_kernel_line(node, "\n".join(f"[{time.strftime('%a %b %e %H:%M:%S %Y')}] kernel noise {i}"
                                             for i in range(2000)))
    script = d / "tasks.sbatch"
    script.write_text(f"#!/bin/bash\n#SBATCH -N4 -n8\nsrun --output={d}/task-%j-%t.out bash -c "
                      "'for i in $(seq 1 500); do echo \"rank $SLURM_PROCID step $i loss 1.0\"; done; exit 1'\n"
                      "exit $?\n")
    job = cli.sbatch(["-o", str(d / "slurm-%j.out"), str(script)])
    cli.wait_job(job, "ended", 60)
    rows = []
    for label, kernel in (("log dir", KernelSource(log_dir=str(c.kernel_dir / "{node}"))),
                          ("srun dmesg", KernelSource(via_srun=True)), ("no kernel", KernelSource())):
        secs = []
        files = 0
        for i in range(n if label != "srun dmesg" else max(3, n // 4)):
            got = collect_job(cli, job, d / f"col-{label.replace(' ', '')}-{i}",
                              CollectOptions(kernel=kernel, task_output=(f"{d}/task-%j-%t.out",)))
            secs.append(got.seconds)
            files = len(got.files)
        rows.append({"kernel": label, "nodes": 4, "tasks": 8, "files": files, "runs": len(secs),
                     "mean_s": round(statistics.mean(secs), 3), "max_s": round(max(secs), 3)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="slurm-bench-") as tmp:
        root = Path(tmp) / "cluster"
        (root / "etc").mkdir(parents=True)
        epilog = root / "etc" / "epilog.sh"
        epilog.write_text(EPILOG.format(root=root, python=sys.executable))
        epilog.chmod(0o755)
        (root / "etc" / "diagnoser.yaml").write_text("policy:\n  backoff: {base_s: 0, jitter: 0}\n")
        c = SlurmCluster(root, epilog_slurmctld=str(epilog))
        t0 = time.monotonic()
        c.start()
        bringup = time.monotonic() - t0
        cli = SlurmCLI(env={"SLURM_CONF": str(c.conf)})
        trials: list[dict] = []
        try:
            for poll in (1.0, 0.3):
                for case in ("restart", "drain"):
                    for i in range(args.trials):
                        c.resume_all()
                        for f in c.kernel_dir.glob("*/dmesg.log"):
                            f.unlink()
                        d = Path(tmp) / f"{case}-{poll}-{i}"
                        d.mkdir()
                        trials.append(controller_trial(c, cli, d, case, poll))
                        print(json.dumps(trials[-1]), flush=True)
            for poll in (1.0, 0.3):
                d = Path(tmp) / f"steady-{poll}"
                d.mkdir()
                trials.append(steady_calls(c, cli, d, poll))
                print(json.dumps(trials[-1]), flush=True)
            for i in range(args.trials):
                d = Path(tmp) / f"hook-{i}"
                d.mkdir()
                trials.append(hook_trial(c, cli, d))
                print(json.dumps(trials[-1]), flush=True)
            c.resume_all()
            for f in c.kernel_dir.glob("*/dmesg.log"):
                f.unlink()
            (Path(tmp) / "collect").mkdir()
            collection = collection_bench(c, cli, Path(tmp) / "collect", 20)
        finally:
            t1 = time.monotonic()
            c.stop()
            teardown = time.monotonic() - t1
    summary = []
    for key in sorted({(t["case"], t.get("poll_s")) for t in trials}, key=str):
        rows = [t for t in trials if (t["case"], t.get("poll_s")) == key]
        if key[0] == "steady":
            summary += [{k: t[k] for k in ("case", "poll_s", "wall_s", "slurm_calls_per_min")} for t in rows]
            continue
        rec = [t["recovery_s"] for t in rows]
        entry = {"case": key[0], "poll_s": key[1], "n": len(rows), "ok": sum(t["status"] in ("succeeded", "COMPLETED")
                                                                              for t in rows),
                 "recovery_median_s": round(statistics.median(rec), 2), "recovery_max_s": round(max(rec), 2)}
        for part in ("detect_s", "diagnose_s", "triage_s", "requeue_to_running_s", "detect_and_diagnose_s"):
            vals = [t[part] for t in rows if part in t]
            if vals:
                entry[part.removesuffix("_s") + "_median" + ("_s" if part.endswith("_s") else "")] = round(
                    statistics.median(vals), 2)
        summary.append(entry)
    out = {"bringup_s": round(bringup, 2), "teardown_s": round(teardown, 2), "summary": summary,
           "collection": collection, "trials": trials}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "slurm_recovery.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: out[k] for k in ("bringup_s", "teardown_s", "summary", "collection")}, indent=1))


if __name__ == "__main__":
    main()
