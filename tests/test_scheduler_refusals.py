"""What a scheduler or orchestrator says when it refuses or cannot run a job. Slurm's error codes as its commands
print them: the job's request is the user's to fix, a busy or closed cluster is retried, a cluster whose
authentication, versions or node set-up are broken goes to an operator. Kubernetes: a missing Secret, ConfigMap or
PVC is the manifest's; storage that will not mount and a full namespace quota go to a person."""

import pytest
from triage_support import triage_files as _triage

VERDICTS = {
    "salloc: error: Job submit/allocate failed: Invalid partition name specified":
        ("user_code", "scheduler_request_invalid", "stop_and_notify"),
    "srun: fatal: SLURM_GPUS_PER_TASK is mutually exclusive with --ntasks-per-gpu and SLURM_NTASKS_PER_GPU":
        ("user_code", "scheduler_request_invalid", "stop_and_notify"),
    "srun: error: Unable to create step for job 238051: More processors requested than permitted":
        ("user_code", "scheduler_request_invalid", "stop_and_notify"),
    "sbatch: error: Batch job submission failed: Requested GRES option unsupported by configured SelectType plugin":
        ("user_code", "scheduler_request_invalid", "stop_and_notify"),
    "sbatch: error: Batch job submission failed: Rate limit exceeded, please retry momentarily":
        ("infra", "scheduler_controller_unreachable", "retry_after_backoff"),
    "srun: error: Unable to allocate resources: Connection timed out":
        ("infra", "scheduler_controller_unreachable", "retry_after_backoff"),
    "sbatch: error: Batch job submission failed: Job can not start due to maintenance reservation.":
        ("infra", "scheduler_partition_unavailable", "retry_after_backoff"),
    "srun: error: Unable to allocate resources: Immediate execution impossible, resources too fragmented for "
    "allocation":
        ("infra", "scheduler_nodes_unavailable", "retry_after_backoff"),
    "srun: error: Unable to allocate resources: Incompatible versions of client and server code":
        ("infra", "scheduler_misconfigured", "escalate"),
    "[2024-11-06T11:23:46.199] error: Munge decode failed: Expired credential":
        ("infra", "scheduler_misconfigured", "escalate"),
    '  Warning  FailedMount  12s (x8 over 76s)  kubelet  MountVolume.SetUp failed for volume "hf-token" : secret '
    '"hf-token" not found': ("user_code", "config_error", "stop_and_notify"),
    '  Warning  FailedMount  2m  kubelet  MountVolume.SetUp failed for volume "data" : rpc error: code = Internal '
    'desc = mount failed: exit status 32': ("infra", "storage_mount_failed", "escalate"),
    'Error from server (Forbidden): pods "trainer-0" is forbidden: exceeded quota: gpu-quota, requested: '
    'requests.nvidia.com/gpu=8, used: requests.nvidia.com/gpu=8, limited: requests.nvidia.com/gpu=8':
        ("infra", "orchestration_unschedulable", "escalate"),
}


@pytest.mark.parametrize("line", sorted(VERDICTS))
def test_a_refusal_gets_its_class(tmp_path, line):
    d = _triage(tmp_path, {"job.out": line + "\n"})
    assert (d.category.value, d.subtype, d.action.value) == VERDICTS[line]


def test_a_task_launch_that_names_its_reason_is_decided_by_the_reason_not_as_a_node_failure(tmp_path):
    d = _triage(tmp_path, {"slurm-4211.out": (
        "srun: error: Task launch for StepId=4211.0 failed on node gpu-n-07: Invalid job credential\n"
        "srun: error: Application launch failed: Invalid job credential\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "scheduler_misconfigured", "escalate")


def test_an_optional_spank_plugin_that_did_not_load_does_not_outrank_the_refusal_that_follows(tmp_path):
    # spank.c reports the plug-in's load error, then goes on unless plugstack.conf marks it required
    d = _triage(tmp_path, {"slurm-submit.out": (
        "sbatch: error: spank: x11.so: Plugin file not found\n"
        "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("user_code", "scheduler_request_invalid",
                                                              "stop_and_notify")
    alone = _triage(tmp_path / "alone", {"slurm-submit.out": "sbatch: error: spank: x11.so: Plugin file not found\n"})
    assert (alone.category.value, alone.action.value) == ("infra", "escalate")
    required = _triage(tmp_path / "required", {"slurm-submit.out": (
        "sbatch: error: spank: x11.so: Plugin file not found\n"
        "sbatch: error: spank: /etc/slurm/plugstack.conf:2: Failed to load plugin x11.so. Aborting.\n")})
    assert (required.rule, required.action.value) == ("slurm.spank-required-plugin-not-loaded", "escalate")


@pytest.mark.parametrize("line", ["ValueError: Invalid time specified",
                                  "requests.exceptions.ConnectionError: Connection refused"])
def test_the_same_words_outside_a_slurm_command_are_not_slurms(tmp_path, line):
    d = _triage(tmp_path, {"rank0.log": line + "\n"})
    assert not (d.rule or "").startswith("slurm.")
