"""Open MPI's openib BTL help texts (v4.1.x help-mpi-btl-openib.txt), as mpirun prints them between dashed rules: the
locked-memory and registration limits and the node's verbs stack are the site's to fix, a retry count exceeded between
two hosts is the fabric's, and a warning the job survives gives way to the error that ended it."""

from triage_support import triage_files as _triage

_RULE = "--------------------------------------------------------------------------\n"


def test_the_memlock_help_text_goes_to_an_operator_and_names_no_node(tmp_path):
    d = _triage(tmp_path, {"mpirun.log": (
        _RULE +
        "The OpenFabrics (openib) BTL failed to initialize while trying to\n"
        "allocate some locked memory.  This typically can indicate that the\n"
        "memlock limits are set too low.  For most HPC installations, the\n"
        "memlock limits should be set to \"unlimited\".  The failure occured\n"
        "here:\n"
        "\n"
        "  Local host:    cn-0412\n"
        "  OMPI source:   btl_openib_component.c:1216\n"
        "  Function:      ompi_free_list_init_ex_new()\n"
        "  Device:        mlx4_0\n"
        "  Memlock limit: 65536\n"
        "\n"
        "You may need to consult with your system administrator to get this\n"
        "problem fixed.\n" + _RULE)})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "memlock_limit", "escalate")
    assert d.rule == "launch.ompi-openib-memlock-init-fail"
    assert d.culprit.nodes == []


def test_the_memlock_field_alone_is_read_when_the_excerpt_kept_only_the_fields(tmp_path):
    d = _triage(tmp_path, {"mpirun.log": (
        "  Local host:    cn-0412\n"
        "  OMPI source:   btl_openib_component.c:1216\n"
        "  Function:      ompi_free_list_init_ex_new()\n"
        "  Device:        mlx4_0\n"
        "  Memlock limit: 32768\n")})
    assert (d.category.value, d.subtype) == ("infra", "memlock_limit")


def test_the_rnr_retry_help_text_is_the_fabric_between_two_hosts(tmp_path):
    d = _triage(tmp_path, {"mpirun.log": (
        _RULE +
        "The OpenFabrics \"receiver not ready\" retry count on a per-peer\n"
        "connection between two MPI processes has been exceeded.  In general,\n"
        "this should not happen because Open MPI uses flow control on per-peer\n"
        "connections to ensure that receivers are always ready when data is\n"
        "sent.\n"
        "\n"
        "  Local host:   node07\n"
        "  Local device: mlx4_0\n"
        "  Peer host:    node11\n" + _RULE)})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "nccl_ib_completion_error", "restart")
    assert d.rule == "launch.ompi-openib-rnr-retry-exceeded"  # read from the catalog, not recalled from a past incident


def test_a_registration_limit_warning_gives_way_to_the_error_that_ended_the_job(tmp_path):
    warning = (
        _RULE +
        "WARNING: It appears that your OpenFabrics subsystem is configured to only\n"
        "allow registering part of your physical memory.  This can cause MPI jobs to\n"
        "run with erratic performance, hang, and/or crash.\n"
        "\n"
        "  Local host:              r3i1n7\n"
        "  Registerable memory:     32768 MiB\n"
        "  Total memory:            65457 MiB\n"
        "\n"
        "Your MPI job will continue, but may be behave poorly and/or hang.\n" + _RULE)
    alone = _triage(tmp_path / "alone", {"mpirun.log": warning})
    assert (alone.category.value, alone.subtype, alone.action.value) == (
        "infra", "rdma_registerable_memory_limited", "escalate")
    with_error = _triage(tmp_path / "with-error", {"mpirun.log": warning + (
        "[r3i1n7:220695] *** An error occurred in MPI_Recv\n"
        "[r3i1n7:220695] *** reported by process [2456485889,1]\n"
        "[r3i1n7:220695] *** on communicator MPI_COMM_WORLD\n"
        "[r3i1n7:220695] *** MPI_ERR_TRUNCATE: message truncated\n"
        "[r3i1n7:220695] *** MPI_ERRORS_ARE_FATAL (processes in this communicator will now abort,\n")})
    assert (with_error.category.value, with_error.subtype) == ("user_code", "mpi_usage_error")


def test_a_queue_that_cannot_be_created_is_the_nodes_verbs_stack(tmp_path):
    d = _triage(tmp_path, {"mpirun.log": (
        _RULE +
        "The OpenFabrics (openib) BTL failed to initialize while trying to\n"
        "create an internal queue.  This typically indicates a failed\n"
        "OpenFabrics installation, faulty hardware, or that Open MPI is\n"
        "attempting to use a feature that is not supported on your hardware\n"
        "\n"
        "  Local host:  compute-2-14\n"
        "  OMPI source: btl_openib.c:396\n"
        "  Function:    ibv_create_srq()\n"
        "  Error:       Invalid argument (errno=22)\n"
        "  Device:      mlx5_0\n" + _RULE)})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "rdma_device_init_failed", "escalate")


def test_an_async_network_error_event_is_the_fabrics_unless_it_names_a_local_port_error(tmp_path):
    def event(kind: str, number: str) -> str:
        return (_RULE +
                f"The OpenFabrics stack has reported {kind} network error event.  Open MPI\n"
                "will try to continue, but your job may end up failing.\n"
                "\n"
                "  Local host:        gpu-b-031\n"
                "  MPI process PID:   88210\n"
                f"  Error number:      {number}\n" + _RULE)
    unnamed = _triage(tmp_path / "unnamed", {"mpirun.log": event("an unknown", "23")})
    assert (unnamed.category.value, unnamed.subtype, unnamed.action.value) == (
        "infra", "rdma_async_error_event", "restart")
    # the verbs event name, when printed, is more specific: a port error on this node's HCA is the part's
    port = _triage(tmp_path / "port", {"mpirun.log": event("a", "10 (IBV_EVENT_PORT_ERR)")})
    assert (port.category.value, port.subtype) == ("hardware", "ib_link_down")


def test_mismatched_adapters_between_nodes_go_to_an_operator(tmp_path):
    d = _triage(tmp_path, {"mpirun.log": (
        _RULE +
        "The Open MPI receive queue configuration for the OpenFabrics devices\n"
        "on two nodes are incompatible, meaning that MPI processes on two\n"
        "specific nodes were unable to communicate with each other.  This\n"
        "generally happens when you are using OpenFabrics devices from\n"
        "different vendors on the same network.\n"
        "\n"
        "  Local host:       n001\n"
        "  Local adapter:    mlx4_0 (vendor 0x2c9, part ID 26428)\n"
        "  Local queues:     P,128,256,192,128:S,2048,256,128,32\n"
        "\n"
        "  Remote host:      n042\n"
        "  Remote adapter:   (vendor 0x1077, part ID 29474)\n"
        "  Remote queues:    P,65536,256,192,128\n" + _RULE)})
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "rdma_heterogeneous_devices", "escalate")
