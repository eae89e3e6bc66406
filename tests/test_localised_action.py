"""A connection or device error localised to one node is that node's; the same error with no node to blame is
configuration or fabric, for a person (runbooks' `localised_action`)."""

import pytest
from triage_support import triage_files as _triage


def test_a_refused_peer_that_several_nodes_name_is_excluded(tmp_path):
    boot = "NCCL INFO Bootstrap : Using ib0:10.8.0.{ip}<0>\n"
    files = {f"gpu-00{i}/rank{i}.log": f"gpu-00{i}:41{i}:41{i} [0] {boot.format(ip=i)}"
             f"gpu-00{i}:41{i}:52{i} [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.8.0.4<38721> "
             "failed : Connection refused\n" for i in (1, 2, 3)}
    files["gpu-004/rank4.log"] = f"gpu-004:414:414 [0] {boot.format(ip=4)}step 12 loss 2.1\n"
    d = _triage(tmp_path, files)
    assert (d.category.value, d.subtype) == ("infra", "nccl_network_error")
    assert d.culprit.nodes == ["gpu-004"] and d.action.value == "restart_excluding_nodes"


def test_a_refused_connection_with_no_node_to_blame_goes_to_a_person(tmp_path):
    """One process failing to reach one peer: either end may be broken, and in public reports it is mostly a
    firewall, a Docker bridge address or the wrong interface, which a plain retry repeats."""
    d = _triage(tmp_path, {"rank1.log": (
        "worker-3:331:402 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 172.17.0.2<38721> "
        "failed : Connection refused\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "nccl_network_error", "escalate")
    assert d.culprit.nodes == []


def test_busy_gpus_on_a_named_node_exclude_it_and_elsewhere_go_to_a_person(tmp_path):
    d = _triage(tmp_path / "a", {"nid004069/rank2047.log": (
        "2047: cudaSetDevice(cuda_device_id) error( cudaErrorDevicesUnavailable): CUDA-capable device(s) is/are "
        "busy or unavailable Kokkos_Cuda_Instance.cpp:544\n")})
    assert d.subtype == "gpu_busy_unavailable"
    assert d.culprit.nodes == ["nid004069"] and d.action.value == "restart_excluding_nodes"
    d = _triage(tmp_path / "b", {"stderr.log": (
        "RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable\n")})
    assert (d.subtype, d.action.value, d.culprit.nodes) == ("gpu_busy_unavailable", "escalate", [])


def test_an_unreachable_rendezvous_store_goes_to_a_person(tmp_path):
    d = _triage(tmp_path, {"rank1.log": (
        "[W socket.cpp:601] [c10d] The client socket has timed out after 900s while trying to connect to "
        "(172.17.0.2, 29500).\n"
        "torch.distributed.DistNetworkError: The client socket has timed out after 900s while trying to connect to "
        "(172.17.0.2, 29500).\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "rendezvous_failure", "escalate")


# node software that does not work: alone, an operator's (often every node of an image after a rollout);
# with the node's own journal or kernel log beside a healthy node, that node is drained meanwhile
NODE_SOFTWARE_FAULTS = {
    # error 802: the Fabric Manager is not running or does not match the driver
    "fabric_manager_not_ready": (
        "[rank0]: RuntimeError: CUDA error: system not yet initialized\n",
        "hgx-b200-14", "journal.log",
        "Mar 02 06:12:40 hgx-b200-14 systemd[1]: nvidia-fabricmanager.service: Control process exited, "
        "code=exited, status=1/FAILURE\n"
        "Mar 02 06:12:40 hgx-b200-14 systemd[1]: nvidia-fabricmanager.service: Failed with result 'exit-code'.\n"),
    # a driver upgrade without a reboot: the kernel module and the libraries differ
    "driver_mismatch": (
        "Failed to initialize NVML: Driver/library version mismatch\n",
        "gpu-n-031", "dmesg.log",
        "[Thu Jan 30 08:14:02 2025] NVRM: API mismatch: the client has the version 550.127.05, but\n"
        "[Thu Jan 30 08:14:02 2025] NVRM: this kernel module has the version 550.90.07.  Please make sure that "
        "this kernel module and all NVIDIA driver\n"),
    # the driver's user-space library is not on the node (or not mounted into its containers)
    "driver_library_missing": (
        "ImportError: libcuda.so.1: cannot open shared object file: No such file or directory\n",
        "gpu-n-044", "stderr.log",
        "Traceback (most recent call last):\n  File \"/opt/train/train.py\", line 3, in <module>\n"
        "    import jax\nImportError: libcuda.so.1: cannot open shared object file: No such file or directory\n"),
}


@pytest.mark.parametrize("subtype", sorted(NODE_SOFTWARE_FAULTS))
def test_node_software_faults_go_to_a_person_unless_the_evidence_names_the_node(tmp_path, subtype):
    job_line, node, node_log, node_text = NODE_SOFTWARE_FAULTS[subtype]
    d = _triage(tmp_path / "a", {"rank0.log": job_line})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", subtype, "escalate")
    assert d.culprit.nodes == []
    d = _triage(tmp_path / "b", {f"{node}/{node_log}": node_text, f"{node}/rank0.log": job_line,
                                 "healthy-node/rank8.log": "step 4 loss 3.2\n"})
    assert d.subtype == subtype
    assert d.culprit.nodes == [node] and d.action.value == "drain_and_restart"


def test_an_nvls_setup_failure_on_a_node_with_cuda_running_drains_it(tmp_path):
    d = _triage(tmp_path, {"rank2.log": (
        "[rank2]:h100-c4:9910:9910 [2] transport/nvls.cc:233 NCCL WARN Cuda failure 1 'invalid argument'\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "nvswitch_fabric_manager", "drain_and_restart")


def test_a_container_that_lost_its_gpus_to_a_daemon_reload_is_restarted(tmp_path):
    """NVIDIA's notice (nvidia-container-toolkit#48): a new container gets its devices back."""
    d = _triage(tmp_path, {"rank0.log": "Failed to initialize NVML: Unknown Error\n"})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "nvml_device_access_lost", "restart")


def test_a_gpu_that_fell_off_the_bus_without_an_xid_is_named_from_the_messages_first_line(tmp_path):
    d = _triage(tmp_path, {
        "gpu-07/dmesg.log": ("[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
                             "                  NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
                             "                  NVRM: fallen off the bus and is not responding to commands.\n"),
        "gpu-08/rank8.log": "step 10 loss 2.0\n"})
    assert d.category.value == "hardware" and d.action.value == "drain_and_restart"
    assert d.culprit.nodes == ["gpu-07"] and d.culprit.gpus == ["0000:b3:00"]


BAR_UNASSIGNED = {
    "nvidia": ("[   37.010658] NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:\n"
               "               NVRM: BAR1 is 0M @ 0x0 (PCI:0000:56:00.0)\n"
               "[   37.011201] nvidia: probe of 0000:56:00.0 failed with error -1\n"
               "[   52.101234] NVRM: GPU 0000:56:00.0: RmInitAdapter failed! (0x22:0x56:742)\n"),
    "amdgpu": ("[    9.292134] amdgpu 0000:83:00.0: amdgpu: Fatal error during GPU init\n"
               "[    9.292551] amdgpu: probe of 0000:83:00.0 failed with error -12\n"),
}


@pytest.mark.parametrize("driver", sorted(BAR_UNASSIGNED))
def test_a_gpu_the_bios_gave_no_memory_window_is_a_firmware_setting_not_a_broken_card(tmp_path, driver):
    """The init failures that follow are explained by the unassigned BAR: a person changes the BIOS setting
    (Above 4G Decoding, Re-Size BAR); the node that shows it is drained meanwhile."""
    d = _triage(tmp_path / "a", {"dmesg.log": BAR_UNASSIGNED[driver]})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "gpu_bar_unassigned", "escalate")
    d = _triage(tmp_path / "b", {"gpu-n-12/dmesg.log": BAR_UNASSIGNED[driver],
                                 "gpu-n-13/rank8.log": "step 4 loss 3.2\n"})
    assert d.culprit.nodes == ["gpu-n-12"] and d.action.value == "drain_and_restart"
