"""Lines that say the cluster's own set-up failed before or under the job: Slurm with no configuration source, a
node image whose cloud-init stops on a duplicate MAC (a Python RuntimeError that is not the job's), and a managed
cluster's health check that condemns an instance."""

from triage_support import triage_files as _triage


def test_slurm_without_a_configuration_source_goes_to_an_operator(tmp_path):
    d = _triage(tmp_path, {"launch.log": (
        "$ srun --nodes=2 --gpus-per-node=8 python train.py\n"
        "srun: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
        "srun: error: fetch_config: DNS SRV lookup failed\n"
        "srun: error: _establish_config_source: failed to fetch config\n"
        "srun: fatal: Could not establish a configuration source\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "scheduler_misconfigured", "escalate")


def test_slurm_conf_node_definitions_that_stop_the_daemons_go_to_an_operator(tmp_path):
    ctld = _triage(tmp_path / "ctld", {"slurmctld.log": (
        "Nov 20 09:21:38 ctl01 slurmctld[26180]: slurmctld version 24.05.4 started on cluster gpu\n"
        "Nov 20 09:21:38 ctl01 slurmctld[26180]: error: Duplicated NodeHostName gpu-n-0 in the config file\n"
        "Nov 20 09:21:38 ctl01 slurmctld[26180]: error: Duplicated NodeHostName gpu-n-1 in the config file\n"
        "Nov 20 09:21:38 ctl01 slurmctld[26180]: fatal: Duplicated NodeName gpu-n-0 in the config file\n")})
    slurmd = _triage(tmp_path / "slurmd", {"slurmd.log": (
        "Nov 20 11:04:17 login1 systemd[1]: Starting Slurm node daemon...\n"
        "Nov 20 11:04:17 login1 slurmd[1873]: fatal: Unable to determine this slurmd's NodeName\n"
        "Nov 20 11:04:17 login1 systemd[1]: slurmd.service: Main process exited, code=exited, status=1/FAILURE\n")})
    for d in (ctld, slurmd):
        assert (d.category.value, d.subtype, d.action.value) == ("infra", "scheduler_misconfigured", "escalate")
        assert d.rule == "slurm.slurm-conf-node-definitions"
        assert d.culprit.nodes == []  # the configuration is wrong, not a node


def test_cloud_inits_duplicate_mac_runtime_error_is_the_node_image_not_the_job(tmp_path):
    d = _triage(tmp_path, {"boot.log": (
        "Starting Network Service...\n"
        "RuntimeError: duplicate mac found! both 'eth1' and 'ib0' have mac '00:15:5d:33:ff:07'\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "node_image_network_config", "escalate")


def test_a_hyperpod_deep_health_check_failure_excludes_the_instance(tmp_path):
    d = _triage(tmp_path, {"DeepHealthCheckResults.log": (
        '{"level":"error","ts":"2024-06-18T21:15:22Z","msg":"Encountered FaultyInstance. Replace the Instance. '
        'Region: us-west-2, InstanceType: p4d.24xlarge. ERROR:Bandwidth has less than threshold: Expected minimum '
        'threshold :80,NCCL Test output Bw: 30"}\n')})
    assert (d.category.value, d.subtype, d.action.value) == (
        "hardware", "node_failed_health_check", "restart_excluding_nodes")
