"""Speed and memory of `diagnoser triage` on a generated job, side by side with grep.

The baseline is `grep -E -f <every runbook signature> -r <tree>`: the floor any triage pays to read
the bytes and test the same patterns. Both run in the same invocation of this script, alternating,
so machine noise hits both; figures are reported as a ratio and as MB/s. Memory: peak PSS summed
over the triage process tree (workers included), and the peak RSS of its largest process.

    python bench/scale.py --size 2G [--nodes 32] [--kind xid79] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="2G")
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--kind", default="xid79")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--data", type=Path, default=ROOT / "bench" / "data")
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args()
    tree = args.data / f"job-{args.size}-{args.nodes}-{args.kind}"
    if not (tree / "expected.json").exists():
        print(f"generating {args.size} in {tree} ...", file=sys.stderr)
        generate(tree, args.nodes, human(args.size), args.kind)
    expected = json.loads((tree / "expected.json").read_text())
    size = sum(p.stat().st_size for p in tree.rglob("*.log"))
    patterns = tree.parent / "signatures.ere"
    patterns.write_text("\n".join(to_ere(s) for b in load_runbooks() for s in b.signatures) + "\n")
    triage_cmd = [sys.executable, "-m", "diagnoser.cli", "triage", str(tree), "--json", "--no-progress"]
    if args.workers:
        triage_cmd += ["--workers", str(args.workers)]
    grep_cmd = ["grep", "-E", "-f", str(patterns), "-r", str(tree)]
    rows = []
    for _ in range(args.repeat):
        g = run_measured(grep_cmd, memory=False)
        t = run_measured(triage_cmd)
        rows.append((g, t))
    out = subprocess.run(triage_cmd, capture_output=True, text=True, check=True)
    verdict = json.loads(out.stdout)
    best_g = min(r[0][0] for r in rows)
    best_t = min(r[1][0] for r in rows)
    peak = max(r[1][1] for r in rows)
    peak_one = max(r[1][2] for r in rows)
    result = {
        "bytes": size, "files": expected["ranks"] + args.nodes, "grep_s": round(best_g, 2),
        "triage_s": round(best_t, 2), "ratio_triage_over_grep": round(best_t / best_g, 2),
        "triage_MBps": round(size / best_t / 1e6, 1), "grep_MBps": round(size / best_g / 1e6, 1),
        "triage_peak_pss_MB": round(peak / 1e6, 1), "triage_peak_rss_one_process_MB": round(peak_one / 1e6, 1),
        "verdict_ok": verdict["category"] == expected["category"]
        and expected["culprit_node"] in verdict["culprit"]["nodes"],
    }
    print(json.dumps(result, indent=2))
    (ROOT / "bench" / "out").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "out" / f"scale-{args.size}.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
