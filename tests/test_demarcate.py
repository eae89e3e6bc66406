"""First-failure demarcation and culprit localisation, on hand-built matches."""

from datetime import UTC, datetime, timedelta

from diagnoser.collect.nccl import RankPlacement
from diagnoser.models import LogRecord, Role, SignatureMatch
from diagnoser.prefilter.culprit import locate
from diagnoser.prefilter.demarcate import demarcate
from diagnoser.prefilter.matching import Topology

T = datetime(2026, 3, 4, 5, 0, tzinfo=UTC)


def m(book, prio, t=None, role=Role.ROOT, kind="log", node=None, rank=None, line=1, **fields):
    rec = LogRecord(source=f"{node or 'x'}/{book}.log", line=line, text=book, time=t, node=node, rank=rank,
                    kind=kind)
    return SignatureMatch(runbook_id=book, record=rec, role=role, priority=prio, fields=fields)


def test_specific_hardware_fault_beats_an_earlier_generic_error_inside_the_window():
    cuda = m("cuda-unknown", 50, T, rank=5)
    xid = m("xid79", 97, T + timedelta(seconds=2), kind="dmesg", node="gpu-017")
    d = demarcate([cuda, xid], (T - timedelta(hours=1), T + timedelta(hours=1)))
    assert d.root is xid and d.competing == [cuda]


def test_a_failure_after_the_window_is_a_consequence_not_the_root():
    exc = m("keyerror", 20, T, rank=3)
    late_xid = m("xid79", 97, T + timedelta(minutes=5), kind="dmesg", node="gpu-002")
    d = demarcate([exc, late_xid], (T - timedelta(hours=1), T + timedelta(hours=1)))
    assert d.root is exc and d.later == [late_xid]


def test_old_kernel_events_are_history():
    old = m("xid79", 97, T - timedelta(days=3), kind="dmesg", node="gpu-001")
    oom = m("cuda-oom", 66, None, rank=1)
    d = demarcate([old, oom], (T, T + timedelta(hours=2)))
    assert d.root is oom and d.history == [old]


def test_with_only_a_kernel_log_the_latest_incident_is_the_failure_and_older_bursts_are_history():
    # a node's `dmesg -T`: application Xids days ago on other GPUs, the contained ECC error now
    app = [m("xid43", 40, T - timedelta(days=9), kind="dmesg", node="n4", line=1),
           m("xid31", 42, T - timedelta(days=4), kind="dmesg", node="n4", line=2)]
    ecc = m("xid94", 88, T, kind="dmesg", node="n4", line=3)
    d = demarcate([*app, ecc], (None, None))
    assert d.root is ecc and d.history == app


def test_a_kernel_cascade_without_gaps_is_one_incident_and_its_first_failure_decides():
    # within one burst (events less than the margin apart) the first-failure window still rules
    burst = [m("xid79", 97, T, kind="dmesg", node="n1", line=1),
             *(m("xid45", 30, T + timedelta(minutes=k), kind="dmesg", node="n1", line=2 + k) for k in range(0, 40, 8))]
    d = demarcate(burst, (None, None))
    assert d.root is burst[0] and not d.history


def test_collateral_never_decides_while_a_root_signature_fired():
    timeouts = [m("timeout", 15, T - timedelta(seconds=100), role=Role.COLLATERAL, rank=r) for r in range(63)]
    exc = m("python-exception", 12, T, rank=7)
    d = demarcate([*timeouts, exc], (None, None))
    assert d.root is exc and len(d.collateral) == 63


def test_only_collateral_then_it_decides():
    timeouts = [m("timeout", 15, T, role=Role.COLLATERAL, rank=r) for r in range(4)]
    d = demarcate(timeouts, (None, None))
    assert d.root.runbook_id == "timeout" and len(d.supporting) == 4


def test_ties_go_to_the_earliest():
    a = m("oom", 66, T + timedelta(seconds=3), rank=2)
    b = m("oom", 66, T + timedelta(seconds=1), rank=9)
    assert demarcate([a, b], (None, None)).root is b


