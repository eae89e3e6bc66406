"""Scheduler and orchestrator lines: the node they name as failed is the culprit; a kubelet eviction that names
a container over its request is the job's spec."""

import pytest
from triage_support import triage_files as _triage


def test_scheduler_lines_that_name_the_failed_node_name_it(tmp_path):
    d = _triage(tmp_path / "sinfo", {"sinfo-R.txt": (
        "REASON               USER      TIMESTAMP           NODELIST\n"
        "Kill task failed     root      2024-01-25T15:12:23 ip-10-0-1-23\n")})
    assert (d.subtype, d.culprit.nodes) == ("scheduler_node_failure", ["ip-10-0-1-23"])
    d = _triage(tmp_path / "stepd", {"slurmd.log": (
        "[2020-12-14T09:44:56.002] [63532.0] error: *** STEP 63532.0 STEPD TERMINATED ON cn106 AT "
        "2020-12-14T09:44:56 DUE TO JOB NOT ENDING WITH SIGNALS ***\n")})
    assert (d.subtype, d.culprit.nodes) == ("scheduler_node_failure", ["cn106"])
    d = _triage(tmp_path / "ray", {"driver.log": (
        "2022-02-15 16:53:52,096\tWARNING worker.py:1462 -- The node with node id: 8f205b12643d and ip: "
        "10.128.0.103 has been marked dead because the detector has missed too many heartbeats from it. This can "
        "happen when a raylet crashes unexpectedly or has lagging heartbeats.\n")})
    assert (d.subtype, d.culprit.nodes) == ("scheduler_node_failure", ["10.128.0.103"])
    d = _triage(tmp_path / "owner", {"driver.log": (
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task. The actor is dead "
        "because its owner has died. Owner Id: 01000000ffffffff Owner Ip address: 172.21.160.9 Owner worker exit "
        "type: SYSTEM_ERROR Worker exit detail: Owner's node has crashed.\n")})
    assert (d.subtype, d.culprit.nodes) == ("scheduler_node_failure", ["172.21.160.9"])
    d = _triage(tmp_path / "gres", {"slurmctld.log": (
        "May 23 12:49:52 mgmt1 slurmctld[80708]: slurmctld: error: Setting node nodegpu1 state to INVAL with "
        "reason:gres/gpu count reported lower than configured (3 < 4)\n")})
    assert (d.subtype, d.culprit.nodes) == ("gpu_missing_on_node", ["nodegpu1"])


