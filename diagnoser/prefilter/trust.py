"""What counts as evidence: the trust model applied to matches before the first failure is chosen.

Log text is data from untrusted sources. Two rules (README, "What diagnoser trusts"):

1. Kernel-only hardware text (`NVRM: Xid`, `mlx5_core`, `pcieport ... AER`, `EDAC`, `mce:`) is
   hardware evidence only when it comes from a kernel source (dmesg, kern.log, the journal, a node
   health check) or a log whose origin is unknown (a pasted excerpt). Printed in a rank's own output
   (a `[rankN]:` line, a per-rank file, the launcher's console) it is something the job wrote, and at
   most a hint: a job must not get itself re-run, or a node drained, by printing an Xid.
2. The job's time span, which separates today's kernel events from a node's history, is taken
   from timestamps that are plausible: a time in the future or far from the rest of the job's
   logs (a job printing 1999 or 2099) does not widen it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import PurePath

from diagnoser.collect.paths import path_info
from diagnoser.collect.prefixes import split_prefix
from diagnoser.models import NODE_ACTIONS, Category, LogRecord, SignatureMatch
from diagnoser.prefilter.runbooks import Runbook

KERNEL_ONLY = re.compile(
    r"\bNVRM: |\bkernel: |\bmlx5_core\b|\bmlx5_ib\b|\bpcieport\b|\bEDAC\b|\bmce: |\[Hardware Error\]|\bAER: "
    r"|\bnvidia-nvswitch\d*: |\bamdgpu \d{4}:|\[drm(?::[^\]]*)?\] \*ERROR\*"
    r"|\bhabanalabs hl\d+: |\bNEURON_HW_ERR="  # Gaudi's kernel driver; the Neuron driver's dmesg report
    r"|\bDMAR: |\bAMD-Vi: |\bNETDEV WATCHDOG: "  # the IOMMU's faults, the network stack's transmit watchdog
    r"|\b(?:Unc|C)orrected error\(s\): "  # rasdaemon's records of the kernel's EDAC events (ras-mc-ctl --errors)
    r"|\b(?:e1000e|igb|igc|ixgbe|fm10k|i40e|ice|bnxt_en) [0-9a-fA-F]{4}:"  # NIC drivers' dev_printk prefix
    # the BMC's event log as ipmitool and FreeIPMI print it: "<id> | <date> | <time> | ..." or "... | Asserted"
    r"|^\s*[0-9a-fA-F]{1,8}\s*[|,]\s*(?:\d\d/\d\d/\d\d(?:\d\d)?|[A-Z][a-z]{2}-\d\d-\d{4})\s*[|,]\s*\d\d:\d\d:\d\d"
    r"|[|,]\s*(?:De)?[Aa]sserted\s*(?:[|,]|$)")
TRUSTED_KINDS = frozenset({"dmesg", "syslog", "scheduler_record", "health"})
JOB_OUTPUT_NAMES = frozenset({"launcher.log", "console.log"})  # what `diagnoser run` writes from the job's output
# a batch job's output file (slurm-<job>.out) is what the job printed; Slurm never copies kernel logs there
JOB_OUTPUT_KINDS = frozenset({"scheduler"})
MAX_SPAN = timedelta(days=14)  # times this far from the bulk of the job's logs are not the job's
FUTURE_SLACK = timedelta(days=1)


def job_output(rec: LogRecord) -> bool:
    """Did the job itself write this line (a rank's output or the launcher's console)? Judged by the
    file the line is in (a line that merely looks like syslog inside a rank's log is still the rank's)."""
    kind = path_info(PurePath(rec.source)).kind
    if kind in TRUSTED_KINDS:
        return False
    return rec.rank is not None or kind in JOB_OUTPUT_KINDS or PurePath(rec.source).name in JOB_OUTPUT_NAMES


def kernel_text_from_the_job(rec: LogRecord) -> bool:
    """Kernel-only text (an Xid, an mlx5 or AER line) in a line the job itself wrote."""
    return job_output(rec) and KERNEL_ONLY.search(split_prefix(rec.text).rest) is not None


def printed_by_the_job(m: SignatureMatch, book: Runbook | None) -> bool:
    """A kernel-only line that the job printed itself, read as hardware or by a rule that drains or excludes a
    node (an IOMMU fault, a NIC's transmit hang): a hint, not evidence."""
    takes_node_out = book is not None and (
        book.category is Category.HARDWARE or {book.action, book.localised_action} & NODE_ACTIONS)
    return bool(takes_node_out) and kernel_text_from_the_job(m.record)


def split_hints(matches: list[SignatureMatch], books: dict[str, Runbook]
                ) -> tuple[list[SignatureMatch], list[SignatureMatch]]:
    """(evidence, hints): hints are kernel-only lines found in the job's own output whose rule reads them as
    hardware or would take a node out."""
    evidence, hints = [], []
    for m in matches:
        (hints if printed_by_the_job(m, books.get(m.runbook_id)) else evidence).append(m)
    return evidence, hints


# a timed-out collective says how long it waited: PyTorch's watchdog "... Timeout(ms)=600000) ran for 600047
# milliseconds before timing out"
_WAITED = re.compile(r"\bran for (\d{1,10}) milliseconds before timing out|\bTimeout\(ms\)=(\d{1,10})\)")
MAX_WAIT = timedelta(hours=2)  # the longest collective timeout counted: a job printing a day-long one gains no more


def waited_since(records: list[LogRecord], span: tuple[datetime | None, datetime | None]) -> datetime | None:
    """When the longest-waiting timed-out collective began: a watchdog line at T that ran for N ms was waiting
    from T - N. The failure that stalled it happened in that wait, so the job's span reaches back to it (a
    rank's logs may hold no earlier time than the timeout itself). Only lines inside the plausible span count."""
    start, end = span
    if start is None or end is None:
        return None
    earliest = None
    for rec in records:
        if rec.time is None or rec.time_inferred or not start <= rec.time <= end:
            continue
        m = _WAITED.search(rec.text)
        if m is None:
            continue
        waited = min(timedelta(milliseconds=int(m.group(1) or m.group(2))), MAX_WAIT)
        began = rec.time - waited
        earliest = began if earliest is None or began < earliest else earliest
    return earliest


def plausible_span(times: list[datetime], now: datetime | None = None) -> tuple[datetime | None, datetime | None]:
    """The job's span from its logs' first/last times, without future or outlying times.

    With several sources the bulk is around the median; with one or two, the latest plausible
    time anchors it (a failure is near the end of the logs)."""
    now = now or datetime.now(UTC)

    def aware(t: datetime) -> datetime:
        return t if t.tzinfo else t.replace(tzinfo=UTC)

    valid = sorted((t for t in times if aware(t) <= now + FUTURE_SLACK), key=aware)
    if not valid:
        return None, None
    if len(valid) >= 4:
        centre = aware(valid[(len(valid) - 1) // 2])
        kept = [t for t in valid if abs(aware(t) - centre) <= MAX_SPAN]
    else:
        kept = [t for t in valid if aware(valid[-1]) - aware(t) <= MAX_SPAN]
    return (kept[0], kept[-1]) if kept else (None, None)
