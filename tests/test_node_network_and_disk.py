"""A node's own network device or disk failing under a job: the kernel's transmit watchdog (and the drivers' hang
reports) names the node whose traffic stopped, the IB tools' port-state dumps name a port that is down, and Ray's
out-of-disk error is the node's disk. The raylet's routine "over 95% full" warning is not a failure."""

import pytest
from triage_support import triage_files as _triage
from triage_support import watchdog_timeout

TX_HANG = (
    "Nov 20 03:03:51 gpu-b07 kernel: mlx5_core 0000:3b:00.0 ens1f0np0: NETDEV WATCHDOG: CPU: 12: transmit queue 5 "
    "timed out 5376 ms\n"
    "Nov 20 03:03:51 gpu-b07 kernel: mlx5_core 0000:3b:00.0 ens1f0np0: TX timeout on queue: 5, SQ: 0x1d3, CQ: 0x4a1, "
    "SQ Cons: 0x1a2 SQ Prod: 0x1b0, usecs since last trans: 5376000\n")


def test_a_transmit_hang_on_one_node_excludes_that_node_and_explains_the_peers_timeouts(tmp_path):
    d = _triage(tmp_path, {
        "gpu-b07/dmesg.log": TX_HANG,
        "gpu-b07/rank8.log": watchdog_timeout(8),
        "gpu-a03/rank0.log": watchdog_timeout(0),
    })
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "nic_transmit_timeout", "restart_excluding_nodes")
    assert d.culprit.nodes == ["gpu-b07"]


def test_a_link_up_message_is_not_a_hang(tmp_path):
    d = _triage(tmp_path, {"dmesg.log": "[  12.114] e1000e 0000:00:19.0 eth0: NIC Link is Up 1000 Mbps Full Duplex, "
                                         "Flow Control: Rx/Tx\n"})
    assert d.subtype != "nic_transmit_timeout"


@pytest.mark.parametrize("dump", [  # ibv_devinfo, then iproute2's rdma link
    "hca_id: mlx5_0\n        transport:                      InfiniBand (0)\n"
    "        phys_port_cnt:                  1\n                port:   1\n"
    "                        state:                  PORT_DOWN (1)\n",
    "link mlx5_7/1 subnet_prefix fe80:0000:0000:0000 lid 3403 sm_lid 1 lmc 0 state DOWN physical_state POLLING\n",
])
def test_ibv_devinfo_and_rdma_link_show_a_port_that_is_down(tmp_path, dump):
    d = _triage(tmp_path, {"ib.log": dump})
    assert (d.category.value, d.subtype) == ("hardware", "ib_link_down")


def test_an_active_port_is_not_a_failure(tmp_path):
    d = _triage(tmp_path, {"ib.log": "link mlx5_0/1 subnet_prefix fe80:0000:0000:0000 lid 12 sm_lid 1 lmc 0 state "
                                     "ACTIVE physical_state LINK_UP netdev ib0\n"
                                     "                        state:                  PORT_ACTIVE (4)\n"})
    assert d.subtype != "ib_link_down"


def test_rays_out_of_disk_error_is_the_nodes_disk(tmp_path):
    d = _triage(tmp_path, {"driver.log": (
        "ray.exceptions.OutOfDiskError: Local disk is full\n"
        "The object cannot be created because the local object store is full and the local disk's utilization is "
        "over capacity (95% by default).Tip: Use `df` on this node to check disk usage and `ray memory` to check "
        "object store memory usage.\n")})
    assert (d.category.value, d.subtype) == ("infra", "storage_full")


def test_the_raylets_disk_warning_does_not_outweigh_the_jobs_own_error(tmp_path):
    d = _triage(tmp_path, {"driver.log": (
        "(raylet) [2025-05-12 21:22:19,118 E 47346 47378] file_system_monitor.cc:116: /tmp/ray/session_2025-05-12_"
        "16-40-59_061012_46959 is over 95% full, available space: 77.5 GB; capacity: 1984.68 GB. Object creation will "
        "fail if spilling is required.\n"
        "ValueError: Total number of attention heads (28) must be divisible by tensor parallel size (8).\n")})
    assert d.category.value == "user_code"
