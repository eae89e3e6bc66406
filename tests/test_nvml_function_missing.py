"""A program linked against a newer NVML than the node's driver installs cannot resolve the entry point: the fleet's
driver is older than the tool needs (for an operator), not the job's own extension built against another torch."""

from triage_support import triage_files as _triage


def test_an_agent_that_cannot_resolve_an_nvml_entry_point_is_the_drivers_age(tmp_path):
    d = _triage(tmp_path, {"agent.log": (
        "==> Starting Nomad agent...\n"
        "nomad: symbol lookup error: nomad: undefined symbol: nvmlDeviceGetPciInfo_v3\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "driver_too_old", "escalate")
    assert d.rule == "nvidia-driver.nvml-function-missing-driver-too-old"


def test_pynvml_function_not_found_is_the_drivers_age(tmp_path):
    d = _triage(tmp_path, {"rank0.log": (
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.11/site-packages/pynvml/nvml.py", line 2013, in nvmlDeviceGetGpuFabricInfo\n'
        "    _nvmlCheckReturn(ret)\n"
        "pynvml.nvml.NVMLError_FunctionNotFound: Function Not Found\n")})
    assert (d.category.value, d.subtype) == ("infra", "driver_too_old")


def test_an_extension_built_against_another_torch_stays_the_jobs(tmp_path):
    d = _triage(tmp_path, {"rank0.log": (
        "ImportError: /opt/conda/lib/python3.10/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: "
        "undefined symbol: _ZN3c104cuda9SetDeviceEi\n")})
    assert d.category.value == "user_code"
    assert d.subtype != "driver_too_old"


def test_pytorchs_own_nvml_lookup_failing_on_the_way_to_an_oom_report_is_not_read_as_the_driver(tmp_path):
    # PyTorch looks NVML functions up itself (c10/cuda/driver_api.cpp); the one public case showing this assert had it
    # on the path of a CUDA OOM, the job's own sizes
    d = _triage(tmp_path, {"rank0.log": (
        "    return F.linear(input, self.weight, self.bias)\n"
        "RuntimeError: r.nvmlDeviceGetNvLinkRemoteDeviceType_ INTERNAL ASSERT FAILED at "
        "\"../c10/cuda/driver_api.cpp\":27, please report a bug to PyTorch. "
        "Can't find nvmlDeviceGetNvLinkRemoteDeviceType: /lib64/libnvidia-ml.so.1: "
        "undefined symbol: nvmlDeviceGetNvLinkRemoteDeviceType\n")})
    assert d.rule != "nvidia-driver.nvml-function-missing-driver-too-old"
