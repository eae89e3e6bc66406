"""A GPU container whose nvidia-smi is missing ran without the NVIDIA runtime (CUDA images do not ship it; the
runtime mounts it from the host driver): the node's container set-up, for an operator, unlike a command the job's
own image lacks."""

import pytest
from triage_support import triage_files as _triage


@pytest.mark.parametrize("line", [
    'Error: failed to start container "gpu-test": Error response from daemon: failed to create task for container: '
    "failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: "
    'error during container init: exec: "nvidia-smi": executable file not found in $PATH: unknown\n',
    "+ nvidia-smi\nbash: nvidia-smi: command not found\n",
])
def test_a_missing_nvidia_smi_is_the_nodes_container_runtime(tmp_path, line):
    d = _triage(tmp_path, {"pod.log": line})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "container_gpu_runtime_missing", "escalate")
    assert d.rule == "container.gpu-container-without-driver-utilities"


def test_a_command_missing_from_the_jobs_own_image_stays_the_jobs(tmp_path):
    d = _triage(tmp_path, {"pod.log": (
        "Warning  Failed  2s  kubelet  Error: failed to create containerd task: failed to create shim task: "
        "OCI runtime create failed: runc create failed: unable to start container process: "
        'exec: "torchrunn": executable file not found in $PATH: unknown\n')})
    assert (d.category.value, d.subtype) == ("user_code", "container_command_not_found")
