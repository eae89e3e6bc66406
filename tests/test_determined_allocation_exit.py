"""Determined's master ends a trial's allocation with a reason it logs as "<trial> was terminated: <reason>": an agent
that failed under a running container, or a master that could not restore the allocation after a restart, is the
platform's failure (restart the trial); an agent that could not launch the container may be the job's own image, so it
decides nothing by itself."""

from triage_support import triage_files as _triage

TRIAL_LOG = (
    "[2024-03-02T09:14:11.482Z] 4c1a2b3d || INFO: [rank=0] epoch 3: loss 1.842\n"
    "[2024-03-02T09:31:57.006Z]          || ERROR: Trial 1284 (Experiment 311) was terminated: "
    "allocation failed due to agent failure: agent failed while the container was running: "
    "agent closed with allocated containers\n"
)


def test_an_agent_lost_under_a_running_trial_is_restarted(tmp_path):
    d = _triage(tmp_path, {"trial-1284.log": TRIAL_LOG})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "scheduler_node_failure", "restart")
    assert d.rule == "hpc-cloud-services.determined-agent-failed"


def test_a_master_that_cannot_restore_the_allocation_is_restarted(tmp_path):
    d = _triage(tmp_path, {"trial-12.log": (
        "ERROR: Trial (Experiment 12) was terminated: allocation failed due to restore error: "
        "RM failed to restore the allocation\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "orchestrator_restore_failed", "restart")
    assert d.rule == "hpc-cloud-services.determined-restore-error"


def test_an_agent_that_could_not_launch_the_container_is_not_read_as_a_lost_node(tmp_path):
    d = _triage(tmp_path, {"trial-7.log": (
        "ERROR: Trial 7 (Experiment 3) was terminated: allocation failed due to agent failure: "
        "agent failed to launch the container: failed to pull image\n")})
    assert d.rule not in ("hpc-cloud-services.determined-agent-failed", "hpc-cloud-services.determined-restore-error")
    assert d.subtype != "scheduler_node_failure"
