"""Build the seed memory shipped with the package: diagnoser/data/seed_incidents.jsonl.

The seed is the corpus of real incidents (`diagnoser/data/corpus/*.jsonl`): labelled excerpts from
public bug reports and postmortems, each with its source URL and the thread's resolution. It replaces
the earlier seed built from the runbooks' own example lines and the generated fixtures, which could
only ever recall what the rules already knew. Incidents get ids inc-00001.. in corpus order (a new
store keeps them) and stable origins (`seed/corpus/<case id>`), so importing a newer seed refreshes,
never duplicates; cases whose excerpt masks to the same signature are kept once.

    python bench/build_seed.py [--corpus DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from diagnoser.retrieve.corpus import corpus_incidents, load_corpus
from diagnoser.retrieve.incident import Incident, format_id

ROOT = Path(__file__).resolve().parents[1]


def build(corpus_dir: Path) -> list[Incident]:
    seen: set[str] = set()
    out = []
    for inc in corpus_incidents(load_corpus(corpus_dir)):
        if inc.fingerprint in seen:
            continue
        seen.add(inc.fingerprint)
        out.append(inc.model_copy(update={"id": format_id(len(out) + 1)}))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=ROOT / "diagnoser" / "data" / "corpus")
    parser.add_argument("--out", type=Path, default=ROOT / "diagnoser" / "data" / "seed_incidents.jsonl")
    args = parser.parse_args()
    incidents = build(args.corpus)
    if not incidents:
        print(f"no corpus cases in {args.corpus}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(i.model_dump_json(by_alias=True) + "\n" for i in incidents), encoding="utf-8")
    print(f"wrote {len(incidents)} seed incidents from the corpus to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
