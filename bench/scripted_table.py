"""`bench/llm_stage.py --scripted`: the LLM stage over the labelled corpus with scripted endpoints.

See bench/llm_stage.py's docstring for what is measured and bench/scripted_llm.py for the endpoints.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

from accuracy import EXPECTED_FAMILY, FILE_FOR_KIND, OUR_FAMILY
from scripted_llm import POLICIES, ScriptedEndpoint

REMOVES = {"drain_and_restart", "restart_excluding_nodes"}


def _verdict_row(d) -> dict:
    return {"category": d.category.value, "family": OUR_FAMILY[d.action.value], "action": d.action.value,
            "nodes": list(d.culprit.nodes), "decided_by": d.decided_by.value, "rule": d.rule}


def scripted_table(args) -> int:
    os.environ["DIAGNOSER_STORE"] = tempfile.mkdtemp(prefix="llm-stage-store-")  # fresh, empty store
    from diagnoser.classify import load_config
    from diagnoser.classify.scope import job_nodes
    from diagnoser.classify.stage import review
    from diagnoser.retrieve import api
    from diagnoser.retrieve.corpus import corpus_incidents, load_corpus
    from diagnoser.triage import analyse

    corpus = load_corpus(args.corpus)
    if not corpus:
        print(f"no corpus cases in {args.corpus}", file=sys.stderr)
        return 1
    policies = list(POLICIES) if args.scripted == "all" else [args.scripted]
    repos = {c.source_repo for c in corpus}
    memories = {r: corpus_incidents([c for c in corpus if c.source_repo != r]) for r in repos}
    endpoints = {p: ScriptedEndpoint(p) for p in policies}
    rows: list[dict] = []
    try:
        configs = {p: load_config(base_url=e.url, cache_dir="none", context_tokens=args.context_tokens,
                                  max_tokens=args.max_tokens, timeout=30) for p, e in endpoints.items()}
        for n, case in enumerate(corpus, 1):
            api.use_seed(memories[case.source_repo])
            with tempfile.TemporaryDirectory() as tmp:
                (Path(tmp) / FILE_FOR_KIND.get(case.log_kind, "stderr.log")).write_text(case.log + "\n",
                                                                                      encoding="utf-8")
                a = analyse([tmp], workers=1)
            row = {"id": case.id, "truth": [case.category.value, EXPECTED_FAMILY[case.expected_action]],
                   "job_nodes": sorted(job_nodes(a)), "rules": _verdict_row(a.diagnosis)}
            for p, e in endpoints.items():
                e.case = case
                row[p] = _verdict_row(review(a, configs[p]))
            rows.append(row)
            if n % 40 == 0:
                print(f"[{n}/{len(corpus)}]", file=sys.stderr)
    finally:
        api.use_seed(None)
        for e in endpoints.values():
            e.close()
    table = summarise(rows, ["rules", *policies])
    first = endpoints[policies[0]]
    shown = sorted(first.shown)
    table["prompts"] = {"sent": len(shown), "distinct": len(first.digests), "without_lines": shown.count(0),
                        "lines_p50": shown[len(shown) // 2] if shown else 0, "lines_max": max(shown, default=0)}
    print_table(table, len(rows))
    if args.show:
        for p in policies:
            misses = [r for r in rows if [r[p]["category"], r[p]["family"]] != r["truth"]][: args.show]
            print(f"\n{p} misses (truth | rules | {p}):")
            for r in misses:
                print(f"  {r['id']}: {'/'.join(r['truth'])} | {r['rules']['category']}/{r['rules']['family']} "
                      f"({r['rules']['rule']}) | {r[p]['category']}/{r[p]['family']} by {r[p]['decided_by']}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "llm_stage_scripted.json").write_text(json.dumps({"table": table, "rows": rows}, indent=1))
    return 0


def summarise(rows: list[dict], columns: list[str]) -> dict:
    n = len(rows)
    out = {}
    for col in columns:
        cat = sum(r[col]["category"] == r["truth"][0] for r in rows)
        fam = sum(r[col]["family"] == r["truth"][1] for r in rows)
        node_actions = [r for r in rows if r[col]["action"] in REMOVES]
        foreign = [r for r in node_actions if any(x not in r["job_nodes"] for x in r[col]["nodes"])]
        user_to_node = [r for r in rows if r["rules"]["category"] == "user_code" and r[col]["action"] in REMOVES]
        truly_user = [r for r in rows if r["truth"][0] == "user_code" and r[col]["action"] in REMOVES]
        out[col] = {"category": round(100 * cat / n, 1), "family": round(100 * fam / n, 1),
                    "node_actions": len(node_actions), "non_job_node_actions": len(foreign),
                    "user_code_to_node_action": len(user_to_node), "true_user_code_node_action": len(truly_user),
                    "decided_by": dict(Counter(r[col]["decided_by"] for r in rows))}
    return out


def print_table(table: dict, n: int) -> None:
    print(f"\nLLM stage on the labelled corpus ({n} cases; leave-one-repo-out memory, fresh store, no LLM cache)")
    print(f"{'endpoint':<12}{'category':>10}{'family':>9}{'node acts':>11}{'non-job':>9}{'uc->node':>10}"
          f"{'UC->node':>10}  decided by")
    for col, t in table.items():
        if col == "prompts":
            continue
        name = "none" if col == "rules" else col
        by = ", ".join(f"{k} {v}" for k, v in sorted(t["decided_by"].items(), key=lambda kv: -kv[1]))
        print(f"{name:<12}{t['category']:>9.1f}%{t['family']:>8.1f}%{t['node_actions']:>11}"
              f"{t['non_job_node_actions']:>9}{t['user_code_to_node_action']:>10}"
              f"{t['true_user_code_node_action']:>10}  {by}")
    print("(none = rules + retrieval; node acts = drains/exclusions; non-job = those naming a node that is not the "
          "job's; uc->node = rules+retrieval user_code verdicts turned into a node action; UC->node = cases labelled "
          "user_code given a node action)")
    p = table["prompts"]
    print(f"prompts: {p['sent']} sent, {p['distinct']} distinct, {p['without_lines']} without evidence lines; "
          f"evidence lines per prompt: median {p['lines_p50']}, max {p['lines_max']}")

