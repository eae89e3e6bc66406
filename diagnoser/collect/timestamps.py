"""Absolute timestamps in the formats training clusters actually write.

Times without a zone are read as UTC: all sources of one job are assumed to share a zone.
Formats without a year (syslog, glog) take the year of a reference time (the file's mtime).
Plain dmesg stamps (`[12345.678]`, seconds since boot) are not absolute and are ignored.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

_MONTHS = {m: i for i, m in enumerate(
    ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], start=1)}

_ISO = re.compile(
    r"(?<!\d)(\d{4})-(\d{2})-(\d{2})[T _,](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?(Z|[+-]\d{2}:?\d{2})?"
)
_DMESG_T = re.compile(
    r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4})\]"
)
_SYSLOG = re.compile(r"^([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))? ")
_GLOG = re.compile(r"^[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{1,9})\b")
# the BMC's event log: ipmitool "  1a | 03/04/2026 | 05:06:07 | ..." (%x gives a 2-digit year from 1.8.19 on, then
# "05:06:07 UTC"), its CSV "1a,03/04/2026,05:06:07,...", FreeIPMI ipmi-sel "26 | Mar-04-2026 | 05:06:07 | ..."
_SEL = re.compile(
    r"^\s*[0-9a-fA-F]{1,8}\s*[|,]\s*(?:(\d\d)/(\d\d)/(\d{4}|\d\d)|([A-Z][a-z]{2})-(\d\d)-(\d{4}))"
    r"\s*[|,]\s*(\d\d):(\d\d):(\d\d)\b"
)
_CLOCK = re.compile(r"\d\d:\d\d:\d\d")  # every format above has one: most log lines are rejected by it alone


def _fraction(text: str | None) -> int:
    if not text:
        return 0
    return int(text[:6].ljust(6, "0"))


def _zone(text: str | None) -> timezone:
    if not text or text == "Z":
        return UTC
    sign = 1 if text[0] == "+" else -1
    digits = text[1:].replace(":", "")
    return timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0)))


def _safe(year: int, month: int, day: int, h: int, mi: int, s: int, us: int, tz: timezone) -> datetime | None:
    try:
        return datetime(year, month, day, h, mi, s, us, tzinfo=tz)
    except ValueError:
        return None


def parse_time(text: str, reference_year: int) -> datetime | None:
    """The first absolute timestamp in `text`, or None."""
    head = text[:200]
    if not _CLOCK.search(head):
        return None
    m = _SYSLOG.match(head)
    if m and m.group(1).lower() in _MONTHS:
        return _safe(reference_year, _MONTHS[m.group(1).lower()], int(m.group(2)), int(m.group(3)),
                     int(m.group(4)), int(m.group(5)), _fraction(m.group(6)), UTC)
    m = _DMESG_T.search(head)
    if m and m.group(1).lower() in _MONTHS:
        return _safe(int(m.group(6)), _MONTHS[m.group(1).lower()], int(m.group(2)), int(m.group(3)),
                     int(m.group(4)), int(m.group(5)), 0, UTC)
    m = _SEL.match(head)
    if m:
        return _sel_time(m)
    m = _ISO.search(head)
    if m:
        return _safe(int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)),
                     int(m.group(6)), _fraction(m.group(7)), _zone(m.group(8)))
    m = _GLOG.match(head)
    if m:
        return _safe(reference_year, int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)),
                     int(m.group(5)), _fraction(m.group(6)), UTC)
    return None


def _sel_time(m: re.Match[str]) -> datetime | None:
    hms = int(m.group(7)), int(m.group(8)), int(m.group(9))
    if m.group(1):
        year = int(m.group(3))
        return _safe(year + 2000 if year < 100 else year, int(m.group(1)), int(m.group(2)), *hms, 0, UTC)
    month = _MONTHS.get(m.group(4).lower())
    return _safe(int(m.group(6)), month, int(m.group(5)), *hms, 0, UTC) if month else None


def has_year(text: str) -> bool:
    """Whether the first timestamp of `text` carries its year (ISO, dmesg -T) or not (syslog, glog)."""
    head = text[:200]
    if _SYSLOG.match(head) or _GLOG.match(head):
        return False
    return bool(_DMESG_T.search(head) or _SEL.match(head) or _ISO.search(head))


def nearest_year(t: datetime, anchor: datetime) -> datetime:
    """`t` moved to the year (anchor's, or one either side) that puts it nearest `anchor`.

    Year-less formats get their year from the file's mtime, which copying or a git checkout
    resets; the job's own dated lines are the better reference.
    """
    best = t
    for year in (anchor.year - 1, anchor.year, anchor.year + 1):
        try:
            candidate = t.replace(year=year)
        except ValueError:  # Feb 29
            continue
        if abs(candidate - anchor) < abs(best - anchor):
            best = candidate
    return best
