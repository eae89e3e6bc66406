"""Held-out accuracy: the development set and the real-incident corpus, leave-one-source-repo-out.

The corpus (`diagnoser/data/corpus/*.jsonl`) is the seed incident memory. Scoring it with itself in
memory would only measure recall of what was seen, so each case is triaged with a memory built from
the corpus *minus every case of its own source repository* (leave-one-repo-out, LORO), and without
the rules written from that repository's incidents (a rule's `derived_from`). Rules taken from
published vocabularies (runbooks, the vendor catalogs in `diagnoser/data/catalog/`) stay. The
development set (`../shared/bench/*.jsonl`) is triaged with the whole corpus in memory (it shares no
thread with the corpus).

Reported side by side: category and action-family accuracy, the same for the keyword baseline
(`bench/keyword_baseline.py`, the grep that triage must beat) on the same cases, the share decided by each stage
(rule: a specific runbook or catalog entry; fallback: a generic class such as a bare exception,
errno or signal; collectives: the hang/desync analysis; retrieval; none), the confusion
matrices, `unknown` rate, and culprit precision/recall on corpus cases whose label names one (nodes;
and nodes or GPUs by PCI bus id).

    python bench/corpus_eval.py [--corpus DIR] [--dev DIR] [--extra DIR ...] [--show-misses] [--skip-loro]
                                [--out DIR]

`--memory-fraction F` keeps only a fixed share F of the corpus in every memory (the same cases whatever the
run: a case is kept when a hash of its id falls below F, so a smaller share is a subset of a larger one). It
measures what the incident memory adds and how accuracy grows with the corpus: `bench/memory_curve.py` runs it
at several shares and plots the curve.

`--extra DIR` scores another labelled set (same format) with the corpus in memory: a batch of real
incidents collected after the rules were written, or a site's own labelled failures, before they join
the corpus. Each case is scored as leave-one-repo-out will score it once joined: the corpus's cases
from its `source_repo` leave the memory and the rules derived from that repository are held out.
`--skip-loro` scores only those sets (a minute instead of ten).

With matplotlib installed (`pip install -e ".[plots]"`) it also draws the four confusion matrices,
row-normalised, into `<out>/confusion.png`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from rich.progress import Progress

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from accuracy import CATEGORIES, EXPECTED_FAMILY, FAMILIES, FILE_FOR_KIND, OUR_FAMILY, matrix, print_matrix  # noqa: E402
from keyword_baseline import classify as keyword_classify  # noqa: E402

from diagnoser import triage as triage_module  # noqa: E402
from diagnoser.collect.nccl import normalize_bus_id  # noqa: E402
from diagnoser.retrieve import api  # noqa: E402
from diagnoser.retrieve.corpus import CorpusCase, corpus_incidents, load_corpus  # noqa: E402
from diagnoser.triage import triage  # noqa: E402

FALLBACK_PRIORITY = 40  # rules below this priority are generic classes (see prefilter/catalog.py)
STAGES = ["rule", "fallback", "collectives", "retrieval", "none"]


def stage_of(verdict: dict, priorities: dict[str, int]) -> str:
    if verdict["decided_by"] != "rule":
        return verdict["decided_by"] if verdict["decided_by"] in STAGES else "none"
    rule = verdict.get("rule") or ""
    if rule.startswith("collectives"):
        return "collectives"
    return "fallback" if priorities.get(rule, 100) < FALLBACK_PRIORITY else "rule"


def predict(log: str, log_kind: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / FILE_FOR_KIND.get(log_kind, "stderr.log")
        f.write_text(log + "\n", encoding="utf-8")
        return triage([tmp], workers=1).to_json_dict()


PCI_ADDRESS = re.compile(r"(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?")


def culprit_hit(label: str | None, verdict: dict) -> bool | None:
    """None: the verdict names no node, or the label names only a GPU by bus id (it cannot say which
    node, as a node-only label cannot say which GPU); else whether the labelled culprit mentions a named node."""
    nodes = verdict["culprit"]["nodes"]
    if not nodes:
        return None
    if label and not PCI_ADDRESS.sub("", label).strip(" ,;/()"):
        return None
    return bool(label) and any(n.lower() in label.lower() for n in nodes)


def gpu_hit(label: str | None, verdict: dict) -> bool | None:
    """None: the verdict names no GPU by bus id, or the label names none (a label that names only the node,
    or no culprit, cannot say which GPU); else whether the label names that same GPU."""
    gpus = {normalize_bus_id(g) for g in verdict["culprit"]["gpus"] if ":" in g}
    wanted = {normalize_bus_id(a) for a in PCI_ADDRESS.findall(label or "")}
    if not gpus or not wanted:
        return None
    return bool(gpus & wanted)


def culprit_in_log(label: str | None, log: str) -> bool:
    """Whether the excerpt shows the labelled culprit, so that naming it was possible (the recall denominator): the
    label's first word without its punctuation ("hoth, GPU 0000:1C:00.0" -> "hoth"), or a GPU bus id it gives, in
    any spelling the log uses (case, domain width)."""
    words = (label or "").split()
    if not words:
        return False
    first = words[0].strip(",;:()")
    if first and first in log:
        return True
    wanted = {normalize_bus_id(a) for a in PCI_ADDRESS.findall(label)}
    return bool(wanted & {normalize_bus_id(a) for a in PCI_ADDRESS.findall(log)})


def any_hit(row: dict) -> bool | None:
    """A node or a GPU named: right only when nothing named is wrong."""
    named = [h for h in (row["culprit_hit"], row["gpu_hit"]) if h is not None]
    return None if not named else all(named)


def score(name: str, rows: list[dict], show_misses: bool) -> dict:
    n = len(rows)
    cat_pairs = [(r["truth_category"], r["category"]) for r in rows]
    act_pairs = [(r["truth_family"], r["family"]) for r in rows]
    headline = rates(rows)
    cat_acc, act_acc, unknown = (headline[k] for k in ("category_accuracy", "action_family_accuracy", "unknown_rate"))
    stages = Counter(r["stage"] for r in rows)
    stage_acc = {s: (sum(r["category"] == r["truth_category"] for r in rows if r["stage"] == s), stages[s])
                 for s in STAGES if stages[s]}
    named = [r for r in rows if r["culprit_hit"] is not None]
    precision = sum(r["culprit_hit"] for r in named) / len(named) if named else None
    labelled = [r for r in rows if r["truth_culprit_in_log"]]
    recall = sum(bool(r["culprit_hit"]) for r in labelled) / len(labelled) if labelled else None
    print(f"\n== {name}: {n} cases   category {cat_acc:.1%}   action family {act_acc:.1%}   unknown {unknown:.1%}")
    print("decided by: " + ", ".join(f"{s} {c}/{stages[s]} right" for s, (c, _) in stage_acc.items()))
    print(f"culprit nodes named in {len(named)} cases, precision "
          f"{'n/a' if precision is None else f'{precision:.1%}'}; recall on {len(labelled)} labelled "
          f"{'n/a' if recall is None else f'{recall:.1%}'}")
    named_any = [r for r in rows if any_hit(r) is not None]
    precision_any = sum(any_hit(r) for r in named_any) / len(named_any) if named_any else None
    recall_any = sum(bool(any_hit(r)) for r in labelled) / len(labelled) if labelled else None
    print(f"culprit node or GPU named in {len(named_any)} cases, precision "
          f"{'n/a' if precision_any is None else f'{precision_any:.1%}'}; recall on {len(labelled)} labelled "
          f"{'n/a' if recall_any is None else f'{recall_any:.1%}'}")
    slices = slice_scores(rows)
    print("by slice: " + "; ".join(f"{k} {v['cases']}: {v['category_accuracy']:.1%} / {v['action_family_accuracy']:.1%}"
                                   f" ({v['unknown_rate']:.1%} unknown)" for k, v in slices.items()))
    baseline = keyword_comparison(rows)
    print(f"keyword baseline (bench/keyword_baseline.py) on the same cases: "
          f"category {baseline['category_accuracy']:.1%}   action family {baseline['action_family_accuracy']:.1%}; "
          f"category right only by triage "
          f"{baseline['only_triage']}, only by the keywords {baseline['only_keywords']}")
    cat_m, act_m = matrix(cat_pairs, CATEGORIES), matrix(act_pairs, FAMILIES)
    print_matrix("category", cat_m, CATEGORIES)
    print_matrix("action family", act_m, FAMILIES)
    if show_misses:
        print("\nmisses: id | truth | predicted (subtype, stage)")
        for r in rows:
            if r["category"] != r["truth_category"] or r["family"] != r["truth_family"]:
                print(f"  {r['id']} | {r['truth_category']}/{r['truth_family']} | {r['category']}/{r['family']} "
                      f"({r['subtype']}, {r['stage']})")
        print("\nculprit named wrongly: id | labelled culprit | nodes named")
        for r in rows:
            if any_hit(r) is False:
                print(f"  {r['id']} | {r['truth_culprit']} | {', '.join(r['culprit_nodes'] + r['culprit_gpus'])}")
    return {"cases": n, "category_accuracy": cat_acc, "action_family_accuracy": act_acc, "unknown_rate": unknown,
            "stages": dict(stages), "stage_correct": {s: c for s, (c, _) in stage_acc.items()},
            "culprit_precision": precision, "culprit_named": len(named), "culprit_recall": recall,
            "culprit_any_precision": precision_any, "culprit_any_named": len(named_any),
            "culprit_any_recall": recall_any,
            "keyword_baseline": baseline, "slices": slices,
            "category_matrix": {"labels": CATEGORIES, "matrix": cat_m},
            "action_matrix": {"labels": FAMILIES, "matrix": act_m},
            "rows": rows}


def slice_scores(rows: list[dict]) -> dict[str, dict]:
    """Category/family accuracy and `unknown` rate on slices of the labels: decoys (the log points one way, the
    thread's resolution the other) against plain cases, and each label confidence of the plain cases. A slice
    says where the misses are; it is no reweighting of the headline figure."""
    groups: dict[str, list[dict]] = {"decoys": [r for r in rows if r["decoy"]],
                                     "plain": [r for r in rows if not r["decoy"]]}
    for confidence in ("high", "medium", "low"):
        groups[f"plain, {confidence} confidence"] = [r for r in groups["plain"] if r["label_confidence"] == confidence]
    return {name: rates(g) for name, g in groups.items() if g}


def rates(rows: list[dict]) -> dict:
    """Cases, category and action-family accuracy and `unknown` rate of a non-empty set of rows."""
    n = len(rows)
    return {"cases": n,
            "category_accuracy": sum(r["category"] == r["truth_category"] for r in rows) / n,
            "action_family_accuracy": sum(r["family"] == r["truth_family"] for r in rows) / n,
            "unknown_rate": sum(r["category"] == "unknown" for r in rows) / n}


def keyword_comparison(rows: list[dict]) -> dict:
    """The keyword baseline scored on the same cases, and where each is right and the other is not."""
    n = len(rows)
    kw_right = [r["keyword_category"] == r["truth_category"] for r in rows]
    ours_right = [r["category"] == r["truth_category"] for r in rows]
    return {"category_accuracy": sum(kw_right) / n,
            "action_family_accuracy": sum(r["keyword_family"] == r["truth_family"] for r in rows) / n,
            "only_triage": sum(o and not k for o, k in zip(ours_right, kw_right, strict=True)),
            "only_keywords": sum(k and not o for o, k in zip(ours_right, kw_right, strict=True))}


def plot_confusions(results: dict[str, dict], path: Path) -> Path | None:
    """Category and action-family confusion matrices of each set, one heatmap each (rows: truth,
    shaded by the share of the row, labelled with counts); None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    panels = [(name, kind, res[key]) for name, res in results.items()
              for kind, key in (("category", "category_matrix"), ("action family", "action_matrix"))]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.8 * len(panels), 4.4), layout="constrained")
    for ax, (name, kind, m) in zip(axes, panels, strict=True):
        labels, counts = m["labels"], m["matrix"]
        shares = [[v / max(1, sum(row)) for v in row] for row in counts]
        ax.imshow(shares, cmap="Blues", vmin=0, vmax=1)
        ax.set_xticks(range(len(labels)), [x.replace("_", "\n") for x in labels], fontsize=8)
        ax.set_yticks(range(len(labels)), [x.replace("_", "\n") for x in labels], fontsize=8)
        ax.set_xlabel("predicted")
        ax.set_ylabel("truth")
        right = sum(counts[i][i] for i in range(len(labels)))
        ax.set_title(f"{name}\n{kind}: {right}/{sum(map(sum, counts))} right", fontsize=9)
        for i, row in enumerate(counts):
            for j, v in enumerate(row):
                if v:
                    ax.text(j, i, str(v), ha="center", va="center", fontsize=8,
                            color="white" if shares[i][j] > 0.6 else "black")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def row_for(case: CorpusCase, verdict: dict, priorities: dict[str, int]) -> dict:
    label = case.culprit
    kw_category, kw_family = keyword_classify(case.log)
    return {"id": case.id, "repo": case.source_repo, "truth_category": case.category,
            "keyword_category": kw_category, "keyword_family": kw_family,
            "truth_family": EXPECTED_FAMILY[case.expected_action], "category": verdict["category"],
            "family": OUR_FAMILY[verdict["action"]], "subtype": verdict["subtype"],
            "stage": stage_of(verdict, priorities), "rule": verdict.get("rule"),
            "culprit_hit": culprit_hit(label, verdict), "truth_culprit": label,
            "culprit_nodes": verdict["culprit"]["nodes"],
            "gpu_hit": gpu_hit(label, verdict), "culprit_gpus": verdict["culprit"]["gpus"],
            "truth_culprit_in_log": culprit_in_log(label, case.log),
            "decoy": case.decoy, "label_confidence": case.label_confidence}


