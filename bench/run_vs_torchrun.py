"""`diagnoser run` (its defaults) vs plain `torchrun --max-restarts=N` on one fixed fault schedule, side by side.

    python bench/run_vs_torchrun.py [--steps 36] [--step-time 0.3] [--out bench/out]

The job: tests/e2e/train.py, 2 ranks, gloo on CPU, a checkpoint every 5 steps. The fault
schedule (each fault fires once; the same for every runner):
    step  7  rank 0: OSError [Errno 116] Stale file handle reading a shard (transient, infra)
    step 14  rank 1: SIGKILL, nothing else (a bare kill: no traceback, no OOM, no scheduler)
    step 21  rank 0: NCCL "unhandled system error" (ncclSystemError; a transient socket failure)
    step 28  rank 1: hangs before the all-reduce; rank 0 waits in it
Baselines: `torchrun --max-restarts 10`; the job resumes from its newest checkpoint by itself
(`--auto-resume`); a hang ends only when the collective times out (`--pg-timeout`, 60 s here,
scaled down from NCCL's 600 s default), then torchrun restarts the workers. Two variants:
- `torchrun` as shipped (torch 2.13): its c10d rendezvous shares one TCPStore across restart rounds
  and the workers use it without a per-round prefix, so a restarted gloo worker can read its dead
  peer's address from the previous round, fail `connectFullMesh` ("Connection refused") and burn a
  restart, or wait for the store's 300 s timeout when the stale port answers (the 310 s gaps seen
  before this was understood);
- `torchrun, fresh store` with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, torch's own opt-out (a new
  store per round): the fair baseline.
diagnoser: `diagnoser run --hang-timeout 10s --kill-grace 5s -- torchrun --max-restarts 0 ...` with
no policy flags (default policy, budgets and backoff); the job resumes from `$DIAGNOSER_RESUME_FROM`.

Measured, identically for every runner from the trainer's own step log (rank 0 logs every step with
its time and attempt): wall time, ETTR = kept training time / wall time (a step's time counts once,
for its last execution), steps recomputed. Per failure: the time from the failure (the job's last
completed step) to the first step of the next attempt, split into detection (-> torchrun's
"failed (exitcode" line, or diagnoser's failure_detected), diagnosis (-> diagnoser's decision;
none for torchrun) and restart (-> first step of the next attempt); for torchrun also the restarts
burned on the way (attempts that never made a step). Writes <out>/run_vs_torchrun.{json,md}.
Never part of the test run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "tests" / "e2e" / "train.py"
FAULTS = {"FAULT_TRANSIENT": "0:7", "FAULT_KILL": "1:14", "FAULT_NCCL": "0:21", "FAULT_HANG": "1:28"}
FRESH_STORE = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def job_args(work: Path, steps: int, step_time: float) -> list[str]:
    return [str(TRAIN), "--steps", str(steps), "--ckpt-dir", str(work / "ck"), "--ckpt-every", "5",
            "--step-time", str(step_time), "--pg-timeout", "60"]


def run_timed(cmd: list[str], env: dict[str, str], log: Path, timeout: float) -> tuple[float, float, list]:
    """Run, timestamping every output line as it arrives; (start, end, [(t, line)])."""
    lines: list[tuple[float, str]] = []
    start = time.time()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace")

    def pump() -> None:
        assert proc.stdout is not None
        with open(log, "w") as fh:
            for line in proc.stdout:
                lines.append((time.time(), line.rstrip("\n")))
                fh.write(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    reader.join(10)
    return start, time.time(), lines


def step_log(work: Path) -> list[dict]:
    path = work / "steps.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def ettr_from_steps(steps: list[dict], wall: float) -> dict:
    """Kept training time / wall: each step's duration (time since the previous step of the same
    attempt; the median for an attempt's first step) counted once, for its last execution."""
    by_attempt: dict[str, list[dict]] = defaultdict(list)
    for s in steps:
        by_attempt[str(s["attempt"])].append(s)
    durations = []
    for runs in by_attempt.values():
        for prev, cur in zip(runs, runs[1:], strict=False):
            durations.append(cur["time"] - prev["time"])
    median = statistics.median(durations) if durations else 0.0
    last_exec: dict[int, float] = {}
    for runs in by_attempt.values():
        for i, s in enumerate(runs):
            last_exec[s["step"]] = runs[i]["time"] - runs[i - 1]["time"] if i else median
    executions = len(steps)
    return {"final_step": max((s["step"] for s in steps), default=0), "productive_s": round(sum(last_exec.values()), 2),
            "ettr": round(sum(last_exec.values()) / wall, 4) if wall else None,
            "steps_executed": executions, "steps_recomputed": executions - len(last_exec),
            "attempts_with_progress": len(by_attempt), "median_step_s": round(median, 3)}


