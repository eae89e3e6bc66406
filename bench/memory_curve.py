"""How held-out accuracy grows with the incident memory: the corpus scored leave-one-repo-out with a memory
that holds 0%, 25%, ... 100% of the corpus (`corpus_eval.py --memory-fraction`), side by side.

At 0% only the rules and the closest-vocabulary step (the catalogs' own examples) decide; the rise from there
is what retrieval over real past incidents adds, and its slope at 100% says whether collecting more incidents
still pays. The shares are nested (the cases kept at 25% are among those kept at 50%), so the points differ
only in memory size.

    python bench/memory_curve.py [--fractions 0,0.25,0.5,0.75,1] [--jobs 2] [--out DIR]

Each point is one full leave-one-repo-out run (10-30 minutes on one core, by load); `--jobs` runs that many at once.
Results: <out>/memory_curve.json and, with matplotlib, <out>/memory_curve.png.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT / "bench" / "corpus_eval.py"


def run_point(fraction: float, out: Path) -> dict:
    """One leave-one-repo-out run at this memory share; its corpus figures and stage counts."""
    point_dir = out / f"memory-{fraction:g}"
    log = out / f"memory-{fraction:g}.log"  # not with_suffix: "memory-0.25" has a suffix already
    point_dir.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as sink:
        subprocess.run([sys.executable, str(EVAL), "--memory-fraction", str(fraction), "--out", str(point_dir)],
                       stdout=sink, stderr=subprocess.STDOUT, check=True)
    loro = json.loads((point_dir / "corpus_eval.json").read_text(encoding="utf-8"))["corpus LORO"]
    return {"fraction": fraction, "cases": loro["cases"], "category_accuracy": loro["category_accuracy"],
            "action_family_accuracy": loro["action_family_accuracy"], "unknown_rate": loro["unknown_rate"],
            "stages": loro["stages"], "stage_correct": loro["stage_correct"]}


def plot(points: list[dict], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    xs = [100 * p["fraction"] for p in points]
    fig, ax = plt.subplots(figsize=(6.4, 4.2), layout="constrained")
    for key, label in (("category_accuracy", "category"), ("action_family_accuracy", "action family"),
                       ("unknown_rate", "unknown")):
        ax.plot(xs, [100 * p[key] for p in points], marker="o", label=label)
    ax.set_xlabel("share of the corpus in the incident memory (%)")
    ax.set_ylabel("% of corpus cases (leave-one-repo-out)")
    ax.set_title(f"Held-out accuracy against memory size ({points[-1]['cases']} cases)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fractions", default="0,0.25,0.5,0.75,1")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "memory_curve")
    args = parser.parse_args()
    fractions = sorted({float(f) for f in args.fractions.split(",") if f.strip()})
    if not fractions or any(not 0.0 <= f <= 1.0 for f in fractions):
        parser.error("--fractions: comma-separated shares between 0 and 1")
    args.out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        points = list(pool.map(lambda f: run_point(f, args.out), fractions))
    (args.out / "memory_curve.json").write_text(json.dumps(points, indent=1), encoding="utf-8")
    print(f"{'memory':>7} {'category':>9} {'family':>7} {'unknown':>8}  decided by retrieval (right)")
    for p in points:
        print(f"{100 * p['fraction']:6.0f}% {100 * p['category_accuracy']:8.1f}% "
              f"{100 * p['action_family_accuracy']:6.1f}% {100 * p['unknown_rate']:7.1f}%  "
              f"{p['stages'].get('retrieval', 0)} ({p['stage_correct'].get('retrieval', 0)})")
    png = plot(points, args.out / "memory_curve.png")
    print(f"\nplot: {png}" if png else "\n(no plot: pip install -e '.[plots]')")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
