"""Build the seed memory shipped with the package: diagnoser/data/seed_incidents.jsonl.

Sources:
- runbooks/*.md: one incident per runbook from its `examples.match` lines, under its own
  category/subtype/action;
- log_fixtures/<scenario>/ (unless --no-fixtures): the evidence lines `diagnoser triage` cites for the
  scenario's logs, labelled with the scenario's expected.yaml verdict.
Incidents get ids inc-00001.. in that order (a new store keeps them) and stable origins
(`seed/runbook/<id>`, `seed/fixture/<name>`), so importing a newer seed refreshes, never duplicates.

    python bench/build_seed.py [--runbooks DIR] [--fixtures DIR] [--no-fixtures] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from diagnoser.retrieve.incident import Incident, format_id
from diagnoser.retrieve.runbook_index import read_runbooks
from diagnoser.retrieve.seed import LabelledText, from_labelled, runbook_texts

ROOT = Path(__file__).resolve().parents[1]


def fixture_texts(directory: Path) -> list[LabelledText]:
    """Labelled evidence of each log_fixtures scenario (scenarios triage cannot read are skipped)."""
    from diagnoser.triage import triage

    out = []
    for scenario in sorted(p for p in directory.iterdir() if (p / "expected.yaml").is_file() and (p / "logs").is_dir()):
        expected = yaml.safe_load((scenario / "expected.yaml").read_text(encoding="utf-8")) or {}
        try:
            diagnosis = triage([str(scenario / "logs")], workers=1)
        except Exception as exc:  # noqa: BLE001 - one broken scenario must not stop the seed
            print(f"skip {scenario.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            continue
        text = "\n".join(e.text for e in diagnosis.evidence)
        if not text:
            print(f"skip {scenario.name}: triage cites no evidence", file=sys.stderr)
            continue
        runbook = diagnosis.runbook if diagnosis.subtype == expected.get("subtype") else None
        out.append(LabelledText(origin=f"seed/fixture/{scenario.name}", text=text,
                                category=expected["category"], subtype=expected["subtype"],
                                action=expected["action"], runbook=runbook,
                                root_cause=str(expected.get("description") or "")))
    return out


def build(runbook_dir: Path, fixture_dir: Path | None) -> list[Incident]:
    items = runbook_texts(read_runbooks(runbook_dir))
    if fixture_dir is not None and fixture_dir.is_dir():
        items += fixture_texts(fixture_dir)
    seen: set[str] = set()
    out = []
    for inc in from_labelled(items):
        if inc.fingerprint in seen:
            continue
        seen.add(inc.fingerprint)
        out.append(inc.model_copy(update={"id": format_id(len(out) + 1)}))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runbooks", type=Path, default=ROOT / "runbooks")
    parser.add_argument("--fixtures", type=Path, default=ROOT / "log_fixtures")
    parser.add_argument("--no-fixtures", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "diagnoser" / "data" / "seed_incidents.jsonl")
    args = parser.parse_args()
    incidents = build(args.runbooks, None if args.no_fixtures else args.fixtures)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(i.model_dump_json(by_alias=True) + "\n" for i in incidents), encoding="utf-8")
    kinds = {k: sum(i.origin.startswith(f"seed/{k}/") for i in incidents) for k in ("runbook", "fixture")}
    print(f"wrote {len(incidents)} seed incidents ({kinds['runbook']} from runbooks, {kinds['fixture']} from "
          f"log_fixtures) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
