"""Accuracy of triage on labelled failure excerpts (default: ../shared/bench/*.jsonl).

Each item's `log` is written to a file named after its `log_kind` and triaged as a user would
(`diagnoser triage <dir> --json` through the library). Reports category accuracy, action-family
accuracy and the confusion matrices; writes bench/out/accuracy.json and
bench/out/confusion_category.json (the format the goodput simulator reads).

    python bench/accuracy.py [FILE.jsonl ...] [--show-misses]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

from diagnoser.triage import triage

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SETS = sorted((ROOT.parent / "shared" / "bench").glob("*.jsonl"))
CATEGORIES = ["hardware", "infra", "user_code", "unknown"]
EXPECTED_FAMILY = {
    "restart_same": "restart", "resume_from_checkpoint": "restart",
    "restart_excluding_node": "exclude_or_drain", "drain_node_and_restart": "exclude_or_drain",
    "retry_after_backoff": "retry", "abort_notify_user": "stop", "escalate_to_operator": "escalate",
}
OUR_FAMILY = {
    "restart": "restart", "rollback_and_restart": "restart",
    "restart_excluding_nodes": "exclude_or_drain", "drain_and_restart": "exclude_or_drain",
    "retry_after_backoff": "retry", "stop_and_notify": "stop", "escalate": "escalate",
}
FAMILIES = ["restart", "exclude_or_drain", "retry", "stop", "escalate"]
FILE_FOR_KIND = {"dmesg": "dmesg.log", "nccl": "nccl.log", "scheduler": "slurm-job.out"}


def load(paths: list[Path]) -> list[dict]:
    items = []
    for path in paths:
        items += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return items


def predict(item: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / FILE_FOR_KIND.get(item.get("log_kind", ""), "stderr.log")
        f.write_text(item["log"] + "\n")
        d = triage([tmp], workers=1)
    return d.to_json_dict()


def matrix(pairs: list[tuple[str, str]], labels: list[str]) -> list[list[int]]:
    counts = Counter(pairs)
    return [[counts[(t, p)] for p in labels] for t in labels]


def print_matrix(title: str, m: list[list[int]], labels: list[str]) -> None:
    width = max(len(x) for x in labels) + 2
    print(f"\n{title} (rows = truth, columns = predicted)")
    print(" " * width + "".join(x[:10].rjust(12) for x in labels))
    for label, row in zip(labels, m, strict=True):
        print(label.ljust(width) + "".join(str(v).rjust(12) for v in row))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sets", nargs="*", type=Path, default=DEFAULT_SETS)
    parser.add_argument("--show-misses", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args()
    items = load(args.sets)
    if not items:
        print("no labelled items found", file=sys.stderr)
        return 1
    cat_pairs, act_pairs, misses = [], [], []
    for item in items:
        verdict = predict(item)
        truth_family = EXPECTED_FAMILY[item["expected_action"]]
        got_family = OUR_FAMILY[verdict["action"]]
        cat_pairs.append((item["category"], verdict["category"]))
        act_pairs.append((truth_family, got_family))
        if item["category"] != verdict["category"] or truth_family != got_family:
            misses.append((item["id"], item["category"], truth_family, verdict["category"], got_family,
                           verdict["subtype"]))
    n = len(items)
    cat_acc = sum(t == p for t, p in cat_pairs) / n
    act_acc = sum(t == p for t, p in act_pairs) / n
    print(f"items: {n}   category accuracy: {cat_acc:.1%}   action-family accuracy: {act_acc:.1%}")
    cat_m = matrix(cat_pairs, CATEGORIES)
    act_m = matrix(act_pairs, FAMILIES)
    print_matrix("category", cat_m, CATEGORIES)
    print_matrix("action family", act_m, FAMILIES)
    if args.show_misses:
        print("\nmisses: id | truth category/family | predicted category/family (subtype)")
        for miss in misses:
            print(f"  {miss[0]} | {miss[1]}/{miss[2]} | {miss[3]}/{miss[4]} ({miss[5]})")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "accuracy.json").write_text(json.dumps({
        "items": n, "category_accuracy": cat_acc, "action_family_accuracy": act_acc,
        "category_matrix": {"labels": CATEGORIES, "matrix": cat_m},
        "action_matrix": {"labels": FAMILIES, "matrix": act_m},
        "misses": misses}, indent=2))
    (args.out / "confusion_category.json").write_text(json.dumps({"labels": CATEGORIES, "matrix": cat_m}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
