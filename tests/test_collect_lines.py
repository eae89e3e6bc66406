"""Line-level normalisation: bytes, colours, progress bars, prefixes, timestamps, paths."""

from datetime import UTC, datetime, timedelta, timezone
from pathlib import PurePath

import pytest

from diagnoser.collect.paths import path_info
from diagnoser.collect.prefixes import split_prefix
from diagnoser.collect.text import clean_line, decode, truncate_around, visible_segments
from diagnoser.collect.timestamps import parse_time


def test_decode_never_fails_on_invalid_utf8():
    assert decode(b"ok \xff\xfe bad \xc3") == "ok \ufffd\ufffd bad \ufffd"


def test_clean_line_strips_ansi_and_control_but_keeps_carriage_returns():
    raw = "\x1b[1;31mERROR\x1b[0m \x00boom\x07\r\n"
    assert clean_line(raw) == "ERROR boom"
    assert clean_line("a\rb\n") == "a\rb"


def test_visible_segments_of_a_tqdm_redraw_keep_an_error_printed_between_frames():
    line = " 10%|#  | 1/10\r 20%|## | 2/10\rRuntimeError: CUDA error: unknown error\r 30%|###| 3/10"
    segments = visible_segments(line)
    assert "RuntimeError: CUDA error: unknown error" in segments
    assert segments[-1].startswith(" 30%")


def test_truncate_keeps_the_interesting_span_visible():
    text = "x" * 10000 + "Xid 79" + "y" * 10000
    out = truncate_around(text, 10000, 10006, limit=200)
    assert "Xid 79" in out and len(out) <= 202


@pytest.mark.parametrize(("line", "rank", "local", "rest"), [
    ("[rank3]:RuntimeError: x", 3, None, "RuntimeError: x"),
    ("[rank12]: Traceback (most recent call last):", 12, None, "Traceback (most recent call last):"),
    ("[default5]:terminate called", None, 5, "terminate called"),
    ("  7: srun said", 7, None, "srun said"),
    ("[stderr]ModuleNotFoundError: x", None, None, "ModuleNotFoundError: x"),
    ("(RayTrainWorker pid=4242, ip=10.1.2.3) torch.OutOfMemoryError: CUDA out of memory.", None, None,
     "torch.OutOfMemoryError: CUDA out of memory."),
    ("(pid=771) Traceback (most recent call last):", None, None, "Traceback (most recent call last):"),
    ("(worker1, rank=1, pid=812) AssertionError", 1, None, "AssertionError"),
    ("trainer-1  | Killed", None, None, "Killed"),
    ("trainer_1  | Killed", None, None, "Killed"),
    ("[1,12]<stdout>:gpu-07:815:864 [4] NCCL INFO x", 12, None, "gpu-07:815:864 [4] NCCL INFO x"),
    ("[2,0]<stderr>: Traceback (most recent call last):", 0, None, "Traceback (most recent call last):"),
    ("[1,12] rank twelve", None, None, "[1,12] rank twelve"),
    ("epoch 1 | loss 0.3", None, None, "epoch 1 | loss 0.3"),
    ("(see the log above) error", None, None, "(see the log above) error"),
    ("plain line", None, None, "plain line"),
])
def test_rank_prefixes(line, rank, local, rest):
    p = split_prefix(line)
    assert (p.rank, p.local_rank, p.rest) == (rank, local, rest)


def test_a_ray_prefix_names_the_node_by_address():
    """The driver's log gathers every node's worker and raylet lines; the prefix says which node a line came from."""
    assert split_prefix("(RayTrainWorker pid=4242, ip=10.1.2.3) torch.OutOfMemoryError: x").node == "10.1.2.3"
    p = split_prefix("(raylet, ip=172.19.24.110) [2025-03-04 05:06:07,123 E 88 88] node_manager.cc:3040: x")
    assert (p.node, p.rest) == ("172.19.24.110", "[2025-03-04 05:06:07,123 E 88 88] node_manager.cc:3040: x")
    assert split_prefix("(pid=771) Traceback (most recent call last):").node is None


def test_a_failure_a_ray_worker_printed_is_localised_to_its_node(tmp_path):
    """The driver's log holds every worker's lines: busy GPUs reported by the worker on 10.0.0.7 are that node's."""
    from triage_support import triage_files

    d = triage_files(tmp_path, {"driver.log": (
        "(RayTrainWorker pid=5137, ip=10.0.0.3) loss: 2.019226  [ 6400/30000]\n"
        "(RayTrainWorker pid=5172, ip=10.0.0.7) RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or "
        "unavailable\n")})
    assert (d.subtype, d.culprit.nodes, d.action.value) == ("gpu_busy_unavailable", ["10.0.0.7"],
                                                             "restart_excluding_nodes")


