"""A program that cannot start because the dynamic loader cannot find a library it was built against (glibc's
own message, not Python's wrapping of it): the environment the job was built for is not the one it runs in, so a
rerun fails the same way. libcuda missing is the node's driver and keeps its own reading."""

from triage_support import triage_files as _triage

SRUN_127 = "srun: error: nid001128: task 0: Exited with exit code 127\nsrun: Terminating StepId=57310225.1\n"


def test_the_loaders_message_for_a_program_is_a_missing_runtime_library(tmp_path):
    d = _triage(tmp_path, {"slurm-57310225.out": (
        "/opt/apps/jdftx/build-gpu/jdftx_gpu: error while loading shared libraries: libcudart.so.12: cannot open "
        "shared object file: No such file or directory\n" + SRUN_127)})
    assert (d.category.value, d.subtype, d.action.value) == ("user_code", "import_error", "stop_and_notify")


def test_a_missing_libcuda_is_still_the_nodes_driver(tmp_path):
    d = _triage(tmp_path, {"slurm-57310225.out": (
        "python: error while loading shared libraries: libcuda.so.1: cannot open shared object file: No such file or "
        "directory\n" + SRUN_127)})
    assert d.category.value == "infra" and d.subtype != "import_error"
