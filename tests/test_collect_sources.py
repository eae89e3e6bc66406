"""What NCCL, Slurm, torchrun and kernel lines say about where a rank ran."""

from diagnoser.collect import kernel, nccl, slurm, torchrun


def test_nccl_init_line_maps_rank_to_node_device_and_bus_id():
    line = ("gpu-017:12345:12345 [3] NCCL INFO comm 0x5581e0a0 rank 11 nranks 16 cudaDev 3 nvmlDev 3 "
            "busId 3b000 commId 0x9f1c2e3d4b5a6978 - Init COMPLETE")
    p = nccl.parse_init(line)
    assert (p.rank, p.node, p.device, p.bus_id, p.nranks) == (11, "gpu-017", 3, "0000:3b:00", 16)


def test_nccl_2_21_init_line_and_warn_line_with_source_location():
    line = ("node-b17:2463:2953 [7] NCCL INFO ncclCommInitRank comm 0x55a46663d2af rank 7 nranks 16 cudaDev 7 "
            "nvmlDev 7 busId bd000 commId 0xf3c6e114511e747f - Init COMPLETE")
    p = nccl.parse_init(line)
    assert (p.rank, p.node, p.bus_id) == (7, "node-b17", "0000:bd:00")
    warn = nccl.parse_line("trn-h100-041:23258:23755 [4] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion")
    assert (warn.host, warn.device) == ("trn-h100-041", 4)


def test_an_nccl_line_behind_a_wrappers_lead_still_names_its_host():
    """Time stamps, pdsh's `host: ` (DeepSpeed's multi-node runner) and `grep -r`'s file name go in front of
    NCCL's own prefix; its host is still the node."""
    for line, host in [
        ("[2025-04-08 08:39:46] devgpu263:589012:591652 [0] transport/nvls.cc:254 NCCL WARN Cuda failure 1",
         "devgpu263"),
        ("10.10.23.10: so-ucloud-10:1307367:1307586 [0] transport/net_ib.cc:1038 NCCL WARN NET/IB : x",
         "so-ucloud-10"),
        ("worker-1: worker-1:15874:17284 [4] NCCL INFO P2P is disabled", "worker-1"),
        (" 2025-02-18 12:54 ncivki7q:180:915 [7] NCCL INFO misc/socket.cc:47 -> 3", "ncivki7q"),
        ("prefill-2.log:[2025-09-17 15:16:23] prefill-2:311:405 [0] transport/net_ib.cc:199 NCCL WARN x",
         "prefill-2"),
    ]:
        assert nccl.parse_line(line).host == host, line
    assert nccl.parse_line("RuntimeError: host-1:311:405 [0] failed") is None  # no NCCL prefix: nothing read


def test_bus_id_spellings_normalise_to_one_form():
    for raw in ("3b000", "0000:3b:00.0", "00000000:3B:00.0", "0000:3b:00"):
        assert nccl.normalize_bus_id(raw) == "0000:3b:00"
    assert nccl.normalize_bus_id("1a1000") == "0001:a1:00"


def test_nccl_oob_line_maps_ip_to_host():
    assert nccl.parse_oob_ip("node3:77:77 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.13<0>") == ("node3", "10.0.0.13")
    line = "node3:77:77 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.13<0>"
    assert nccl.parse_oob_ip(line) == ("node3", "10.0.0.13")


def test_srun_task_exit_names_node_and_task_range():
    e = slurm.parse_task_exit("srun: error: gpu-003: tasks 8-11: Exited with exit code 1")
    assert (e.node, e.ranks, e.exit_code) == ("gpu-003", (8, 9, 10, 11), 1)
    e = slurm.parse_task_exit("srun: error: n2: task 1: Killed")
    assert (e.node, e.ranks, e.exit_code) == ("n2", (1,), None)
    assert slurm.parse_stepd_node("slurmstepd: error: *** JOB 4242 ON gpu-003 CANCELLED AT 2025-03-04T05:06:07 "
                                  "DUE TO NODE FAILURE ***") == "gpu-003"


def test_torchrun_failure_block_fields():
    block = ["[1]:", "  time      : 2025-03-04_05:06:09", "  host      : gpu-017",
             "  rank      : 5 (local_rank: 1)", "  exitcode  : -9 (pid: 12345)", "  error_file: <N/A>"]
    f = torchrun.block_fields(block)
    assert (f.host, f.rank, f.local_rank, f.time) == ("gpu-017", 5, 1, "2025-03-04_05:06:09")


def test_kernel_syslog_host():
    assert kernel.syslog_host("Mar  4 05:06:07 gpu-017 kernel: [123.4] mlx5_core 0000:0c:00.0: x") == "gpu-017"
    assert kernel.syslog_host("2025-03-04T05:06:07+0000 gpu-017 kernel: x") == "gpu-017"
    assert kernel.syslog_host("[2025-03-04 05:06:07] step 1") is None


def test_a_placeholder_in_the_syslog_host_column_names_no_node_but_is_still_kernel_output():
    # an unnamed machine prints localhost; a pasted log is often redacted to "hostname"
    for line in ("Apr 12 00:54:42 hostname kernel: amdgpu 0000:2f:00.0: amdgpu: GPU reset begin!",
                 "Mar  4 05:06:07 localhost kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."):
        assert kernel.syslog_host(line) is None
        assert kernel.is_kernel_line(line)
    assert kernel.syslog_host("Mar  4 05:06:07 hostname-07 kernel: x") == "hostname-07"
