"""Does the verdict survive the way a launcher writes the log? Corpus cases re-written in each format.

Every real excerpt of the corpus (the rank-output kinds: stderr, stdout, nccl, mixed) is triaged as
posted and again with each line re-written the way a launcher or log collector would: `srun --label`,
torchrun `--tee`, Ray worker prefixes, `docker compose logs`, `kubectl logs --timestamps`, Open MPI's
`mpirun --tag-output`, and CRLF line ends. A format that changes (category, action, subtype) is a format
the rules do not read; the report lists the cases that changed, per format. Each case is triaged with
the corpus minus itself in the incident memory, so a verdict the rules leave open is never answered by
the case's own label.
Kernel lines (NVRM, mlx5, ...) posted inside a rank-output excerpt become a rank's output once a launcher
prefix is added, and the trust model rightly stops taking them as hardware evidence: such changes are
expected, not a format the rules fail to read.

    python bench/format_robustness.py [--corpus DIR] [--show N] [--only FORMAT ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from rich.progress import Progress

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from accuracy import FILE_FOR_KIND  # noqa: E402

from diagnoser.retrieve import api  # noqa: E402
from diagnoser.retrieve.corpus import corpus_incidents, load_corpus  # noqa: E402
from diagnoser.triage import triage  # noqa: E402

RANK_KINDS = {"stderr", "stdout", "nccl", "mixed"}
FORMATS: dict[str, Callable[[int, str], str]] = {
    "srun --label": lambda i, line: f"  3: {line}",
    "torchrun --tee": lambda i, line: f"[rank3]: {line}",
    "ray worker": lambda i, line: f"(RayTrainWorker pid=4242, ip=10.1.2.3) {line}",
    "docker compose": lambda i, line: f"trainer-1  | {line}",
    "kubectl --timestamps": lambda i, line: f"2025-03-04T05:06:{i % 60:02d}.123456789Z {line}",
    "mpirun --tag-output": lambda i, line: f"[1,3]<stdout>:{line}",
    "CRLF": lambda i, line: f"{line}\r",
}


def verdict(log: str, kind: str) -> tuple[str, str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / FILE_FOR_KIND.get(kind, "stderr.log")
        f.write_bytes((log + "\n").encode("utf-8"))
        v = triage([tmp], workers=1).to_json_dict()
    return v["category"], v["action"], v["subtype"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=ROOT / "diagnoser" / "data" / "corpus")
    parser.add_argument("--show", type=int, default=5, help="changed cases listed per format")
    parser.add_argument("--only", action="append", choices=sorted(FORMATS), help="re-write only in this format")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args()
    formats = {name: FORMATS[name] for name in args.only} if args.only else FORMATS
    os.environ["DIAGNOSER_STORE"] = tempfile.mkdtemp(prefix="format-bench-store-")
    corpus = load_corpus(args.corpus)
    memory = corpus_incidents(corpus)
    cases = [c for c in corpus if c.log_kind in RANK_KINDS]
    changed: dict[str, list[dict]] = {name: [] for name in formats}
    with Progress(transient=True) as bar:
        task = bar.add_task("formats", total=len(cases))
        for case in cases:
            api.use_seed([i for i in memory if i.origin != f"seed/corpus/{case.id}"])
            base = verdict(case.log, case.log_kind)
            for name, rewrite in formats.items():
                log = "\n".join(rewrite(i, line) for i, line in enumerate(case.log.split("\n")))
                got = verdict(log, case.log_kind)
                if got != base:
                    changed[name].append({"id": case.id, "as_posted": base, "rewritten": got})
            bar.advance(task)
    api.use_seed(None)
    print(f"{len(cases)} corpus cases (rank output), verdict (category, action, subtype) as posted vs re-written")
    for name, diffs in changed.items():
        print(f"  {name:<22} unchanged {len(cases) - len(diffs):>4}/{len(cases)}")
        for d in diffs[:args.show]:
            print(f"      {d['id']}: {'/'.join(d['as_posted'])} -> {'/'.join(d['rewritten'])}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "format_robustness.json").write_text(json.dumps({"cases": len(cases), "changed": changed},
                                                                indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
