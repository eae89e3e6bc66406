"""NCCL's RAS subsystem (2.24+) as operators paste it: `ncclras` status reports and monitor events. A process RAS
declares dead is the one to look at, not a diagnosis: its own first error decides, the other ranks' timeouts stay
collateral, and a report that only shows ranks at different operation counts is normal traffic."""

from triage_support import triage_files as _triage
from triage_support import watchdog_timeout

STATUS_DEAD = """Communicators... (2.05s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         4       7-8        32        32   RUNNING  INCOMPLETE

Errors
======

DEAD
  1 job process is considered dead (unreachable via the RAS network)
  Process 3487984 on node 172.16.64.213 managing GPU 5

#0-0 (cf264af53edbe986) INCOMPLETE
  Missing communicator data from 1 rank
  The missing rank: 21
"""
MONITOR = """RAS Monitor Mode - watching for peer changes (Ctrl+C to exit)...
================================================================
[2025-12-19 13:07:07] PEER_DEAD: Process 1524345 on node 172.16.64.245 managing GPU 1
"""
RANK0_TIMEOUT = watchdog_timeout(0, when="1219 13:16:12", seq=5120)  # a peer's timeout, after the death at 13:07


def test_a_status_report_with_a_dead_process_is_a_lost_peer_and_names_no_node_it_cannot_see(tmp_path):
    d = _triage(tmp_path, {"gpu-a03/ncclras.txt": STATUS_DEAD})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "peer_lost", "restart")
    assert d.culprit.nodes == []  # the dead process is on the next line; gpu-a03 is only where ncclras ran


def test_a_monitor_event_names_the_node_of_the_dead_process(tmp_path):
    d = _triage(tmp_path, {"gpu-a03/ncclras-monitor.txt": MONITOR, "gpu-a03/rank0.log": RANK0_TIMEOUT})
    assert (d.category.value, d.subtype) == ("infra", "peer_lost")
    assert d.culprit.nodes == ["172.16.64.245"]


def test_the_dead_processs_own_error_decides(tmp_path):
    oom = ("[rank21]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 5 has a total "
           "capacity of 79.15 GiB of which 1.02 GiB is free.\n")
    d = _triage(tmp_path, {"gpu-c01/rank21.log": oom, "gpu-a03/ncclras.txt": STATUS_DEAD,
                           "gpu-a03/rank0.log": RANK0_TIMEOUT})
    assert (d.category.value, d.subtype) == ("user_code", "cuda_oom")


def test_ranks_at_different_operation_counts_are_not_a_failure(tmp_path):
    d = _triage(tmp_path, {"ncclras.txt": (
        "Warnings\n========\n\n#0-0 (27a079b828ff1a75) MISMATCH\n"
        "  Communicator ranks have different collective operation counts\n"
        "  26 ranks have launched up to operation 6650\n  6 ranks have launched up to operation 6649\n"
        "  Rank 0 -- GPU 0 managed by process 483072 on node 172.16.64.210\n")})
    assert d.decided_by.value != "rule"  # no signature reads it as a dead, missing or timed-out rank
    assert d.subtype not in ("peer_lost", "collective_timeout")
