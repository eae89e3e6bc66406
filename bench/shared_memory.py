"""Shared incident memory on a chromadb server vs the embedded store, measured in one run.

(a) accuracy, top-1 subtype on the synthetic incidents of retrieval_eval.py (55 close subtypes,
    `same` and `cross` phrasings, 3 seeds x 200 queries): chromadb's own nearest-neighbour query on
    the server (the hashing embedding every ledger record carries) against the host's local TF-IDF
    view (what `search` and triage use in server mode, the same index as the embedded store).
(b) speed at N distinct incidents: write rate (server ledger vs embedded store), a fresh host's
    first sync (fetch + fold + index of the whole ledger), and triage's retrieval call
    (`api.neighbours`) p50/p95 with the server vs the embedded store.

    python bench/shared_memory.py [--sizes 1000,5000] [--seeds 1,2,3]

Starts `chroma run` on a free loopback port; results in bench/out/shared_memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from retrieval_eval import _incident, _pct, _word, distinct_incidents, synthetic_set  # noqa: E402

from diagnoser.retrieve import api  # noqa: E402
from diagnoser.retrieve.remote import RemoteStore  # noqa: E402
from diagnoser.retrieve.server_config import MemoryServer  # noqa: E402
from diagnoser.retrieve.signature import signature_text  # noqa: E402
from diagnoser.retrieve.store import IncidentStore  # noqa: E402

OUT = ROOT / "bench" / "out"


def start_chroma(data: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).parent / "chroma"
    proc = subprocess.Popen([str(exe), "run", "--path", str(data), "--host", "127.0.0.1", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(url + "/api/v2/heartbeat", timeout=1).close()
            return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("chroma run did not start")


def accuracy(url: str, tmp: Path, seeds: list[int]) -> list[dict]:
    rows = []
    for mode in ("same", "cross"):
        hits = {"server vector (chromadb query)": 0, "local TF-IDF view": 0}
        total = 0
        for seed in seeds:
            server = MemoryServer(url, collection=f"acc-{mode}-{seed}")
            memory, queries = synthetic_set(seed, mode)
            with RemoteStore(server, tmp / f"acc-{mode}-{seed}") as st:
                st.add_many(i for i in (_incident(t, cat, sub, "escalate") for t, sub, cat in memory) if i)
                st.sync()
                collection = st._connect()
                for text, sub in queries:
                    sig = signature_text(text)
                    got = collection.query(query_embeddings=st.embedder.embed([sig]).tolist(), n_results=1,
                                           include=["metadatas"])
                    hits["server vector (chromadb query)"] += json.loads(got["metadatas"][0][0]["json"])[
                        "subtype"] == sub
                    hits["local TF-IDF view"] += st.search(text, k=1)[0][0].subtype == sub
                    total += 1
        for name, h in hits.items():
            rows.append({"set": f"synthetic-{mode}", "method": name, "hits": h, "n": total, "acc": round(h / total, 3)})
            print(f"  synthetic-{mode:5s} {name:32s} {h}/{total}", file=sys.stderr)
    return rows


def _probe(queries: list[str], env: dict[str, str]) -> tuple[float, float]:
    """api.neighbours p50/p95 (ms), in the process that runs it (as triage would)."""
    lat = []
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        api.neighbours(queries[0], k=5)  # first call: loads the view
        for q in queries:
            t = time.perf_counter()
            api.neighbours(q, k=5)
            lat.append((time.perf_counter() - t) * 1000)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        api._caches.clear()
    return _pct(lat, 50), _pct(lat, 95)


def speed(url: str, tmp: Path, sizes: list[int]) -> list[dict]:
    rows = []
    rng = random.Random(7)
    vocab = [_word(rng) for _ in range(5000)]
    for n in sizes:
        incidents = distinct_incidents(n, rng, vocab)
        queries = [i.signature for i in rng.sample(incidents, 50)]
        server = MemoryServer(url, collection=f"speed-{n}")
        t = time.perf_counter()
        with RemoteStore(server, tmp / f"writer-{n}") as st:
            st.add_many(incidents)
        server_write = n / (time.perf_counter() - t)
        t = time.perf_counter()
        with RemoteStore(server, tmp / f"fresh-{n}") as st:
            st.sync()
        first_sync = time.perf_counter() - t
        local = tmp / f"embedded-{n}"
        t = time.perf_counter()
        with IncidentStore.create(local, seed=False) as st:
            st.add_many(incidents)
        local_write = n / (time.perf_counter() - t)
        s50, s95 = _probe(queries, {"DIAGNOSER_STORE": str(tmp / f"fresh-{n}"), "DIAGNOSER_MEMORY__SERVER": url,
                                    "DIAGNOSER_MEMORY__COLLECTION": f"speed-{n}"})
        os.environ.pop("DIAGNOSER_MEMORY__SERVER", None)
        os.environ.pop("DIAGNOSER_MEMORY__COLLECTION", None)
        e50, e95 = _probe(queries, {"DIAGNOSER_STORE": str(local)})
        row = {"incidents": n, "server_writes_per_s": round(server_write), "embedded_writes_per_s": round(local_write),
               "first_sync_s": round(first_sync, 2), "neighbours_server_p50_ms": round(s50, 2),
               "neighbours_server_p95_ms": round(s95, 2), "neighbours_embedded_p50_ms": round(e50, 2),
               "neighbours_embedded_p95_ms": round(e95, 2)}
        rows.append(row)
        print(f"  {row}", file=sys.stderr)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000,5000")
    ap.add_argument("--seeds", default="1,2,3")
    args = ap.parse_args()
    for key in [k for k in os.environ if k.startswith("DIAGNOSER_")]:
        del os.environ[key]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        proc, url = start_chroma(tmp / "chroma")
        try:
            result = {"accuracy": accuracy(url, tmp, [int(s) for s in args.seeds.split(",")]),
                      "speed": speed(url, tmp, [int(s) for s in args.sizes.split(",")])}
        finally:
            proc.terminate()
            proc.wait(30)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "shared_memory.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
