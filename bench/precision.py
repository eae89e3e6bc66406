"""Localisation precision on generated jobs: every failure kind x scale x clock skew x truncation.

For each scenario the culprit rank and node must be named, and the category must be right (a
truncated culprit log that hides the error itself can only be found as the rank everyone waited
for: then `hang` with that rank is the right answer).

    python bench/precision.py [--scales 2,16,128] [--skew 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth_job import KINDS, generate  # noqa: E402

from diagnoser.triage import triage  # noqa: E402

# kinds whose only evidence is in the culprit rank's own log: truncation turns them into a hang
# (not desync: in DETAIL mode every rank reports the mismatch and names the odd one out)
OWN_LOG_ONLY = {"cuda_oom", "python_exception", "storage_eio", "nccl_ib_peer"}


def check(expected: dict, verdict, truncated: bool) -> tuple[bool, str]:
    category, rank, node = expected["category"], expected["culprit_rank"], expected["culprit_node"]
    if truncated and expected["kind"] in OWN_LOG_ONLY:
        category, node = "unknown", expected["culprit_node_of_rank"]
    ok_cat = verdict.category.value == category
    # the job's own code names its rank, never a node (the node did nothing wrong)
    ok_node = not verdict.culprit.nodes if category == "user_code" else node in verdict.culprit.nodes
    # the peer kind names the peer node; ranks are then the reporters' victims, not asked for
    ok_rank = rank is None or expected["kind"] == "nccl_ib_peer" and not truncated or rank in verdict.culprit.ranks
    why = "" if ok_cat and ok_node and ok_rank else (
        f"got {verdict.category.value}/{verdict.subtype} nodes={verdict.culprit.nodes} "
        f"ranks={verdict.culprit.ranks}; want {category} node={node} rank={rank}")
    return ok_cat and ok_node and ok_rank, why


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scales", default="2,16,128", help="node counts (8 ranks each)")
    ap.add_argument("--skew", type=float, default=3.0, help="max clock skew between nodes, seconds")
    ap.add_argument("--kinds", default=",".join(KINDS), help="failure kinds to generate")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out" / "precision.json")
    args = ap.parse_args()
    rows, failures = [], []
    started = time.perf_counter()
    for nodes in (int(x) for x in args.scales.split(",")):
        for kind in args.kinds.split(","):
            for skew in (0.0, args.skew):
                for truncate in (False, True):
                    if kind == "hang" and truncate:
                        continue
                    with tempfile.TemporaryDirectory() as tmp:
                        expected = generate(Path(tmp), nodes, nodes * 8 * 40_000, kind, seed=nodes + len(kind),
                                            skew=skew, truncate=truncate)
                        expected["culprit_node_of_rank"] = (f"gpu-{expected['culprit_rank'] // 8 + 1:03d}"
                                                            if expected["culprit_rank"] is not None
                                                            else expected["culprit_node"])
                        verdict = triage([tmp])
                    ok, why = check(expected, verdict, truncate)
                    rows.append({"nodes": nodes, "kind": kind, "skew": skew, "truncated": truncate, "ok": ok})
                    if not ok:
                        failures.append(f"{nodes} nodes {kind} skew={skew} truncated={truncate}: {why}")
    passed = sum(r["ok"] for r in rows)
    print(f"{passed}/{len(rows)} scenarios localised correctly ({time.perf_counter() - started:.0f} s)")
    for f in failures:
        print("  MISS", f)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"passed": passed, "total": len(rows), "failures": failures, "rows": rows}))
    return 0 if not failures else 1


if __name__ == "__main__":
    raise SystemExit(main())
