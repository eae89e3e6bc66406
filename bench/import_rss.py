"""Peak RSS of `IncidentStore.import_jsonl` on a file with one 20 MB line, old code vs this tree.

Each import runs in a fresh child process (a new store, seed off); its peak RSS is the child's
ru_maxrss. The baseline is the code at a git revision (default 226d4be, before the line cap), taken
with `git archive` into a temporary directory. A file of the same small records without the big
line is the reference in the same run.

    PYTHONPATH=$PWD /tmp/fresh-venv/bin/python bench/import_rss.py [--base REV]

Measured 2026-11-23 (MiB peak RSS, 50 records / 49 records + one 20 MB line): base 226d4be 148 / 507
(the 20 MB record imported); this tree 148 / 148 (the line skipped unread and named).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

CHILD = """
import resource, sys
from pathlib import Path
from diagnoser.retrieve.store import IncidentStore
with IncidentStore.create(Path(sys.argv[2]), seed=False) as st:
    try:
        r = st.import_jsonl(Path(sys.argv[1]))
        note = f"added={r.added} unread={getattr(r, 'unread', None)}"
    except Exception as exc:
        note = f"{type(exc).__name__}: {str(exc)[:80]}"
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024, note)
"""


def make_files(tmp: Path, repo: Path) -> tuple[Path, Path]:
    sys.path.insert(0, str(repo))
    from diagnoser.retrieve.seed import shipped_seed

    records = [inc.model_dump_json(by_alias=True) for inc in list(shipped_seed())[:50]]
    small, big = tmp / "small.jsonl", tmp / "big.jsonl"
    small.write_text("".join(r + "\n" for r in records))
    huge = json.dumps({**json.loads(records[0]), "root_cause": "x" * (20 << 20), "signature": "y" * 10})
    big.write_text("".join(r + "\n" for r in records[1:]) + huge + "\n")
    return small, big


def peak(tree: Path, src: Path, tmp: Path, tag: str) -> tuple[int, str]:
    env = {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(src), str(tmp / f"store-{tag}")], env=env, cwd=tmp,
                         capture_output=True, text=True, check=True).stdout.split(" ", 1)
    return int(out[0]), out[1].strip()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="226d4be")
    args = ap.parse_args()
    repo = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        base = tmp / "base"
        archive = subprocess.run(["git", "-C", str(repo), "archive", args.base, "diagnoser"], capture_output=True,
                                 check=True).stdout
        (tmp / "base.tar").write_bytes(archive)
        with tarfile.open(tmp / "base.tar") as tar:
            tar.extractall(base, filter="data")
        small, big = make_files(tmp, repo)
        print(f"{'code':10} {'file':26} {'peak RSS MiB':>12}  result")
        for name, tree in (("base " + args.base, base), ("this tree", repo)):
            for label, src in (("50 records", small), ("49 records + 20 MB line", big)):
                mib, note = peak(tree, src, tmp, f"{name[:4]}{label[:2]}")
                print(f"{name:10} {label:26} {mib:>12}  {note}")


if __name__ == "__main__":
    main()