@pytest.mark.parametrize("wording", [
    "Container trainer was using 5053216Ki, which exceeds its request of 0. ",  # kubelet before 1.2x
    "Container trainer was using 5053216Ki, request is 0, has larger consumption of memory. ",  # since
])
def test_an_eviction_that_names_a_container_over_its_request_is_the_jobs_spec(tmp_path, wording):
    """The kubelet names a container only when it used more than it requested: the pod was chosen for that."""
    d = _triage(tmp_path, {"events.txt": (
        f"4m11s   Warning   Evicted   pod/trainer-0   The node was low on resource: memory. {wording}\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("user_code", "resource_request_exceeded",
                                                               "stop_and_notify")
    d = _triage(tmp_path / "node", {"events.txt": (
        "4m11s   Warning   Evicted   pod/trainer-0   The node was low on resource: memory. Threshold quantity: "
        "100Mi, available: 91244Ki. \n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "orchestration_eviction", "restart")
    d = _triage(tmp_path / "disk", {"events.txt": (
        "Status:  Failed  Reason: Evicted  Message: The node had condition: [DiskPressure].\n")})
    assert (d.category.value, d.subtype) == ("infra", "orchestration_eviction")


def test_a_pyxis_container_that_will_not_start_goes_to_a_person_and_a_throttled_registry_retries(tmp_path):
    """pyxis's own line says only that the start failed; the node's enroot set-up or kernel is the usual cause.
    A registry that throttles says so on the next line, and that is the verdict."""
    d = _triage(tmp_path / "start", {"slurm-4411.out": (
        "0: slurmstepd-gn03: pyxis: starting container ...\n"
        "0: slurmstepd-gn03: error: pyxis: container start failed with error code: 1\n"
        "0: slurmstepd-gn03: error: pyxis:     enroot-unshare: failed to set seccomp filter: Invalid argument\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "container_start_failed", "escalate")
    d = _triage(tmp_path / "registry", {"slurm-4412.out": (
        "slurmstepd: error: pyxis: failed to import docker image\n"
        "slurmstepd: error: pyxis:     [ERROR] URL https://registry-1.docker.io/v2/library/ubuntu/manifests/22.04 "
        "returned error code: 429 Too Many Requests\n")})
    assert (d.category.value, d.action.value) == ("infra", "retry_after_backoff")


@pytest.mark.parametrize("line", [
    "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
    "(raylet) [2023-04-09 07:23:59,445 E 395 395] (raylet) node_manager.cc:3049: 10 Workers (tasks / actors) killed "
    "due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: e5d953ef, IP: 10.0.62.231) "
    "over the last time period.",
])
def test_rays_memory_monitor_killing_workers_is_the_jobs_host_memory(tmp_path, line):
    """Ray kills the job's own workers when the node's RAM runs short: the job's sizes, as for the OOM killer."""
    d = _triage(tmp_path, {"driver.log": line + "\n"})
    assert (d.category.value, d.subtype) == ("user_code", "host_oom")


def test_a_ray_summary_that_killed_nobody_is_not_an_oom(tmp_path):
    d = _triage(tmp_path, {"driver.log": (
        "(raylet) node_manager.cc:3040: 0 Workers (tasks / actors) killed due to memory pressure (OOM), 1 Workers "
        "crashed due to other reasons at node (ID: 2c82620270df, IP: 172.31.183.172) over the last time period.\n")})
    assert d.subtype != "host_oom"


def test_a_ray_worker_that_ended_on_sigterm_under_kubernetes_is_read_as_its_pods_memory_limit(tmp_path):
    """Ray itself adds the pod-memory sentence on Kubernetes; an actor death without it says nothing of memory."""
    d = _triage(tmp_path / "k8s", {"driver.log": (
        "(TaskRunner pid=1177) error: The actor is dead because its worker process has died. Worker exit type: "
        "SYSTEM_ERROR Worker exit detail: Worker exits unexpectedly. Worker exits with an exit code 1. The worker may "
        "have exceeded K8s pod memory limits. The process receives a SIGTERM.\n")})
    assert (d.category.value, d.subtype, d.decided_by.value) == ("user_code", "host_oom_suspected", "rule")
    bare = _triage(tmp_path / "bare", {"driver.log": (
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n")})
    assert bare.subtype != "host_oom_suspected"


def test_a_failed_liveness_probe_is_restarted_and_a_rejected_manifest_is_the_jobs(tmp_path):
    probe = _triage(tmp_path / "probe", {"describe-pod.txt": (
        "Events:\n"
        "  Warning  Unhealthy  10s (x3 over 20s)  kubelet  Liveness probe failed: Get "
        "\"http://10.244.1.7:8080/healthz\": context deadline exceeded (Client.Timeout exceeded while awaiting "
        "headers)\n"
        "  Normal   Killing    10s                kubelet  Container trainer failed liveness probe, will be "
        "restarted\n")})
    # the probe says the process stopped answering, not why: the kubelet's own remedy, no node named
    assert (probe.category.value, probe.subtype, probe.action.value) == (
        "unknown", "liveness_probe_failed", "restart")
    assert probe.culprit.nodes == []
    manifest = _triage(tmp_path / "manifest", {"kubectl.log": (
        "Error from server (BadRequest): error when creating \"pytorchjob.yaml\": PyTorchJob in version \"v1\" cannot "
        "be handled as a PyTorchJob: strict decoding error: unknown field "
        "\"spec.pytorchReplicaSpecs.Worker.replica\"\n")})
    assert (manifest.category.value, manifest.subtype, manifest.action.value) == (
        "user_code", "manifest_invalid", "stop_and_notify")


def test_aws_batch_stop_reasons_separate_a_lost_host_a_wrong_image_and_an_unreachable_registry(tmp_path):
    """AWS Batch/ECS report why a job's container stopped: the instance went away (restart), the job definition
    names an image that does not exist (the job's), or the registry could not be reached (retry later)."""
    host = _triage(tmp_path / "host", {"job.log": (
        "statusReason: Host EC2 (instance i-0a1b2c3d4e5f60718) terminated.\n")})
    image = _triage(tmp_path / "image", {"job.log": (
        "statusReason: CannotPullContainerError: Error response from daemon: manifest for "
        "111122223333.dkr.ecr.eu-west-1.amazonaws.com/llm-train:nightly not found: manifest unknown\n")})
    net = _triage(tmp_path / "net", {"job.log": (
        "statusReason: CannotPullContainerError: Error response from daemon: Get "
        "https://111122223333.dkr.ecr.eu-west-1.amazonaws.com/v2/: dial tcp 10.0.4.7:443: i/o timeout\n")})
    assert (host.category, host.action) == ("infra", "restart")
    assert (image.category, image.action) == ("user_code", "stop_and_notify")
    assert (net.category, net.action) == ("infra", "retry_after_backoff")


def test_aws_batch_runnable_reasons_separate_waiting_for_capacity_from_a_broken_compute_environment(tmp_path):
    capacity = _triage(tmp_path / "capacity", {"describe-jobs.json": (
        '    "status": "RUNNABLE",\n'
        '    "statusReason": "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - Service cannot fulfill the capacity requested '
        'for instance type p5.48xlarge",\n')})
    assert (capacity.category.value, capacity.action.value) == ("infra", "retry_after_backoff")
    invalid = _triage(tmp_path / "invalid", {"describe-compute-environments.txt": (
        "COMPUTEENVIRONMENTS  gpu-ce  INVALID  ENABLED\n"
        "statusReason: CLIENT_ERROR - Not authorized to perform sts:AssumeRole (Service: AWSSecurityTokenService; "
        "Status Code: 403; Error Code: AccessDenied; Request ID: dc0e2d28-2e99-11e7-b372-7fcc6fb65fe7)\n")})
    assert (invalid.category.value, invalid.subtype, invalid.action.value) == (
        "infra", "scheduler_config_invalid", "escalate")
    assert invalid.culprit.nodes == []


def test_kubelet_events_separate_the_jobs_spec_from_the_nodes_memory_and_disk(tmp_path):
    """`kubectl describe pod` / `kubectl get events` as the kubelet writes them: a missing Secret or a malformed
    image name is the manifest's; a node-wide OOM is host memory; image GC failing to free disk is the node's, and
    an eviction on the same node still decides over it."""
    d = _triage(tmp_path / "secret", {"describe.txt": (
        "  Normal   Scheduled  61s                default-scheduler  Successfully assigned ml/trainer-0 to gpu-w-3\n"
        "  Warning  Failed     4s (x6 over 60s)   kubelet            Error: secret \"wandb-key\" not found\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("user_code", "config_error", "stop_and_notify")
    d = _triage(tmp_path / "image", {"describe.txt": (
        "  Warning  InspectFailed  8s (x3 over 30s)  kubelet  Failed to apply default image tag "
        "\"reg.local/ml/Train:v1\": couldn't parse image reference \"reg.local/ml/Train:v1\": invalid reference "
        "format: repository name must be lowercase\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("user_code", "container_image_invalid",
                                                               "stop_and_notify")
    d = _triage(tmp_path / "oom", {"events.txt": (
        "ml   2m   Warning   SystemOOM   node/gpu-w-3   System OOM encountered, victim process: python, pid: 4412\n")})
    assert (d.category.value, d.subtype) == ("user_code", "host_oom")
    disk_gc = ("ml   5m   Warning   FreeDiskSpaceFailed   node/gpu-w-3   Failed to garbage collect required amount "
               "of images. Attempted to free 9238860902 bytes, but only found 0 bytes eligible to free.\n")
    d = _triage(tmp_path / "disk", {"events.txt": disk_gc})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "node_disk_pressure", "escalate")
    d = _triage(tmp_path / "evicted", {"events.txt": disk_gc + (
        "ml   4m   Warning   Evicted   pod/trainer-0   The node was low on resource: ephemeral-storage. Threshold "
        "quantity: 21045465262, available: 19925764Ki. \n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "orchestration_eviction", "restart")


@pytest.mark.parametrize("lines", [
    # kubectl describe pod, and kubectl get pods as kubelets of 1.16-1.17 showed the rejection
    "Status:         Failed\n"
    "Reason:         TopologyAffinityError\n"
    "Message:        Pod Resources cannot be allocated with Topology locality\n"
    "Events:\n"
    "  Warning  TopologyAffinityError  12s   kubelet  Resources cannot be allocated with Topology locality\n",
    "NAMESPACE     NAME                        READY   STATUS                    RESTARTS   AGE\n"
    "train         llama-worker-3              0/1     Topology Affinity Error   0          40s\n",
])
def test_a_pod_the_topology_manager_rejected_goes_to_a_person_not_to_the_job(tmp_path, lines):
    d = _triage(tmp_path, {"kubectl-describe.txt": lines})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "gpu_allocation_failed", "escalate")
    assert d.rule == "k8s-training.kubelet-topology-affinity-rejected"
