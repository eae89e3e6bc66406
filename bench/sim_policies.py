"""Simulated ETTR of the recovery policies at 1k / 16k / 128k GPUs, and the simulator vs the model.

    python bench/sim_policies.py [--days 30] [--seeds 5] [--config rates.toml] [--confusion cm.json]

Prints markdown tables and writes bench/out/sim_policies.{json,md}, sim_policies.png and
sim_agreement.png. Default rates and timings: diagnoser/metrics/sim/config.py; the confusion
matrix: diagnoser/metrics/sim/confusion.json (the triage benchmark's, once it writes one).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from diagnoser.metrics.plots import plot_policies, plot_validation
from diagnoser.metrics.sim import compare_policies, load_config, load_confusion, validate_model

OUT = Path(__file__).parent / "out"
SCALES = [1024, 16384, 131072]
AGREEMENT_SCALES = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]


def policy_table(rows) -> str:
    lines = ["| GPUs | policy | ETTR (mean ± sd) | failures/run | lost h/run: detect | diagnose | restart | "
             "recompute | stopped |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ph = r.phase_s
        lost = " | ".join(f"{ph[k] / 3600:.1f}" for k in ("detection", "diagnosis", "restart", "recompute",
                                                           "stopped"))
        lines.append(f"| {r.gpus:,} | {r.policy} | {100 * r.ettr:.1f}% ± {100 * r.ettr_sd:.1f} | "
                     f"{r.failures:.0f} | {lost} |")
    return "\n".join(lines)


def agreement_table(rows) -> str:
    lines = ["| GPUs | interval | λ(u0+Δ/2) | analytic E[ETTR] | exact (renewal) | simulated | sim vs analytic |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        ok = "ok" if r.within else "model invalid"
        lines.append(f"| {r.gpus:,} | {r.interval_s / 60:.0f} min | {r.load:.3f} | {100 * r.analytic:.1f}% | "
                     f"{100 * r.renewal:.1f}% | {100 * r.simulated:.1f}% | {100 * r.rel_error:.1f}% ({ok}) |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=30.0, help="simulated wall time per run")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--config", help="TOML/YAML with a [simulate] section")
    ap.add_argument("--confusion", help="confusion matrix JSON")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    cfg = load_config(args.config, days=args.days)
    cm = load_confusion(args.confusion)
    rows = compare_policies(cfg, SCALES, args.seeds, cm)
    fast = compare_policies(load_config(args.config, days=args.days, hang_detect_s=30.0), SCALES, args.seeds, cm)
    checks = validate_model(AGREEMENT_SCALES, restart_s=cfg.restart_s, write_s=cfg.checkpoint_write_s,
                            days=120.0, seeds=3, gpus_per_node=cfg.gpus_per_node)
    seconds = time.perf_counter() - t0

    accuracy = ", ".join(f"{c.value} {cm.accuracy(c):.2f}" for c in cm.labels)
    text = "\n\n".join([
        f"## Simulated ETTR by policy ({args.days:g} days x {args.seeds} seeds, default rates; "
        f"hang detection {cfg.hang_detect_s:.0f} s; diagnosis accuracy: {accuracy})",
        policy_table(rows),
        "## Same, with hangs detected in 30 s (progress watchdog instead of the collective timeout)",
        policy_table(fast),
        "## Simulator vs analytic E[ETTR] (model assumptions: one Poisson process, u0 = "
        f"{cfg.restart_s:.0f} s, w_cp = {cfg.checkpoint_write_s:.0f} s, optimal interval; 120 days x 3 seeds)",
        agreement_table(checks),
        f"_{seconds:.1f} s on this machine_",
    ])
    print(text)
    (OUT / "sim_policies.md").write_text(text + "\n", encoding="utf-8")
    (OUT / "sim_policies.json").write_text(json.dumps({
        "config": cfg.model_dump(mode="json"), "confusion": cm.model_dump(mode="json"), "seeds": args.seeds,
        "policies": [r.model_dump() for r in rows], "policies_fast_hang_detection": [r.model_dump() for r in fast],
        "agreement": [r.model_dump() for r in checks]}, indent=2), encoding="utf-8")
    plot_policies(rows, OUT / "sim_policies.png", f"Simulated ETTR, default rates, {args.days:g} days x {args.seeds}")
    plot_validation(checks, OUT / "sim_agreement.png")
    print(f"\nwrote {OUT}/sim_policies.{{md,json,png}} and {OUT}/sim_agreement.png")


if __name__ == "__main__":
    main()
