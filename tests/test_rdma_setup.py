"""RDMA set-up the node refuses (an HCA firmware command failing with a status, a locked-memory limit too small for
registrations) is the node's configuration, for an operator; it never outweighs an error the job itself raised."""

from triage_support import triage_files as _triage

MKEY_FAILED = ("[Sat Feb  6 16:51:55 2021] mlx5_core 0000:81:00.0: mlx5_cmd_check:794:(pid 0): CREATE_MKEY(0x200) "
               "op_mod(0x0) failed, status limits exceeded(0x8), syndrome (0x59c8a4)\n")
MEMLOCK = "libibverbs: Warning: RLIMIT_MEMLOCK is 65536 bytes.\n    This will severely limit memory registrations.\n"


def test_an_hca_command_the_firmware_refuses_goes_to_an_operator(tmp_path):
    d = _triage(tmp_path, {"dmesg.log": MKEY_FAILED})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "ib_resource_setup_failed", "escalate")


def test_a_small_locked_memory_limit_is_the_nodes_configuration(tmp_path):
    d = _triage(tmp_path, {"rank0.log": MEMLOCK})
    assert (d.category.value, d.subtype) == ("infra", "ib_resource_setup_failed")


def test_the_memlock_warning_does_not_outweigh_the_jobs_own_error(tmp_path):
    d = _triage(tmp_path, {"rank0.log": MEMLOCK + (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.10 GiB of which 1.19 GiB is free.\n")})
    assert d.subtype == "cuda_oom"