def attempts_of(steps: list[dict]) -> list[tuple[str, float, float]]:
    """(attempt, first step time, last step time) in order."""
    out: dict[str, list[float]] = {}
    for s in steps:
        out.setdefault(str(s["attempt"]), []).append(s["time"])
    return [(a, ts[0], ts[-1]) for a, ts in out.items()]


def baseline(work: Path, steps: int, step_time: float, restarts: int, timeout: float, fresh_store: bool) -> dict:
    env = {**os.environ, **FAULTS, "FAULT_STATE_DIR": str(work / "state"), "TRAIN_STEPS_LOG": str(work / "steps.jsonl"),
           **(FRESH_STORE if fresh_store else {})}
    env.pop("DIAGNOSER_RESUME_FROM", None)
    cmd = ["torchrun", "--standalone", "--nproc-per-node", "2", "--max-restarts", str(restarts),
           *job_args(work, steps, step_time), "--auto-resume"]
    t0, t1, lines = run_timed(cmd, env, work / "torchrun.log", timeout)
    st = step_log(work)
    detected = [t for t, line in lines if "failed (exitcode" in line]
    failures = []
    spans = attempts_of(st)
    for (_, _, last), (_, nxt_first, _) in zip(spans, spans[1:], strict=False):
        det = next((t for t in detected if t > last), None)
        burned = sum(1 for t in detected if last < t < nxt_first) - 1
        failures.append({"detection_s": round(det - last, 2) if det else None, "diagnosis_s": 0.0,
                         "restart_s": round(nxt_first - det, 2) if det else None,
                         "total_s": round(nxt_first - last, 2), "restarts_burned": max(0, burned)})
    result = ettr_from_steps(st, t1 - t0)
    completed = result["final_step"] == steps
    mesh = sum(1 for _, line in lines if "connectFullMesh failed" in line)
    name = f"torchrun --max-restarts {restarts}" + (", fresh store" if fresh_store else "")
    return {"runner": name, "wall_s": round(t1 - t0, 2), **result, "completed": completed,
            "restarts_used": len(detected), "gloo_mesh_failures": mesh, "failures": failures}


def diagnoser(work: Path, steps: int, step_time: float, timeout: float) -> dict:
    env = {**os.environ, **FAULTS, "FAULT_STATE_DIR": str(work / "state"), "TRAIN_STEPS_LOG": str(work / "steps.jsonl")}
    cmd = [sys.executable, "-m", "diagnoser.act.cli", "run", "--json", "--run-dir", str(work / "run"),
           "--checkpoint-dir", str(work / "ck"), "--hang-timeout", "10s", "--kill-grace", "5s",
           "--", "torchrun", "--standalone", "--nproc-per-node", "2",
           "--max-restarts", "0", *job_args(work, steps, step_time)]
    t0, t1, lines = run_timed(cmd, env, work / "diagnoser.log", timeout)
    summary = json.loads(next((line for _, line in reversed(lines) if line.startswith("{")), "{}"))
    from diagnoser.act.events import read_audit

    events = read_audit(work / "run" / "audit.jsonl")
    st = step_log(work)
    spans = attempts_of(st)
    fails = [e for e in events if e.type == "failure_detected"]
    decisions = [e for e in events if e.type == "decision"]
    failures = []
    for i, ((_, _, last), (_, nxt_first, _)) in enumerate(zip(spans, spans[1:], strict=False)):
        if i >= len(fails) or i >= len(decisions):
            break
        det, dec = fails[i].time.timestamp(), decisions[i].time.timestamp()
        diag = next((e for e in events if e.type == "diagnosis" and e.attempt == fails[i].attempt), None)
        failures.append({"how": fails[i].how.value, "verdict": f"{diag.category.value}/{diag.subtype}" if diag else "",
                         "action": decisions[i].action.value, "detection_s": round(det - last, 2),
                         "diagnosis_s": round(dec - det, 2), "restart_s": round(nxt_first - dec, 2),
                         "total_s": round(nxt_first - last, 2)})
    result = ettr_from_steps(st, t1 - t0)
    return {"runner": "diagnoser run", "wall_s": round(t1 - t0, 2), **result,
            "completed": result["final_step"] == steps, "ettr_audit": summary.get("ettr"),
            "status": summary.get("status"), "failures": failures}