def test_xid_bus_id_is_mapped_to_the_rank_that_used_the_gpu():
    topo = Topology(placements={5: RankPlacement(5, "gpu-017", 1, "0000:3b:00", 16),
                                4: RankPlacement(4, "gpu-017", 0, "0000:18:00", 16)})
    xid = m("xid79", 97, T, kind="dmesg", node="gpu-017", gpu="0000:3b:00")
    c = locate([xid], topo, hardware=True)
    assert (c.nodes, c.ranks, c.gpus) == (["gpu-017"], [5], ["0000:3b:00"])


def test_a_hardware_line_names_its_gpu_by_the_drivers_device_prefix_not_the_pcie_ports():
    """Where a signature captured no GPU, the kernel's device prefix of the GPU driver names it (and so
    the rank on it); a PCIe root port's address is the port, not a GPU."""
    topo = Topology(placements={3: RankPlacement(3, "gpu-017", 3, "0000:83:00", 16)})

    def line(text: str) -> SignatureMatch:
        rec = LogRecord(source="gpu-017/dmesg.log", line=1, text=text, time=T, node="gpu-017", kind="dmesg")
        return SignatureMatch(runbook_id="hw", record=rec, role=Role.ROOT, priority=90, fields={})

    amd = line("[ 1358.996458] amdgpu 0000:83:00.0: uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!")
    assert (locate([amd], topo, hardware=True).gpus, locate([amd], topo, hardware=True).ranks) == (["0000:83:00"], [3])
    agent = line("XID 79(GPU has fallen off the bus) detected on PCI:0000:ae:00")
    assert locate([agent], topo, hardware=True).gpus == ["0000:ae:00"]
    port = line("pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer")
    assert locate([port], topo, hardware=True).gpus == []
    assert locate([amd], topo, hardware=False).gpus == []  # only a hardware verdict names a GPU


def test_errors_that_name_one_peer_blame_the_peer_node_not_the_reporters():
    topo = Topology(node_ips={"10.0.0.9": "gpu-009"})
    reports = [m("ib", 76, T, node=f"gpu-00{i}", rank=i, peer="10.0.0.9") for i in range(1, 5)]
    c = locate(reports, topo)
    assert c.nodes == ["gpu-009"] and c.ranks == []


def test_one_rank_naming_one_peer_blames_nobody_either_end_may_be_broken():
    topo = Topology(node_ips={"10.0.0.9": "gpu-009"})
    retries = [m("ib", 76, T + timedelta(seconds=i), node="gpu-001", rank=1, peer="10.0.0.9", line=i) for i in range(3)]
    c = locate(retries, topo)
    assert c.nodes == [] and c.ranks == []
    second = m("ib", 76, T, node="gpu-002", rank=2, peer="10.0.0.9")
    assert locate([*retries, second], topo).nodes == ["gpu-009"]


def test_one_process_losing_two_peers_blames_neither():
    """NCCL's proxy and service threads of one process report each connection they lose: two peers named
    once each by the same process is that process's trouble as much as theirs."""
    topo = Topology(node_ips={"10.0.0.9": "gpu-009", "10.0.0.7": "gpu-007"})
    closed = m("socket", 76, T, node="gpu-001", peer="10.0.0.9", line=1)
    reset = m("socket", 76, T + timedelta(seconds=1), node="gpu-001", peer="10.0.0.7", line=9)
    assert locate([closed, reset], topo).nodes == []


def test_many_peers_and_no_standout_blame_one_reporting_node_only_when_there_is_one():
    """No peer named by most reports: one node whose processes lost peers everywhere points at its own
    port or HCA; reporters on every side naming each other localise nothing (a fabric or configuration
    fault), so no node is named rather than the whole job."""
    ips = {"10.0.0.1": "gpu-001", "10.0.0.2": "gpu-002", "10.0.0.3": "gpu-003", "10.0.0.9": "gpu-009"}
    topo = Topology(node_ips=ips)
    own = [m("ib", 76, T, node="gpu-009", rank=r, peer=peer, line=r * 10 + i)
           for r in (1, 2) for i, peer in enumerate(("10.0.0.1", "10.0.0.2", "10.0.0.3"))]
    assert locate(own, topo).nodes == ["gpu-009"]
    mutual = [m("ib", 76, T, node=node, rank=rank, peer=peer) for node, rank, peer in (
        ("gpu-001", 1, "10.0.0.2"), ("gpu-001", 2, "10.0.0.3"), ("gpu-002", 3, "10.0.0.1"),
        ("gpu-002", 4, "10.0.0.3"), ("gpu-003", 5, "10.0.0.1"), ("gpu-003", 6, "10.0.0.2"))]
    assert locate(mutual, topo).nodes == [] and locate(mutual, topo).ranks == []


