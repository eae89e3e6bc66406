"""The kernel's Ceph client (libceph, CephFS, RBD) as it logs losing a monitor, MDS or OSD: the node's mount is the
victim of the storage service or the network to it, so the job is not blamed and no node is drained, unless the MDS
evicted this client, whose mount then stays broken until remounted; a session coming up is not a failure."""

from triage_support import triage_files as _triage


def test_a_lost_mds_session_is_the_storage_not_the_job(tmp_path):
    d = _triage(tmp_path, {"gpu-n-021/dmesg.log": (
        "[3677603.126214] libceph: mds0 (1)172.21.5.114:6812 socket closed (con state OPEN)\n"
        "[3677603.132176] libceph: mon1 (1)172.21.5.112:6789 session lost, hunting for new mon\n")})
    assert (d.category.value, d.subtype) == ("infra", "storage_io_error")
    assert d.rule == "storage.ceph-kernel-client-session-lost"
    assert d.culprit.nodes == []


def test_a_denied_reconnect_leaves_that_nodes_mount_broken_so_the_job_restarts_without_it(tmp_path):
    d = _triage(tmp_path, {"gpu-n-021/dmesg.log": (
        "[3677603.126214] libceph: mds0 (1)172.21.5.114:6812 socket closed (con state OPEN)\n"
        "[3677655.880302] ceph: mds0 reconnect denied\n"
        "[3677655.881004] libceph: mds0 (1)172.21.5.114:6812 socket closed (con state NEGOTIATION)\n")})
    assert d.rule == "storage.ceph-kernel-client-evicted"
    assert (d.category.value, d.action.value) == ("infra", "restart_excluding_nodes")
    assert d.culprit.nodes == ["gpu-n-021"]


def test_an_unreachable_monitor_is_read_from_the_connect_error(tmp_path):
    d = _triage(tmp_path, {"gpu-n-005/dmesg.log": (
        "[ 9120.441802] libceph: connect (1)10.40.2.11:6789 error -101\n"
        "[ 9121.449911] libceph: connect (1)10.40.2.12:6789 error -101\n")})
    assert d.rule == "storage.ceph-kernel-client-session-lost"
    assert d.category.value == "infra"


def test_a_session_coming_up_is_not_a_storage_failure(tmp_path):
    d = _triage(tmp_path, {"gpu-n-005/dmesg.log": (
        "[   41.102331] libceph: mon1 (1)10.40.2.12:6789 session established\n"
        "[   41.104512] libceph: client4521 fsid 2f5c2e1a-8a3b-11ee-9c1a-0242ac120002\n")})
    assert d.subtype != "storage_io_error"
