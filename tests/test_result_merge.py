"""Results folded as workers answer: the job's topology is the one file order gives."""

from __future__ import annotations

import random

from diagnoser.collect.nccl import RankPlacement
from diagnoser.prefilter.merge import ResultMerger
from diagnoser.prefilter.scan import SourceResult


def _result(i: int, placements, ips=(), tasks=()) -> SourceResult:
    r = SourceResult(f"gpu-{i:03d}/rank{i}.log", "log", f"gpu-{i:03d}", rank=i, counts={"nccl-collective-timeout": 1})
    r.placed = (tuple(placements), tuple(ips), tuple(tasks), (), ())
    return r


def _files() -> list[SourceResult]:
    """Rank 3 is placed by two files (a restarted rank: the later file is right); an ip changes hands."""
    out = [_result(i, [(i, RankPlacement(i, f"gpu-{i // 8:03d}", i % 8, f"0000:{i % 8}a:00", 16, 100 + i))],
                   [(f"10.0.0.{i // 8}", f"gpu-{i // 8:03d}")], [(i, f"gpu-{i // 8:03d}")]) for i in range(16)]
    out.append(_result(16, [(3, RankPlacement(3, "gpu-009", 3, "0000:3a:00", 16, 999))],
                        [("10.0.0.0", "gpu-009")], [(3, "gpu-009")]))
    return out


def test_a_later_file_wins_whatever_order_the_results_arrive_in() -> None:
    in_order = ResultMerger()
    for i, r in enumerate(_files()):
        in_order.add(i, r)
    expected = in_order.topology()
    assert expected.node_of_rank(3) == "gpu-009" and expected.placements[3].pid == 999
    assert expected.node_ips["10.0.0.0"] == "gpu-009" and expected.task_nodes[3] == "gpu-009"
    assert list(expected.placements) == list(range(16))  # a key keeps the place it was first said at
    for seed in range(5):
        files = list(enumerate(_files()))
        random.Random(seed).shuffle(files)
        shuffled = ResultMerger()
        for i, r in files:
            shuffled.add(i, r)
        got = shuffled.topology()
        assert got == expected and list(got.placements) == list(expected.placements)
        assert all(r.placed is None for _, r in files)  # folded in: no per-file copy is kept


def test_identical_counts_and_node_names_are_held_once() -> None:
    merger = ResultMerger()
    files = _files()
    for i, r in enumerate(files):
        merger.add(i, r)
    assert len({id(r.counts) for r in files}) == 1
    topo = merger.topology()
    assert topo.placements[8].node is topo.placements[9].node
