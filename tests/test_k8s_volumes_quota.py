"""Kubernetes refusing to start a job's pods: a missing Secret/ConfigMap/PVC is the manifest's; storage that will
not mount and a namespace quota that is full go to a person."""

import pytest
from triage_support import triage_files as _triage

VERDICTS = {
    '  Warning  FailedMount  12s (x8 over 76s)  kubelet  MountVolume.SetUp failed for volume "hf-token" : secret '
    '"hf-token" not found': ("user_code", "config_error", "stop_and_notify"),
    '  Warning  FailedMount  2m  kubelet  MountVolume.SetUp failed for volume "data" : rpc error: code = Internal '
    'desc = mount failed: exit status 32': ("infra", "storage_mount_failed", "escalate"),
    'Error from server (Forbidden): pods "trainer-0" is forbidden: exceeded quota: gpu-quota, requested: '
    'requests.nvidia.com/gpu=8, used: requests.nvidia.com/gpu=8, limited: requests.nvidia.com/gpu=8':
        ("infra", "orchestration_unschedulable", "escalate"),
}


@pytest.mark.parametrize("line", sorted(VERDICTS))
def test_kubernetes_refusing_the_pods_gets_its_class(tmp_path, line):
    d = _triage(tmp_path, {"events.txt": line + "\n"})
    assert (d.category.value, d.subtype, d.action.value) == VERDICTS[line]
