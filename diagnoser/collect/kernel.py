"""Kernel logs: dmesg (with and without -T), kern.log/syslog and journalctl lines.

The host is named by syslog/journal lines (`Mar  4 05:06:07 gpu-017 kernel: ...`); plain dmesg
output does not name it, so it comes from the file path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_SYSLOG_HOST = re.compile(
    r"^(?:[A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2}(?:\.\d+)?|\d{4}-\d{2}-\d{2}T[\d:.]+(?:Z|[+-][\d:]+)?) "
    r"(?P<host>[A-Za-z0-9][A-Za-z0-9._-]{0,62}) (?:kernel|nvidia-[a-z-]+|slurmd|systemd|nv-fabricmanager)"
    r"(?:\[\d+\])?:"
)
_DMESG_PREFIX = re.compile(r"^\[\s*\d+\.\d+\]|^\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ")


# what an unnamed machine or a redacted paste prints in the host column: no node of a job
_PLACEHOLDER_HOST = re.compile(r"(?i)^(?:localhost(?:\.localdomain)?|hostname|host|redacted|x{3,})$")


def syslog_host(line: str) -> str | None:
    """The host a syslog/journal line names, or None (also for a placeholder such as `localhost`)."""
    m = _SYSLOG_HOST.match(line)
    if m is None or _PLACEHOLDER_HOST.match(m.group("host")):
        return None
    return m.group("host")


def is_kernel_line(line: str) -> bool:
    """Whether a line has the shape of kernel output (dmesg or syslog `kernel:`)."""
    return bool(_DMESG_PREFIX.match(line)) or _SYSLOG_HOST.match(line) is not None


# NVRM prints some messages as several kernel lines and names the GPU only on the first ("NVRM: The NVIDIA
# GPU 0000:b3:00.0" / "NVRM: (PCI ID: 10de:26b5) installed in this system has" / "NVRM: fallen off the bus
# and is not responding to commands."; dmesg indents the continuations, without a timestamp)
_NVRM_HEAD = re.compile(r"\bNVRM: The NVIDIA GPU [0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b")
NVRM_MESSAGE_LINES = 4  # the longest such message, head included


def nvrm_message_head(rest: str, earlier: Iterable[str]) -> tuple[str, ...]:
    """The earlier lines (`earlier`: nearest first) of the multi-line NVRM message that `rest` continues, head
    first; nothing when `rest` is no such continuation (it names its own GPU, or no head is within reach)."""
    if "NVRM:" not in rest or _NVRM_HEAD.search(rest):
        return ()
    seen: list[str] = []
    for line in earlier:
        if "NVRM:" not in line:
            return ()
        seen.append(line)
        if _NVRM_HEAD.search(line):
            return tuple(reversed(seen))
    return ()
