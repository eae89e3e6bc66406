"""Triage through the HTTP service vs the CLI, side by side in one run: latency, throughput, memory.

For a small job and a 1 GB job (generated with synth_job.py into --dir), with 1, 4 and 8 concurrent
clients, each client sending requests one after the other:
- service: `POST /v1/triage` (paths on the server) to one `diagnoser serve` on loopback (uvicorn, --workers
  triage processes), plus `POST /v1/triage/upload`: the small job as a .tar.gz, the 1 GB job as its files
  (one client);
- CLI: the same number of `diagnoser triage --json PATH` processes, as many at once as there are clients.
Reported per row: p50 / p95 latency, requests per second, and the peak PSS of the whole process tree
(the server with its workers; the CLI processes with theirs), and the ratios service / CLI.

    python bench/serve_bench.py [--big 1G] [--small 8M] [--workers 2] [--json]
    python bench/serve_bench.py --ledger-cost [--small 8M] [--clients 1,8]

`--ledger-cost` measures what the job ledger (one JSON record per triage in `--jobs-dir`, written when the
job is accepted and again when it ends) costs a synchronous triage: the small job through two servers side
by side, one with the ledger and one whose jobs directory cannot be created (memory only), requests
alternating between them so both see the same machine load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))
from serve_support import Server, tgz  # noqa: E402
from synth_job import generate, human  # noqa: E402

TOKEN = "bench-token"


class PeakPSS:
    """Samples the summed PSS of a process tree (or of every process `pids()` names) every 0.1 s."""

    def __init__(self, pids) -> None:
        self.pids, self.peak = pids, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for pid in self.pids():
                try:
                    p = psutil.Process(pid)
                    for q in [p, *p.children(recursive=True)]:
                        total += q.memory_full_info().pss
                except psutil.Error:
                    continue
            self.peak = max(self.peak, total)
            self._stop.wait(0.1)

    def __enter__(self) -> PeakPSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def job(directory: Path, size: int, nodes: int) -> Path:
    expected = directory / "expected.json"
    if expected.is_file() and abs(json.loads(expected.read_text())["bytes"] - size) < size * 0.05:
        return directory
    if directory.exists():
        subprocess.run(["rm", "-rf", str(directory)], check=True)
    directory.mkdir(parents=True)
    generate(directory, nodes, size, "xid79")
    return directory


def drive(clients: int, requests: int, one) -> tuple[list[float], float]:
    """`requests` calls of `one()` by `clients` concurrent clients; (latencies, wall seconds)."""
    per = [requests // clients + (1 if i < requests % clients else 0) for i in range(clients)]

    def client(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t = time.perf_counter()
            one()
            out.append(time.perf_counter() - t)
        return out

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        lat = [x for part in pool.map(client, per) for x in part]
    return lat, time.perf_counter() - start


def row(lat: list[float], wall: float, peak: int) -> dict:
    lat = sorted(lat)
    p95 = lat[min(len(lat) - 1, round(0.95 * (len(lat) - 1)))]
    return {"n": len(lat), "p50_s": round(statistics.median(lat), 3), "p95_s": round(p95, 3),
            "rps": round(len(lat) / wall, 2), "peak_pss_MB": round(peak / 1e6, 1)}


def service_call(http: httpx.Client, kind: str, path: Path, archive: bytes | None, category: str):
    def one() -> None:
        if kind == "path":
            r = http.post("/v1/triage", json={"paths": [str(path)]})
        elif archive is not None:
            r = http.post("/v1/triage/upload", files=[("files", ("job.tgz", archive))])
        else:  # every file, streamed from disk
            handles = [open(p, "rb") for p in sorted(path.rglob("*.log"))]  # noqa: SIM115
            try:
                r = http.post("/v1/triage/upload",
                              files=[("files", (str(Path(h.name).relative_to(path)), h)) for h in handles])
            finally:
                for h in handles:
                    h.close()
        r.raise_for_status()
        assert r.json()["category"] == category, r.json()
    return one


def cli_row(env: dict[str, str], path: Path, category: str, clients: int, requests: int) -> dict:
    live: set[int] = set()

    def one() -> None:
        p = subprocess.Popen([sys.executable, "-m", "diagnoser.cli", "triage", "--json", str(path)],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        live.add(p.pid)
        out, _ = p.communicate()
        live.discard(p.pid)
        assert json.loads(out)["category"] == category

    with PeakPSS(lambda: list(live)) as mem:
        lat, wall = drive(clients, requests, one)
    return row(lat, wall, mem.peak)


def ledger_cost(args: argparse.Namespace, env: dict[str, str], clients: list[int]) -> None:
    path = job(args.dir / "small", human(args.small), 2)
    category = json.loads((path / "expected.json").read_text())["category"]
    blocker = args.dir / "no-ledger"  # a file where the jobs directory should be: the ledger turns itself off
    blocker.write_text("")
    servers = {"ledger": Server("--root", str(args.dir), "--workers", str(args.workers), "--queue", "64",
                                env={**env, "DIAGNOSER_SERVE__TOKEN": TOKEN}),
               "memory only": Server("--root", str(args.dir), "--workers", str(args.workers), "--queue", "64",
                                     env={**env, "DIAGNOSER_SERVE__TOKEN": TOKEN,
                                          "DIAGNOSER_SERVE__JOBS_DIR": str(blocker / "jobs")})}
    rows = []
    try:
        calls = {k: service_call(srv.client(TOKEN, timeout=600), "path", path, None, category)
                 for k, srv in servers.items()}
        for one in calls.values():
            one()  # warm
        for c in clients:
            n = max(6 * c, 48)
            lat: dict[str, list[float]] = {k: [] for k in calls}
            wall = dict.fromkeys(calls, 0.0)
            for _ in range(4):  # alternate in rounds: drift in machine load hits both
                for k, one in calls.items():
                    part, w = drive(c, n // 4, one)
                    lat[k] += part
                    wall[k] += w
            for k in calls:
                rows.append({"ledger": k, "clients": c, **row(lat[k], wall[k], 0)})
    finally:
        for srv in servers.values():
            srv.stop()
    base = {r["clients"]: r for r in rows if r["ledger"] == "memory only"}
    print(f"small job ({args.small}) via POST /v1/triage, --workers {args.workers}, {os.cpu_count()} CPUs\n")
    print("| jobs | clients | requests | p50 s | p95 s | req/s | p50 / memory only | req/s / memory only |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        b = base[r["clients"]]
        print(f"| {r['ledger']} | {r['clients']} | {r['n']} | {r['p50_s']} | {r['p95_s']} | {r['rps']} | "
              f"{r['p50_s'] / b['p50_s']:.2f} | {r['rps'] / b['rps']:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/diagnoser-serve-bench"))
    ap.add_argument("--small", default="8M")
    ap.add_argument("--big", default="1G")
    ap.add_argument("--workers", type=int, default=2, help="the service's triage processes")
    ap.add_argument("--clients", default="1,4,8")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--ledger-cost", action="store_true", help="the job ledger's cost per triage (see above)")
    args = ap.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    if args.ledger_cost:
        args.dir.mkdir(parents=True, exist_ok=True)
        ledger_cost(args, {**os.environ, "PYTHONPATH": str(ROOT), "DIAGNOSER_STORE": str(args.dir / "store"),
                           "DIAGNOSER_LLM_BASE_URL": ""}, clients)
        return
    small, big = f"small {args.small}", f"big {args.big}"  # the rows' labels
    jobs = {small: job(args.dir / "small", human(args.small), 2), big: job(args.dir / "big", human(args.big), 16)}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DIAGNOSER_STORE": str(args.dir / "store"),
           "DIAGNOSER_LLM_BASE_URL": ""}
    server = Server("--root", str(args.dir), "--workers", str(args.workers), "--queue", "64",
                    env={**env, "DIAGNOSER_SERVE__TOKEN": TOKEN})
    results = []
    try:
        http = server.client(TOKEN, timeout=1800)
        small_tgz = tgz(jobs[small])
        for name, path in jobs.items():
            category = json.loads((path / "expected.json").read_text())["category"]
            for c in clients:
                n = max(3 * c, 24) if name == small else max(c, 3)
                # uploads: the small job as one .tar.gz at every concurrency; the 1 GB job as its 144 files, one client
                for kind in ["path", "upload"] if name == small or c == 1 else ["path"]:
                    one = service_call(http, kind, path, small_tgz if name == small else None, category)
                    one()  # warm: the workers' first triage of this job (page cache, imports)
                    with PeakPSS(lambda: [server.proc.pid]) as mem:
                        lat, wall = drive(c, n, one)
                    results.append({"job": name, "via": f"service/{kind}", "clients": c, **row(lat, wall, mem.peak)})
                    print(json.dumps(results[-1]), file=sys.stderr)
                results.append({"job": name, "via": "cli", "clients": c, **cli_row(env, path, category, c, n)})
                print(json.dumps(results[-1]), file=sys.stderr)
    finally:
        server.stop()
    cli_of = {(r["job"], r["clients"]): r for r in results if r["via"] == "cli"}
    for r in results:
        base = cli_of[(r["job"], r["clients"])]
        r["p50_vs_cli"] = round(r["p50_s"] / base["p50_s"], 2)
        r["rps_vs_cli"] = round(r["rps"] / base["rps"], 2)
    if args.json:
        print(json.dumps({"workers": args.workers, "cpus": os.cpu_count(), "rows": results}, indent=2))
        return
    print(f"service --workers {args.workers}, {os.cpu_count()} CPUs; small = {args.small}, big = {args.big}\n")
    print("| job | via | clients | requests | p50 s | p95 s | req/s | peak PSS MB | p50 / CLI | req/s / CLI |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['job']} | {r['via']} | {r['clients']} | {r['n']} | {r['p50_s']} | {r['p95_s']} | {r['rps']} | "
              f"{r['peak_pss_MB']} | {r['p50_vs_cli']} | {r['rps_vs_cli']} |")


if __name__ == "__main__":
    main()
