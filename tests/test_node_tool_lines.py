"""Lines that node tools print about the node itself: nvidia-smi's InfoROM check names the board to pull, and NCCL's
report that its shared-memory segment vanished under it blames the host's configuration, not /dev/shm's size."""

from triage_support import triage_files as _triage


def test_nvidia_smis_corrupted_inforom_drains_and_names_the_gpu(tmp_path):
    d = _triage(tmp_path, {"validator.log": (
        "running command nvidia-smi\n"
        "WARNING: infoROM is corrupted at gpu 0000:0B:00.0\n"
        "14\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("hardware", "gpu_corrupt_inforom", "drain_and_restart")
    assert d.culprit.gpus == ["0000:0b:00"]  # bus ids are kept in one form, as the Xid lines give them


def test_a_shared_memory_segment_removed_under_nccl_is_the_hosts_not_a_full_dev_shm(tmp_path):
    removed = _triage(tmp_path / "removed", {"rank3.log": (
        "trn-07:4411:4502 [3] NCCL WARN unlink shared memory /dev/shm/nccl-d5rTd0 failed, error: No such file or "
        "directory (2)\n")})
    assert (removed.category.value, removed.subtype, removed.action.value) == (
        "infra", "shm_removed_by_host", "escalate")
    full = _triage(tmp_path / "full", {"rank3.log": (
        "trn-07:4411:4502 [3] NCCL WARN Error while creating shared memory segment /dev/shm/nccl-xJ8sWq (size "
        "9637888), error: No space left on device (28)\n")})
    assert full.subtype == "shm_exhausted"
