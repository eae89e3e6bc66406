"""What MPICH's launcher, Apptainer, slurmd and a GPU cloud's API print when a job cannot run: Hydra's exit string
carries the signal that killed a rank, an image built for another CPU is the job's, a node whose GPU core affinity
does not fit its sockets is the operator's, and a pod with no free GPU waits for capacity."""

from triage_support import triage_files as _triage

_HYDRA_BANNER = (
    "===================================================================================\n"
    "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
    "=   PID 5279 RUNNING AT gpu-n-015\n"
    "=   EXIT CODE: {code}\n"
    "=   CLEANING UP REMAINING PROCESSES\n"
    "=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES\n"
    "===================================================================================\n"
    "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: {text} (signal {sig})\n"
    "This typically refers to a problem with your application.\n"
    "Please see the FAQ page for debugging suggestions\n")


def test_hydras_exit_string_names_the_signal_that_ended_the_rank(tmp_path):
    segv = _triage(tmp_path / "segv", {"mpiexec.log": _HYDRA_BANNER.format(code=11, text="Segmentation fault", sig=11)})
    assert (segv.category.value, segv.subtype, segv.decided_by.value) == ("user_code", "segfault", "rule")
    killed = _triage(tmp_path / "kill", {"mpiexec.log": _HYDRA_BANNER.format(code=9, text="Killed", sig=9)})
    # a bare SIGKILL: the OOM killer or the scheduler, not a segfault
    assert (killed.subtype, killed.decided_by.value) == ("host_oom_suspected", "rule")
    bus = _triage(tmp_path / "bus", {"mpiexec.log": _HYDRA_BANNER.format(code=7, text="Bus error", sig=7)})
    assert bus.subtype == "sigbus"


def test_an_image_for_another_cpu_architecture_is_the_jobs(tmp_path):
    d = _triage(tmp_path, {"slurm-771020.out": (
        "FATAL:   While checking container encryption: could not open image /scratch/u1/train-arm64.sif: the "
        "image's architecture (arm64) could not run on the host's (amd64)\n"
        "srun: error: gpu-n-015: task 0: Exited with exit code 255\n")})
    assert (d.category.value, d.subtype, d.action.value) == (
        "user_code", "image_architecture_mismatch", "stop_and_notify")


def test_gpu_core_affinity_that_does_not_fit_the_sockets_goes_to_an_operator(tmp_path):
    d = _triage(tmp_path, {"slurmd.log": (
        "[2025-03-04T05:06:07.120] error: _check_core_range_matches_sock: gres/gpu GRES autodetected core affinity "
        "48-63 on node gpu-n-015 doesn't match socket boundaries. (Socket 0 is cores 0-47)\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "gres_conf_invalid", "escalate")


def test_a_configured_gpu_that_slurmd_discards_goes_to_an_operator(tmp_path):
    # slurm.conf names GPUs that autodetection did not find and gres.conf gives no File=: slurmd drops them
    d = _triage(tmp_path, {"slurmd.log": (
        "[2025-10-06T15:42:05.112] debug:  Gres GPU plugin: Merging configured GRES with system GPUs\n"
        "[2025-10-06T15:42:05.114] error: Discarding the following config-only GPU due to lack of File "
        "specification:\n"
        "[2025-10-06T15:42:05.114] error:     GRES[gpu] Type:mi300x Count:8 Cores(192):(null)  Links:(null) "
        "Flags:HAS_TYPE,ENV_RSMI File:(null) UniqueId:(null)\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "gres_conf_invalid", "escalate")
    assert d.rule == "cluster-ops.slurm-gres-conf-invalid"
    assert d.culprit.nodes == []  # gres.conf and slurm.conf are the fleet's files, not this node's fault


def test_a_runpod_pod_without_a_free_gpu_waits_for_capacity(tmp_path):
    d = _triage(tmp_path, {"launch.log": (
        "Traceback (most recent call last):\n"
        '  File "/home/u1/launch.py", line 12, in <module>\n'
        "    runpod.resume_pod(pod_id, gpu_count=1)\n"
        "runpod.error.QueryError: There are not enough free GPUs on the host machine to start this pod.\n")})
    assert (d.category.value, d.subtype, d.action.value) == (
        "infra", "cloud_capacity_unavailable", "retry_after_backoff")


def test_a_slurm_on_gcp_resume_without_capacity_waits_and_an_ssh_prompt_goes_to_an_operator(tmp_path):
    stockout = _triage(tmp_path / "gcp", {"resume.log": (
        "2025-03-04 05:06:07,123 resume.py ERROR: bulkInsert operation errors: VM_MIN_COUNT_NOT_REACHED\n")})
    assert (stockout.category.value, stockout.action.value) == ("infra", "retry_after_backoff")
    prompt = _triage(tmp_path / "ssh", {"horovodrun.log": (
        "The authenticity of host 'gpu-n-017 (10.1.4.17)' can't be established.\n"
        "ED25519 key fingerprint is SHA256:Hk3vO5cT0mXq1bV7yJt2c8e4Wc6r0kP9sL1zQ3nB5aE.\n"
        "Are you sure you want to continue connecting (yes/no/[fingerprint])?\n")})
    assert (prompt.category.value, prompt.subtype, prompt.action.value) == ("infra", "launcher_ssh_failed", "escalate")
