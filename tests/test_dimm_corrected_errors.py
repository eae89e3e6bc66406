"""Corrected memory errors: one is harmless, a single report of ten or more on one DIMM is a failing DIMM
(past mcelog's default per-DIMM threshold of 10 corrected errors in 24 hours): drain that node."""

from pathlib import Path

from triage_support import triage_files, watchdog_timeout

BURST = ("[Mon Oct  3 13:52:42 2022] EDAC MC1: 262 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 "
         "(channel:1 slot:0 page:0x2031c14 offset:0x940 grain:32 syndrome:0x0 -  OVERFLOW area:DRAM "
         "err_code:0001:0090 socket:0 ha:0 channel_mask:2 rank:1)\n")
SINGLE = ("[Mon Oct  3 13:52:42 2022] EDAC MC1: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 "
          "(channel:1 slot:0 page:0x2031c14 offset:0x940 grain:32 syndrome:0x0 area:DRAM err_code:0001:0090)\n")
RAS_BURST = ("3 2024-02-11 04:10:12 +0000 12 Corrected error(s): memory read error at CPU_SrcID#1_MC#0_Chan#2_DIMM#0 "
             "location: 2:0:0:-1, addr 0x2a3f1c000, grain 5, syndrome 0  err_code:0x0101:0x0091 socket:1 imc:0\n")


def test_a_burst_of_corrected_errors_on_one_dimm_drains_its_node(tmp_path: Path):
    verdict = triage_files(tmp_path, {"gpu-b07/dmesg.log": BURST, "gpu-a01/rank0.log": watchdog_timeout(0)})
    assert (verdict.category, verdict.action) == ("hardware", "drain_and_restart")
    assert verdict.culprit.nodes == ["gpu-b07"]
    assert "262 CE" in verdict.evidence[0].text


def test_rasdaemons_count_is_read_the_same_way(tmp_path: Path):
    verdict = triage_files(tmp_path, {"gpu-b07/dmesg.log": RAS_BURST})
    assert (verdict.category, verdict.action) == ("hardware", "drain_and_restart")


def test_a_single_corrected_error_drains_nothing(tmp_path: Path):
    verdict = triage_files(tmp_path, {"gpu-b07/dmesg.log": SINGLE})
    assert (verdict.subtype, verdict.action) == ("host_corrected_error", "escalate")


def test_the_same_lines_printed_by_the_job_are_no_evidence(tmp_path: Path):
    for name, line in (("edac", BURST), ("rasdaemon", RAS_BURST)):
        verdict = triage_files(tmp_path / name, {"gpu-a01/rank0.log": line})
        assert verdict.category != "hardware" and not verdict.culprit.nodes, name


def _single(when: str, dimm: str = "CPU_SrcID#0_Ha#0_Chan#1_DIMM#0") -> str:
    return (f"[{when}] EDAC MC1: 1 CE memory read error on {dimm} (channel:1 slot:0 page:0x2031c14 offset:0x940 "
            "grain:32 syndrome:0x0 area:DRAM err_code:0001:0090)\n")


def test_single_reports_add_up_on_one_dimm(tmp_path: Path):
    dmesg = "".join(_single(f"Mon Oct  3 13:{m:02d}:42 2022") for m in range(40, 52))
    verdict = triage_files(tmp_path, {"gpu-b07/dmesg.log": dmesg})
    assert (verdict.category, verdict.action) == ("hardware", "drain_and_restart")
    assert verdict.culprit.nodes == ["gpu-b07"] and "12 corrected memory errors" in verdict.root_cause


def test_rasdaemons_single_records_add_up_too(tmp_path: Path):
    records = "".join(f"{i} 2022-10-16 06:37:{i:02d} +0000 1 Corrected error(s): memory read error at "
                      f"CPU_SrcID#1_MC#1_Chan#1_DIMM#0 location: 3:1:0:-1, addr 4700948{i:02d}512, grain 5, "
                      "syndrome 0  err_code:0x0101:0x0091 socket:1 imc:1 channel:1 dimm:0\n" for i in range(1, 11))
    verdict = triage_files(tmp_path, {"gpu-b07/ras-mc-ctl-errors.log": "Memory controller events:\n" + records})
    assert (verdict.category, verdict.action) == ("hardware", "drain_and_restart")


def test_errors_spread_over_dimms_or_days_stay_an_operators(tmp_path: Path):
    spread = "".join(_single("Mon Oct  3 13:40:42 2022", f"CPU_SrcID#0_Ha#0_Chan#{c}_DIMM#0") for c in range(4)
                     for _ in range(3))
    days = "".join(_single(f"{day} Oct  {d} 1{h}:00:00 2022") for d, day in ((3, "Mon"), (4, "Tue"), (5, "Wed"))
                   for h in range(4))
    for name, dmesg in (("spread", spread), ("days", days)):
        verdict = triage_files(tmp_path / name, {"gpu-b07/dmesg.log": dmesg})
        assert (verdict.subtype, verdict.action) == ("host_corrected_error", "escalate"), name


def test_reports_from_the_kernel_log_and_the_journal_of_one_node_add_up(tmp_path: Path):
    kernel = "".join(_single(f"Mon Oct  3 13:{m:02d}:42 2022") for m in range(40, 45))
    journal = "".join(f"2022-10-03T13:{m:02d}:42+00:00 gpu-b07 kernel: EDAC MC1: 1 CE memory read error on "
                      "CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x2031c14 offset:0x940 grain:32)\n"
                      for m in range(45, 50))
    verdict = triage_files(tmp_path, {"gpu-b07/dmesg.log": kernel, "gpu-b07/journal-kernel.log": journal})
    assert (verdict.category, verdict.action) == ("hardware", "drain_and_restart")
