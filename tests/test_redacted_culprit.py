"""Logs pasted into a ticket or a chat often hide host names ("ip: xxx", "<redacted>", "[monitor-ip]"): such a
placeholder names no node, so triage does not drain it, nor the node whose log reported it."""

import pytest
from triage_support import triage_files as _triage

_RAY_NODE_DEAD = ("The node with node id: {id} and ip: {ip} has been marked dead because the detector has missed too "
                  "many heartbeats from it. This can happen when a raylet crashes unexpectedly or has lagging "
                  "heartbeats.\n")


@pytest.mark.parametrize("placeholder", ["xxx", "XXX", "***", "<redacted>", "[node-ip]", "{hostname}"])
def test_a_redacted_node_is_not_named(tmp_path, placeholder):
    d = _triage(tmp_path, {"ray-head.log": _RAY_NODE_DEAD.format(id="xxx", ip=placeholder)})
    assert (d.category.value, d.subtype) == ("infra", "scheduler_node_failure")
    assert d.culprit.nodes == []


def test_a_real_address_is_still_named(tmp_path):
    d = _triage(tmp_path, {"ray-head.log": _RAY_NODE_DEAD.format(id="8f2c41d9a0b7", ip="10.202.0.99")})
    assert d.culprit.nodes == ["10.202.0.99"]


def test_a_redacted_node_does_not_make_the_reporting_node_the_culprit(tmp_path):
    # the head node logs another node's death: with that node's name hidden, the head is still not the culprit
    d = _triage(tmp_path, {"ray-head-0/ray-head.log": _RAY_NODE_DEAD.format(id="xxx", ip="xxx")})
    assert d.culprit.nodes == []
