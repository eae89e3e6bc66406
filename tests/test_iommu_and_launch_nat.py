"""Two failures a node's or a cluster's network setup causes, which retrying unchanged repeats: the IOMMU refusing
GPU peer-to-peer DMA under a collective (the node's VT-d/ACS setup: drain it), and horovodrun's driver seeing its
tasks through NAT (the cluster network: escalate)."""

import pytest
from triage_support import triage_files as _triage
from triage_support import watchdog_timeout

DMAR = {  # the pre-5.10 wording, then the current one
    "old": "[1478401.486621] DMAR: DRHD: handling fault status reg 502\n"
           "[1478401.486981] DMAR: [DMA Write] Request device [02:00.0] fault addr cd139000 [fault reason 05] "
           "PTE Write access is not set\n",
    "new": "Nov 20 03:02:11 gpu-b07 kernel: DMAR: DRHD: handling fault status reg 2\n"
           "Nov 20 03:02:11 gpu-b07 kernel: DMAR: [DMA Read NO_PASID] Request device [3b:00.0] fault addr "
           "0xfbe00000 [fault reason 0x06] PTE Read access is not set\n",
}


@pytest.mark.parametrize("wording", sorted(DMAR))
def test_dmar_faults_under_a_hung_allreduce_drain_the_node_whose_iommu_blocks_p2p(tmp_path, wording):
    d = _triage(tmp_path, {
        "gpu-b07/dmesg.log": DMAR[wording],
        "gpu-b07/rank0.log": watchdog_timeout(0, seq=12),
        "gpu-a03/rank8.log": watchdog_timeout(8, seq=12),
    })
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "iommu_dma_fault", "drain_and_restart")
    assert d.culprit.nodes == ["gpu-b07"]


def test_an_amdgpu_page_fault_is_not_read_as_the_iommu_setup(tmp_path):
    d = _triage(tmp_path, {"dmesg.log": (
        "[  262.094619] amdgpu 0000:03:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:158 vmid:0 pasid:0, for "
        "process  pid 0 thread  pid 0)\n"
        "[  262.094625] amdgpu 0000:03:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x0010 address=0x64a7f000 "
        "flags=0x0000]\n")})
    assert d.subtype != "iommu_dma_fault"


def test_a_user_code_error_still_decides_over_dmar_noise(tmp_path):
    d = _triage(tmp_path, {
        "gpu-b07/dmesg.log": DMAR["new"],
        "gpu-b07/rank0.log": ("[rank0]: RuntimeError: mat1 and mat2 shapes cannot be multiplied (4096x1024 and "
                              "2048x1024)\n"),
    })
    assert d.category.value == "user_code"


def test_horovodrun_tasks_seen_through_nat_are_the_cluster_network(tmp_path):
    d = _triage(tmp_path, {"launcher.log": (
        "Testing interfaces on all the hosts.\nLaunched horovodrun server.\n"
        "Attempted to launch horovod task servers.\nWaiting for the hosts to acknowledge.\n"
        "ERROR: Task 1 declared addresses {'lo': [('127.0.0.1', 55651)], 'eth0': [('192.168.101.5', 55651)]}, but "
        "has connected from a different address 192.168.101.0. This is not supported. Is the server behind NAT?\n"
        "Traceback (most recent call last):\n  File \"/usr/local/bin/horovodrun\", line 21, in <module>\n"
        "    run_commandline()\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "launcher_network_nat", "escalate")
