"""An application-class Xid following one GPU through unrelated processes is the GPU; on every GPU, the program."""

from __future__ import annotations

from pathlib import Path

from diagnoser.triage import triage

MMU = ("NVRM: Xid (PCI:0000:{bus}:00): 31, pid={pid}, name=python3, Ch 00000008, intr 00000000. MMU Fault: ENGINE "
       "GRAPHICS GPCCLIENT_T1_10 faulted @ 0x7fd7_90743000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ")
ILLEGAL = "[rank{r}]: RuntimeError: CUDA error: an illegal memory access was encountered"


def _dmesg(events: list[tuple[str, str, int]]) -> list[str]:
    """(day, bus, pid) -> `dmesg -T` lines of the node."""
    return [f"[{day} 2026] " + MMU.format(bus=bus, pid=pid) for day, bus, pid in events]


def _job(tmp_path: Path, dmesg: list[str], rank_error: str | None = ILLEGAL, printed: list[str] = ()) -> Path:
    node = tmp_path / "gpu-017"
    node.mkdir()
    for r in range(4):
        lines = [f"[rank{r}]:[2026-03-04 05:00:0{r},000] [INFO] step 1 loss 2.31", *printed]
        if r == 2 and rank_error:
            lines.append(f"[rank{r}]:[2026-03-04 05:00:09,000] " + rank_error.format(r=r).split("]: ", 1)[1])
        (node / f"rank{r}.log").write_text("\n".join(lines) + "\n")
    (node / "dmesg.log").write_text("\n".join(dmesg) + "\n")
    return tmp_path


def test_an_mmu_fault_that_follows_one_gpu_across_processes_drains_that_gpus_node(tmp_path: Path) -> None:
    history = _dmesg([("Sun Mar  1 10:00:00", "db", 13641), ("Mon Mar  2 03:12:40", "db", 14323),
                      ("Wed Mar  4 05:00:08", "db", 33275)])
    d = triage([str(_job(tmp_path, history))], workers=1)
    assert (d.category.value, d.subtype, d.action.value) == ("hardware", "gpu_recurring_fault", "drain_and_restart")
    assert d.culprit.nodes == ["gpu-017"] and d.culprit.gpus == ["0000:db:00"]
    assert "3 unrelated processes" in d.root_cause and d.rule.startswith("recurrence.")
    assert any("Xid" in e.text and "pid=13641" in e.text for e in d.evidence)


def test_the_same_fault_on_every_gpu_is_the_program(tmp_path: Path) -> None:
    # a bad kernel write hits each GPU the job runs on, once per run, three runs in a row
    events = [(f"{day} 0{i}:00:00", bus, 1000 * run + i) for run, day in enumerate(
        ["Sun Mar  1", "Mon Mar  2", "Wed Mar  4"], start=1) for i, bus in enumerate(["1b", "3b", "5d", "db"])]
    d = triage([str(_job(tmp_path, _dmesg(events)))], workers=1)
    assert d.category.value == "user_code", d.root_cause
    assert not d.culprit.nodes


def test_two_processes_are_not_yet_a_pattern(tmp_path: Path) -> None:
    history = _dmesg([("Mon Mar  2 03:12:40", "db", 14323), ("Wed Mar  4 05:00:08", "db", 33275)])
    d = triage([str(_job(tmp_path, history))], workers=1)
    assert d.category.value == "user_code", d.root_cause


def test_a_cuda_oom_stays_the_programs_whatever_the_gpus_history(tmp_path: Path) -> None:
    history = _dmesg([("Sun Mar  1 10:00:00", "db", 13641), ("Mon Mar  2 03:12:40", "db", 14323),
                      ("Tue Mar  3 03:12:40", "db", 20001)])
    oom = ("[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
           "capacity of 79.11 GiB of which 1.02 GiB is free.")
    d = triage([str(_job(tmp_path, history, rank_error=oom))], workers=1)
    assert (d.category.value, d.subtype) == ("user_code", "cuda_oom"), d.root_cause


def test_xids_the_job_prints_itself_do_not_make_a_pattern(tmp_path: Path) -> None:
    printed = [MMU.format(bus="db", pid=pid) for pid in (11, 12, 13, 14)]
    d = triage([str(_job(tmp_path, [], printed=printed))], workers=1)
    assert d.category.value == "user_code", d.root_cause


AMD_FAULT = ("amdgpu 0000:{bus}:00.0: amdgpu: [gfxhub0] retry page fault (src_id:0 ring:0 vmid:8 pasid:32769, "
             "for process python3 pid {pid} thread python3 pid {pid})")


def _amd_job(tmp_path: Path, events: list[tuple[str, str, int]]) -> Path:
    node = tmp_path / "mi300-04"
    node.mkdir()
    for r in range(4):
        (node / f"rank{r}.log").write_text(f"[rank{r}]:[2026-03-04 05:00:0{r},000] [INFO] step 1 loss 2.31\n")
    (node / "dmesg.log").write_text("\n".join(f"[{day} 2026] " + AMD_FAULT.format(bus=bus, pid=pid)
                                              for day, bus, pid in events) + "\n")
    return tmp_path


def test_an_amdgpu_page_fault_that_follows_one_gpu_across_processes_is_the_gpu(tmp_path: Path) -> None:
    # amdgpu names the process as "pid N", not NVIDIA's "pid=N": read from the catalog's captured pid
    events = [("Sun Mar  1 10:00:00", "c1", 44120), ("Mon Mar  2 03:12:40", "c1", 45001),
              ("Wed Mar  4 05:00:08", "c1", 47777)]
    d = triage([str(_amd_job(tmp_path, events))], workers=1)
    assert (d.category.value, d.subtype) == ("hardware", "gpu_recurring_fault")
    assert d.culprit.nodes == ["mi300-04"] and d.culprit.gpus == ["0000:c1:00"]


def test_amdgpu_page_faults_on_every_gpu_stay_the_programs(tmp_path: Path) -> None:
    events = [("Wed Mar  4 05:00:08", bus, 47777 + i) for i, bus in enumerate(["c1", "c2", "c3", "c4"])]
    d = triage([str(_amd_job(tmp_path, events))], workers=1)
    assert d.category.value == "user_code" and d.subtype == "gpu_memory_access_fault"
