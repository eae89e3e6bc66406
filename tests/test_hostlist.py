"""Node lists are printed compressed the way Slurm writes them, and expand back to the same nodes."""

from __future__ import annotations

import random

from rich.console import Console

from diagnoser.hostlist import compress_hostlist
from diagnoser.models import Action, Category, Culprit, Diagnosis
from diagnoser.render import render
from diagnoser.slurm.records import expand_hostlist


def test_a_range_of_padded_names_is_one_bracket() -> None:
    assert compress_hostlist([f"gpu{i:03d}" for i in range(200, 0, -1)] + ["login1"]) == "gpu[001-200],login1"
    assert compress_hostlist(["gpu9", "gpu10", "gpu11", "gpu13"]) == "gpu[9-11,13]"
    assert compress_hostlist(["gpu-017", "gpu-018", "node-b", "gpu-017"]) == "gpu-[017-018],node-b"
    assert compress_hostlist(["gpu001", "gpu100", "gpu101"]) == "gpu[001,100-101]"
    assert compress_hostlist(["n1-ib", "n2-ib"]) == "n[1-2]-ib"
    assert compress_hostlist([]) == ""


def test_compressed_lists_expand_to_the_same_nodes() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        pool = [f"{p}{n:0{w}d}{s}" for p in ("gpu", "gpu-", "n") for w in (1, 3) for n in rng.sample(range(1200), 4)
                for s in ("", "-ib")] + ["login", "x0"]
        nodes = rng.sample(pool, rng.randint(1, 25))
        assert sorted(expand_hostlist(compress_hostlist(nodes))) == sorted(set(nodes))


def test_the_verdict_view_prints_200_nodes_as_one_hostlist() -> None:
    d = Diagnosis(category=Category.INFRA, subtype="nfs_down", action=Action.RESTART_EXCLUDING_NODES,
                  confidence=0.8, root_cause="NFS server lost", culprit=Culprit(nodes=[f"gpu{i:03d}" for i in
                                                                                       range(1, 201)]))
    console = Console(record=True, width=100)
    render(d, None, console)
    text = console.export_text()
    assert "nodes: gpu[001-200]" in text and "gpu002" not in text
