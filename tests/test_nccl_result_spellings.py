"""NCCL result codes in the spellings older releases and other frameworks print: NCCL up to 2.18 said only
"internal error" / "invalid argument" / "invalid usage" (no "run with NCCL_DEBUG" hint), and Paddle wraps the
result as "NCCL error(<number>), <string>." (older Paddle: "Nccl error, <string>")."""

from pathlib import Path

import pytest
from triage_support import triage_files

from diagnoser.models import Category
from diagnoser.prefilter.runbooks import load_runbooks

TRACE = ("Traceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n"
         "    dist.all_reduce(grad)\n")


@pytest.mark.parametrize(("line", "subtype"), [
    ("RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:825, internal error, "
     "NCCL version 2.7.8", "nccl_internal_error"),
    ("OSError: (External) NCCL error(3), internal error. ", "nccl_internal_error"),
    ("RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:784, invalid argument, "
     "NCCL version 2.7.8", "nccl_invalid_usage"),
    ("RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:514, invalid usage, "
     "NCCL version 2.7.8", "nccl_invalid_usage"),
    ("OSError: (External)  Nccl error, unhandled cuda error  "
     "(at /paddle/paddle/fluid/platform/collective_helper.cc:100)",
     "nccl_unhandled_cuda_error"),
])
def test_the_result_is_read_whatever_the_spelling(tmp_path: Path, line: str, subtype: str):
    verdict = triage_files(tmp_path, {"node-a/rank0.log": TRACE + line + "\n"})
    assert verdict.subtype == subtype and verdict.decided_by == "rule"


def test_a_bare_internal_error_in_the_jobs_own_message_is_not_ncclInternalError(tmp_path: Path):
    verdict = triage_files(tmp_path, {"node-a/rank0.log": TRACE + "ValueError: internal error, NCCL version "
                                      "string could not be parsed from config\n"})
    assert verdict.subtype != "nccl_internal_error"


@pytest.mark.parametrize("text", [
    # PyTorch: the result, then ncclGetLastError() after "Last error:"
    "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:3396, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.25.1\n"
    "ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\nCuda failure 1 'invalid argument'\n",
    # XLA:GPU quotes the last NCCL warning on the same line
    "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: external/xla/xla/service/gpu/nccl_utils.cc:297: NCCL "
    "operation ncclGroupEnd() failed: unhandled cuda error (run with NCCL_DEBUG=INFO for details). Last NCCL "
    "warning(error) log entry (may be unrelated) 'Cuda failure 1 'invalid argument''.\n",
])
def test_the_cuda_failure_behind_an_unhandled_cuda_error_decides(tmp_path: Path, text: str):
    # ncclUnhandledCudaError only says a CUDA call inside NCCL failed; the CUDA error it reports names the class
    verdict = triage_files(tmp_path, {"node-a/rank0.log": TRACE + text})
    assert (verdict.category, verdict.subtype) == ("user_code", "cuda_invalid_argument")


def test_an_unhandled_cuda_error_without_its_cuda_failure_stays_open(tmp_path: Path):
    verdict = triage_files(tmp_path, {"node-a/rank0.log": TRACE + "ncclUnhandledCudaError: Call to CUDA function "
                                      "failed.\n"})
    assert (verdict.category, verdict.subtype) == ("unknown", "nccl_unhandled_cuda_error")


def test_every_cuda_error_that_names_a_class_outranks_the_open_unhandled_cuda_error():
    # the ordering the two tests above rely on, checked over the whole table so a new CUDA entry cannot undo it
    rules = {r.id: r for r in load_runbooks()}
    open_ones = [rules["nccl.ncclunhandledcudaerror"], rules["jax-xla.xla-nccl-unhandled-cuda"]]
    classified = [r for r in rules.values() if r.id.startswith("cuda.") and r.category != Category.UNKNOWN]
    assert classified
    assert min(r.priority for r in classified) > max(r.priority for r in open_ones)
