"""Fold each file's result into the job's as it arrives, so 100,000 results stay small.

What a file said about where ranks ran goes into one job-wide topology at once (in the order of the
files, whatever order the workers answer in: a later file's word wins, as before); collateral lines
past the budget become facts (collateral.py); identical small values (rule counts, strings the
files repeat) are shared instead of held once per file.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from diagnoser.collect import nccl
from diagnoser.prefilter.collateral import CollateralBudget
from diagnoser.prefilter.matching import JobFact, Topology, fact_key

if TYPE_CHECKING:
    from diagnoser.prefilter.scan import SourceResult


class ResultMerger:
    def __init__(self) -> None:
        self.budget = CollateralBudget()
        self._counts: dict[tuple, dict[str, int]] = {}
        self._values: dict[tuple[type, object], object] = {}
        # key -> (where it was first said, where last, the last word), a place being file index << 32
        # | position in the file's list: as merged in file order, a key keeps its first place and the
        # last word
        self._placements: dict[int, tuple[int, int, nccl.RankPlacement]] = {}
        self._node_ips: dict[str, tuple[int, int, str]] = {}
        self._task_nodes: dict[int, tuple[int, int, str]] = {}
        self._task_exits: list[tuple[int, int, tuple]] = []
        # a fact's key -> (file index, position, the fact): the first saying of each, in file order (consistency.py
        # compares distinct choices per node and distinct processes per rank; repeats only cost memory)
        self._facts: dict[tuple, tuple[int, int, JobFact]] = {}

    def add(self, index: int, result: SourceResult) -> None:
        """`index`: the file's place in the job's list of sources."""
        self.budget.absorb(result)
        if result.counts:
            key = tuple(sorted(result.counts.items()))
            result.counts = self._counts.setdefault(key, result.counts)  # read-only from here on
        if result.node is not None:
            result.node = sys.intern(result.node)
        if result.placed is not None:
            self._place(index, result.placed)
            result.placed = None

    def _share(self, value):  # noqa: ANN001, ANN202 - a str or an int
        return self._values.setdefault((type(value), value), value)

    @staticmethod
    def _said(table: dict, key, at: int, value) -> None:  # noqa: ANN001 - a rank or an ip, its value
        entry = table.get(key)
        if entry is None:
            table[key] = (at, at, value)
        else:
            first, last, word = entry
            table[key] = (min(first, at), *((at, value) if at >= last else (last, word)))

    def _place(self, index: int, placed: tuple) -> None:
        placements, node_ips, task_nodes, task_exits, facts = placed
        for n, (rank, p) in enumerate(placements):
            self._said(self._placements, rank, index << 32 | n, nccl.RankPlacement(
                p.rank, self._share(p.node), p.device, self._share(p.bus_id), self._share(p.nranks), p.pid))
        for n, (ip, node) in enumerate(node_ips):
            self._said(self._node_ips, ip, index << 32 | n, self._share(node))
        for n, (rank, node) in enumerate(task_nodes):
            self._said(self._task_nodes, rank, index << 32 | n, self._share(node))
        self._task_exits.extend((index, n, exit_) for n, exit_ in enumerate(task_exits))
        for n, fact in enumerate(facts):
            key = fact_key(fact)
            if key not in self._facts or (index, n) < self._facts[key][:2]:
                self._facts[key] = (index, n, fact)

    def topology(self) -> Topology:
        def in_file_order(table: dict) -> dict:
            return {key: entry[2] for key, entry in sorted(table.items(), key=lambda kv: kv[1][0])}

        return Topology(in_file_order(self._placements), in_file_order(self._node_ips),
                        in_file_order(self._task_nodes), [exit_ for *_, exit_ in sorted(self._task_exits,
                                                                                        key=lambda t: t[:2])],
                        [fact for *_, fact in sorted(self._facts.values(), key=lambda t: t[:2])])
