"""Ceph's health lines, as `ceph health detail` and `ceph -s` print them beside a job whose checkpoints live on
CephFS or RBD: a full OSD blocks writes and placement groups that are down block I/O (the storage's operators),
while near-full and stale-only warnings decide nothing."""

from triage_support import triage_files as _triage


def test_a_full_osd_is_the_storage_clusters_and_names_no_training_node(tmp_path):
    d = _triage(tmp_path, {"ceph-health.txt": (
        "HEALTH_ERR 1 full osd(s); 1 backfillfull osd(s); 1 nearfull osd(s)\n"
        "osd.3 is full at 97%\n"
        "osd.4 is backfill full at 91%\n"
        "osd.2 is near full at 87%\n")})
    assert (d.category.value, d.subtype) == ("infra", "storage_full")
    assert d.culprit.nodes == []


def test_placement_groups_down_block_io_and_go_to_an_operator(tmp_path):
    d = _triage(tmp_path, {"ceph-status.txt": (
        "  cluster:\n"
        "    id:     9f0ae51b-6218-4394-b83a-a97cd345f403\n"
        "    health: HEALTH_WARN\n"
        "            1 osds down\n"
        "            Reduced data availability: 360 pgs inactive, 51 pgs down, 7 pgs stale\n")})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "storage_unavailable", "escalate")


def test_near_full_and_stale_warnings_alone_decide_nothing(tmp_path):
    d = _triage(tmp_path, {"ceph-health.txt": (
        "HEALTH_WARN 1 nearfull osd(s)\n"
        "osd.2 is near full at 87%\n"
        "Reduced data availability: 101 pgs stale\n")})
    assert d.subtype not in ("storage_full", "storage_unavailable")
