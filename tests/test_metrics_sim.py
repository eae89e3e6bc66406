"""The discrete-event simulator: determinism, agreement with the analytic model, policy ordering."""

from __future__ import annotations

import json

import pytest

from diagnoser.metrics import model
from diagnoser.metrics.sim import (
    Confusion,
    SimConfig,
    compare_policies,
    load_config,
    load_confusion,
    make_policy,
    simulate,
    validate_model,
)
from diagnoser.metrics.sim.config import CategoryRates
from diagnoser.models import Category


def test_same_seed_same_run_other_seed_other_run():
    cfg = load_config(days=10)
    pol = make_policy("diagnoser", load_confusion())
    a, b = simulate(cfg, pol, 16384, seed=7), simulate(cfg, pol, 16384, seed=7)
    assert a == b
    assert simulate(cfg, pol, 16384, seed=8).ettr != a.ettr
    assert a.failures > 50
    assert sum(a.phase_s.values()) == pytest.approx(a.wall_s, rel=1e-9)  # every second accounted


@pytest.mark.parametrize("gpus", [1024, 4096, 16384])
def test_simulator_within_5_percent_of_analytic_where_assumptions_hold(gpus):
    (row,) = validate_model([gpus], days=120, seeds=2)
    assert row.load < 0.2  # λ·(u0 + Δ/2) small: the first-order model applies
    assert row.rel_error < 0.05


def test_simulator_matches_exact_renewal_value_beyond_the_first_order_model():
    (row,) = validate_model([131072], days=20, seeds=2)
    assert row.rel_error > 0.5  # the first-order formula is off at this load...
    assert row.simulated == pytest.approx(row.renewal, rel=0.03)  # ...the simulator is not


def test_simulated_failure_count_matches_rate():
    cfg = SimConfig.model_assumptions(6.5, restart_s=0, write_s=0, interval_s=3600, days=200)
    res = simulate(cfg, make_policy("naive"), 16384, seed=1)
    expected = model.failure_rate(2048, 6.5) * cfg.days * 86400  # ≈ 2662
    assert res.failures == pytest.approx(expected, rel=0.05)


def test_policy_ordering_with_default_rates():
    rows = compare_policies(load_config(days=90), [1024, 16384], seeds=4, confusion=load_confusion())
    for g in (1024, 16384):
        e = {r.policy: r.ettr for r in rows if r.gpus == g}
        assert e["oracle"] >= e["diagnoser"] >= e["naive"], (g, e)


def test_excluding_lemon_nodes_is_what_saves_time():
    lemons_only = {Category.HARDWARE: CategoryRates(rate_per_1000_node_days=6.5, persistent_fraction=1.0,
                                                    recur_mean_s=1800)}
    cfg = SimConfig(days=20, categories=lemons_only, diagnosis_s=0)
    naive = simulate(cfg, make_policy("naive"), 8192, 3)
    perfect = simulate(cfg, make_policy("diagnoser", Confusion.perfect()), 8192, 3)
    oracle = simulate(cfg, make_policy("oracle"), 8192, 3)
    assert naive.failures > 2 * perfect.failures
    assert perfect.excluded_faults == perfect.failures  # every lemon drained at its first failure
    assert perfect.ettr == pytest.approx(oracle.ettr, abs=0.02)
    assert naive.ettr < perfect.ettr - 0.1


def test_diagnosis_accuracy_matters():
    cfg = load_config(days=60)
    good = Confusion.perfect()
    blind = Confusion(labels=list(Category), matrix=[[0, 1, 0, 0]] * 4)  # says "infra" to everything
    assert blind.accuracy(Category.HARDWARE) == 0
    e_good = simulate(cfg, make_policy("diagnoser", good), 16384, 5).ettr
    e_blind = simulate(cfg, make_policy("diagnoser", blind), 16384, 5).ettr
    assert e_good > e_blind + 0.03


def test_confusion_matrix_file(tmp_path):
    default = load_confusion()
    assert default.labels == [Category.HARDWARE, Category.INFRA, Category.USER_CODE, Category.UNKNOWN]
    # the shipped default is the measured rules-only accuracy on the development set (bench/accuracy.py)
    assert all(0.85 <= default.accuracy(c) <= 1.0 for c in default.labels)
    p = tmp_path / "cm.json"
    p.write_text(json.dumps({"labels": ["hardware", "user_code"], "matrix": [[8, 2], [1, 9]]}))
    cm = load_confusion(p)
    assert cm.row(Category.HARDWARE) == [(Category.HARDWARE, 0.8), (Category.USER_CODE, 0.2)]
    assert cm.row(Category.INFRA) == [(Category.INFRA, 1.0)]  # no row: taken as right
    p.write_text(json.dumps({"labels": ["hardware", "infra"], "matrix": [[1, 0]]}))
    with pytest.raises(ValueError):
        load_confusion(p)


def test_config_file_overrides(tmp_path):
    p = tmp_path / "rates.toml"
    p.write_text('[simulate]\ndays = 7\nhang_detect_s = 30\n'
                 '[simulate.categories.hardware]\nrate_per_1000_node_days = 3.0\n')
    cfg = load_config(p, days=None)
    assert (cfg.days, cfg.hang_detect_s) == (7, 30)
    hw = cfg.categories[Category.HARDWARE]
    assert hw.rate_per_1000_node_days == 3.0 and hw.persistent_fraction == 0.2  # other fields kept
    assert load_config(p, days=2).days == 2
    y = tmp_path / "rates.yaml"
    y.write_text("simulate:\n  restart_s: 120\n")
    assert load_config(y).restart_s == 120
    y.write_text("simulate:\n  restrat_s: 120\n")
    with pytest.raises(ValueError):
        load_config(y)


def test_unknown_failures_restart_without_waiting_for_a_human():
    transient = {Category.INFRA: CategoryRates(rate_per_1000_node_days=6.5, persistent_fraction=0.0)}
    cfg = SimConfig(days=20, categories=transient, diagnosis_s=0)
    says_unknown = Confusion(labels=list(Category), matrix=[[0, 0, 0, 1]] * 4)
    naive = simulate(cfg, make_policy("naive"), 16384, 2)
    unsure = simulate(cfg, make_policy("diagnoser", says_unknown), 16384, 2)
    assert unsure.phase_s["stopped"] == 0 and unsure.ettr == pytest.approx(naive.ettr, abs=0.01)


def test_crash_loop_breaker_gets_a_human_to_remove_a_lemon_the_triage_cannot_name():
    lemons = {Category.HARDWARE: CategoryRates(rate_per_1000_node_days=6.5, persistent_fraction=1.0,
                                               recur_mean_s=1800)}
    cfg = SimConfig(days=20, categories=lemons, diagnosis_s=0)
    says_unknown = Confusion(labels=list(Category), matrix=[[0, 0, 0, 1]] * 4)
    naive = simulate(cfg, make_policy("naive"), 8192, 3)
    unsure = simulate(cfg, make_policy("diagnoser", says_unknown), 8192, 3)
    assert unsure.excluded_faults > 0 and unsure.failures < naive.failures
    assert unsure.ettr > naive.ettr
