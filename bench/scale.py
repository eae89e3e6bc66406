"""Speed and memory of `diagnoser triage` on generated jobs, side by side with grep.

The baseline is `grep -E -f <every runbook signature> -r <tree>`: the floor any triage pays to read
the bytes and test the same patterns. Both run in the same invocation of this script, grep first and
then triage on the same page cache, alternating when repeated, so machine noise hits both; figures
are reported as a ratio and as MB/s. Memory: peak PSS summed over the triage process tree (workers
included, sampled from /proc/<pid>/smaps_rollup), and the peak RSS of its largest process.

Shapes (files x size; each is one generated job, made once under --data):
  big    the --size/--nodes job (default 2G over 32 nodes: 256 rank logs of 8 MB)
  1k     1,000 rank logs x 1 MB
  10k    10,000 rank logs x 100 KB
  100k   100,000 rank logs x 10 KB (generating it takes minutes)
Every shape also has one small dmesg file per node (8 ranks a node).

    python bench/scale.py [--shapes 10k,100k] [--repeat 2] [--size 2G --nodes 32]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth_job import generate, human  # noqa: E402

from diagnoser.prefilter.runbooks import load_runbooks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def to_ere(pattern: str) -> str:
    """Python runbook regex -> POSIX ERE for GNU grep (same meaning for the runbook subset)."""
    caseless = pattern.startswith("(?i)")
    p = pattern[4:] if caseless else pattern
    p = re.sub(r"\(\?P<\w+>", "(", p).replace("(?:", "(")
    p = p.replace(r"\d", "[0-9]").replace(r"\s", "[[:space:]]").replace(r"\S", "[^[:space:]]")
    p = p.replace(r"\w", "[[:alnum:]_]").replace(r"\W", "[^[:alnum:]_]")
    if caseless:  # grep has no per-pattern -i: spell both cases outside bracket expressions
        out, in_class, escaped = [], False, False
        for ch in p:
            if escaped:
                out.append(ch)
                escaped = False
            elif ch == "\\":
                out.append(ch)
                escaped = True
            elif ch == "[":
                in_class = True
                out.append(ch)
            elif ch == "]":
                in_class = False
                out.append(ch)
            elif ch.isalpha() and not in_class:
                out.append(f"[{ch.lower()}{ch.upper()}]")
            else:
                out.append(ch)
        p = "".join(out)
    return p


def run_measured(cmd: list[str], memory: bool = True) -> tuple[float, int, int, int]:
    """(wall seconds, peak PSS of the process tree, peak RSS of its largest process, exit code).

    PSS splits pages shared by forked workers among them, so the tree's sum is the memory really
    used; summed RSS would count every shared page once per process.
    """
    start = time.perf_counter()
    proc = psutil.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak_pss = peak_rss = 0
    while proc.poll() is None:
        if memory:
            try:
                tree = [proc, *proc.children(recursive=True)]
                infos = [p.memory_full_info() for p in tree if p.is_running()]
                peak_pss = max(peak_pss, sum(i.pss for i in infos))
                peak_rss = max(peak_rss, max((i.rss for i in infos), default=0))
            except psutil.Error:
                pass
        time.sleep(0.05)
    return time.perf_counter() - start, peak_pss, peak_rss, proc.returncode


SHAPES = {"1k": (125, "1000M"), "10k": (1250, "1000M"), "100k": (12500, "1000M")}  # (nodes, total size)


def measure_shape(tree: Path, patterns: Path, repeat: int, workers: int | None) -> dict:
    """grep and triage on one generated job, `repeat` times each, alternating (grep first)."""
    expected = json.loads((tree / "expected.json").read_text())
    files = list(tree.rglob("*.log"))
    size = sum(p.stat().st_size for p in files)
    triage_cmd = [sys.executable, "-m", "diagnoser.cli", "triage", str(tree), "--json", "--no-progress"]
    if workers:
        triage_cmd += ["--workers", str(workers)]
    grep_cmd = ["grep", "-E", "-f", str(patterns), "-r", str(tree)]
    rows, loads = [], []
    for _ in range(repeat):
        loads.append(os.getloadavg()[0])
        g = run_measured(grep_cmd, memory=False)
        t = run_measured(triage_cmd)
        rows.append((g, t))
    out = subprocess.run(triage_cmd, capture_output=True, text=True, check=True)
    verdict = json.loads(out.stdout)
    best_g = min(r[0][0] for r in rows)
    best_t = min(r[1][0] for r in rows)
    return {
        "files": len(files), "bytes": size, "grep_s": round(best_g, 2), "triage_s": round(best_t, 2),
        "ratio_triage_over_grep": round(best_t / best_g, 2),
        "triage_MBps": round(size / best_t / 1e6, 1), "grep_MBps": round(size / best_g / 1e6, 1),
        "triage_peak_pss_MB": round(max(r[1][1] for r in rows) / 1e6, 1),
        "triage_peak_rss_one_process_MB": round(max(r[1][2] for r in rows) / 1e6, 1),
        "load_before_runs": [round(x, 1) for x in loads],
        "verdict_ok": verdict["category"] == expected["category"]
        and expected["culprit_node"] in verdict["culprit"]["nodes"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="big,1k,10k,100k", help="comma-separated subset of: big,1k,10k,100k")
    ap.add_argument("--size", default="2G", help="total size of the 'big' shape")
    ap.add_argument("--nodes", type=int, default=32, help="nodes (x 8 ranks) of the 'big' shape")
    ap.add_argument("--kind", default="xid79")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--data", type=Path, default=ROOT / "bench" / "data")
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args()
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = [s for s in shapes if s != "big" and s not in SHAPES]
    if unknown:
        ap.error(f"unknown shape(s) {', '.join(unknown)}: choose from big, {', '.join(SHAPES)}")
    patterns = args.data / "signatures.ere"
    args.data.mkdir(parents=True, exist_ok=True)
    patterns.write_text("\n".join(to_ere(s) for b in load_runbooks() for s in b.signatures) + "\n")
    results = {}
    for shape in shapes:
        nodes, size = (args.nodes, args.size) if shape == "big" else SHAPES[shape]
        tree = args.data / f"job-{size}-{nodes}-{args.kind}"
        if not (tree / "expected.json").exists():
            print(f"generating {shape}: {nodes * 8} rank logs, {size} in {tree} ...", file=sys.stderr)
            generate(tree, nodes, human(size), args.kind)
        results[shape] = measure_shape(tree, patterns, args.repeat, args.workers)
        print(json.dumps({shape: results[shape]}), file=sys.stderr)
    print("| shape | files | GB | grep s | triage s | ratio | peak PSS MB | verdict |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for shape, r in results.items():
        verdict = "ok" if r["verdict_ok"] else "WRONG"
        print(f"| {shape} | {r['files']:,} | {r['bytes'] / 1e9:.2f} | {r['grep_s']} | {r['triage_s']} | "
              f"{r['ratio_triage_over_grep']}x | {r['triage_peak_pss_MB']:.0f} | {verdict} |")
    (ROOT / "bench" / "out").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "out" / "scale.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
