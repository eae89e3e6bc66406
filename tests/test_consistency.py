"""Failures no single line shows: the job's processes disagree on what must agree (prefilter/consistency.py)."""

from __future__ import annotations

from pathlib import Path

from diagnoser.models import Action, Category
from diagnoser.prefilter.consistency import NET_ENTRY, RANK_ENTRY
from diagnoser.triage import triage

WATCHDOG = ("[rank0]:[E1128 04:12:55.118202 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
            "600047 milliseconds before timing out.")
HPCX = "/opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so"


def nccl_init(host: str, pid: int, plugin: str | None, network: str, ranks: range) -> str:
    """What NCCL_DEBUG=INFO prints on one node at init: the plugin loader's word, the network, the ranks."""
    lines = []
    for dev, rank in enumerate(ranks):
        p = f"{host}:{pid + dev}:{pid + dev + 60} [{dev}] NCCL INFO"
        lines.append(f"{p} Bootstrap : Using ib0:10.4.0.{rank // 8 + 11}<0>")
        lines.append(f"{p} Plugin Path : {plugin}" if plugin else
                     f"{p} NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.")
        lines.append(f"{p} Using network {network}")
        lines.append(f"{p} comm 0x55d1c8a3e0 rank {rank} nranks 24 cudaDev {dev} nvmlDev {dev} busId "
                     f"{(0x18 + 0x20 * dev):x}000 commId 0x9e1f3a6b2c4d8e71 - Init START")
    return "\n".join(lines) + "\n"


def job(tmp_path: Path, nodes: dict[str, str], tail: str = WATCHDOG) -> Path:
    """A per-node layout: node-x/rank*.log holds that node's NCCL output; the first node's log ends in `tail`."""
    for n, (node, text) in enumerate(nodes.items()):
        (tmp_path / node).mkdir(parents=True)
        (tmp_path / node / f"rank{8 * n}.log").write_text(text + (tail + "\n" if n == 0 else ""))
    return tmp_path


def test_a_node_without_the_net_plugin_is_the_cause_of_a_first_collective_hang(tmp_path: Path):
    d = job(tmp_path, {"node-a": nccl_init("gpu-a07", 3100, HPCX, "IBext_v8", range(0, 8)),
                       "node-b": nccl_init("gpu-a08", 4100, HPCX, "IBext_v8", range(8, 16)),
                       "node-c": nccl_init("gpu-a09", 5100, None, "IB", range(16, 24))})
    v = triage([str(d)])
    assert (v.rule, v.category, v.action) == (NET_ENTRY, Category.INFRA, Action.ESCALATE)
    assert v.culprit.nodes == ["gpu-a09"]
    assert "Could not find: libnccl-net.so" in v.evidence[0].text  # the odd node's own line leads
    assert "gpu-a09" in v.root_cause


def test_with_two_nodes_the_one_that_fell_back_to_sockets_is_named(tmp_path: Path):
    d = job(tmp_path, {"node-a": nccl_init("n1", 3100, None, "IB", range(0, 8)),
                       "node-b": nccl_init("n2", 4100, None, "Socket", range(8, 16))})
    v = triage([str(d)])
    assert v.rule == NET_ENTRY and v.culprit.nodes == ["n2"]


def test_nodes_that_agree_are_not_a_finding(tmp_path: Path):
    d = job(tmp_path, {"node-a": nccl_init("gpu-a07", 3100, HPCX, "IBext_v8", range(0, 8)),
                       "node-b": nccl_init("gpu-a08", 4100, HPCX, "IBext_v8", range(8, 16))})
    assert triage([str(d)]).rule != NET_ENTRY


def test_a_plugin_found_under_its_second_name_counts_as_loaded(tmp_path: Path):
    """The loader tries libnccl-net-<name>.so and libnccl-net.so: a failed first try is not a fallback."""
    tried = ("n1:3100:3160 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net-ofi.so: cannot open shared "
             "object file: No such file or directory : when loading libnccl-net-ofi.so\n"
             "n1:3100:3160 [0] NCCL INFO NET/Plugin: Loaded net plugin AWS Libfabric (v9)\n"
             "n1:3100:3160 [0] NCCL INFO Using network AWS Libfabric\n")
    other = ("n2:4100:4160 [0] NCCL INFO NET/Plugin: Loaded net plugin AWS Libfabric (v9)\n"
             "n2:4100:4160 [0] NCCL INFO Using network AWS Libfabric\n")
    assert triage([str(job(tmp_path, {"node-a": tried, "node-b": other}))]).rule != NET_ENTRY