def test_an_nccl_fault_under_mpirun_tag_output_names_its_node_and_rank(tmp_path):
    """Open MPI's `--tag-output` (Horovod's launcher) puts `[jobid,rank]<stdout>:` before NCCL's own
    `host:pid:tid [dev]` prefix: the host is the node to leave out, the tag the rank."""
    from triage_support import triage_files

    d = triage_files(tmp_path, {"mpirun.log": (
        "[1,3]<stdout>:gpu-node-02:733:790 [3] NCCL INFO comm 0x55d1c0 rank 3 nranks 16 cudaDev 3 busId 61000 - "
        "Init COMPLETE\n"
        "[1,12]<stdout>:gpu-node-07:815:864 [4] transport/net_ib.cc:80 NCCL WARN NET/IB : Got async event : "
        "local catastrophic error\n")})
    assert (d.subtype, d.action.value) == ("ib_link_down", "restart_excluding_nodes")
    assert (d.culprit.nodes, d.culprit.ranks) == (["gpu-node-07"], [12])


def test_collector_stamp_is_dropped_only_for_matching():
    from diagnoser.collect.prefixes import without_stamp

    line = "2025-03-04T05:06:07.123456789Z [rank3]: AssertionError"
    assert split_prefix(line).rest == line  # the time is read from the stamp
    assert split_prefix(without_stamp(line)) == split_prefix("[rank3]: AssertionError")
    assert without_stamp("2025-03-04 05:06:07 AssertionError") == "2025-03-04 05:06:07 AssertionError"


@pytest.mark.parametrize(("line", "expected"), [
    ("[2025-03-04 05:06:07,123] torch.distributed.run: [WARNING] x",
     datetime(2025, 3, 4, 5, 6, 7, 123000, tzinfo=UTC)),
    ("2025-03-04T05:06:07Z something", datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)),
    ("2026-04-02,03:40:58 | INFO | open_clip style", datetime(2026, 4, 2, 3, 40, 58, tzinfo=UTC)),
    ("2025-03-04T05:06:07+02:00 host kernel: x",
     datetime(2025, 3, 4, 5, 6, 7, tzinfo=timezone(timedelta(hours=2)))),
    ("[Tue Mar  4 05:06:07 2025] NVRM: Xid (PCI:0000:3b:00): 79", datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)),
    ("Mar  4 05:06:07 gpu-017 kernel: [123.456] mlx5_core", datetime(2024, 3, 4, 5, 6, 7, tzinfo=UTC)),
    ("E0304 05:06:07.123456 1234 ProcessGroupNCCL.cpp:1] x", datetime(2024, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)),
    ("  time      : 2025-03-04_05:06:09", datetime(2025, 3, 4, 5, 6, 9, tzinfo=UTC)),
    ("E0304 05:06:07.123456789 1234 ProcessGroupNCCL.cpp:1] torch>=2.5 nanoseconds",
     datetime(2024, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)),
])
def test_timestamp_formats(line, expected):
    assert parse_time(line, reference_year=2024) == expected


@pytest.mark.parametrize("line", [
    "[12345.678901] NVRM: Xid (PCI:0000:3b:00): 79",  # seconds since boot: not absolute
    "step 100 loss 2.3",
    "2025-13-45 99:99:99 not a date",
])
def test_no_absolute_time(line):
    assert parse_time(line, reference_year=2024) is None


@pytest.mark.parametrize(("path", "node", "rank", "kind"), [
    ("gpu-017/rank5.log", "gpu-017", 5, "log"),
    ("dmesg/gpu-017.log", "gpu-017", None, "dmesg"),
    ("logs/dmesg-node12.txt", "node12", None, "dmesg"),
    ("kern-dgx-a100-03.log", "dgx-a100-03", None, "dmesg"),
    ("nccl/nccl-gpu-017.log", "gpu-017", None, "nccl"),
    ("job/rank_005.log", None, 5, "log"),
    ("node7/stderr/rank-12.err", "node7", 12, "stderr"),
    ("slurm-4242.out", None, None, "scheduler"),
    ("gpu-003/syslog", "gpu-003", None, "dmesg"),
    ("slurm/sacct-4242.txt", None, None, "scheduler_record"),
    ("slurm/gpu-003.scontrol.txt", "gpu-003", None, "scheduler_record"),
    ("bmc/gpu-017.log", "gpu-017", None, "dmesg"),  # the BMC's event log is a platform log
    ("gpu-017/ipmi-sel.txt", "gpu-017", None, "dmesg"),
])
def test_path_info(path, node, rank, kind):
    info = path_info(PurePath(path))
    assert (info.node, info.rank, info.kind) == (node, rank, kind)
