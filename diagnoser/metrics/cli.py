"""`diagnoser report | whatif | simulate`: goodput of audited runs, the what-if model, the simulator.

`register(app)` adds the commands to the main typer app. Every command prints one JSON object
with `--json` and writes a PNG with `--plot PATH.png`. Durations accept 90, 90s, 10m, 1.5h, 2d.
Config file (TOML/YAML; `--config` or $DIAGNOSER_METRICS_CONFIG): sections [whatif], [simulate].
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console

from diagnoser import durations
from diagnoser.metrics import model
from diagnoser.metrics.goodput import build_report
from diagnoser.metrics.model import WhatIfParams
from diagnoser.metrics.sim.config import ENV_CONFIG, ENV_CONFUSION, load_config, load_confusion, read_config_file
from diagnoser.metrics.timeline import load_timelines
from diagnoser.models import Category

EXIT_UNUSABLE = 2

ConfigOpt = Annotated[Path | None, typer.Option("--config", envvar=ENV_CONFIG,
                                                help="TOML/YAML file with [whatif] / [simulate] sections")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object")]
PlotOpt = Annotated[Path | None, typer.Option("--plot", help="Write a PNG figure here")]


def parse_duration(text: str) -> float:
    """'90' / '90s' / '10m' / '1.5h' / '2d' / '1h30m' / Slurm's '00:10:00', '1-00:00:00' -> seconds."""
    try:
        return durations.parse_duration(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _seconds(text: str | None) -> float | None:
    return None if text is None else parse_duration(text)


def _ints(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise typer.BadParameter(f"expected comma-separated integers: {text!r}") from exc


def _fail(message: str) -> None:
    typer.echo(f"diagnoser: {message}", err=True)
    raise typer.Exit(EXIT_UNUSABLE)


PLOTS_HINT = "pip install 'diagnoser[plots]'"


def _plot(name: str, *args: object) -> str:
    """Call diagnoser.metrics.plots.<name>; a clear error (exit 2) when matplotlib is not installed: it is the
    `plots` extra, not a dependency of the core install."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        _fail(f"--plot needs matplotlib, which is not installed: {PLOTS_HINT} (the rest works without it)")
    from diagnoser.metrics import plots

    return str(getattr(plots, name)(*args))


def _emit_json(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")


def report_command(
    path: Annotated[Path, typer.Argument(help="An audit log (JSONL) or a directory of them")],
    as_json: JsonOpt = False,
    plot: PlotOpt = None,
    window: Annotated[str | None, typer.Option(help="Sliding ETTR window for the plot (default: wall/10)")] = None,
    lemon_threshold: Annotated[int, typer.Option(help="Failures that make a node a lemon")] = 2,
) -> None:
    """Goodput of supervised runs: ETTR, TOR, MTTF/MTTR by cause, lost time, lemon nodes."""
    warnings: list[str] = []
    try:
        timelines = load_timelines(path, warnings)
    except (OSError, ValueError) as exc:
        _fail(str(exc))
        return
    if not timelines:
        _fail(f"{path}: no runs in the audit log")
    report = build_report(timelines, lemon_threshold, warnings)
    out = report.to_json_dict()
    if plot is not None:
        out["plot"] = _plot("plot_report", timelines, report, plot, _seconds(window))
    if as_json:
        _emit_json(out)
        return
    from diagnoser.metrics.render import render_report

    console = Console()
    render_report(report, console)
    if plot is not None:
        console.print(f"plot: {out['plot']}")


def whatif_command(
    gpus: Annotated[int | None, typer.Option(help="GPUs in the job [default 16384]")] = None,
    gpus_per_node: Annotated[int | None, typer.Option(help="[default 8]")] = None,
    rf: Annotated[float | None, typer.Option("--rf", help="Node failures per 1,000 node-days [default 6.5, Meta RSC-1]",
                                             envvar="DIAGNOSER_RF")] = None,
    rf_from: Annotated[Path | None, typer.Option(help="Estimate r_f from these audit logs (file or dir)")] = None,
    rf_categories: Annotated[str, typer.Option(help="Failure categories counted into r_f")] = "hardware,infra",
    restart: Annotated[str | None, typer.Option(help="Restart overhead u0 [default 10m]")] = None,
    ckpt_write: Annotated[str | None, typer.Option(help="Blocking checkpoint write time w_cp [default 60s]")] = None,
    ckpt_interval: Annotated[str | None, typer.Option(help="Your checkpoint interval [default: optimal]")] = None,
    scales: Annotated[str | None, typer.Option(help="GPU counts for the curve, e.g. 1024,16384,131072")] = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Expected ETTR, MTTF and the optimal checkpoint interval at a scale, and ETTR over scale."""
    try:
        base = read_config_file(config, "whatif")
        given = {"gpus": gpus, "gpus_per_node": gpus_per_node, "rf_per_1000_node_days": rf,
                 "restart_s": _seconds(restart), "checkpoint_write_s": _seconds(ckpt_write),
                 "checkpoint_interval_s": _seconds(ckpt_interval)}
        estimate, source = None, "given" if rf is not None or "rf_per_1000_node_days" in base else "literature"
        if rf_from is not None:
            cats = tuple(Category(c.strip()) for c in rf_categories.split(",") if c.strip())
            estimate = model.estimate_rf(load_timelines(rf_from), cats)
            if estimate.failures == 0:
                raise ValueError(f"no {rf_categories} failures in {estimate.node_days:.2f} node-days of {rf_from}: "
                                 f"r_f < {estimate.high:.2f} per 1,000 node-days (95%); pass --rf")
            given["rf_per_1000_node_days"] = estimate.rf_per_1000_node_days
            source = f"audit logs: {rf_from}"
        params = WhatIfParams(**(base | {k: v for k, v in given.items() if v is not None}))
        result = model.whatif(params, _ints(scales), rf_source=source)
    except (OSError, ValueError, ValidationError) as exc:
        _fail(str(exc).splitlines()[0] if isinstance(exc, ValidationError) else str(exc))
        return
    out = result.model_dump(mode="json") | {"rf_estimate": estimate.model_dump(mode="json") if estimate else None}
    if plot is not None:
        out["plot"] = _plot("plot_whatif", result, plot)
    if as_json:
        _emit_json(out)
        return
    from diagnoser.metrics.render import render_whatif

    console = Console()
    render_whatif(result, console, estimate)
    if plot is not None:
        console.print(f"plot: {out['plot']}")


def simulate_command(
    gpus: Annotated[str, typer.Option(help="GPU counts, comma-separated")] = "1024,16384,131072",
    policies: Annotated[str, typer.Option("--policy", help="naive,diagnoser,oracle (comma-separated)")]
    = "naive,diagnoser,oracle",
    days: Annotated[float | None, typer.Option(help="Simulated wall time per run [default 30]")] = None,
    seeds: Annotated[int, typer.Option(help="Runs per policy and scale (seeds 0..n-1)")] = 3,
    confusion: Annotated[Path | None, typer.Option(envvar=ENV_CONFUSION,
                                                   help="Confusion matrix JSON of the triage benchmark")] = None,
    validate: Annotated[bool, typer.Option(help="Also check the simulator against the analytic model")] = False,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
    plot: PlotOpt = None,
) -> None:
    """Simulate long runs with failures and compare recovery policies (naive, diagnoser, oracle)."""
    from diagnoser.metrics.sim import POLICIES, compare_policies, validate_model

    try:
        scales = _ints(gpus) or []
        names = tuple(p.strip() for p in policies.split(",") if p.strip())
        if unknown := [n for n in names if n not in POLICIES]:
            raise ValueError(f"unknown policy {unknown[0]!r} (choose from {', '.join(POLICIES)})")
        if not scales or min(scales) < 1 or seeds < 1:
            raise ValueError("need at least one positive GPU count and one seed")
        cfg = load_config(config, days=days)
        matrix = load_confusion(confusion)
    except (OSError, ValueError, ValidationError, KeyError) as exc:
        _fail(str(exc).splitlines()[0] if str(exc) else repr(exc))
        return
    rows = compare_policies(cfg, scales, seeds, matrix, names)
    checks = validate_model(scales, restart_s=cfg.restart_s, write_s=cfg.checkpoint_write_s,
                            gpus_per_node=cfg.gpus_per_node) if validate else None
    out = {"config": cfg.model_dump(mode="json"), "policies": [r.model_dump(mode="json") for r in rows],
           "validation": [r.model_dump(mode="json") for r in checks] if checks else None}
    if plot is not None:
        out["plot"] = _plot("plot_policies", rows, plot, f"Simulated ETTR, {cfg.days:g} days, {seeds} seeds")
    if as_json:
        _emit_json(out)
        return
    from diagnoser.metrics.render import render_simulation

    console = Console()
    render_simulation(rows, console, checks)
    if plot is not None:
        console.print(f"plot: {out['plot']}")


def register(app: typer.Typer) -> None:
    """Add `report`, `whatif` and `simulate` to the main app."""
    app.command("report")(report_command)
    app.command("whatif")(whatif_command)
    app.command("simulate")(simulate_command)
