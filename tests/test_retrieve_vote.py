"""The neighbour vote decides only when a close neighbourhood agrees; otherwise the verdict stays unknown."""

import pytest

from diagnoser.retrieve.incident import Incident, Status
from diagnoser.retrieve.vote import MIN_SCORE, THRESHOLD, neighbour_vote, tally


def inc(i: int, category: str = "hardware", subtype: str = "gpu_xid_79", action: str = "drain_and_restart",
        status: Status = Status.CONFIRMED, resolution: str | None = None) -> Incident:
    return Incident(id=f"inc-{i:05d}", signature=f"sig {i}", category=category, subtype=subtype, action=action,
                    status=status, resolution=resolution)


def test_a_close_agreeing_neighbourhood_decides():
    vote = neighbour_vote([(inc(1, resolution="drained gpu-017"), 0.93), (inc(2), 0.81),
                           (inc(3, "user_code", "cuda_oom", "stop_and_notify"), 0.30)])
    assert vote is not None
    assert (vote.category.value, vote.subtype, vote.action.value) == ("hardware", "gpu_xid_79", "drain_and_restart")
    assert vote.support == ["inc-00001", "inc-00002"] and vote.resolution == "drained gpu-017"
    assert THRESHOLD <= vote.confidence <= 0.93


def test_weak_or_split_neighbourhoods_abstain():
    assert neighbour_vote([]) is None
    assert neighbour_vote([(inc(1), THRESHOLD - 0.05)]) is None  # closest neighbour not close enough
    assert neighbour_vote([(inc(1), MIN_SCORE - 0.01)]) is None and tally([(inc(1), MIN_SCORE - 0.01)]) is None
    split = [(inc(1), 0.8), (inc(2, "user_code", "cuda_oom", "stop_and_notify"), 0.8)]
    assert tally(split).confidence == pytest.approx(0.4)
    assert neighbour_vote(split, threshold=0.45) is None


def test_the_threshold_is_the_boundary():
    neighbours = [(inc(1), 0.7)]
    assert neighbour_vote(neighbours, threshold=0.7) is not None
    assert neighbour_vote(neighbours, threshold=0.7001) is None


def test_a_vote_for_unknown_never_decides():
    timeouts = [(inc(1, "unknown", "collective_timeout", "escalate"), 0.99)]
    assert tally(timeouts).category.value == "unknown"
    assert neighbour_vote(timeouts) is None


def test_people_outweigh_unconfirmed_triages():
    neighbours = [(inc(1, "infra", "nccl_network_error", "retry_after_backoff", status=Status.UNCONFIRMED), 0.9),
                  (inc(2, "hardware", "ib_link_down", "restart_excluding_nodes", status=Status.CONFIRMED), 0.85)]
    vote = tally(neighbours)
    assert (vote.category.value, vote.subtype) == ("hardware", "ib_link_down")


def test_subtype_and_action_follow_the_weight_within_the_winning_category():
    neighbours = [(inc(1, subtype="gpu_xid_48_dbe"), 0.6), (inc(2), 0.58), (inc(3), 0.57)]
    assert tally(neighbours).subtype == "gpu_xid_79"
