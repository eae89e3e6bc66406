"""What a DCGM-based health check, exporter or prolog prints when DCGM itself cannot run the check (dcgmReturn_t as
errorString() words it): a host engine or module that is not there is the node's monitoring set-up, for an operator,
and says nothing about the GPUs; a driver that stops answering NVML takes the node out; a diagnostic that asks to
drain a GPU is the GPU's."""

import pytest
from triage_support import triage_files as _triage


@pytest.mark.parametrize("line", [
    "Error: unable to establish a connection to the specified host: localhost\n",
    'time="2021-03-02T10:00:00Z" level=fatal msg="Error watching fields: This request is serviced by a module of '
    'DCGM that is not currently loaded"\n',
    "Error: The NVVS binary was not found in the specified location; please install it to "
    "/usr/libexec/datacenter-gpu-manager-4/ or set environment variable NVVS_BIN_PATH to the directory containing "
    "nvvs.\n",
])
def test_dcgm_that_cannot_run_the_check_is_the_monitoring_set_up(tmp_path, line):
    d = _triage(tmp_path, {"prolog.log": line})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "gpu_monitoring_unavailable", "escalate")


def test_dcgm_without_nvml_is_the_nodes_driver_stack(tmp_path):
    d = _triage(tmp_path, {"prolog.log": (
        "Error: Cannot perform the requested operation because NVML doesn't exist on this system.\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "driver_too_old", "escalate")


def test_an_nvml_driver_timeout_takes_the_node_out(tmp_path):
    d = _triage(tmp_path, {"prolog.log": (
        "+ dcgmi diag -r 1\n"
        "Error: Cannot perform the requested operation because an NVML driver timeout error was detected. "
        "Verify NVML is responsive before restarting the hostengine.\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "gpu_driver_unresponsive", "drain_and_restart")


def test_a_diagnostic_that_asks_to_drain_the_gpu_is_the_gpus(tmp_path):
    d = _triage(tmp_path, {"prolog.log": (
        "+ dcgmi diag -r 2\n"
        "Error: The diagnostic returned an error that indicates the need to drain the GPU\n")})
    assert (d.category.value, d.action.value) == ("hardware", "drain_and_restart")
    assert d.rule == "nvidia-driver.dcgm-diag-isolate"


def test_a_monitoring_failure_does_not_hide_the_jobs_own_error(tmp_path):
    d = _triage(tmp_path, {"rank0.log": (
        "Error: unable to establish a connection to the specified host: localhost\n"
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 88, in <module>\n'
        "    loss = criterion(out, batch['labels'])\n"
        "KeyError: 'labels'\n")})
    assert d.category.value == "user_code"
