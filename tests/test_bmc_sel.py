"""The BMC's System Event Log (ipmitool `sel elist`, FreeIPMI `ipmi-sel`) saved beside a job's logs: a processor,
power-supply or bus fault the platform recorded during the job names that node and drains it; the same event from
months ago is the node's history; a cleared (deasserted) event is no fault; and a job that prints SEL lines into its
own output gets a hint, not a drained node."""

from datetime import UTC, datetime

import pytest
from triage_support import triage_files as _triage
from triage_support import watchdog_timeout

from diagnoser.collect.timestamps import parse_time

STEP = "2026-11-20 03:03:51,204 - train - INFO - step 1200 loss 2.31\n"  # dates the job: November 2026


def _sel(*events: str) -> str:
    return "".join(f"{i + 0x1a:4x} | {e}\n" for i, e in enumerate(events))


@pytest.mark.parametrize(("name", "sel", "subtype"), [
    ("gpu-b07/bmc.log", _sel("11/20/2026 | 03:02:10 | Processor #0x04 | IERR | Asserted"), "host_cpu_error"),
    ("bmc/gpu-b07.log", _sel("11/20/26 | 03:02:10 UTC | Power Supply PSU2 Status | Failure detected | Asserted"),
     "host_power_supply_failure"),
    ("gpu-b07/ipmi-sel.txt", "112 | Nov-20-2026 | 03:02:10 | PCI ERR | Critical Interrupt | Bus Fatal Error\n",
     "host_bus_error"),
])
def test_a_platform_fault_during_the_job_drains_its_node_and_explains_the_peers_timeouts(tmp_path, name, sel, subtype):
    d = _triage(tmp_path, {
        name: sel,
        "gpu-b07/rank8.log": watchdog_timeout(8),
        "gpu-a03/rank0.log": watchdog_timeout(0),
    })
    assert (d.category.value, d.subtype, d.action.value) == ("hardware", subtype, "drain_and_restart")
    assert d.culprit.nodes == ["gpu-b07"]


def test_an_event_from_months_before_the_job_is_the_nodes_history(tmp_path):
    d = _triage(tmp_path, {
        "gpu-b07/bmc.log": _sel("03/02/2026 | 11:40:55 | Processor #0x04 | IERR | Asserted",
                                "03/02/2026 | 11:52:03 | Processor #0x04 | IERR | Deasserted"),
        "gpu-b07/rank8.log": f"{STEP}{watchdog_timeout(8)}",
        "gpu-a03/rank0.log": f"{STEP}{watchdog_timeout(0)}",
    })
    assert d.category.value != "hardware"
    assert "gpu-b07" not in d.culprit.nodes


def test_a_cleared_event_and_a_presence_event_are_not_faults(tmp_path):
    d = _triage(tmp_path, {"gpu-b07/bmc.log": _sel(
        "11/20/2026 | 03:02:10 | Power Supply #0x51 | Failure detected | Deasserted",
        "11/20/2026 | 03:02:11 | Power Supply #0x51 | Presence detected | Asserted",
        "11/20/2026 | 03:02:12 | Temperature GPU3_Temp | Upper Critical going high | Deasserted")})
    assert d.category.value != "hardware"


def test_a_critical_sensor_outranks_a_warning_and_a_warning_alone_only_tells_an_operator(tmp_path):
    warning = "11/20/2026 | 03:01:00 | Temperature GPU3_Temp | Upper Non-critical going high | Asserted"
    critical = "11/20/2026 | 03:02:10 | Temperature GPU3_Temp | Upper Critical going high | Asserted"
    alone = _triage(tmp_path / "a", {"gpu-b07/bmc.log": _sel(warning)})
    assert (alone.category.value, alone.subtype, alone.action.value) == ("hardware", "host_sensor_warning", "escalate")
    both = _triage(tmp_path / "b", {"gpu-b07/bmc.log": _sel(warning, critical)})
    assert (both.subtype, both.action.value) == ("host_sensor_critical", "drain_and_restart")


def test_sel_lines_the_job_printed_itself_do_not_drain_a_node(tmp_path):
    forged = "[rank8]:  1a | 11/20/2026 | 03:02:10 | Processor #0x04 | IERR | Asserted\n"
    d = _triage(tmp_path, {
        "gpu-b07/rank8.log": forged + watchdog_timeout(8),
        "gpu-a03/rank0.log": watchdog_timeout(0),
    })
    assert d.category.value != "hardware"
    assert d.action.value != "drain_and_restart"


@pytest.mark.parametrize("line", [
    "  1a | 11/20/2026 | 03:02:10 | Processor #0x04 | IERR | Asserted",  # ipmitool 1.8.18
    "  1a | 11/20/26 | 03:02:10 UTC | Processor CPU1 Status | IERR | Asserted",  # ipmitool 1.8.19+: %x, %X %Z
    "1a,11/20/2026,03:02:10,Processor #0x04,IERR,Asserted",  # ipmitool -c
    "26 | Nov-20-2026 | 03:02:10 | CPU1 Status | Processor | IERR",  # FreeIPMI ipmi-sel
])
def test_each_sel_printer_s_time_is_read(line):
    assert parse_time(line, 2020) == datetime(2026, 11, 20, 3, 2, 10, tzinfo=UTC)