def test_rank_without_node_is_placed_by_topology():
    topo = Topology(task_nodes={12: "n3"})
    c = locate([m("oom", 66, T, rank=12)], topo)
    assert c.nodes == ["n3"] and c.ranks == [12]


def test_a_node_named_in_the_failure_line_beats_the_reporting_node():
    named = m("node-fail", 78, T, node="gpu-001")
    named = SignatureMatch(runbook_id="node-fail", record=named.record, role=Role.ROOT, priority=78,
                           fields={"node": "gpu-003"})
    reporter = m("node-fail", 78, T, node="gpu-002")
    c = locate([named, reporter], Topology())
    assert c.nodes == ["gpu-003"]


def test_an_exception_carrying_a_collateral_message_is_collateral():
    exc = m("python-exception", 12, T, rank=2, line=7)
    peer = SignatureMatch(runbook_id="peer-lost", record=exc.record, role=Role.COLLATERAL, priority=18)
    d = demarcate([exc, peer], (None, None))
    assert d.root is peer
    specific = m("cuda-oom", 66, T, rank=2, line=7)
    assert demarcate([specific, peer], (None, None)).root is specific


def test_reports_naming_one_other_rank_elect_it_as_the_odd_one_out():
    """DETAIL-mode desync: every rank reports, the healthy ones name the odd one."""
    topo = Topology(task_nodes={5: "node12"})
    reports = [m("desync", 79, T, rank=r) for r in range(8)]
    reports = [SignatureMatch(runbook_id="desync", record=x.record, role=Role.ROOT, priority=79,
                              fields={"rank": "0" if x.record.rank == 5 else "5"}) for x in reports]
    c = locate(reports, topo)
    assert c.ranks == [5] and c.nodes == ["node12"]


def test_oom_killer_pid_is_mapped_to_its_rank_through_nccl_prefixes():
    topo = Topology(placements={9: RankPlacement(9, "gpu-002", 1, "0000:2a:00", 16, pid=40009)})
    oom = SignatureMatch(runbook_id="host-oom", role=Role.ROOT, priority=68, fields={"pid": "40009"},
                         record=LogRecord(source="dmesg/gpu-002.log", line=3, text="Killed process 40009 (python)",
                                          node="gpu-002", kind="dmesg", time=T))
    c = locate([oom], topo)
    assert (c.nodes, c.ranks) == (["gpu-002"], [9])


def test_a_connection_error_that_names_no_peer_blames_neither_end():
    """Old NCCL prints no peer in "Got completion with error 12": whether one end or both report it, the
    reporting end is no more to blame than the other (a wrong GID index or MTU breaks both)."""
    both = [m("ib", 76, T, node=node, rank=rank) for node, rank in (("gpu5", 4), ("gpu4", 0))]
    assert locate(both, Topology(), connection=True).nodes == []
    assert locate(both[:1], Topology(), connection=True).nodes == []
    assert locate(both, Topology()).nodes == ["gpu5", "gpu4"]  # not a connection error: two failing nodes
    assert locate(both, Topology(), connection=True).ranks == []  # the reporting ranks are victims too


def test_a_connection_error_whose_reports_name_one_other_rank_still_blames_that_rank():
    reports = [m("ib", 76, T, node="gpu4", rank=r) for r in (0, 1)]
    for r in reports:
        r.fields["rank"] = "9"  # "... but Rank 9 is ..."
    assert locate(reports, Topology(), connection=True).ranks == [9]
