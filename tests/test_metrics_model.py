"""The analytic model against values computed by hand."""

from __future__ import annotations

import math

import pytest

from diagnoser.metrics import model
from diagnoser.metrics.model import WhatIfParams


def test_mttf_at_design_scales():
    # r_f = 6.5 per 1,000 node-days (Meta RSC-1), 8 GPUs per node
    # 1,024 GPUs = 128 nodes: 0.832 failures/day -> 28.85 h
    assert model.mttf_s(128, 6.5) / 3600 == pytest.approx(24 / 0.832, rel=1e-9)
    # 16,384 GPUs = 2,048 nodes: 13.312/day -> 1.80 h (DESIGN: ≈ 1.8 h)
    assert model.mttf_s(2048, 6.5) / 3600 == pytest.approx(1.803, abs=1e-3)
    # 131,072 GPUs = 16,384 nodes: 106.5/day -> 13.5 min (DESIGN: ≈ 14 min)
    assert model.mttf_s(16384, 6.5) / 60 == pytest.approx(13.52, abs=0.01)
    # RSC-2's 2.34: 1,024 GPUs -> 80.1 h
    assert model.mttf_s(128, 2.34) / 3600 == pytest.approx(80.13, abs=0.01)


def test_expected_ettr_by_hand():
    # λ = 2048 * 6.5 / 1000 / 86400 = 1.540741e-4 /s; u0 = 600, Δ = 1800, w = 60
    # (1 - λ·(600 + 900)) / (1 + 60/1800) = (1 - 0.231111) / 1.033333 = 0.744086
    assert model.expected_ettr(2048, 6.5, 600, 1800, 60) == pytest.approx(0.744086, abs=1e-6)
    # no failures: only the checkpoint overhead remains
    assert model.expected_ettr(2048, 0.0, 600, 1800, 60) == pytest.approx(1800 / 1860)
    # beyond the model's range the first-order value would be negative: clamped
    assert model.expected_ettr(16384, 6.5, 3600, 3600, 60) == 0.0


def test_optimal_interval_by_hand_and_is_a_maximum():
    # sqrt(2 * 60 / 1.540741e-4) = sqrt(778846) = 882.5 s
    opt = model.optimal_interval_s(2048, 6.5, 60)
    assert opt == pytest.approx(882.52, abs=0.01)
    best = model.expected_ettr(2048, 6.5, 600, opt, 60)
    for other in (opt / 3, opt / 1.5, opt * 1.5, opt * 3):
        assert model.expected_ettr(2048, 6.5, 600, other, 60) < best


def test_renewal_agrees_at_small_load_and_departs_at_large():
    small = (128, 6.5, 600, model.optimal_interval_s(128, 6.5, 60), 60)
    assert model.renewal_ettr(*small) == pytest.approx(model.expected_ettr(*small), rel=0.005)
    big = (16384, 6.5, 600, model.optimal_interval_s(16384, 6.5, 60), 60)
    assert model.renewal_ettr(*big) > 4 * model.expected_ettr(*big)
    assert model.renewal_ettr(128, 0.0, 600, 1800, 60) == pytest.approx(1800 / 1860)


def test_whatif_point_and_curve():
    res = model.whatif(WhatIfParams(gpus=1024, restart_s=600, checkpoint_write_s=60, checkpoint_interval_s=3600),
                       scales=[1024, 16384, 131072])
    p = res.point
    assert (p.gpus, p.nodes) == (1024, 128)
    assert p.interval_s == 3600
    lam = 128 * 6.5 / 1000 / 86400
    assert p.ettr == pytest.approx((1 - lam * (600 + 1800)) / (1 + 60 / 3600))
    assert p.optimal_interval_s == pytest.approx(math.sqrt(120 / lam))
    assert [c.gpus for c in res.curve] == [1024, 16384, 131072]
    ettrs = [c.ettr_at_optimal for c in res.curve]
    assert ettrs == sorted(ettrs, reverse=True)
    assert p.first_order_ok and p.load == pytest.approx(lam * 2400)
    assert not res.curve[-1].first_order_ok  # 131,072 GPUs: λ·(u0 + Δ/2) ≈ 0.9
    assert model.whatif(WhatIfParams(gpus=3000), scales=[1024]).curve[-1].gpus == 3000


def test_whatif_params_reject_nonsense():
    with pytest.raises(ValueError):
        WhatIfParams(gpus=0)
    with pytest.raises(ValueError):
        WhatIfParams(rf_per_1000_node_days=0)
    with pytest.raises(ValueError):
        WhatIfParams(typo=1)


def test_scale_grid():
    assert model.scale_grid(1024, 8192) == [1024, 2048, 4096, 8192]
