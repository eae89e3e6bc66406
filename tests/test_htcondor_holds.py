"""HTCondor puts a job on hold with a reason: an executable the starter cannot run, a slot too small for the
program to start, an allowed duration reached and a Docker image that cannot be pulled are the job's; the execute
node's own container self-test failing goes to a person."""

from triage_support import triage_files as _triage

# condor_q -hold prints the job id, owner, date and the HoldReason the starter wrote
_HELD = "ID          OWNER          HELD_SINCE  HOLD_REASON\n"


def test_an_executable_the_starter_cannot_run_is_the_jobs(tmp_path):
    d = _triage(tmp_path, {"condor_q_hold.txt": _HELD + (
        "4086540.0   u1              3/4  05:06 Error from slot1_11@gpu-n-015.cluster.edu: Failed to execute "
        "'/var/lib/condor/execute/slot1/dir_4086540/condor_exec.exe' with arguments 2: "
        "(errno=2: 'No such file or directory')\n")})
    assert (d.category.value, d.subtype, d.action.value, d.decided_by.value) == (
        "user_code", "file_not_found", "stop_and_notify", "rule")
    assert d.culprit.nodes == []  # the submit file is wrong on every node, not this one


def test_a_script_with_an_interpreter_the_node_lacks_is_the_jobs(tmp_path):
    d = _triage(tmp_path, {"job.log": (
        "007 (4086541.000.000) 2025-03-04 05:06:07 Shadow exception!\n"
        "\tError from slot1_3@gpu-n-016.cluster.edu: Failed to execute '/var/lib/condor/execute/dir_1234/train.sh': "
        "invalid interpreter (/bin/bash\r) specified on first line of script\n")})
    assert (d.category.value, d.subtype) == ("user_code", "file_not_found")


def test_a_slot_too_small_to_start_the_program_is_the_jobs_memory_request(tmp_path):
    d = _triage(tmp_path, {"condor_q_hold.txt": _HELD + (
        "4086542.0   u1              3/4  05:06 Error from slot1_2@gpu-n-017.cluster.edu: Job was OOM killed by "
        "cgroup memory limit before it could start. Consider requesting more memory.\n")})
    assert (d.category.value, d.subtype) == ("user_code", "host_oom")


def test_an_allowed_duration_reached_is_handled_like_a_time_limit(tmp_path):
    d = _triage(tmp_path, {"condor_q_hold.txt": _HELD + (
        "4086543.0   u1              3/6  05:06 The job exceeded allowed execute duration of 2+00:00:00\n")})
    assert (d.subtype, d.decided_by.value) == ("scheduler_time_limit", "rule")


def test_an_image_that_cannot_be_pulled_is_the_jobs_and_a_failed_runtime_self_test_goes_to_a_person(tmp_path):
    image = _triage(tmp_path / "image", {"condor_q_hold.txt": _HELD + (
        "4086544.0   u1              3/4  05:06 Error from slot1_1@gpu-n-018.cluster.edu: Cannot pull image "
        "ghcr.io/lab/trainer:v2.0 Error response from daemon: manifest for ghcr.io/lab/trainer:v2.0 not found: "
        "manifest unknown\n")})
    assert (image.category.value, image.subtype, image.action.value, image.decided_by.value) == (
        "user_code", "container_image_invalid", "stop_and_notify", "rule")
    runtime = _triage(tmp_path / "runtime", {"condor_q_hold.txt": _HELD + (
        "4086545.0   u1              3/4  05:06 Error from slot1_4@gpu-n-019.cluster.edu: Singularity test failed: "
        "FATAL:   container creation failed: mount /proc/self/fd/3->/usr/local/var/singularity/mnt/session/rootfs "
        "error\n")})
    assert (runtime.category.value, runtime.subtype, runtime.action.value) == (
        "infra", "container_start_failed", "escalate")


def test_a_browser_error_that_says_failed_to_execute_is_not_a_hold(tmp_path):
    d = _triage(tmp_path, {"stderr.log": "TypeError: Failed to execute 'fetch' on 'Window': Failed to fetch\n"})
    assert d.subtype != "file_not_found"
