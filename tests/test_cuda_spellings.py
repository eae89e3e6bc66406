"""A CUDA error string gets one verdict however the framework introduces it: PyTorch's "CUDA error:", NCCL's
"Cuda failure", or the glog CHECK of a framework that calls CUDA itself (Caffe, MXNet, Paddle)."""

import pytest
from triage_support import triage_files as _triage

SPELLINGS = {
    "out of memory": [
        "Check failed: error == cudaSuccess (2 vs. 0)  out of memory",  # Caffe CUDA_CHECK
        "gpu-07:4412:4501 [3] include/alloc.h:48 NCCL WARN Cuda failure 'out of memory'",
    ],
    "unknown error": [
        "F0815 11:07:44.123311 20993 common.cpp:152] Check failed: error == cudaSuccess (999 vs. 0)  unknown error",
        "[11:07:44] src/storage/storage.cc:59: Check failed: e == cudaSuccess || e == cudaErrorCudartUnloading "
        "CUDA: unknown error",  # MXNet CUDA_CALL
        "Check failed: cudaSuccess == cudaStat (0 vs. 999) Cuda Error: unknown error",  # Paddle (Fluid)
    ],
    "initialization error": [
        "Check failed: e == cudaSuccess CUDA: initialization error",
    ],
}


@pytest.mark.parametrize(("string", "spelling"), [(s, x) for s, xs in SPELLINGS.items() for x in xs])
def test_a_cuda_string_gets_pytorchs_verdict_in_every_spelling(tmp_path, string, spelling):
    torch = _triage(tmp_path / "torch", {"rank0.log": f"[rank0]: RuntimeError: CUDA error: {string}\n"})
    other = _triage(tmp_path / "other", {"rank0.log": spelling + "\n"})
    assert torch.subtype not in ("python_exception", "no_signature")
    assert (other.category, other.subtype, other.action) == (torch.category, torch.subtype, torch.action)


def test_a_generic_string_without_a_cuda_introducer_is_not_a_cuda_error(tmp_path):
    d = _triage(tmp_path, {"rank0.log": (
        "F0815 11:07:44.123311 20993 solver.cpp:88] Check failed: status == kOk (3 vs. 0)  unknown error\n")})
    assert d.subtype != "gpu_cuda_unknown_error"


@pytest.mark.parametrize("warning", [
    "/usr/local/lib/python3.10/dist-packages/torch/cuda/__init__.py:235: UserWarning: \n"
    "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.\n"
    "The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.\n",
    "UserWarning: Found GPU0 NVIDIA B200 which is of compute capability (CC) 10.0.\n"
    "The following list shows the CCs this version of PyTorch was built for and the hardware CCs it supports:\n"
    "- 8.0 which supports hardware CC >=8.0,!=8.7\n",
])
def test_torchs_warning_that_its_build_lacks_the_gpus_arch_is_the_no_kernel_image_class(tmp_path, warning):
    failing = _triage(tmp_path / "failing", {"rank0.log": (
        "[rank0]: RuntimeError: CUDA error: no kernel image is available for execution on the device\n")})
    warned = _triage(tmp_path / "warned", {"rank0.log": warning})
    assert (warned.category, warned.subtype, warned.action) == (failing.category, failing.subtype, failing.action)
    assert warned.subtype == "cuda_arch_mismatch"


def test_pytorchs_dsa_boilerplate_is_not_a_device_side_assert(tmp_path):
    """c10/cuda/CUDAException.cpp appends 'Device-side assertions were explicitly omitted for this error check' to
    any CUDA error checked without device-assertion info: the CUDA error above it is the failure."""
    d = _triage(tmp_path, {"rank0.log": (
        "[2026-01-13 09:47:52.883] [error] CUDA error: invalid device ordinal\n"
        "GPU device may be out of range, do you have enough GPUs?\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might "
        "be incorrect.\n"
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
        "Device-side assertions were explicitly omitted for this error check; the error probably arose while "
        "initializing the DSA handlers.\n"
        "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:44 (most recent call "
        "first):\n")})
    assert d.subtype == "cuda_invalid_device_ordinal", d.root_cause


@pytest.mark.parametrize(("line", "category", "subtype"), [
    # Marian's CURAND_CHECK prints only the number; CuPy and Caffe print the curandStatus_t name
    ("[2024-03-02 10:11:12] Curand error 203 - src/tensors/rand.cpp:80: "
     "curandCreateGenerator(&generator_, CURAND_RNG_PSEUDO_DEFAULT)", "infra", "cuda_init_error"),
    ("cupy_backends.cuda.libs.curand.CURANDError: CURAND_STATUS_INITIALIZATION_FAILED", "infra", "cuda_init_error"),
    ("F0412 10:02:11.512 common.cpp:171] Check failed: status == CURAND_STATUS_SUCCESS (102 vs. 0)  "
     "CURAND_STATUS_ALLOCATION_FAILED", "user_code", "cuda_oom"),
    ("cupy_backends.cuda.libs.curand.CURANDError: CURAND_STATUS_LENGTH_NOT_MULTIPLE", "user_code", "curand_error"),
])
def test_curand_status_codes_read_by_name_and_by_number(tmp_path, line, category, subtype):
    d = _triage(tmp_path, {"rank0.log": line + "\n"})
    assert (d.category, d.subtype) == (category, subtype)


def test_peer_access_unsupported_is_the_callers_unless_enabling_p2p_failed_after_the_driver_allowed_it(tmp_path):
    """cudaErrorPeerAccessUnsupported answers a capability query: a caller that tried P2P between GPUs the driver
    reports as unconnected (one GPU per process) is the job's; NCCL's 'failed to peer with device' comes after the
    driver said P2P was possible, so the node is suspect."""
    ipc = _triage(tmp_path / "ipc", {"rank0.log": (
        "ws-3:41210:41388 [0] transport/p2p.cc:238 NCCL WARN failed to open CUDA IPC handle : 217 peer access "
        "is not supported between these two devices\n")})
    peer = _triage(tmp_path / "peer", {"rank0.log": (
        "gpu-018:20311:20390 [1] NCCL WARN failed to peer with device 2(=4f000): 217 peer access is not supported "
        "between these two devices\n")})
    assert (ipc.category, ipc.action) == ("user_code", "stop_and_notify")
    assert (peer.category, peer.action) == ("infra", "drain_and_restart")
