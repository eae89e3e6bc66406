"""`diagnoser report | whatif | simulate` through typer's CliRunner: JSON output, PNG files, errors."""

from __future__ import annotations

import json
import math

import pytest
import typer
from PIL import Image
from typer.testing import CliRunner

from diagnoser.metrics.cli import parse_duration, register

try:  # the hand-built log lives with the report tests
    from test_metrics_report import hand_log, write_log
except ImportError:  # pragma: no cover - other import modes
    from tests.test_metrics_report import hand_log, write_log

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture()
def cli():
    app = typer.Typer()
    register(app)
    runner = CliRunner()

    def run(*args: str, code: int = 0):
        res = runner.invoke(app, list(args))
        assert res.exit_code == code, (res.output, res.exception)
        return res

    return run


def assert_png(path, min_size=(200, 150)):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    with Image.open(path) as im:
        im.verify()
    with Image.open(path) as im:
        assert im.format == "PNG" and im.size[0] >= min_size[0] and im.size[1] >= min_size[1]


def test_report_json_and_plot(cli, tmp_path):
    log = write_log(tmp_path / "audit.jsonl", hand_log())
    png = tmp_path / "out" / "report.png"
    out = json.loads(cli("report", str(log), "--json", "--plot", str(png)).stdout)
    assert out["schema"] == "goodput/v1"
    run = out["runs"][0]
    assert run["ettr"] == pytest.approx(4000 / 6100)
    assert run["tor"] == pytest.approx(4200 / 6100)
    assert run["lost_s"]["recompute"] == pytest.approx(1200)
    assert {g["key"] for g in run["by_category"]} == {"hardware", "user_code"}
    f1 = run["failure_list"][0]
    assert (f1["how"], f1["category"], f1["action"], f1["culprit_nodes"]) == ("hang", "hardware",
                                                                              "drain_and_restart", ["n3"])
    assert (f1["detection_s"], f1["restart_s"], f1["recompute_s"]) == (400, 200, 700)
    assert out["plot"] == str(png)
    assert_png(png)


def test_report_terminal(cli, tmp_path):
    log = write_log(tmp_path / "audit.jsonl", hand_log())
    text = cli("report", str(log)).stdout
    for expected in ("job-1", "65.6%", "68.9%", "gpu_xid_79", "n3", "recompute"):
        assert expected in text


def test_report_unusable_input(cli, tmp_path):
    res = cli("report", str(tmp_path / "missing.jsonl"), code=2)
    assert "diagnoser:" in res.output
    (tmp_path / "empty").mkdir()
    cli("report", str(tmp_path / "empty"), code=2)


def test_whatif_json_by_hand(cli, tmp_path):
    png = tmp_path / "whatif.png"
    out = json.loads(cli("whatif", "--gpus", "16384", "--rf", "6.5", "--restart", "10m", "--ckpt-write", "60s",
                         "--ckpt-interval", "30m", "--scales", "1024,131072", "--json", "--plot", str(png)).stdout)
    p = out["point"]
    assert p["nodes"] == 2048
    assert p["mttf_s"] / 3600 == pytest.approx(1.803, abs=1e-3)
    assert p["ettr"] == pytest.approx(0.744086, abs=1e-6)  # see test_metrics_model
    assert p["optimal_interval_s"] == pytest.approx(882.52, abs=0.01)
    assert [c["gpus"] for c in out["curve"]] == [1024, 16384, 131072]
    assert out["rf_source"] == "given"
    assert_png(png)


def test_whatif_terminal_and_config_file(cli, tmp_path, monkeypatch):
    cfg = tmp_path / "m.yaml"
    cfg.write_text("whatif:\n  gpus: 1024\n  restart_s: 300\n")
    monkeypatch.setenv("DIAGNOSER_METRICS_CONFIG", str(cfg))
    out = json.loads(cli("whatif", "--json").stdout)
    assert out["params"]["gpus"] == 1024 and out["params"]["restart_s"] == 300
    assert out["params"]["rf_per_1000_node_days"] == 6.5 and out["rf_source"] == "literature"
    assert json.loads(cli("whatif", "--gpus", "2048", "--json").stdout)["point"]["gpus"] == 2048  # option wins
    text = cli("whatif").stdout
    assert "optimal checkpoint interval" in text and "1,024" in text


def test_whatif_rf_from_audit_logs(cli, tmp_path):
    log = write_log(tmp_path / "audit.jsonl", hand_log())
    out = json.loads(cli("whatif", "--rf-from", str(log), "--gpus", "1024", "--json").stdout)
    node_days = (2850 * 4 + 2650 * 4) / 86400
    assert out["rf_estimate"]["failures"] == 1
    assert out["params"]["rf_per_1000_node_days"] == pytest.approx(1000 / node_days)
    assert out["rf_source"].startswith("audit logs")
    res = cli("whatif", "--rf-from", str(log), "--rf-categories", "infra", code=2)
    assert "no infra failures" in res.output


def test_simulate_json_and_plot(cli, tmp_path):
    png = tmp_path / "sim.png"
    out = json.loads(cli("simulate", "--gpus", "1024,16384", "--days", "5", "--seeds", "1", "--validate",
                         "--json", "--plot", str(png)).stdout)
    rows = out["policies"]
    assert [(r["gpus"], r["policy"]) for r in rows] == [(g, p) for g in (1024, 16384)
                                                        for p in ("naive", "diagnoser", "oracle")]
    assert all(0 < r["ettr"] <= 1 for r in rows)
    assert [v["gpus"] for v in out["validation"]] == [1024, 16384]
    assert out["config"]["days"] == 5
    assert_png(png)
    text = cli("simulate", "--gpus", "1024", "--days", "2", "--seeds", "1", "--policy", "naive").stdout
    assert "Simulated ETTR" in text and "naive" in text


def test_simulate_bad_input(cli, tmp_path):
    assert "unknown policy" in cli("simulate", "--policy", "yolo", code=2).output
    bad = tmp_path / "cm.json"
    bad.write_text('{"labels": ["hardware"], "matrix": [[1, 2]]}')
    cli("simulate", "--confusion", str(bad), "--days", "1", code=2)


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("10m", 600), ("1.5h", 5400), ("2d", 172800)])
def test_parse_duration(text, seconds):
    assert math.isclose(parse_duration(text), seconds)


def test_parse_duration_rejects_garbage():
    with pytest.raises(typer.BadParameter):
        parse_duration("ten minutes")


def test_plot_without_matplotlib_says_how_to_install_it(cli, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    log = write_log(tmp_path / "audit.jsonl", hand_log())
    res = cli("report", str(log), "--plot", str(tmp_path / "r.png"), code=2)
    assert "pip install 'diagnoser[plots]'" in res.output and not (tmp_path / "r.png").exists()
    assert cli("report", str(log), "--json").stdout  # everything else works without it


@pytest.mark.parametrize(("span_s", "unit"), [(45, "seconds"), (360, "minutes"), (6100, "minutes"),
                                              (5 * 3600, "hours"), (40 * 3600, "hours"), (30 * 86400, "days")])
def test_the_report_time_axis_unit_fits_the_run(span_s, unit):
    from diagnoser.metrics.plots import time_unit

    assert time_unit(span_s)[0] == unit
