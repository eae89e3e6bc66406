"""A broken connection reported from one end blames neither end: an EFA, UCX, Slingshot, Open MPI or ParaStation MPI
transport error says that a request to some peer failed, and the node that printed it is no more the culprit than the
peer it could not reach. Only a local device fault names its node. (Label convention of the public threads these lines
come from: the cause was a security group, a pod's memory limit or a dead peer, never the reporting node.)"""

import pytest
from triage_support import triage_files as _triage

from diagnoser.prefilter.runbooks import load_runbooks

EFA_UNRESPONSIVE = (
    "ip-10-1-23-45:27341:27512 [3] int nccl_net_ofi_rdma_context::handle_error_entry(fid_cq*, fi_cq_err_entry*, "
    "uint16_t):1336 NCCL WARN NET/OFI Request 0x7f2b9c0a1d88 ({ dev: 6, size: 2097152, state: PENDING, type: SEND }) "
    "completed with error: err: 103, flags: 0, prov_errno: 4124, strerror: Unresponsive receiver (connection "
    "previously established) My EFA addr: fi_addr_efa://[fe80::4d5:aaff:fe12:3456]:1:1234567 My host id: "
    "i-0a1b2c3d4e5f60718 Peer EFA addr: fi_addr_efa://[fe80::4c1:bbff:fe65:4321]:0:7654321 Peer host id: "
    "i-0f9e8d7c6b5a40312, len: 0\n")
OFI_COMPLETION = (
    "ip-10-1-23-45:27341:27512 [3] int nccl_net_ofi_rdma_context::handle_error_entry(fid_cq*, fi_cq_err_entry*, "
    "uint16_t):1336 NCCL WARN NET/OFI Request 0x7f3ad80f2c48 ({ dev: 3, size: 1048576, state: PENDING, type: SEND }) "
    "completed with error: err: 5, flags: 0, prov_errno: 4096, strerror: Unknown error, len: 0\n")
UCX_UNREACHABLE = ("[1718901234.552101] [ip-10-1-23-45:88210:0]          ucp_ep.c:1661 UCX  ERROR ep 0x7f2c1c0a8000: "
                   "error 'Destination is unreachable' on rc_mlx5/mlx5_2:1 will not be handled since no error callback "
                   "is installed\n")
OFI_CQ_READ = ("ip-10-1-23-45:27341:27512 [5] int nccl_net_ofi_rdma_ep_t::ofi_process_cq_rail("
               "nccl_net_ofi_ep_rail_t*):1421 NCCL WARN NET/OFI Unable to retrieve completion queue entries. "
               "RC: -265, ERROR: Unspecified error\n")


@pytest.mark.parametrize(("line", "subtype"), [
    (EFA_UNRESPONSIVE, "efa_unresponsive_remote"),
    (OFI_COMPLETION, "ofi_completion_error"),
    (UCX_UNREACHABLE, "ucx_transport_error"),
])
def test_a_transport_error_from_one_end_names_neither_the_reporting_node_nor_its_rank(tmp_path, line, subtype):
    d = _triage(tmp_path, {"ip-10-1-23-45/rank3.log": line})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", subtype, "restart")
    assert (d.culprit.nodes, d.culprit.ranks) == ([], [])


def test_the_same_error_from_ranks_on_two_nodes_still_names_no_node(tmp_path):
    other = OFI_COMPLETION.replace("ip-10-1-23-45:27341", "ip-10-1-40-17:5120").replace("[3]", "[0]")
    d = _triage(tmp_path, {"ip-10-1-23-45/rank3.log": OFI_COMPLETION, "ip-10-1-40-17/rank8.log": other})
    assert d.subtype == "ofi_completion_error"
    assert d.culprit.nodes == []


def test_a_failing_completion_queue_is_the_local_device_and_names_its_node(tmp_path):
    d = _triage(tmp_path, {"ip-10-1-23-45/rank5.log": OFI_CQ_READ})
    assert d.subtype == "ofi_cq_read_failed"
    assert d.culprit.nodes == ["ip-10-1-23-45"]


def test_every_connection_scoped_entry_is_a_connection_failure_not_a_device_fault():
    """The scope is for lines that report a request to a peer failing; a hardware entry (a device of this node) must
    never carry it, nor an action that needs a node named."""
    books = [b for b in load_runbooks() if b.scope == "connection"]
    assert len(books) >= 10
    for b in books:
        assert b.category.value == "infra", b.id
        assert b.action.value in ("restart", "retry_after_backoff", "escalate"), b.id
        assert b.about_connection


PSCOM_RANK_LOG = (
    "{r}: <PSP:r{r:07d}:ib:ibv_poll_cq(): Infiniband returned the wrong Opcode 5408>\n"
    "{r}: <PSP:r{r:07d}:connection to (10.13.6.39,20811,0x168,r0000386) (type:openib,state:open) : read : "
    "Broken pipe>\n"
    "{r}: <PSP:r{r:07d}:connection to (10.13.6.39,20811,0x168,r0000386) (type:openib,state:wo) : write : "
    "Broken pipe>\n")


def test_parastation_mpi_error_completion_is_a_fabric_failure_that_names_nobody(tmp_path):
    """pscom (ParaStation MPI) reports an error completion as an unexpected opcode and breaks every connection of the
    HCA; the broken-pipe lines that follow are its collateral."""
    d = _triage(tmp_path, {"jwb0815/stderr.log": PSCOM_RANK_LOG.format(r=359) + PSCOM_RANK_LOG.format(r=356)})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "ib_completion_error", "restart")
    assert d.rule == "parastation-pscom.pscom-openib-wrong-opcode"
    assert (d.culprit.nodes, d.culprit.ranks) == ([], [])
    assert d.collateral.get("parastation-pscom.pscom-connection-broken", 0) >= 2


def test_parastation_mpi_broken_connections_alone_are_collateral_of_the_peer_they_name(tmp_path):
    lines = "".join(line for r in (359, 356) for line in PSCOM_RANK_LOG.format(r=r).splitlines(keepends=True)[1:])
    d = _triage(tmp_path, {"jwb0815/stderr.log": lines})
    assert (d.category.value, d.subtype) == ("infra", "peer_lost")
    assert d.culprit.nodes == ["10.13.6.39"]  # two processes name the same peer
