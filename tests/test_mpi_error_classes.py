"""The MPI standard's error classes as Open MPI, MPICH and mpi4py print them when the error handler is fatal: a
wrong call is the program's, and a failed peer (ULFM) is collateral of that peer."""

from triage_support import triage_files as _triage

_OMPI_FATAL = (
    "[gpu-n-015:220695] *** An error occurred in MPI_Recv\n"
    "[gpu-n-015:220695] *** reported by process [2456485889,1]\n"
    "[gpu-n-015:220695] *** on communicator MPI_COMM_WORLD\n"
    "[gpu-n-015:220695] *** {cls}\n"
    "[gpu-n-015:220695] *** MPI_ERRORS_ARE_FATAL (processes in this communicator will now abort,\n"
    "[gpu-n-015:220695] ***    and potentially your MPI job)\n"
    "--------------------------------------------------------------------------\n"
    "mpirun has exited due to process rank 1 with PID 220695 on\n"
    "node gpu-n-015 exiting improperly. There are three reasons this could occur:\n")


def test_a_truncated_message_is_the_programs_and_names_no_node(tmp_path):
    d = _triage(tmp_path, {"mpirun.log": _OMPI_FATAL.format(cls="MPI_ERR_TRUNCATE: message truncated")})
    assert (d.category.value, d.subtype, d.action.value) == ("user_code", "mpi_usage_error", "stop_and_notify")
    assert d.culprit.nodes == []


def test_mpichs_class_text_reads_the_same_as_the_class_name(tmp_path):
    d = _triage(tmp_path, {"slurm-4412.out": (
        "Abort(537470981) on node 71 (rank 71 in comm 0): Fatal error in PMPI_Allreduce: Invalid communicator, "
        "error stack:\n"
        "PMPI_Allreduce(454): MPI_Allreduce(sbuf=0x7fffe380a628, rbuf=0xc56a238, count=1, datatype=MPI_INT, "
        "op=MPI_SUM, comm=0x0) failed\n"
        "PMPI_Allreduce(376): Invalid communicator\n")})
    assert (d.category.value, d.subtype) == ("user_code", "mpi_usage_error")


def test_mpi4pys_exception_carries_the_class_and_is_read_by_it(tmp_path):
    d = _triage(tmp_path, {"rank0.log": (
        "Traceback (most recent call last):\n"
        '  File "/workspace/shard.py", line 41, in exchange\n'
        "    comm.Send(buf, dest=world_size)\n"
        '  File "mpi4py/MPI/Comm.pyx", line 406, in mpi4py.MPI.Comm.Send\n'
        "mpi4py.MPI.Exception: MPI_ERR_RANK: invalid rank\n")})
    assert (d.category.value, d.subtype) == ("user_code", "mpi_usage_error")


def test_a_failed_peer_under_ulfm_is_collateral_of_that_peer(tmp_path):
    d = _triage(tmp_path, {"mpirun.log": _OMPI_FATAL.format(cls="MPI_ERR_PROC_FAILED: Process Failure")})
    assert d.subtype == "peer_lost"
    assert d.category.value != "user_code"


def test_open_mpis_retry_exceeded_help_text_alone_is_the_fabric_between_two_hosts(tmp_path):
    # the status line alone was already read (runbooks/nccl-ib-completion-error.md); an excerpt that kept only the
    # help text that follows it is read the same way
    d = _triage(tmp_path, {"mpirun.log": (
        "--------------------------------------------------------------------------\n"
        "The InfiniBand retry count between two MPI processes has been\n"
        "exceeded.  \"Retry count\" is defined in the InfiniBand spec 1.2\n"
        "(section 12.7.38):\n"
        "\n"
        "    The total number of times that the sender wishes the receiver to\n"
        "    retry timeout, packet sequence, etc. errors before posting a\n"
        "    completion error.\n")})
    assert (d.category.value, d.subtype) == ("infra", "nccl_ib_completion_error")
