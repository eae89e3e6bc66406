"""The GPU Operator's driver container failing on a node is the node's software, for an operator: its own script's
messages, and the package manager's when the headers or the repositories are out of reach."""

import pytest
from triage_support import triage_files as _triage

DRIVER_CONTAINER_LOGS = {
    "kernel version": (
        "Resolving Linux kernel version...\n"
        "Could not resolve Linux kernel version\n"
        "Stopping NVIDIA persistence daemon...\n"),
    "headers not in the repository": (
        "Installing Linux kernel headers...\n"
        "+ dnf -q -y --releasever=8.6 install kernel-headers-4.18.0-372.9.1.el8.x86_64 "
        "kernel-devel-4.18.0-372.9.1.el8.x86_64\n"
        "Error: Unable to find a match: kernel-devel-4.18.0-372.9.1.el8.x86_64\n"),
    "driver in use": (
        "Stopping NVIDIA persistence daemon...\n"
        "Unloading NVIDIA driver kernel modules...\n"
        "nvidia_uvm           1339392  4\n"
        "Could not unload NVIDIA driver kernel modules, driver is in use\n"),
}


@pytest.mark.parametrize("case", sorted(DRIVER_CONTAINER_LOGS))
def test_a_driver_container_that_cannot_install_the_driver_goes_to_an_operator(tmp_path, case):
    d = _triage(tmp_path, {"nvidia-driver-ctr.log": DRIVER_CONTAINER_LOGS[case]})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "driver_install_failed", "escalate")


def test_apts_resolver_failure_is_dns(tmp_path):
    d = _triage(tmp_path, {"nvidia-driver-ctr.log": (
        "Ign:1 http://archive.ubuntu.com/ubuntu noble InRelease\n"
        "Err:2 http://security.ubuntu.com/ubuntu noble-security InRelease\n"
        "  Temporary failure resolving 'security.ubuntu.com'\n")})
    assert (d.category.value, d.subtype) == ("infra", "dns_resolution")


def test_the_scripts_progress_lines_alone_are_not_a_failure(tmp_path):
    d = _triage(tmp_path, {"nvidia-driver-ctr.log": (
        "Resolving Linux kernel version...\nProceeding with Linux kernel version 5.15.0-91-generic\n"
        "Installing Linux kernel headers...\nDone, now waiting for signal\n")})
    assert d.subtype != "driver_install_failed"


def test_pytorch_rocms_no_hip_gpus_is_the_same_class_as_no_cuda_gpus(tmp_path):
    d = _triage(tmp_path, {"rank0.log": (
        "Traceback (most recent call last):\n"
        '  File "/run/determined/train.py", line 41, in <module>\n'
        "    model = model.to(torch.device('cuda'))\n"
        "RuntimeError: No HIP GPUs are available\n")})
    assert (d.category.value, d.subtype) == ("infra", "driver_mismatch")
