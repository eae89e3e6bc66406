"""NCCL debug output (`NCCL_DEBUG=INFO|WARN`, also via `NCCL_DEBUG_FILE`).

Every NCCL line starts `host:pid:tid [cudaDev] NCCL ...`, which names the node. The INFO lines
written at communicator init map ranks to nodes, devices and PCI bus ids; they let a kernel Xid on
`PCI:0000:3b:00` be pinned to the rank that ran on that GPU, and a peer IP to a node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# WARN lines carry the source location: `host:pid:tid [dev] transport/net_ib.cc:1295 NCCL WARN ...`.
# What a wrapper may put in front of that prefix, up to two of them: a time stamp (`[2025-04-08 08:39:46] `,
# `2025-02-18 12:54 `), pdsh's `host: ` (DeepSpeed's multi-node runner) and `grep -r`'s `file.log:`. The prefix's
# own host names the node, so the lead is only skipped.
_LEAD = (r"(?:\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d(?::\d\d(?:[.,]\d{1,9})?)?\] ?"
         r"| ?\d{4}-\d\d-\d\d[ T]\d\d:\d\d(?::\d\d(?:[.,]\d{1,9})?)?Z?:? "
         r"|[A-Za-z0-9][A-Za-z0-9._-]{0,62}: "
         r"|[\w./-]{1,128}\.(?:log|txt|out|err):)")
_LINE = re.compile(rf"^{_LEAD}{{0,2}}(?P<host>[A-Za-z0-9][A-Za-z0-9._-]{{0,62}}):(?P<pid>\d+):(?P<tid>\d+) "
                   r"\[(?P<dev>\d+)\] (?:[\w./-]+:\d+ )?NCCL ")
_INIT = re.compile(
    r"NCCL INFO (?:ncclCommInitRank(?:Config)? )?comm 0x[0-9a-f]+ rank (?P<rank>\d+) nranks (?P<nranks>\d+) "
    r"cudaDev (?P<dev>\d+)"
    r"(?: nvmlDev \d+)? busId (?P<bus>[0-9a-f]+)"
)
_OOB_IP = re.compile(r"NCCL INFO (?:Bootstrap : Using|NET/\w+ : Using .*OOB) \w+:(?P<ip>[0-9a-f.:]+)<")

# Literal anchors the scanner matches to find these context lines in one pass.
INIT_ANCHOR = r"NCCL INFO (ncclCommInitRank(Config)? )?comm 0x[0-9a-f]+ rank \d+ nranks \d+ cudaDev"
OOB_ANCHOR = r"NCCL INFO (Bootstrap : Using|NET/\w+ : Using .*OOB) "
# Which network each process chose: NCCL's plugin loader (src/plugin/plugin_open.cc, 2.19-2.21 src/net.cc,
# 2.12 src/net.cc), the Mellanox/HPC-X RDMA-SHARP plugin's own "Plugin Path" line, and init.cc's
# "Using network %s". All processes of a job must agree (see prefilter/consistency.py).
NET_ANCHOR = r"NCCL INFO (NET/Plugin ?: |Plugin Path : |Using network )"


_NET_LOADED = re.compile(r"NET/Plugin ?: ?Loaded net plugin (?P<name>.+?)(?: \(v\d+\))?\.?$")
_NET_PATH = re.compile(r"NCCL INFO Plugin Path : (?P<name>\S+)")
# the loader gave up and NCCL runs its internal IB/socket transports: no such library, a library that
# failed to load (its dlerror), or the fallback sentence itself
_NET_INTERNAL = re.compile(r"NET/Plugin ?: ?(?:Could not find:|No plugin found|Using internal network plugin"
                           r"|Plugin load returned|lib\S*\.so: )")
_NET_USED = re.compile(r"NCCL INFO Using network (?P<name>\S.*?)\s*$")


@dataclass(frozen=True, slots=True)
class NetChoice:
    """What one line says about a process's network: `kind` "plugin" (value "loaded" or "internal", with the
    plugin's name or path as `detail`) or "network" (the transport's name)."""

    kind: str
    value: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class NcclLine:
    host: str
    pid: int
    device: int


@dataclass(frozen=True, slots=True)
class RankPlacement:
    """One rank's place in the job: node, local device, PCI bus id (`0000:3b:00`)."""

    rank: int
    node: str
    device: int
    bus_id: str
    nranks: int
    pid: int = 0  # the rank's process id (from the line prefix), named by OOM-killer and Xid lines


def parse_line(text: str) -> NcclLine | None:
    m = _LINE.match(text)
    if not m:
        return None
    return NcclLine(m.group("host"), int(m.group("pid")), int(m.group("dev")))


def parse_net_choice(text: str) -> NetChoice | None:
    """The network choice an NCCL INFO line reports, if it reports one."""
    if (m := _NET_USED.search(text)) is not None:
        return NetChoice("network", m.group("name"))
    if (m := _NET_LOADED.search(text)) is not None:
        return NetChoice("plugin", "loaded", m.group("name"))
    if (m := _NET_PATH.search(text)) is not None:
        return NetChoice("plugin", "loaded", m.group("name"))
    if _NET_INTERNAL.search(text):
        return NetChoice("plugin", "internal")
    return None


def normalize_bus_id(raw: str) -> str:
    """`3b000` / `0000:3b:00.0` / `00000000:3B:00.0` -> `0000:3b:00` (domain:bus:device)."""
    raw = raw.lower().strip()
    if ":" in raw:
        parts = raw.split(":")
        domain = parts[0][-4:].rjust(4, "0") if len(parts) == 3 else "0000"
        bus = parts[-2][-2:].rjust(2, "0")
        device = parts[-1].split(".")[0][-2:].rjust(2, "0")
        return f"{domain}:{bus}:{device}"
    value = raw.rjust(5, "0")  # NCCL prints busId as hex of (bus << 12 | device << 4 | fn)... as text
    bus, device = value[-5:-3], value[-3:-1]
    domain = value[:-5].rjust(4, "0")[-4:]
    return f"{domain}:{bus}:{device}"


def parse_init(text: str) -> RankPlacement | None:
    line = parse_line(text)
    m = _INIT.search(text)
    if not line or not m:
        return None
    return RankPlacement(int(m.group("rank")), line.host, int(m.group("dev")),
                         normalize_bus_id(m.group("bus")), int(m.group("nranks")), line.pid)


def parse_oob_ip(text: str) -> tuple[str, str] | None:
    """(host, ip) from a bootstrap/OOB interface line."""
    line = parse_line(text)
    m = _OOB_IP.search(text)
    if not line or not m:
        return None
    return line.host, m.group("ip")
