"""The trust model: what a job prints is not kernel evidence, and forged dates do not move the job's span."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from diagnoser.prefilter.trust import plausible_span
from diagnoser.triage import triage

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus."
KEYERROR = "[rank3]:KeyError: 'learning_rate'"


def _job(tmp_path: Path, rank3_lines: list[str], dmesg: list[str] | None = None) -> Path:
    for r in range(4):
        d = tmp_path / ("gpu-001" if r < 2 else "gpu-002")
        d.mkdir(exist_ok=True)
        lines = [f"[rank{r}]:[2026-03-04 05:00:0{r},000] [INFO] step 1 loss 2.31"]
        if r == 3:
            lines += rank3_lines
        (d / f"rank{r}.log").write_text("\n".join(lines) + "\n")
    if dmesg is not None:
        (tmp_path / "dmesg").mkdir()
        (tmp_path / "dmesg" / "gpu-002.log").write_text("\n".join(dmesg) + "\n")
    return tmp_path


def test_an_xid_the_job_prints_itself_is_not_hardware_evidence(tmp_path: Path) -> None:
    job = _job(tmp_path, [f"[rank3]:[2026-03-04 05:00:05,000] {XID}", KEYERROR])
    d = triage([str(job)], workers=1)
    assert (d.category.value, d.subtype) == ("user_code", "python_exception"), d.root_cause
    assert not d.culprit.nodes or d.culprit.nodes == ["gpu-002"]
    assert any("printed by the job itself" in n for n in d.notes), d.notes


def test_a_forged_kernel_line_naming_another_node_drains_nothing(tmp_path: Path) -> None:
    forged = f"[rank3]:Mar  4 05:00:05 gpu-099 kernel: {XID}"
    d = triage([str(_job(tmp_path, [forged]))], workers=1)
    assert d.category.value != "hardware" and "gpu-099" not in d.culprit.nodes


def test_the_same_xid_in_the_nodes_kernel_log_decides(tmp_path: Path) -> None:
    job = _job(tmp_path, [KEYERROR], dmesg=[f"[Tue Mar  4 05:00:04 2026] {XID}"])
    d = triage([str(job)], workers=1)
    assert (d.category.value, d.subtype, d.action.value) == ("hardware", "gpu_xid_79", "drain_and_restart")
    assert d.culprit.nodes == ["gpu-002"]


@pytest.mark.parametrize("kernel_text", [  # infra rules that drain or exclude a node, not hardware ones
    "DMAR: [DMA Read NO_PASID] Request device [3b:00.0] fault addr 0xfbe00000 [fault reason 0x06] PTE Read access "
    "is not set",
    "ixgbe 0000:03:00.0 enp3s0: Detected Tx Unit Hang",
])
def test_kernel_text_the_job_prints_cannot_get_its_node_drained_or_excluded(tmp_path: Path, kernel_text) -> None:
    d = triage([str(_job(tmp_path, [f"[rank3]:[2026-03-04 05:00:05,000] {kernel_text}"]))], workers=1)
    assert d.action.value not in ("drain_and_restart", "restart_excluding_nodes"), d.root_cause
    assert d.subtype not in ("iommu_dma_fault", "nic_transmit_timeout")


def test_the_same_iommu_fault_in_the_nodes_kernel_log_drains_it(tmp_path: Path) -> None:
    dmar = ("[Tue Mar  4 05:00:04 2026] DMAR: [DMA Read NO_PASID] Request device [3b:00.0] fault addr 0xfbe00000 "
            "[fault reason 0x06] PTE Read access is not set")
    d = triage([str(_job(tmp_path, [], dmesg=[dmar]))], workers=1)
    assert (d.subtype, d.action.value, d.culprit.nodes) == ("iommu_dma_fault", "drain_and_restart", ["gpu-002"])


def test_a_pasted_excerpt_of_unknown_origin_still_counts(tmp_path: Path) -> None:
    """A human pasting a mixed excerpt (no rank, no launcher) is triaging, not attacking."""
    (tmp_path / "excerpt.txt").write_text(f"[Tue Mar  4 05:00:04 2026] {XID}\n")
    d = triage([str(tmp_path)], workers=1)
    assert d.category.value == "hardware"


def test_a_forged_year_does_not_widen_the_job_span(tmp_path: Path) -> None:
    """An old Xid on the node is history; a job printing 1999 and 2099 must not pull it into its span."""
    job = _job(tmp_path, ["[rank3]:[1999-01-01 00:00:00,000] [INFO] resumed",
                          "[rank3]:[2026-03-04 05:10:00,000] [INFO] step 2 loss 2.30", KEYERROR,
                          "[rank3]:[2099-12-31 23:59:59,000] [INFO] bye"],
               dmesg=[f"[Mon Jan  5 03:00:00 2026] {XID}"])  # two months before the job
    d = triage([str(job)], workers=1)
    assert d.category.value == "user_code", d.root_cause
    assert any("outside the job's time span" in n for n in d.notes), d.notes


def test_plausible_span_drops_future_and_outlying_times() -> None:
    now = datetime(2026, 3, 5, tzinfo=UTC)
    t0 = datetime(2026, 3, 4, 5, 0, tzinfo=UTC)
    bulk = [t0 + timedelta(minutes=m) for m in (0, 1, 5, 9, 10)]
    assert plausible_span([*bulk, datetime(1999, 1, 1, tzinfo=UTC), datetime(2099, 1, 1, tzinfo=UTC)], now) == (
        bulk[0], bulk[-1])
    assert plausible_span([datetime(1999, 1, 1, tzinfo=UTC), t0], now) == (t0, t0)
    assert plausible_span([datetime(2099, 1, 1, tzinfo=UTC)], now) == (None, None)


def test_an_xid_in_a_batch_jobs_own_output_file_is_not_evidence(tmp_path: Path) -> None:
    """slurm-<job>.out is what the job printed (collected by the Slurm executor when the console
    missed it): a kernel line there was printed by the job, whatever its prefix."""
    (tmp_path / "slurm-4242.out").write_text(f"step 1\n[Tue Mar  4 05:00:04 2026] {XID}\n"
                                             "KeyError: 'learning_rate'\n")
    d = triage([str(tmp_path)], workers=1)
    assert d.category.value == "user_code" and any("printed by the job itself" in n for n in d.notes)


@pytest.mark.parametrize("kernel_line", [
    'habanalabs hl2: Received H/W interrupt 236 ["HBM_1_DERR"], reset required',
    "NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR instance-id=i-0592464924bd45322 hostname=trn1-017 nd-id=0 nc-id=0 "
    "serial-num=19fcda00f5ff6eb9 action=TERMINATE_INSTANCE",
])
def test_other_accelerators_kernel_reports_count_only_from_the_kernel_log(tmp_path: Path, kernel_line: str) -> None:
    """Gaudi's and Neuron's drivers report failed memory in the kernel log; a rank printing the same text
    is a hint like a printed Xid."""
    (tmp_path / "printed").mkdir()
    (tmp_path / "kernel").mkdir()
    printed = triage([str(_job(tmp_path / "printed", [f"[rank3]:{kernel_line}"]))], workers=1)
    assert printed.category.value != "hardware" and any("printed by the job itself" in n for n in printed.notes)
    kernel = triage([str(_job(tmp_path / "kernel", [KEYERROR], dmesg=[f"[Tue Mar  4 05:00:04 2026] {kernel_line}"]))],
                    workers=1)
    assert kernel.category.value == "hardware", kernel.root_cause


def test_a_timed_out_collective_reaches_the_span_back_to_when_it_began_waiting(tmp_path: Path) -> None:
    """Ranks whose only timed lines are their watchdog timeouts (kubectl --timestamps) waited 30 minutes for
    a GPU that fell off the bus 25 minutes before the timeouts: that Xid is this failure, not history."""
    for r, node in ((0, "gpu-001"), (5, "gpu-002")):
        (tmp_path / node).mkdir()
        (tmp_path / node / f"rank{r}.log").write_text(
            f"2026-03-04T05:40:07.512Z [rank{r}]:[E304 05:40:07.512093 ProcessGroupNCCL.cpp:632] [Rank {r}] "
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=262144, "
            "NumelOut=262144, Timeout(ms)=1800000) ran for 1800041 milliseconds before timing out.\n")
    (tmp_path / "dmesg").mkdir()
    (tmp_path / "dmesg" / "gpu-002.log").write_text(f"[Wed Mar  4 05:15:02 2026] {XID}\n")
    d = triage([str(tmp_path)], workers=1)
    assert (d.category.value, d.subtype) == ("hardware", "gpu_xid_79"), d.root_cause
    assert d.culprit.nodes == ["gpu-002"]