def test_a_split_cluster_names_no_node(tmp_path: Path):
    """Half the nodes on the plugin, half without: the disagreement stands, but no node is the odd one."""
    nodes = {f"node-{i}": nccl_init(f"h{i}", 3000 + 100 * i, HPCX if i < 2 else None, "IBext_v8" if i < 2 else "IB",
                                    range(8 * i, 8 * i + 8)) for i in range(4)}
    v = triage([str(job(tmp_path, nodes))])
    assert v.rule == NET_ENTRY and v.culprit.nodes == []


def test_a_hardware_fault_on_a_node_stands_over_the_disagreement(tmp_path: Path):
    d = job(tmp_path, {"node-a": nccl_init("gpu-a07", 3100, HPCX, "IBext_v8", range(0, 8)),
                       "node-b": nccl_init("gpu-a08", 4100, None, "IB", range(8, 16))})
    (d / "node-a" / "dmesg.log").write_text(
        "[Fri Nov 28 04:02:11 2026] NVRM: Xid (PCI:0000:18:00): 79, pid=3100, GPU has fallen off the bus.\n")
    v = triage([str(d)])
    assert v.category == Category.HARDWARE and v.rule != NET_ENTRY


def test_two_processes_taking_the_same_rank_is_the_launch_not_the_network(tmp_path: Path):
    """Each node started its own ranks 0-3 of a world of 8 (no srun): a store timeout follows."""
    for node in ("node-a", "node-b"):
        (tmp_path / node).mkdir()
        (tmp_path / node / "train.log").write_text("".join(
            f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8\n" for r in range(4)) + (
            "torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 4/8 clients "
            "joined.\n"))
    v = triage([str(tmp_path)])
    assert (v.rule, v.category, v.action) == (RANK_ENTRY, Category.USER_CODE, Action.STOP_AND_NOTIFY)
    assert v.culprit.nodes == []
    assert "4 rank(s) never joined" in v.root_cause


def test_a_restart_logging_every_rank_again_is_not_a_collision(tmp_path: Path):
    """srun --label: the same task logs its rank once per attempt, and every rank of the world is there."""
    attempt = "".join(f"{r}: Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/4\n" for r in range(4))
    (tmp_path / "slurm-4242.out").write_text(attempt + "0: Restarting from checkpoint step 1200\n" + attempt)
    assert triage([str(tmp_path)]).rule != RANK_ENTRY


def test_one_processs_log_of_two_attempts_is_not_a_collision(tmp_path: Path):
    (tmp_path / "rank3.log").write_text("Initializing distributed: GLOBAL_RANK: 3, MEMBER: 4/8\n"
                                        "Initializing distributed: GLOBAL_RANK: 3, MEMBER: 4/8\n")
    assert triage([str(tmp_path)]).rule != RANK_ENTRY


def test_each_nodes_choice_is_kept_once_however_many_ranks_repeat_it(tmp_path: Path):
    """Memory stays bounded by nodes, not by rank files: every rank of a node logs the same choice."""
    from diagnoser.triage import analyse

    for rank in range(32):
        host = f"gpu-b{rank // 8:02d}"
        (tmp_path / f"rank{rank}.log").write_text(nccl_init(host, 4000 + rank, HPCX, "IBext_v8", range(rank, rank + 1)))
    facts = analyse([str(tmp_path)]).scan.topology.facts
    assert sorted((f.host, f.kind) for f in facts) == sorted((f"gpu-b{n:02d}", k) for n in range(4)
                                                             for k in ("plugin", "network"))


def test_a_site_runbook_of_the_same_id_decides_the_disagreement(tmp_path: Path):
    """A site that drains such nodes instead of paging an operator says so once, in its own runbook."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "net-mismatch.md").write_text(f"""---
id: {NET_ENTRY}
title: 'Nodes on different NCCL networks (site: drain the odd node)'
category: infra
subtype: nccl_net_inconsistent_across_nodes
action: drain_and_restart
priority: 72
confidence: 0.8
given_by: prefilter/consistency.py
---
# Nodes on different NCCL networks

Drain the odd node; the image team re-provisions it.
""")
    d = job(tmp_path / "job", {"node-a": nccl_init("gpu-a07", 3100, HPCX, "IBext_v8", range(0, 8)),
                               "node-b": nccl_init("gpu-a08", 4100, HPCX, "IBext_v8", range(8, 16)),
                               "node-c": nccl_init("gpu-a09", 5100, None, "IB", range(16, 24))})
    v = triage([str(d)], runbook_dir=site)
    assert (v.rule, v.action, v.culprit.nodes) == (NET_ENTRY, Action.DRAIN_AND_RESTART, ["gpu-a09"])