_ALL_RULES: list = []
_held_out_repo: list[str] = [""]


def rules_without_held_out(directory=None, catalogs: bool = True) -> list:
    """The rule library minus the rules written from the held-out repository's incidents."""
    return [r for r in _ALL_RULES if _held_out_repo[0] not in r.derived_from]


def run(cases: list[CorpusCase], memory_for, priorities: dict[str, int], title: str, hold_out: bool) -> list[dict]:
    rows = []
    with Progress(transient=True) as bar:
        task = bar.add_task(title, total=len(cases))
        for case in cases:
            api.use_seed(memory_for(case))
            _held_out_repo[0] = case.source_repo if hold_out else ""
            rows.append(row_for(case, predict(case.log, case.log_kind), priorities))
            bar.advance(task)
    api.use_seed(None)
    _held_out_repo[0] = ""
    return rows


def kept_in_memory(case: CorpusCase, fraction: float) -> bool:
    """Whether the case is in a memory that holds `fraction` of the corpus: a stable hash of its id, so the
    cases kept at 0.25 are among those kept at 0.5."""
    if fraction >= 1.0:
        return True
    digest = hashlib.sha256(case.id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=ROOT / "diagnoser" / "data" / "corpus")
    parser.add_argument("--dev", type=Path, default=ROOT.parent / "shared" / "bench")
    parser.add_argument("--extra", type=Path, action="append", default=[],
                        help="another labelled set (directory of *.jsonl), scored with the whole corpus in memory")
    parser.add_argument("--show-misses", action="store_true")
    parser.add_argument("--skip-loro", action="store_true",
                        help="score only the development and --extra sets (a quick held-out check of a new batch)")
    parser.add_argument("--memory-fraction", type=float, default=1.0,
                        help="keep only this share of the corpus in every memory (0 = rules alone)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args()
    if not 0.0 <= args.memory_fraction <= 1.0:
        parser.error("--memory-fraction must be between 0 and 1")
    # an empty store location: the (replaced) seed answers, never this machine's own store
    os.environ["DIAGNOSER_STORE"] = tempfile.mkdtemp(prefix="corpus-eval-store-")
    from diagnoser.prefilter.runbooks import load_runbooks

    _ALL_RULES.extend(load_runbooks())
    priorities = {b.id: b.priority for b in _ALL_RULES}
    triage_module.load_runbooks = rules_without_held_out  # LORO also for rules written from corpus cases
    corpus = load_corpus(args.corpus)
    if not corpus:
        print(f"no corpus cases in {args.corpus}", file=sys.stderr)
        return 1
    by_repo: dict[str, list[CorpusCase]] = defaultdict(list)
    for case in corpus:
        by_repo[case.source_repo].append(case)
    remembered = [c for c in corpus if kept_in_memory(c, args.memory_fraction)]
    memories = {repo: corpus_incidents([c for c in remembered if c.source_repo != repo]) for repo in by_repo}
    results = {}
    full = corpus_incidents(remembered)
    dev = load_corpus(args.dev, require_repo=False) if args.dev.is_dir() else []
    if dev:
        results["development set"] = score("development set (whole corpus in memory)",
                                           run(dev, lambda c: full, priorities, "dev set", False), args.show_misses)
    for extra in args.extra:
        cases = load_corpus(extra, require_repo=False)
        shared = {c.source_url for c in cases} & {c.source_url for c in corpus}
        if shared:  # a thread already in memory would be scored on its own label
            print(f"{extra}: {len(shared)} cases share a thread with the corpus and are left out", file=sys.stderr)
            cases = [c for c in cases if c.source_url not in shared]
        if not cases:
            print(f"{extra}: no case left to score", file=sys.stderr)
            continue
        # a new batch must not meet its own repository's cases in memory, nor the rules written from that repository
        results[extra.name] = score(f"{extra} (corpus in memory, each case's own repository held out)",
                                    run(cases, lambda c: memories.get(c.source_repo, full), priorities,
                                        extra.name, True), args.show_misses)
    if args.skip_loro:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "corpus_eval.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
        return 0
    results["corpus LORO"] = score(f"corpus, leave-one-repo-out ({len(by_repo)} repositories)",
                                   run(corpus, lambda c: memories[c.source_repo], priorities, "corpus", True),
                                   args.show_misses)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "corpus_eval.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    loro = results["corpus LORO"]["category_matrix"]
    (args.out / "confusion_category.json").write_text(json.dumps(loro), encoding="utf-8")
    png = plot_confusions(results, args.out / "confusion.png")
    print(f"\nconfusion matrices: {png}" if png else "\n(no confusion.png: pip install -e '.[plots]')")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