def markdown(results: list[dict], meta: dict) -> str:
    rows = [("completed", "completed"), ("wall time (s)", "wall_s"), ("ETTR (step log)", "ettr"),
            ("final step", "final_step"), ("steps executed", "steps_executed"),
            ("steps recomputed", "steps_recomputed"), ("attempts with progress", "attempts_with_progress"),
            ("torchrun restarts used", "restarts_used"), ("gloo connectFullMesh failures", "gloo_mesh_failures"),
            ("status", "status")]
    out = [f"# diagnoser run vs torchrun --max-restarts ({meta['date']})", "",
           f"Job: {meta['steps']} steps x {meta['step_time']} s, 2 ranks gloo/CPU, checkpoint every 5 steps; "
           f"faults: {meta['faults']}; machine load average at start {meta['load']}.", "",
           "| | " + " | ".join(r["runner"] for r in results) + " |", "|---|" + "---|" * len(results)]
    for label, key in rows:
        out.append(f"| {label} | " + " | ".join(str(r.get(key)) for r in results) + " |")
    out += ["", "Failure -> first step of the next attempt (s): detection + diagnosis + restart = total", ""]
    for r in results:
        out.append(f"**{r['runner']}**")
        out.append("")
        for i, f in enumerate(r["failures"], 1):
            what = f" ({f['how']} {f['verdict']} -> {f['action']})" if "how" in f else ""
            burned = f" ({f['restarts_burned']} restarts burned)" if f.get("restarts_burned") else ""
            out.append(f"- failure {i}{what}: {f['detection_s']} + {f['diagnosis_s']} + {f['restart_s']} "
                       f"= {f['total_s']}{burned}")
        out.append("")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=36)
    ap.add_argument("--step-time", type=float, default=0.3)
    ap.add_argument("--max-restarts", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    ap.add_argument("--only", choices=["torchrun", "torchrun-fresh", "diagnoser"], help="run one runner only")
    ap.add_argument("--keep", type=Path, help="keep the work directories here")
    args = ap.parse_args()
    meta = {"date": datetime.now().isoformat(timespec="seconds"), "steps": args.steps, "step_time": args.step_time,
            "faults": FAULTS, "load": round(os.getloadavg()[0], 2)}
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-run-") as tmp:
        for name, fn in (("torchrun", lambda w: baseline(w, args.steps, args.step_time, args.max_restarts,
                                                          args.timeout, False)),
                         ("torchrun-fresh", lambda w: baseline(w, args.steps, args.step_time, args.max_restarts,
                                                               args.timeout, True)),
                         ("diagnoser", lambda w: diagnoser(w, args.steps, args.step_time, args.timeout))):
            if args.only and name != args.only:
                continue
            work = (args.keep or Path(tmp)) / name
            work.mkdir(parents=True, exist_ok=True)
            print(f"running {name} ...", file=sys.stderr, flush=True)
            results.append(fn(work))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "run_vs_torchrun.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    md = markdown(results, meta)
    (args.out / "run_vs_torchrun.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
