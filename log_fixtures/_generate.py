#!/usr/bin/env python3
# ruff: noqa: E501  (the literals are log lines; wrapping them would hide their real shape)
"""Regenerate log_fixtures/: realistic multi-rank, multi-source failure scenarios with expected verdicts.

Each scenario is the tree a cluster leaves behind when a job dies (rank logs, torchrun/Slurm output,
NCCL debug output, kernel logs) plus `expected.yaml`, the verdict a senior engineer would give.
The formats are those of the real tools (PyTorch 2.1-2.5 + torchrun, NCCL 2.18-2.21, Slurm 23.02,
Linux 5.15 kernel logs, NVIDIA 535/550 drivers); see README.md next to this script.

Deterministic: every scenario draws from its own fixed-seed RNG, so running this script rewrites the
tree byte for byte (file mtimes are set to the time the logs were collected). Standard library only.

    python log_fixtures/_generate.py              # rewrite every scenario
    python log_fixtures/_generate.py xid79 ecc    # only scenarios whose name contains one of these
"""

from __future__ import annotations

import calendar
import json
import os
import random
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIOS: dict[str, Callable[[], Tree]] = {}


def scenario(name: str):
    def register(fn):
        SCENARIOS[name] = fn
        return fn
    return register


def sec(x: float) -> timedelta:
    return timedelta(seconds=x)


# --------------------------------------------------------------------------------------------------
# time formats
# --------------------------------------------------------------------------------------------------

def iso_ms(t: datetime) -> str:
    """`2026-03-04 05:06:07,123` (Python logging)."""
    return f"{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d}"


def iso_s(t: datetime) -> str:
    return f"{t:%Y-%m-%d %H:%M:%S}"


def slurm_ts(t: datetime) -> str:
    return f"{t:%Y-%m-%dT%H:%M:%S}"


def dmesg_T(t: datetime) -> str:
    """`[Wed Mar  4 05:06:07 2026]` (dmesg -T)."""
    return f"[{t:%a %b} {t.day:2d} {t:%H:%M:%S} {t.year}]"


def syslog_ts(t: datetime) -> str:
    """`Mar  4 05:06:07` (rsyslog traditional format)."""
    return f"{t:%b} {t.day:2d} {t:%H:%M:%S}"


def uptime(boot: datetime, t: datetime) -> str:
    """`[1105822.413255]` seconds since boot, as plain dmesg prints it."""
    d = t - boot
    return f"[{d.days * 86400 + d.seconds:5d}.{d.microseconds:06d}]"


def glog(level: str, t: datetime, nanos: bool = False) -> str:
    """`E0304 05:06:07.123456` (c10/glog); torch >= 2.5 prints nanoseconds."""
    frac = f"{t.microsecond:06d}" + (f"{(t.microsecond * 7 + 311) % 1000:03d}" if nanos else "")
    return f"{level}{t:%m%d} {t:%H:%M:%S}.{frac}"


# --------------------------------------------------------------------------------------------------
# the tree being written
# --------------------------------------------------------------------------------------------------

class Tree:
    """Files of one scenario. Lines carry the time they were written; each file is sorted by it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.files: dict[str, list[tuple[datetime, int, str]]] = {}
        self.raw: dict[str, str] = {}
        self.no_final_newline: set[str] = set()
        self.expected = ""
        self.collected: datetime | None = None
        self._seq = 0

    def add(self, path: str, t: datetime, *lines: str) -> None:
        entries = self.files.setdefault(path, [])
        for line in lines:
            self._seq += 1
            entries.append((t, self._seq, line))

    def block(self, path: str, t: datetime, lines: list[str], step: float = 0.0) -> datetime:
        """Add lines written one after another `step` seconds apart; returns the time after them."""
        for i, line in enumerate(lines):
            self.add(path, t + sec(step * i), line)
        return t + sec(step * len(lines))

    def timed(self, path: str, items: list[tuple[datetime, str]]) -> None:
        for t, line in items:
            self.add(path, t, line)

    def write(self) -> int:
        out = HERE / self.name
        if out.exists():
            shutil.rmtree(out)
        logs = out / "logs"
        logs.mkdir(parents=True)
        mtime = calendar.timegm(self.collected.timetuple()) if self.collected else None
        total = 0
        for rel, entries in sorted(self.files.items()):
            entries.sort(key=lambda e: (e[0], e[1]))
            text = "\n".join(e[2] for e in entries)
            if rel not in self.no_final_newline:
                text += "\n"
            path = logs / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            data = text.encode("utf-8")
            path.write_bytes(data)
            total += len(data)
        for rel, text in sorted(self.raw.items()):
            path = logs / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            total += len(text.encode())
        (out / "expected.yaml").write_text(self.expected.lstrip("\n"), encoding="utf-8")
        if mtime is not None:
            for p in sorted(out.rglob("*")):
                if p.is_file():
                    os.utime(p, (mtime, mtime))
        return total


# --------------------------------------------------------------------------------------------------
# the cluster: nodes, GPUs, ranks, processes
# --------------------------------------------------------------------------------------------------

H100_BUS = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
A100_BUS = ["07", "0f", "47", "4e", "87", "90", "b7", "bd"]
H100_AFFINITY = ["ffffffff,ffffffff,ffffffff"] * 4 + ["ffffffff,ffffffff,ffffffff,00000000,00000000,00000000"] * 4
A100_AFFINITY = ["ffff0000,00000000,ffff0000,00000000"] * 2 + ["0000ffff,00000000,0000ffff,00000000"] * 2 + \
    ["00000000,ffff0000,00000000,ffff0000"] * 2 + ["00000000,0000ffff,00000000,0000ffff"] * 2


@dataclass
class Rank:
    rank: int
    host: str
    local: int
    pid: int
    bus: str  # "3a"
    comm: str  # communicator pointer of the default group
    tid: int  # NCCL init thread id

    @property
    def pci(self) -> str:
        return f"0000:{self.bus}:00"

    @property
    def nccl_bus(self) -> str:
        return f"{int(self.bus, 16):x}000"


@dataclass
class Cluster:
    rng: random.Random
    hosts: list[str]
    gpn: int
    bus: list[str]
    ips: dict[str, str]
    oob_if: str
    hcas: list[str]
    link: str = "IB"  # IB | RoCE
    affinity: list[str] = field(default_factory=lambda: list(H100_AFFINITY))
    agent_pid: dict[str, int] = field(default_factory=dict)
    ranks: list[Rank] = field(default_factory=list)
    comm_id: str = ""

    def __post_init__(self) -> None:
        rng = self.rng
        for n, host in enumerate(self.hosts):
            agent = rng.randint(2100, 98000)
            self.agent_pid[host] = agent
            pid = agent + rng.randint(40, 160)
            for local in range(self.gpn):
                pid += rng.randint(1, 9)
                comm = f"0x{rng.randint(0x55a000000000, 0x55ffffffffff):x}"
                self.ranks.append(Rank(n * self.gpn + local, host, local, pid, self.bus[local], comm,
                                       pid + rng.randint(180, 900)))
        self.comm_id = f"0x{rng.getrandbits(64):016x}"

    @property
    def world(self) -> int:
        return len(self.ranks)

    def on(self, host: str) -> list[Rank]:
        return [r for r in self.ranks if r.host == host]

    def nccl(self, r: Rank, msg: str, tid: int | None = None, level: str = "INFO", where: str = "") -> str:
        """An NCCL debug line; WARN lines carry `file.cc:line` and NCCL puts a blank line before them."""
        tid = r.tid if tid is None else tid
        if level == "WARN":
            return f"{r.host}:{r.pid}:{tid} [{r.local}] {where} NCCL WARN {msg}"
        return f"{r.host}:{r.pid}:{tid} [{r.local}] NCCL {level} {msg}"


def nccl_init(c: Cluster, r: Rank, version: str, cuda: str = "12.3", env: list[str] | None = None,
              channels: int = 32, rings: int = 0) -> list[str]:
    """The NCCL_DEBUG=INFO output of one rank's communicator init (`version` 2.18.x/2.19.x/2.21.x)."""
    ip = c.ips[r.host]
    main = r.pid
    out = [c.nccl(r, f"Bootstrap : Using {c.oob_if}:{ip}<0>", tid=main)]
    if version.startswith("2.18"):
        out.append(c.nccl(r, "NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot open "
                             "shared object file: No such file or directory", tid=main))
        out.append(c.nccl(r, "NET/Plugin : No plugin found, using internal implementation", tid=main))
    else:
        out.append(c.nccl(r, "NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such file "
                             "or directory No plugin found (libnccl-net.so), using internal implementation", tid=main))
    out.append(c.nccl(r, f"cudaDriverVersion {12020 if cuda < '12.3' else 12040}", tid=main))
    if r.rank == 0:
        out.append(c.nccl(r, f"NCCL version {version}+cuda{cuda}", tid=main))
    for e in env or []:
        out.append(c.nccl(r, e))
    devs = " ".join(f"[{i}]{h}:1/{c.link}" for i, h in enumerate(c.hcas))
    out.append(c.nccl(r, f"NET/IB : Using {devs} [RO]; OOB {c.oob_if}:{ip}<0>"))
    out.append(c.nccl(r, "Using non-device net plugin version 0"))
    out.append(c.nccl(r, "Using network IB"))
    n_nodes = len(c.hosts)
    if version.startswith("2.21"):
        out.append(c.nccl(r, f"ncclCommInitRank comm {r.comm} rank {r.rank} nranks {c.world} cudaDev {r.local} "
                             f"nvmlDev {r.local} busId {r.nccl_bus} commId {c.comm_id} - Init START"))
    out.append(c.nccl(r, f"comm {r.comm} rank {r.rank} nRanks {c.world} nNodes {n_nodes} localRanks {c.gpn} "
                         f"localRank {r.local} MNNVL 0"))
    out.append(c.nccl(r, f"Setting affinity for GPU {r.local} to {c.affinity[r.local]}"))
    if r.rank == 0:
        order = "".join(f" {x:3d}" for x in range(c.world))
        for ch in range(rings or min(channels, 4)):
            out.append(c.nccl(r, f"Channel {ch:02d}/{channels:02d} :  {order}"))
    nxt = (r.rank + 1) % c.world
    prv = (r.rank - 1) % c.world
    up = -1 if r.local == 0 and r.rank == 0 else (r.rank - c.gpn if r.local == 0 else r.rank - 1)
    down = r.rank + 1 if r.local < c.gpn - 1 else -1
    child = r.rank + c.gpn if r.local == 0 and r.rank + c.gpn < c.world else -1
    out.append(c.nccl(r, f"Trees [0] {down}/{child}/-1->{r.rank}->{up} [1] {down}/-1/-1->{r.rank}->{up} "
                         f"[2] {down}/{child}/-1->{r.rank}->{up} [3] {down}/-1/-1->{r.rank}->{up}"))
    out.append(c.nccl(r, "P2P Chunksize set to 524288"))
    local_next = c.ranks[nxt]
    if r.local == 0 and n_nodes > 1:
        out.append(c.nccl(r, f"Channel 00/0 : {prv}[{c.ranks[prv].local}] -> {r.rank}[{r.local}] [receive] via "
                             f"NET/IB/{r.local}/GDRDMA"))
    if r.local == c.gpn - 1 and n_nodes > 1:
        out.append(c.nccl(r, f"Channel 00/0 : {r.rank}[{r.local}] -> {nxt}[{local_next.local}] [send] via "
                             f"NET/IB/{r.local}/GDRDMA"))
    else:
        out.append(c.nccl(r, f"Channel 00/0 : {r.rank}[{r.local}] -> {nxt}[{local_next.local}] via P2P/IPC/read"))
    out.append(c.nccl(r, "Connected all rings"))
    out.append(c.nccl(r, "Connected all trees"))
    out.append(c.nccl(r, "threadThresholds 8/8/64 | 512/8/64 | 512 | 512"))
    out.append(c.nccl(r, f"{channels} coll channels, 0 nvls channels, {channels} p2p channels, "
                         f"{channels // 16 if channels >= 16 else 1} p2p channels per peer"))
    if version.startswith("2.21"):
        out.append(c.nccl(r, "TUNER/Plugin: Plugin load returned 2 : libnccl-tuner.so: cannot open shared object file:"
                             " No such file or directory : when loading libnccl-tuner.so"))
        out.append(c.nccl(r, "TUNER/Plugin: Using internal tuner plugin."))
        out.append(c.nccl(r, f"ncclCommInitRank comm {r.comm} rank {r.rank} nranks {c.world} cudaDev {r.local} "
                             f"nvmlDev {r.local} busId {r.nccl_bus} commId {c.comm_id} - Init COMPLETE"))
        out.append(c.nccl(r, f"Init timings: rank {r.rank} nranks {c.world} total 1.{c.rng.randint(10, 99)} (kernels "
                             f"0.{c.rng.randint(10, 30)}, bootstrap 0.{c.rng.randint(30, 80)}, allgathers 0.0{c.rng.randint(1, 9)}, "
                             f"topo 0.{c.rng.randint(10, 20)}, graphs 0.0{c.rng.randint(1, 5)}, connections "
                             f"0.{c.rng.randint(10, 40)}, rest 0.0{c.rng.randint(1, 9)})"))
    else:
        out.append(c.nccl(r, f"comm {r.comm} rank {r.rank} nranks {c.world} cudaDev {r.local} nvmlDev {r.local} "
                             f"busId {r.nccl_bus} commId {c.comm_id} - Init COMPLETE"))
    return out


# --------------------------------------------------------------------------------------------------
# PyTorch / torchrun formats
# --------------------------------------------------------------------------------------------------

@dataclass
class Torch:
    version: str  # 2.1.2 | 2.2.2 | 2.5.1
    site: str = "/usr/local/lib/python3.10/dist-packages"
    python: str = "/usr/bin/python"
    torchrun: str = "/usr/local/bin/torchrun"

    @property
    def new(self) -> bool:
        return self.version >= "2.4"

    @property
    def rank_prefix(self) -> bool:
        """torch >= 2.2 prefixes c10 log lines with `[rankN]:`."""
        return self.version >= "2.2"


# torch/distributed/elastic module -> (file, line) for the glog-style logs of torch >= 2.4
_ELASTIC_FILES = {
    "torch.distributed.run": ("torch/distributed/run.py", 793),
    "torch.distributed.elastic.multiprocessing.api": ("torch/distributed/elastic/multiprocessing/api.py", 897),
    "torch.distributed.elastic.agent.server.api": ("torch/distributed/elastic/agent/server/api.py", 701),
    "torch.distributed.elastic.rendezvous.dynamic_rendezvous": (
        "torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", 1133),
}


def elastic(tv: Torch, t: datetime, level: str, module: str, msg: str, pid: int, line: int | None = None) -> str:
    """A torchrun agent log line (`[2026-03-04 05:06:07,123] module: [LEVEL] msg` before torch 2.4)."""
    if not tv.new:
        return f"[{iso_ms(t)}] {module}: [{level}] {msg}"
    path, default = _ELASTIC_FILES[module]
    t = t.replace(microsecond=t.microsecond // 1000 * 1000)
    return f"{glog(level[0], t)} {pid} {path}:{line or default}] {msg}"


def c10(tv: Torch, rank: int | None, t: datetime, level: str, where: str, msg: str) -> str:
    """A c10 (C++) log line: `[rank3]:[E ProcessGroupNCCL.cpp:1182] ...`."""
    head = f"[{glog(level, t, nanos=True)} {where}]" if tv.new else f"[{level} {where}]"
    pre = f"[rank{rank}]:" if tv.rank_prefix and rank is not None else ""
    return f"{pre}{head} {msg}"


def cpp_frames(tv: Torch, rng: random.Random, where: str, frames: list, base: int,
               lib: str = "libtorch_cuda.so") -> list[str]:
    """`Exception raised from <where> at <src>:<line>` + the c10 backtrace; frames are names (in `lib`) or
    (name, lib) pairs."""
    loc = {"checkTimeout": f"../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
                           f"{ {'2.1': 463, '2.2': 525, '2.5': 616}.get(tv.version[:3], 565)}",
           "checkForNCCLErrorsInternal": "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1436",
           "c10_cuda_check_implementation": "../c10/cuda/CUDAException.cpp:44"}[where]
    out = [f"Exception raised from {where} at {loc} (most recent call first):"]
    out.append(f"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x{base + 0x81d87:x} in "
               f"{tv.site}/torch/lib/libc10.so)")
    for i, f in enumerate(frames, start=1):
        name, flib = (f, lib) if isinstance(f, str) else f
        off = rng.randint(0x40, 0x1ff)
        addr = base + (0x60000 if flib == "libc10.so" else 0x5c000000 if flib == "libc10_cuda.so" else 0x1200000)
        out.append(f"frame #{i}: {name} + 0x{off:x} (0x{addr + rng.randint(0, 0xfffff):x} in "
                   f"{tv.site}/torch/lib/{flib})")
    n = len(frames) + 1
    out.append(f"frame #{n}: <unknown function> + 0xdc253 (0x{base + 0x3e0c253:x} in /lib/x86_64-linux-gnu/libstdc++.so.6)")
    out.append(f"frame #{n + 1}: <unknown function> + 0x94ac3 (0x{base + 0x3fd4ac3:x} in /lib/x86_64-linux-gnu/libc.so.6)")
    out.append(f"frame #{n + 2}: <unknown function> + 0x126850 (0x{base + 0x4066850:x} in /lib/x86_64-linux-gnu/libc.so.6)")
    out.append("")
    return out


def work_str(seq: int, op: str, numel_in: int, numel_out: int, timeout_ms: int) -> str:
    return f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel_in}, NumelOut={numel_out}, Timeout(ms)={timeout_ms})"


def watchdog_timeout(tv: Torch, rng: random.Random, r: Rank, t: datetime, seq: int, op: str, numel: int,
                     timeout_ms: int, numel_out: int | None = None, pg: str = "0") -> list[tuple[datetime, str]]:
    """What ProcessGroupNCCL writes when its watchdog times a collective out and takes the process down."""
    ran = timeout_ms + rng.randint(40, 900)
    work = work_str(seq, op, numel, numel if numel_out is None else numel_out, timeout_ms)
    caught = f"[Rank {r.rank}] Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds " \
             f"before timing out."
    lines: list[tuple[datetime, str]] = []
    k = r.rank

    def at(dt: float, text: str) -> None:
        lines.append((t + sec(dt), text))

    if tv.version.startswith("2.1"):
        at(0, c10(tv, k, t, "E", "ProcessGroupNCCL.cpp:475", caught))
        at(0.001, c10(tv, k, t, "E", "ProcessGroupNCCL.cpp:489", "Some NCCL operations have failed or timed out. "
                      "Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
                      "corrupted/incomplete data."))
        at(0.001, c10(tv, k, t, "E", "ProcessGroupNCCL.cpp:495", "To avoid data inconsistency, we are taking the "
                      "entire process down."))
        at(0.002, c10(tv, k, t, "E", "ProcessGroupNCCL.cpp:916", f"[Rank {k}] NCCL watchdog thread terminated with "
                      f"exception: {caught}"))
        where, end = "checkTimeout", "ncclCommWatchdog"
        fr = ["c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
              "std::ratio<1l, 1000l> > >)", "c10d::ProcessGroupNCCL::workCleanupLoop()",
              "c10d::ProcessGroupNCCL::ncclCommWatchdog()"]
        what = f"[Rank {k}] NCCL watchdog thread terminated with exception: {caught}"
    elif not tv.new:
        at(0, c10(tv, k, t, "E", "ProcessGroupNCCL.cpp:523", caught))
        at(0.001, c10(tv, k, t, "E", "ProcessGroupNCCL.cpp:537", f"[Rank {k}] Some NCCL operations have failed or timed "
                      "out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
                      "corrupted/incomplete data."))
        at(0.001, c10(tv, k, t, "E", "ProcessGroupNCCL.cpp:543", f"[Rank {k}] To avoid data inconsistency, we are "
                      "taking the entire process down."))
        at(0.002, c10(tv, k, t, "E", "ProcessGroupNCCL.cpp:1182", f"[Rank {k}] NCCL watchdog thread terminated with "
                      f"exception: {caught}"))
        where, end = "checkTimeout", "ncclCommWatchdog"
        fr = ["c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
              "std::ratio<1l, 1000l> > >)", "c10d::ProcessGroupNCCL::workCleanupLoop()",
              "c10d::ProcessGroupNCCL::ncclCommWatchdog()"]
        what = f"[Rank {k}] NCCL watchdog thread terminated with exception: {caught}"
    else:
        tag = f"[PG ID {pg} PG GUID {pg}{'(default_pg)' if pg == '0' else ''} Rank {k}]"
        caught = f"{tag} Watchdog caught collective operation timeout: {work} ran for {ran} milliseconds before " \
                 f"timing out."
        at(0, c10(tv, k, t, "E", "ProcessGroupNCCL.cpp:616", caught))
        at(0.001, c10(tv, k, t, "E", "ProcessGroupNCCL.cpp:1785", f"{tag} Exception (either an error or timeout) "
                      f"detected by watchdog at work: {seq}, last enqueued NCCL work: {seq + rng.randint(0, 2)}, last "
                      f"completed NCCL work: {seq - 1}."))
        at(0.001, c10(tv, k, t, "E", "ProcessGroupNCCL.cpp:630", f"{tag} Some NCCL operations have failed or timed out. "
                      "Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
                      "corrupted/incomplete data."))
        at(0.001, c10(tv, k, t, "E", "ProcessGroupNCCL.cpp:636", f"{tag} To avoid data inconsistency, we are taking "
                      "the entire process down."))
        at(0.002, c10(tv, k, t, "E", "ProcessGroupNCCL.cpp:1595", f"[PG ID {pg} PG GUID {pg}"
                      f"{'(default_pg)' if pg == '0' else ''} Rank {k}] Process group watchdog thread terminated with "
                      f"exception: {caught}"))
        where, end = "checkTimeout", "ncclCommWatchdog"
        fr = ["c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
              "std::ratio<1l, 1000l> > >)", "c10d::ProcessGroupNCCL::watchdogHandler()",
              "c10d::ProcessGroupNCCL::ncclCommWatchdog()"]
        what = f"[PG ID {pg} PG GUID {pg}{'(default_pg)' if pg == '0' else ''} Rank {k}] Process group watchdog " \
               f"thread terminated with exception: {caught}"
    base = rng.randint(0x7f0000000000, 0x7fffff000000) & ~0xfff
    frames = cpp_frames(tv, rng, where, fr, base)
    for f in frames:
        at(0.002, f)
    at(0.003, "terminate called after throwing an instance of 'c10::DistBackendError'")
    at(0.003, f"  what():  {what}")
    for f in frames:
        at(0.003, f)
    at(0.003, f"Exception raised from {end} at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
              f"{ {'2.1': 920, '2.2': 1186, '2.5': 1601}.get(tv.version[:3], 1186)} (most recent call first):")
    at(0.003, f"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x{base + 0x81d87:x} in "
              f"{tv.site}/torch/lib/libc10.so)")
    at(0.003, f"frame #1: <unknown function> + 0xdf6b11 (0x{base + 0x1df6b11:x} in {tv.site}/torch/lib/libtorch_cuda.so)")
    at(0.003, f"frame #2: <unknown function> + 0xdc253 (0x{base + 0x3e0c253:x} in /lib/x86_64-linux-gnu/libstdc++.so.6)")
    at(0.003, f"frame #3: <unknown function> + 0x94ac3 (0x{base + 0x3fd4ac3:x} in /lib/x86_64-linux-gnu/libc.so.6)")
    at(0.003, f"frame #4: <unknown function> + 0x126850 (0x{base + 0x4066850:x} in /lib/x86_64-linux-gnu/libc.so.6)")
    at(0.003, "")
    return lines


def py_traceback(frames: list[tuple[str, int, str, str]], exc: list[str], header: bool = True) -> list[str]:
    out = ["Traceback (most recent call last):"] if header else []
    for path, line, fn, code in frames:
        out.append(f'  File "{path}", line {line}, in {fn}')
        if code:
            out.append(f"    {code}")
    return out + exc


def torchrun_failed(tv: Torch, host: str, script: str, failures: list[tuple[datetime, int, int, int, int]],
                    agent_pid: int) -> list[str]:
    """The ChildFailedError traceback + summary torchrun prints; failures: (time, rank, local, exitcode, pid);
    the first one is shown as the root cause (torchrun picks the earliest)."""
    site = tv.site
    if tv.new:
        tb = [("/usr/local/bin/torchrun", 8, "<module>", "sys.exit(main())"),
              (f"{site}/torch/distributed/elastic/multiprocessing/errors/__init__.py", 355, "wrapper",
               "return f(*args, **kwargs)"),
              (f"{site}/torch/distributed/run.py", 919, "main", "run(args)"),
              (f"{site}/torch/distributed/run.py", 910, "run", "elastic_launch("),
              (f"{site}/torch/distributed/launcher/api.py", 138, "__call__",
               "return launch_agent(self._config, self._entrypoint, list(args))"),
              (f"{site}/torch/distributed/launcher/api.py", 269, "launch_agent", "raise ChildFailedError(")]
    else:
        tb = [(tv.torchrun, 8, "<module>", "sys.exit(main())"),
              (f"{site}/torch/distributed/elastic/multiprocessing/errors/__init__.py", 346, "wrapper",
               "return f(*args, **kwargs)"),
              (f"{site}/torch/distributed/run.py", 806, "main", "run(args)"),
              (f"{site}/torch/distributed/run.py", 797, "run", "elastic_launch("),
              (f"{site}/torch/distributed/launcher/api.py", 134, "__call__",
               "return launch_agent(self._config, self._entrypoint, list(args))"),
              (f"{site}/torch/distributed/launcher/api.py", 264, "launch_agent", "raise ChildFailedError(")]
    out = py_traceback(tb, ["torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "])
    out += ["=" * 60, f"{script} FAILED", "-" * 60, "Failures:"]

    def entry(i: int, f: tuple[datetime, int, int, int, int]) -> list[str]:
        t, rank, local, code, pid = f
        if code < 0:
            sig = {-6: "SIGABRT", -9: "SIGKILL", -15: "SIGTERM", -11: "SIGSEGV", -7: "SIGBUS"}[code]
            tbl = f"Signal {-code} ({sig}) received by PID {pid}"
        else:
            tbl = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
        return [f"[{i}]:", f"  time      : {t:%Y-%m-%d_%H:%M:%S}", f"  host      : {host}",
                f"  rank      : {rank} (local_rank: {local})", f"  exitcode  : {code} (pid: {pid})",
                "  error_file: <N/A>", f"  traceback : {tbl}"]

    if len(failures) == 1:
        out.append("  <NO_OTHER_FAILURES>")
    else:
        for i, f in enumerate(sorted(failures[1:], key=lambda f: f[1]), start=1):
            out += entry(i, f)
    out += ["-" * 60, "Root Cause (first observed failure):"]
    out += entry(0, failures[0])
    out.append("=" * 60)
    return out


# --------------------------------------------------------------------------------------------------
# kernel log noise shared by scenarios
# --------------------------------------------------------------------------------------------------

def boot_lines(rng: random.Random, kernel: str, driver: str, driver_date: str, gpus: list[str],
               nics: list[str], netdevs: list[str]) -> list[tuple[float, str]]:
    """(seconds since boot, message) for the start of a GPU node's boot log (heavily trimmed)."""
    out = [
        (0.0, f"Linux version {kernel} (buildd@lcy02-amd64-080) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0, GNU ld "
              f"(GNU Binutils for Ubuntu) 2.38) #{int(kernel.split('-')[1]) + 10}-Ubuntu SMP Fri Feb  9 13:32:52 UTC 2024 "
              f"(Ubuntu {kernel.replace('-generic', '')}.{int(kernel.split('-')[1]) + 10}-generic 5.15.136)"),
        (0.0, f"Command line: BOOT_IMAGE=/boot/vmlinuz-{kernel} root=UUID=7c1f0d3e-2b9a-4c55-9f61-3e8d2a4b6c10 ro "
              "console=tty0 console=ttyS0,115200n8 iommu=pt pci=realloc=off nvme_core.multipath=0 "
              "transparent_hugepage=madvise"),
        (0.0, "KERNEL supported cpus:"),
        (0.0, "  Intel GenuineIntel"),
        (0.0, "  AMD AuthenticAMD"),
        (0.000000 + 0.0, "BIOS-provided physical RAM map:"),
        (0.412345, "ACPI: Early table checksum verification disabled"),
        (1.903112, "ACPI BIOS Error (bug): Could not resolve symbol [\\_SB.PC00.RP01.PXSX], AE_NOT_FOUND "
                   "(20210730/dswload2-162)"),
        (1.903120, "ACPI Error: AE_NOT_FOUND, During name lookup/catalog (20210730/psobject-220)"),
        (2.118201, "pci 0000:00:01.1: PCI bridge to [bus 01-02]"),
    ]
    t = 3.2
    for i, n in enumerate(nics):
        out.append((t + 0.01 * i, f"mlx5_core 0000:{n}:00.0: firmware version: 28.39.2048"))
        out.append((t + 0.01 * i + 0.2, f"mlx5_core 0000:{n}:00.0: Rate limit: 127 rates are supported, range: "
                                        f"0Mbps to 195312Mbps"))
        out.append((t + 0.01 * i + 0.4, f"mlx5_core 0000:{n}:00.0: E-Switch: Total vports 2, per vport: max uc(128) "
                                        f"max mc(2048)"))
    t = 11.7
    out += [
        (t, "nvidia: loading out-of-tree module taints kernel."),
        (t + 0.00001, "nvidia: module license 'NVIDIA' taints kernel."),
        (t + 0.00002, "Disabling lock debugging due to kernel taint"),
        (t + 0.081, "nvidia-nvlink: Nvlink Core is being initialized, major device number 508"),
    ]
    for i, b in enumerate(gpus):
        out.append((t + 0.1 + 0.001 * i, f"nvidia 0000:{b}:00.0: enabling device (0000 -> 0002)"))
    out += [
        (t + 0.32, f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {driver}  {driver_date}"),
        (t + 0.61, f"nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  {driver}  "
                   f"{driver_date}"),
        (t + 0.84, "[drm] [nvidia-drm] [GPU ID 0x00001800] Loading driver"),
        (t + 1.02, "nvidia-uvm: Loaded the UVM driver, major device number 506."),
        (t + 2.2, "audit: type=1400 audit(1707310521.712:2): apparmor=\"STATUS\" operation=\"profile_load\" "
                  "profile=\"unconfined\" name=\"nvidia_modprobe\" pid=1711 comm=\"apparmor_parser\""),
    ]
    for i, dev in enumerate(netdevs):
        out.append((t + 9.3 + 0.05 * i, f"IPv6: ADDRCONF(NETDEV_CHANGE): {dev}: link becomes ready"))
    return out



def agent_teardown(tree: Tree, path: str, tv: Torch, host: str, agent_pid: int, t_detect: datetime,
                   failures: list[tuple[datetime, int, int, int, int]], sigterm: list[int], script: str,
                   unkillable: int | None = None) -> datetime:
    """torchrun's reaction to dead workers: SIGTERM the survivors (SIGKILL after 30 s), log the first
    failure, raise ChildFailedError. Returns the time of the summary."""
    t = t_detect
    mod = "torch.distributed.elastic.multiprocessing.api"
    for pid in sigterm:
        t += sec(0.0003)
        tree.add(path, t, elastic(tv, t, "WARNING", mod, f"Sending process {pid} closing signal SIGTERM", agent_pid))
    if unkillable is not None:
        t += sec(30.02)
        tree.add(path, t, elastic(tv, t, "WARNING", mod, f"Unable to shutdown process {unkillable} via "
                                  f"Signals.SIGTERM, forcefully exiting via Signals.SIGKILL", agent_pid))
    first = min(failures)
    t += sec(0.31 if sigterm else 0.01)
    tree.add(path, t, elastic(tv, t, "ERROR", mod, f"failed (exitcode: {first[3]}) local_rank: {first[2]} (pid: "
                              f"{first[4]}) of binary: {tv.python}", agent_pid, line=869))
    rest = sorted(failures)
    t += sec(0.02)
    tree.block(path, t, torchrun_failed(tv, host, script, rest, agent_pid))
    return t


def tee(tv: Torch, r: Rank, line: str) -> str:
    """torchrun --tee / --log-dir prefix: `[rank13]: ` (torch >= 2.2) or `[default5]:` (role + local rank)."""
    if tv.version < "2.2":
        return f"[default{r.local}]:{line}"
    if line.startswith(f"[rank{r.rank}]:"):
        return line
    return f"[rank{r.rank}]: {line}" if line else f"[rank{r.rank}]: "


def tqdm_bar(desc: str, n: int, total: int, elapsed: float, rate: float, postfix: str = "") -> str:
    frac = n / total
    full = int(frac * 10)
    part = "▏▎▍▌▋▊▉"[int((frac * 10 - full) * 7)] if full < 10 and int((frac * 10 - full) * 7) > 0 else ""
    bar = ("█" * full + part).ljust(10)

    def hms(x: float) -> str:
        x = int(x)
        return f"{x // 3600}:{x % 3600 // 60:02d}:{x % 60:02d}" if x >= 3600 else f"{x // 60:02d}:{x % 60:02d}"
    remaining = (total - n) / rate if rate else 0
    return (f"{desc}: {frac * 100:3.0f}%|{bar}| {n}/{total} [{hms(elapsed)}<{hms(remaining)}, "
            f"{1 / rate:.2f}s/it{', ' + postfix if postfix else ''}]")


def nvidia_smi(rng: random.Random, t: datetime, driver: str, cuda: str, bus: list[str], model: str,
               mem: int) -> list[str]:
    """`nvidia-smi` as a job prolog prints it (idle GPUs)."""
    out = [f"{t:%a %b} {t.day:2d} {t:%H:%M:%S} {t.year}       ",
           "+" + "-" * 89 + "+",
           f"| NVIDIA-SMI {driver:<22} Driver Version: {driver:<14} CUDA Version: {cuda:<9}|",
           "|-----------------------------------------+------------------------+----------------------+",
           "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
           "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
           "|                                         |                        |               MIG M. |",
           "|=========================================+========================+======================|"]
    for i, b in enumerate(bus):
        out.append(f"|  {i:2d}  {model:<30} On  |   00000000:{b.upper()}:00.0 Off |                    0 |")
        out.append(f"| N/A   {rng.randint(27, 36)}C    P0             {rng.randint(62, 79)}W /  "
                   f"{'700W' if 'H100' in model else '400W'} |       1MiB / {mem:6d}MiB |      0%      Default |")
        out.append("|                                         |                        |             Disabled |")
        out.append("+-----------------------------------------+------------------------+----------------------+")
    out += ["", "+" + "-" * 89 + "+",
            "| Processes:                                                                              |",
            "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |",
            "|        ID   ID                                                               Usage      |",
            "|=========================================================================================|",
            "|  No running processes found                                                             |",
            "+" + "-" * 89 + "+"]
    return out

class KernelLog:
    """One node's kernel log in the format it was collected: plain `dmesg`, `dmesg -T`, kern.log
    (rsyslog: `Mar  4 05:06:07 host kernel: [uptime] msg`) or `journalctl -k` (no uptime)."""

    def __init__(self, tree: Tree, path: str, host: str, boot: datetime, mode: str) -> None:
        self.tree, self.path, self.host, self.boot, self.mode = tree, path, host, boot, mode

    def line(self, t: datetime, msg: str) -> str:
        if self.mode == "plain":
            return f"{uptime(self.boot, t)} {msg}"
        if self.mode == "T":
            return f"{dmesg_T(t)} {msg}"
        if self.mode == "syslog":
            return f"{syslog_ts(t)} {self.host} kernel: {uptime(self.boot, t)} {msg}"
        return f"{syslog_ts(t)} {self.host} kernel: {msg}"

    def at(self, t: datetime, *msgs: str) -> None:
        for i, m in enumerate(msgs):
            tt = t + timedelta(microseconds=7 * i)
            self.tree.add(self.path, tt, self.line(tt, m))

    def since_boot(self, items: list[tuple[float, str]]) -> None:
        for s, m in items:
            t = self.boot + sec(s)
            self.tree.add(self.path, t, self.line(t, m))


def yaml_list(items: list) -> str:
    return "[" + ", ".join(f'"{i}"' if isinstance(i, str) else str(i) for i in items) + "]"


def expected(description: str, category: str, subtype: str, action: str, nodes: list[str] | None = None,
             ranks: list[int] | None = None, gpus: list[str] | None = None, first: str | None = None,
             not_subtypes: list[str] | None = None, notes: str = "") -> str:
    out = [f"description: {json.dumps(description, ensure_ascii=False)}", f"category: {category}", f"subtype: {subtype}", f"action: {action}",
           "culprit:"]
    out.append(f"  nodes: {yaml_list(nodes or [])}")
    if ranks is not None:
        out.append(f"  ranks: {yaml_list(ranks)}")
    if gpus is not None:
        out.append(f"  gpus: {yaml_list(gpus)}")
    if first:
        out.append(f"first_failure_source: {first}")
    if not_subtypes:
        out.append(f"not_subtypes: {yaml_list(not_subtypes)}")
    if notes:
        out.append("# " + notes.replace("\n", "\n# "))
    return "\n".join(out) + "\n"


TYPED_STORAGE = [
    "{site}/torch/_utils.py:831: UserWarning: TypedStorage is deprecated. It will be removed in the future and "
    "UntypedStorage will be the only storage class. This should only matter to you if you are using storages "
    "directly.  To access UntypedStorage directly, use tensor.untyped_storage() instead.",
    "  return self.fget.__get__(instance, owner)()",
]
ALLGATHER_BASE = [
    "{site}/torch/distributed/distributed_c10d.py:2912: UserWarning: torch.distributed._all_gather_base is a private "
    "function and will be deprecated. Please use torch.distributed.all_gather_into_tensor instead.",
    "  warnings.warn(",
]
REDUCE_SCATTER_BASE = [
    "{site}/torch/distributed/distributed_c10d.py:3385: UserWarning: torch.distributed._reduce_scatter_base is a "
    "private function and will be deprecated. Please use torch.distributed.reduce_scatter_tensor instead.",
    "  warnings.warn(",
]


def warn(lines: list[str], tv: Torch) -> list[str]:
    return [x.format(site=tv.site) for x in lines]


def megatron_iteration(t: datetime, it: int, total: int, gbs: int, ms_per_it: float, tflops: float, lr: float,
                       loss: float, gnorm: float, scale: str = "1.0", skipped: int = 0, nan: int = 0) -> str:
    return (f" [{iso_s(t)}] iteration {it:8d}/{total:8d} | consumed samples: {it * gbs:12d} | elapsed time per "
            f"iteration (ms): {ms_per_it:.1f} | throughput per GPU (TFLOP/s/GPU): {tflops:.1f} | learning rate: "
            f"{lr:.6E} | global batch size: {gbs:5d} | lm loss: {loss:.6E} | loss scale: {scale} | grad norm: "
            f"{gnorm:.3f} | number of skipped iterations: {skipped:3d} | number of nan iterations: {nan:3d} |")


MEGATRON_ARGS = [
    ("accumulate_allreduce_grads_in_fp32", "True"), ("adam_beta1", "0.9"), ("adam_beta2", "0.95"),
    ("adam_eps", "1e-08"), ("attention_dropout", "0.0"), ("bf16", "True"), ("clip_grad", "1.0"),
    ("data_parallel_size", "{dp}"), ("distributed_backend", "nccl"), ("distributed_timeout_minutes", "10"),
    ("ffn_hidden_size", "28672"), ("global_batch_size", "{gbs}"), ("hidden_size", "8192"),
    ("log_interval", "50"), ("lr", "0.0003"), ("lr_decay_style", "cosine"), ("micro_batch_size", "1"),
    ("num_attention_heads", "64"), ("num_layers", "80"), ("num_query_groups", "8"),
    ("overlap_grad_reduce", "True"), ("pipeline_model_parallel_size", "1"), ("save_interval", "1000"),
    ("seq_length", "4096"), ("sequence_parallel", "True"), ("tensor_model_parallel_size", "8"),
    ("tokenizer_type", "Llama2Tokenizer"), ("use_distributed_optimizer", "True"), ("use_flash_attn", "True"),
    ("world_size", "{world}"),
]


def megatron_startup(t: datetime, world: int, dp: int, gbs: int, ckpt: str, it0: int) -> list[tuple[datetime, str]]:
    """Rank 0's start-up output of a Megatron-LM pretraining run (trimmed)."""
    lines = [f"using world size: {world}, data-parallel size: {dp}, context-parallel size: 1 "
             f"tensor-model-parallel size: 8, pipeline-model-parallel size: 1 ",
             "using torch.bfloat16 for parameters ...",
             "------------------------ arguments ------------------------"]
    for k, v in MEGATRON_ARGS:
        lines.append(f"  {k} {'.' * (48 - len(k))} {v.format(dp=dp, gbs=gbs, world=world)}")
    lines += ["-------------------- end of arguments ---------------------",
              f"setting number of micro-batches to constant {gbs // dp}",
              "> building Llama2Tokenizer tokenizer ...",
              " > padded vocab (size: 32000) with 0 dummy tokens (new size: 32000)",
              "> initializing torch distributed ...",
              "> initialized tensor model parallel with size 8",
              "> initialized pipeline model parallel with size 1",
              "> setting random seeds to 1234 ...",
              "> compiling dataset index builder ...",
              "make: Entering directory '/workspace/Megatron-LM/megatron/core/datasets'",
              "make: Nothing to be done for 'default'.",
              "make: Leaving directory '/workspace/Megatron-LM/megatron/core/datasets'",
              ">>> done with dataset index builder. Compilation time: 0.047 seconds"]
    out = [(t + sec(0.01 * i), x) for i, x in enumerate(lines)]
    t2 = t + sec(36.8)
    more = ["time to initialize megatron (seconds): 38.914",
            f"[after megatron is initialized] datetime: {iso_s(t2)} ",
            "building GPT model ...",
            " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): 8627257344",
            "> buckets for gradient all-reduce / reduce-scatter:",
            "    params for bucket 1 (218103808 elements):",
            "        module.decoder.layers.79.mlp.linear_fc2.weight",
            "        module.decoder.layers.79.mlp.linear_fc1.weight",
            "        module.decoder.layers.79.self_attention.linear_proj.weight",
            "> learning rate decay style: cosine",
            f" loading checkpoint from {ckpt} at iteration {it0}",
            " checkpoint version 3.0",
            f"  successfully loaded checkpoint from {ckpt} [ t 0, p 0 ] at iteration {it0}",
            "(min, max) time across ranks (ms):",
            "    load-checkpoint ................................: (28911.42, 28915.07)"]
    out += [(t2 + sec(0.5 * i), x) for i, x in enumerate(more)]
    t3 = t2 + sec(38.2)
    more = [f"[after model, optimizer, and learning rate scheduler are built] datetime: {iso_s(t3)} ",
            "> building train, validation, and test datasets ...",
            " > datasets target sizes (minimum size):",
            "    train:      512000000",
            "    validation: 10260480",
            "    test:       20480",
            "> building train, validation, and test datasets for GPT ...",
            "> finished creating GPT datasets ..."]
    out += [(t3 + sec(0.2 * i), x) for i, x in enumerate(more)]
    t4 = t3 + sec(88.7)
    more = [f"[after dataloaders are built] datetime: {iso_s(t4)} ",
            "done with setup ...",
            "(min, max) time across ranks (ms):",
            "    model-and-optimizer-setup ......................: (38003.12, 38121.88)",
            "    train/valid/test-data-iterators-setup ..........: (88712.66, 88799.41)",
            "training ...",
            f"[before the start of training step] datetime: {iso_s(t4)} "]
    out += [(t4 + sec(0.01 * i), x) for i, x in enumerate(more)]
    return out


# ==================================================================================================
# 1. Xid 79 on one GPU; the 63 other ranks report NCCL watchdog timeouts ten minutes later
# ==================================================================================================

@scenario("xid79-then-nccl-timeouts")
def xid79_then_nccl_timeouts() -> Tree:
    name = "xid79-then-nccl-timeouts"
    rng = random.Random(name)
    tree = Tree(name)
    hosts = [f"gpu-{i:03d}" for i in range(11, 19)]
    c = Cluster(rng, hosts, 8, H100_BUS, {h: f"10.20.3.{int(h[-3:])}" for h in hosts}, "bond0",
                ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"])
    tv = Torch("2.2.2", site="/opt/venv/lib/python3.10/site-packages", python="/opt/venv/bin/python",
               torchrun="/opt/venv/bin/torchrun")
    job, culprit_host, culprit_local = 771203, "gpu-014", 2
    culprit = next(r for r in c.ranks if r.host == culprit_host and r.local == culprit_local)
    t_sub = datetime(2026, 3, 4, 2, 9, 37, 402000)
    t_launch = t_sub + sec(3.7)
    t_init = t_launch + sec(29.6)
    t_xid = datetime(2026, 3, 4, 5, 6, 7, 481200)
    seq, op, numel_in, numel_out = 9897, "_REDUCE_SCATTER_BASE", 218103808, 27262976
    t_work = t_xid - sec(0.21)
    out = f"slurm-{job}.out"

    # --- sbatch output: the script's echo lines + the 8 torchrun agents
    tree.add(out, t_sub, f"Job {job} on gpu-[011-018] started at {t_sub:%a %b} {t_sub.day:2d} {t_sub:%H:%M:%S} UTC 2026",
             "+ export NCCL_DEBUG=INFO", "+ export NCCL_IB_HCA=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_6,mlx5_7,mlx5_8,mlx5_9",
             "+ export CUDA_DEVICE_MAX_CONNECTIONS=1",
             "+ srun --ntasks-per-node=1 --kill-on-bad-exit=0 /workspace/launch/run_rank.sh /workspace/Megatron-LM/"
             "pretrain_gpt.py --tensor-model-parallel-size 8 --use-distributed-optimizer ...")
    for i, h in enumerate(hosts):
        tt = t_launch + sec(0.05 * i + rng.random() * 0.3)
        for m in ["", "*****************************************",
                  "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your "
                  "system being overloaded, please further tune the variable for optimal performance in your "
                  "application as needed. ", "*****************************************"]:
            tree.add(out, tt, elastic(tv, tt, "WARNING", "torch.distributed.run", m, c.agent_pid[h]))

    # --- per-rank logs (run_rank.sh: exec python ... > $LOGDIR/$(hostname)/rank_$RANK.log 2>&1)
    t_train = None
    for r in c.ranks:
        path = f"{r.host}/rank_{r.rank:02d}.log"
        ti = t_init + sec(rng.random() * 1.5)
        if r.rank == 0:
            start = megatron_startup(t_launch + sec(6.1), c.world, 8, 2048, "/lustre/fs1/ckpt/llama2-70b-pt/run02", 36000)
            tree.timed(path, start[:len(MEGATRON_ARGS) + 8])
            tree.timed(path, start[len(MEGATRON_ARGS) + 8:])
            t_train = start[-1][0]
        tree.block(path, ti, nccl_init(c, r, "2.19.3", env=["NCCL_SOCKET_IFNAME set by environment to bond0",
                                                             "NCCL_IB_HCA set to mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_6,"
                                                             "mlx5_7,mlx5_8,mlx5_9"]), step=0.004)
        tree.block(path, ti + sec(41), warn(TYPED_STORAGE, tv))
    assert t_train is not None
    tt = t_train + sec(20)
    for r in c.ranks:
        tree.block(f"{r.host}/rank_{r.rank:02d}.log", tt + sec(rng.random()), warn(REDUCE_SCATTER_BASE, tv) +
                   warn(ALLGATHER_BASE, tv))

    # --- training: Megatron prints iteration lines on the last rank, checkpoint saves on rank 0
    last = c.ranks[-1]
    lpath = f"{last.host}/rank_{last.rank:02d}.log"
    it, t = 36000, t_train
    ms = 2104.0
    loss = 1.9641
    while True:
        it += 50
        step_ms = ms + rng.uniform(-6, 9)
        t = t + sec(50 * step_ms / 1000)
        if t >= t_xid - sec(0.5):
            break
        loss = loss - 0.00021 + rng.uniform(-0.012, 0.012)
        tree.add(lpath, t, megatron_iteration(t, it, 250000, 2048, step_ms, 401.2 * 2104 / step_ms,
                                              3e-4 * (0.5 + 0.5 * (1 - it / 250000)), loss, rng.uniform(0.24, 0.33)))
        if it == 36050:
            tree.add(lpath, t, f"[Rank {last.rank}] (after {it} iterations) memory (MB) | allocated: 27081.2 | max "
                               f"allocated: 61233.4 | reserved: 66390.0 | max reserved: 66390.0")
        if it % 1000 == 0:
            p0 = "gpu-011/rank_00.log"
            tree.add(p0, t + sec(0.2), f"saving checkpoint at iteration {it:7d} to /lustre/fs1/ckpt/llama2-70b-pt/run02 "
                                       f"in torch_dist format")
            tree.add(p0, t + sec(41.3), f"  successfully saved checkpoint from iteration {it:7d} to "
                                        f"/lustre/fs1/ckpt/llama2-70b-pt/run02 [ t 1/8, p 1/1 ]")
            tree.add(p0, t + sec(41.3), "(min, max) time across ranks (ms):",
                     f"    save-checkpoint ................................: ({41012.3 + rng.uniform(0, 200):.2f}, "
                     f"{41288.9 + rng.uniform(0, 200):.2f})")
            t += sec(41.5)

    # --- the fault: GPU 2 of gpu-014 falls off the bus; its process hangs in the driver, says nothing
    boots = {h: datetime(2026, 2, 19, 8, 14, 51) + timedelta(hours=rng.randint(0, 200), seconds=rng.randint(0, 3599))
             for h in hosts}
    for h in hosts:
        k = KernelLog(tree, f"dmesg/{h}.log", h, boots[h], "plain")
        k.since_boot(boot_lines(rng, "5.15.0-97-generic", "535.161.08", "Tue Mar  5 22:42:18 UTC 2024", H100_BUS,
                                ["1a", "3c", "4d", "5e", "9c", "bc", "cc", "dc"],
                                ["ibp26s0", "ibp60s0", "ibp77s0", "ibp94s0", "ibp156s0", "ibp188s0", "ibp204s0",
                                 "ibp220s0"]))
        # docker bridge chatter from earlier jobs on the node
        tj = t_sub - timedelta(hours=rng.randint(5, 40), minutes=rng.randint(0, 59))
        veth = f"veth{rng.getrandbits(28):07x}"
        k.at(tj, f"docker0: port 1({veth}) entered blocking state", f"docker0: port 1({veth}) entered disabled state",
             f"device {veth} entered promiscuous mode")
        k.at(tj + sec(0.4), f"eth0: renamed from veth{rng.getrandbits(28):07x}",
             f"IPv6: ADDRCONF(NETDEV_CHANGE): {veth}: link becomes ready",
             f"docker0: port 1({veth}) entered forwarding state")
        if h == "gpu-016":
            tc = t_sub + timedelta(hours=1, minutes=17, seconds=12.3)
            k.at(tc, "pcieport 0000:00:01.1: AER: Corrected error received: 0000:01:00.0",
                 "pcieport 0000:01:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
                 "pcieport 0000:01:00.0:   device [1000:c030] error status/mask=00000001/00002000",
                 "pcieport 0000:01:00.0:    [ 0] RxErr                  (First)")
    kx = KernelLog(tree, f"dmesg/{culprit_host}.log", culprit_host, boots[culprit_host], "plain")
    kx.at(t_xid, f"NVRM: GPU at PCI:{culprit.pci}: GPU-6f1e2a7c-93b4-d0e8-51af-2c7b8e4d9a03",
          "NVRM: GPU Board Serial Number: 1654923019412",
          f"NVRM: Xid (PCI:{culprit.pci}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
          f"NVRM: GPU {culprit.pci}.0: GPU has fallen off the bus.",
          f"NVRM: GPU {culprit.pci}.0: GPU serial number is 1654923019412.",
          "NVRM: A GPU crash dump has been created. If possible, please run",
          "NVRM: nvidia-bug-report.sh as root to collect this data before",
          "NVRM: the NVIDIA kernel module is unloaded.")
    for n, dt in enumerate((122.9, 245.8)):
        kx.at(t_xid + sec(dt), f"INFO: task python:{culprit.pid} blocked for more than {int(dt) + (1 if n else 0)} "
                               "seconds.",
              "      Tainted: P           OE     5.15.0-97-generic #107-Ubuntu",
              "\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\" disables this message.",
              f"task:python          state:D stack:    0 pid:{culprit.pid} ppid:{c.agent_pid[culprit_host]} "
              "flags:0x00004002",
              "Call Trace:", " <TASK>", " __schedule+0x2cd/0x890", " schedule+0x69/0x110",
              " os_acquire_mutex+0x2e/0x60 [nvidia]", " _nv045873rm+0x27/0x70 [nvidia]",
              " rm_ioctl+0x63/0xb0 [nvidia]", " nvidia_ioctl+0x6bd/0x8b0 [nvidia]",
              " nvidia_frontend_unlocked_ioctl+0x3b/0x50 [nvidia]", " __x64_sys_ioctl+0x95/0xd0",
              " do_syscall_64+0x5c/0xc0", " entry_SYSCALL_64_after_hwframe+0x62/0xcc", " </TASK>")

    # --- ten minutes later: every other rank's watchdog fires on the same collective
    t_to = t_work + sec(600)
    dead: dict[str, list[tuple[datetime, int, int, int, int]]] = {h: [] for h in hosts}
    for r in c.ranks:
        if r is culprit:
            continue
        t_r = t_to + sec(rng.uniform(0.02, 0.9))
        for tt, line in watchdog_timeout(tv, rng, r, t_r, seq, op, numel_in, 600000, numel_out):
            tree.add(f"{r.host}/rank_{r.rank:02d}.log", tt, line)
        dead[r.host].append((t_r + sec(0.05), r.rank, r.local, -6, r.pid))
    for h in hosts:
        fails = sorted(dead[h])
        t_det = max(f[0] for f in fails) + sec(rng.uniform(0.5, 4.5))
        stuck = culprit.pid if h == culprit_host else None
        t_end = agent_teardown(tree, out, tv, h, c.agent_pid[h], t_det, fails, [stuck] if stuck else [],
                               "pretrain_gpt.py", unkillable=stuck)
        tree.add(out, t_end + sec(1.2), f"srun: error: {h}: task {hosts.index(h)}: Exited with exit code 1")
    t_fin = max(e[0] for e in tree.files[out]) + sec(0.5)
    tree.add(out, t_fin, f"Job {job} finished at {t_fin:%a %b} {t_fin.day:2d} {t_fin:%H:%M:%S} UTC 2026 with exit code 1")
    # teardown: nvidia-peermem complains when the dying processes' GPU memory registrations go away (benign)
    for h in hosts:
        if h != culprit_host:
            KernelLog(tree, f"dmesg/{h}.log", h, boots[h], "plain").at(
                t_to + sec(rng.uniform(1.0, 3.0)),
                "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further processing")

    # --- the epilog's health check on the culprit node
    te = t_fin + sec(6.4)
    tree.raw[f"{culprit_host}/epilog-health.txt"] = (
        f"==== slurm epilog {culprit_host} job {job} {te:%Y-%m-%dT%H:%M:%S}+00:00 ====\n"
        "$ nvidia-smi --query-gpu=index,pci.bus_id,temperature.gpu,ecc.errors.uncorrected.volatile.total --format=csv\n"
        f"Unable to determine the device handle for GPU {culprit.pci.upper().replace('0000:', '0000:')}.0: Unknown Error\n"
        f"$ lspci -s {culprit.bus}:00.0\n"
        f"{culprit.bus}:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev ff)\n"
        "epilog: health check FAILED, node will be drained by slurmctld (reason: gpu_health)\n")
    tree.collected = te + sec(300)
    tree.expected = expected(
        "GPU 2 (0000:3a:00) of gpu-014 fell off the bus (Xid 79, plain dmesg without absolute time); its rank 26 "
        "hung silently and the other 63 ranks hit NCCL watchdog timeouts on SeqNum 9897 ten minutes later",
        "hardware", "gpu_xid_79", "drain_and_restart", nodes=[culprit_host], ranks=[culprit.rank], gpus=[culprit.pci],
        first=f"dmesg/{culprit_host}.log", not_subtypes=["collective_timeout", "nccl_aborted", "launcher_teardown"],
        notes="Trap: 63 ranks report the timeout and torchrun's ChildFailedError blames the SIGABRT'd ranks;\n"
              "the culprit rank 26 prints nothing. The epilog's nvidia-smi line confirms the lost GPU.")
    return tree



# ==================================================================================================
# 2. KeyError in one rank's data pipeline; its node tears down, the other nodes time out 30 min later
# ==================================================================================================

@scenario("user-exception-then-timeouts")
def user_exception_then_timeouts() -> Tree:
    name = "user-exception-then-timeouts"
    rng = random.Random(name)
    tree = Tree(name)
    hosts = [f"hpc-a100-{i}" for i in range(21, 25)]
    c = Cluster(rng, hosts, 8, A100_BUS, {h: f"10.31.8.{h[-2:]}" for h in hosts}, "ens21f0np0",
                ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"],
                affinity=list(A100_AFFINITY))
    tv = Torch("2.5.1", site="/usr/local/lib/python3.11/dist-packages", python="/usr/bin/python3")
    culprit = c.ranks[13]
    t0 = datetime(2026, 3, 19, 13, 38, 42, 318000)
    t_exc = datetime(2026, 3, 19, 14, 22, 5, 902000)
    seq, numel = 147391, 26214400
    paths = {h: f"{h}/torchrun.log" for h in hosts}
    app = "/home/mlops/llm-train"
    for h in hosts:
        p, pid = paths[h], c.agent_pid[h]
        t = t0 + sec(rng.uniform(0, 0.8))
        tree.add(p, t, elastic(tv, t, "WARNING", "torch.distributed.run", "", pid),
                 elastic(tv, t, "WARNING", "torch.distributed.run", "*" * 41, pid),
                 elastic(tv, t, "WARNING", "torch.distributed.run", "Setting OMP_NUM_THREADS environment variable for "
                         "each process to be 1 in default, to avoid your system being overloaded, please further tune "
                         "the variable for optimal performance in your application as needed. ", pid),
                 elastic(tv, t, "WARNING", "torch.distributed.run", "*" * 41, pid))
        for r in c.on(h):
            ti = t + sec(11.2 + rng.random())
            if r.rank == 0:
                tree.add(p, ti - sec(2.5), tee(tv, r, f"{iso_ms(ti - sec(2.5))} INFO [trainer.setup] world_size=32 "
                                                      "dp=32 model=llama-3-8b seq_len=8192 micro_bs=2 grad_accum=4"),
                         tee(tv, r, f"{iso_ms(ti - sec(2.4))} INFO [trainer.setup] resuming from "
                                    "/mnt/weka/ckpt/llama3-8b-sft-v4/step_16000 (optimizer + dataloader state)"))
            tree.block(p, ti, [tee(tv, r, x) for x in nccl_init(c, r, "2.21.5", cuda="12.4", channels=16)], 0.003)
            tree.add(p, ti + sec(3), tee(tv, r, f"{tv.site}/torch/utils/data/dataloader.py:617: UserWarning: This "
                                               "DataLoader will create 6 worker processes in total. Our suggested max "
                                               "number of worker in current system is 4, which is smaller than what "
                                               "this DataLoader is going to create. Please be aware that excessive "
                                               "worker creation might get DataLoader running slow or even freeze, "
                                               "lower the worker number to avoid potential slowness/freeze if "
                                               "necessary."),
                     tee(tv, r, "  warnings.warn("))
            tree.add(p, ti + sec(9), tee(tv, r, f"{app}/trainer/loop.py:141: FutureWarning: `torch.cuda.amp.autocast"
                                                "(args...)` is deprecated. Please use `torch.amp.autocast('cuda', "
                                                "args...)` instead."),
                     tee(tv, r, "  with torch.cuda.amp.autocast(dtype=torch.bfloat16):"))
    # rank 0: tqdm + a log line every 20 steps
    r0, p0 = c.ranks[0], paths[hosts[0]]
    step, t = 16000, t0 + sec(31)
    total, rate = 45000, 1.0 / 1.21
    loss = 1.412
    while True:
        seg = []
        for _ in range(5):
            step += 10
            t += sec(12.1 + rng.uniform(-0.3, 0.3))
            seg.append(tqdm_bar("train", step, total, (t - t0).total_seconds() - 31, rate, f"loss={loss:.3f}"))
        if t > t_exc:
            break
        loss = max(0.9, loss - 0.00004 + rng.uniform(-0.02, 0.02))
        tree.add(p0, t, tee(tv, r0, "\r" + "\r".join(seg)) + f"{iso_ms(t)} INFO [trainer.loop] step={step} "
                 f"loss={loss:.4f} lr={2e-5 * (1 - step / total) + 2e-6:.3e} grad_norm={rng.uniform(0.4, 0.9):.2f} "
                 f"tok/s/gpu={rng.randint(3150, 3420)}")
        if step % 1000 == 0:
            tree.add(p0, t + sec(0.4), tee(tv, r0, f"{iso_ms(t + sec(0.4))} INFO [trainer.ckpt] saving "
                                                    f"/mnt/weka/ckpt/llama3-8b-sft-v4/step_{step} (sharded, 32 files)"))
            tree.add(p0, t + sec(52), tee(tv, r0, f"{iso_ms(t + sec(52))} INFO [trainer.ckpt] saved step_{step} "
                                                   f"in 51.6s"))
            t += sec(52)
    # the exception on rank 13 (node hpc-a100-22, local rank 5)
    py = tv.site
    tb = py_traceback([
        (f"{app}/train.py", 412, "<module>", "main()"),
        (f"{app}/train.py", 388, "main", "trainer.fit()"),
        (f"{app}/trainer/loop.py", 203, "fit", "batch = next(train_iter)"),
        ("", 0, "", ""),
        (f"{py}/torch/utils/data/dataloader.py", 701, "__next__", "data = self._next_data()"),
        (f"{py}/torch/utils/data/dataloader.py", 1465, "_next_data", "return self._process_data(data)"),
        (f"{py}/torch/utils/data/dataloader.py", 1491, "_process_data", "data.reraise()"),
        (f"{py}/torch/_utils.py", 715, "reraise", "raise exception"),
    ], ["KeyError: Caught KeyError in DataLoader worker process 3.", "Original Traceback (most recent call last):",
        f'  File "{py}/torch/utils/data/_utils/worker.py", line 351, in _worker_loop',
        "    data = fetcher.fetch(index)  # type: ignore[possibly-undefined]",
        "           ^^^^^^^^^^^^^^^^^^^^",
        f'  File "{py}/torch/utils/data/_utils/fetch.py", line 52, in fetch',
        "    data = [self.dataset[idx] for idx in possibly_batched_index]",
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        f'  File "{py}/torch/utils/data/_utils/fetch.py", line 52, in <listcomp>',
        "    data = [self.dataset[idx] for idx in possibly_batched_index]",
        "            ~~~~~~~~~~~~^^^^^",
        f'  File "{app}/data/packed.py", line 97, in __getitem__',
        "    ids = record[\"input_ids\"]",
        "          ~~~~~~^^^^^^^^^^^^^",
        "KeyError: 'input_ids'", ""])
    tb = [x for x in tb if x != '  File "", line 0, in ']
    tb.insert(tb.index("    batch = next(train_iter)") + 1, "            ^^^^^^^^^^^^^^^^")
    p13 = paths[culprit.host]
    tree.add(p13, t_exc - sec(0.31), tee(tv, culprit, f"{iso_ms(t_exc - sec(0.31))} WARNING [data.packed] shard "
                                                       "/mnt/weka/data/sft-mix-v7/shard-00417.jsonl.zst: record 88213 "
                                                       "has keys ['text', 'meta'], expected pre-tokenized"))
    tree.block(p13, t_exc, [tee(tv, culprit, x) for x in tb])
    # torchrun on hpc-a100-22 reacts within 100 ms
    h = culprit.host
    others = [r for r in c.on(h) if r is not culprit]
    t_det = t_exc + sec(0.41)
    t_end = agent_teardown(tree, paths[h], tv, h, c.agent_pid[h], t_det, [(t_exc + sec(0.38), 13, 5, 1, culprit.pid)],
                           [r.pid for r in others], "train.py")
    tree.add(paths[h], t_end + sec(0.2), f"{glog('W', t_end + sec(0.2))} {c.agent_pid[h]} "
             "torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1230] The node "
             f"'{h}_{c.agent_pid[h]}_0' has closed the rendezvous 'sft-llama3-8b-0319'.")
    # the other nodes hang in the all-reduce for 30 minutes
    t_work = t_exc - sec(1.02)
    for hh in hosts:
        if hh == h:
            continue
        fails = []
        for r in c.on(hh):
            t_r = t_work + sec(1800 + rng.uniform(0.05, 0.95))
            for tt, line in watchdog_timeout(tv, rng, r, t_r, seq, "ALLREDUCE", numel, 1800000):
                tree.add(paths[hh], tt, tee(tv, r, line) if line else tee(tv, r, ""))
            fails.append((t_r + sec(0.004), r.rank, r.local, -6, r.pid))
        t_det = max(f[0] for f in fails) + sec(0.1)
        agent_teardown(tree, paths[hh], tv, hh, c.agent_pid[hh], t_det, fails, [], "train.py")
    tree.collected = t_work + sec(1800 + 600)
    tree.expected = expected(
        "A DataLoader worker of rank 13 (hpc-a100-22) hit a record without 'input_ids' (KeyError); its node tore down "
        "and the 24 ranks of the other nodes hit NCCL watchdog timeouts (SeqNum 147391) 30 minutes later",
        "user_code", "python_exception", "stop_and_notify", nodes=[], ranks=[13],
        first=paths[culprit.host], not_subtypes=["collective_timeout", "nccl_aborted", "launcher_teardown",
                                                 "missing_env_var"],
        notes="Formats: torch 2.5 (glog-style elastic logs, nanosecond c10 timestamps), NCCL 2.21 init lines\n"
              "(`ncclCommInitRank comm ... - Init COMPLETE`), torchrun --tee `[rankN]:` prefixes, tqdm redraws.")
    return tree


# ==================================================================================================
# 3. Host OOM: the only trace is torchrun's `exitcode -9` (SIGKILL); no kernel log was collected
# ==================================================================================================

@scenario("host-oom-exitcode-9-only")
def host_oom_exitcode_9_only() -> Tree:
    name = "host-oom-exitcode-9-only"
    rng = random.Random(name)
    tree = Tree(name)
    hosts = ["dgx-a100-03", "dgx-a100-04"]
    c = Cluster(rng, hosts, 8, A100_BUS, {"dgx-a100-03": "172.16.40.13", "dgx-a100-04": "172.16.40.14"}, "enp226s0",
                ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"],
                affinity=list(A100_AFFINITY))
    tv = Torch("2.1.2", site="/opt/conda/lib/python3.10/site-packages", python="/opt/conda/bin/python",
               torchrun="/opt/conda/bin/torchrun")
    culprit = c.ranks[11]
    t0 = datetime(2026, 4, 2, 1, 58, 40, 77000)
    t_kill = datetime(2026, 4, 2, 3, 41, 27, 118000)
    paths = {h: f"{h}.log" for h in hosts}
    for h in hosts:
        p, pid = paths[h], c.agent_pid[h]
        t = t0 + sec(rng.uniform(0, 0.9))
        tree.add(p, t, "+ torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=dgx-a100-03:29411 "
                       "--rdzv_id=clip-vitg-0402 --tee 3 -m training.main --model ViT-bigG-14 --batch-size 160 "
                       "--workers 16 --train-data '/datasets/laion2b-en/{00000..23295}.tar' --precision amp_bf16")
        tree.add(p, t + sec(1.4), elastic(tv, t + sec(1.4), "WARNING", "torch.distributed.run", "", pid),
                 elastic(tv, t + sec(1.4), "WARNING", "torch.distributed.run", "*" * 41, pid),
                 elastic(tv, t + sec(1.4), "WARNING", "torch.distributed.run", "Setting OMP_NUM_THREADS environment "
                         "variable for each process to be 1 in default, to avoid your system being overloaded, please "
                         "further tune the variable for optimal performance in your application as needed. ", pid),
                 elastic(tv, t + sec(1.4), "WARNING", "torch.distributed.run", "*" * 41, pid))
        for r in c.on(h):
            ti = t + sec(14.0 + rng.random())
            tree.block(p, ti, [tee(tv, r, x) for x in nccl_init(c, r, "2.18.6", cuda="12.1", channels=16)], 0.003)
            tree.add(p, ti + sec(21), tee(tv, r, f"{tv.site}/torch/utils/data/dataloader.py:557: UserWarning: This "
                                                 "DataLoader will create 16 worker processes in total. Our suggested "
                                                 "max number of worker in current system is 12, which is smaller than "
                                                 "what this DataLoader is going to create. Please be aware that "
                                                 "excessive worker creation might get DataLoader running slow or even "
                                                 "freeze, lower the worker number to avoid potential slowness/freeze "
                                                 "if necessary."),
                     tee(tv, r, "  warnings.warn(_create_warning_msg("))
    # open_clip logs on rank 0 only; its date format `%Y-%m-%d,%H:%M:%S` has a comma between date and time
    r0, p0 = c.ranks[0], paths["dgx-a100-03"]
    t = t0 + sec(15)
    cfg = ["accum_freq: 1", "batch_size: 160", "dataset_type: webdataset", "epochs: 32", "lr: 0.0005",
           "model: ViT-bigG-14", "precision: amp_bf16", "train_num_samples: 12800000", "warmup: 2000", "workers: 16",
           "world_size: 16"]
    tree.add(p0, t, tee(tv, r0, f"{t:%Y-%m-%d,%H:%M:%S} | INFO | Running in distributed mode with multiple "
                                "processes. Device: cuda:0.Process (global: 0, local 0), total 16."))
    tree.add(p0, t + sec(9), tee(tv, r0, f"{t + sec(9):%Y-%m-%d,%H:%M:%S} | INFO | Params:"),
             *[tee(tv, r0, f"{t + sec(9):%Y-%m-%d,%H:%M:%S} | INFO |   {x}") for x in cfg])
    t += sec(38)
    tree.add(p0, t, tee(tv, r0, f"{t:%Y-%m-%d,%H:%M:%S} | INFO | => resuming checkpoint "
                                "'/checkpoints/clip-vitg-0402/checkpoints/epoch_2.pt' (epoch 2)"),
             tee(tv, r0, f"{t:%Y-%m-%d,%H:%M:%S} | INFO | Start epoch 2"))
    n, total, per = 0, 12800000, 160 * 16
    while t < t_kill - sec(40):
        n += per * 100
        t += sec(100 * 1.872 + rng.uniform(-1, 1))
        ls = 1.88 - n / total * 0.05 + rng.uniform(-0.03, 0.03)
        tree.add(p0, t, tee(tv, r0, f"{t:%Y-%m-%d,%H:%M:%S} | INFO | Train Epoch: 2 [{n:9d}/{total} "
                                    f"({100 * n / total:3.0f}%)] Data (t): {rng.uniform(0.35, 0.61):.3f} Batch (t): "
                                    f"{rng.uniform(1.84, 1.92):.3f}, {per / 1.87:.1f}/s, {per / 1.87 / 16:.2f}/s/gpu "
                                    f"LR: 0.000488 Logit Scale: 100.000 Contrastive_loss: {ls:.4f} ({ls + 0.03:.4f}) "
                                    f"Loss: {ls:.4f} ({ls + 0.03:.4f})"))
    # rank 11 is SIGKILLed by the kernel OOM killer (its 16 dataloader workers grew the host RSS); nothing is printed
    h = culprit.host
    others = [r for r in c.on(h) if r is not culprit]
    t_det = t_kill + sec(4.62)  # torch 2.1 polls every 5 s
    agent_teardown(tree, paths[h], tv, h, c.agent_pid[h], t_det, [(t_det, 11, 3, -9, culprit.pid)],
                   [r.pid for r in others], "training.main")
    tree.add(paths[h], t_det + sec(1.1), "srun: error: dgx-a100-04: task 1: Exited with exit code 1")
    # dgx-a100-03 waits in the all-gather of the next step until the 30 min NCCL timeout (torch 2.1 default)
    t_work = t_kill + sec(0.74)
    fails = []
    hh = "dgx-a100-03"
    for r in c.on(hh):
        t_r = t_work + sec(1800 + rng.uniform(0.05, 0.6))
        for tt, line in watchdog_timeout(tv, rng, r, t_r, 52204, "ALLGATHER", 1280, 1800000, numel_out=20480):
            tree.add(paths[hh], tt, tee(tv, r, line))
        fails.append((t_r + sec(0.01), r.rank, r.local, -6, r.pid))
    t_end = agent_teardown(tree, paths[hh], tv, hh, c.agent_pid[hh], max(fails)[0] + sec(2.3), fails, [],
                           "training.main")
    tree.add(paths[hh], t_end + sec(0.8), "srun: error: dgx-a100-03: task 0: Exited with exit code 1")
    tree.collected = t_end + sec(900)
    tree.expected = expected(
        "Rank 11 on dgx-a100-04 was SIGKILLed (torchrun: exitcode -9) while its 16 DataLoader workers grew host "
        "memory; no dmesg was collected; dgx-a100-03's ranks timed out 30 min later and were SIGABRTed",
        "user_code", "host_oom_suspected", "stop_and_notify", nodes=[], ranks=[11],
        first="dgx-a100-04.log", not_subtypes=["collective_timeout", "launcher_teardown", "nccl_aborted"],
        notes="Trap: dgx-a100-03's ChildFailedError (later) names SIGABRT'd ranks as root cause; the 8\n"
              "SIGTERM'd siblings on dgx-a100-04 are collateral. torch 2.1: `[defaultN]:` tee prefixes,\n"
              "NCCL 2.18 init lines; open_clip writes `2026-04-02,03:40:58` (comma, not ISO).")
    return tree


def cuda_error_tail() -> list[str]:
    return ["CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might "
            "be incorrect.", "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
            "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.", ""]


def nccl_error_abort(tv: Torch, rng: random.Random, r: Rank, t: datetime, reason: str, detail: list[str],
                     where: str = "checkForNCCLErrorsInternal") -> list[tuple[datetime, str]]:
    """ProcessGroupNCCL's watchdog finding an NCCL error (async error handling: abort) or a CUDA error
    (`where="c10_cuda_check_implementation"`: the exception escapes the watchdog loop) and taking the process down."""
    k = r.rank
    out = []
    if where == "checkForNCCLErrorsInternal":
        out += [(t, c10(tv, k, t, "E", "ProcessGroupNCCL.cpp:537", f"[Rank {k}] Some NCCL operations have failed or "
                        "timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run "
                        "on corrupted/incomplete data.")),
                (t, c10(tv, k, t, "E", "ProcessGroupNCCL.cpp:543", f"[Rank {k}] To avoid data inconsistency, we are "
                        "taking the entire process down."))]
        frames = ["c10d::ProcessGroupNCCL::checkForNCCLErrorsInternal(std::shared_ptr<c10d::NCCLComm>&)",
                  "c10d::ProcessGroupNCCL::WorkNCCL::checkAndSetException()",
                  "c10d::ProcessGroupNCCL::workCleanupLoop()", "c10d::ProcessGroupNCCL::ncclCommWatchdog()"]
    else:
        frames = [("c10::detail::torchCheckFail(char const*, char const*, unsigned int, std::string const&)",
                   "libc10.so"),
                  ("c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, int, bool)",
                   "libc10_cuda.so"),
                  "c10d::ProcessGroupNCCL::WorkNCCL::finishedGPUExecutionInternal() const",
                  "c10d::ProcessGroupNCCL::WorkNCCL::isCompleted()",
                  "c10d::ProcessGroupNCCL::workCleanupLoop()", "c10d::ProcessGroupNCCL::ncclCommWatchdog()"]
    out.append((t, c10(tv, k, t, "E", "ProcessGroupNCCL.cpp:1182", f"[Rank {k}] NCCL watchdog thread terminated with "
                       f"exception: {reason}")))
    base = rng.randint(0x7f0000000000, 0x7fffff000000) & ~0xfff
    body = detail + cpp_frames(tv, rng, where, frames, base)
    body += ["terminate called after throwing an instance of 'c10::DistBackendError'",
             f"  what():  [Rank {k}] NCCL watchdog thread terminated with exception: {reason}"] + body
    body += ["Exception raised from ncclCommWatchdog at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1186 "
             "(most recent call first):",
             f"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x{base + 0x81d87:x} in "
             f"{tv.site}/torch/lib/libc10.so)",
             f"frame #1: <unknown function> + 0xdf6b11 (0x{base + 0x1df6b11:x} in {tv.site}/torch/lib/libtorch_cuda.so)",
             f"frame #2: <unknown function> + 0xdc253 (0x{base + 0x3e0c253:x} in /lib/x86_64-linux-gnu/libstdc++.so.6)",
             f"frame #3: <unknown function> + 0x94ac3 (0x{base + 0x3fd4ac3:x} in /lib/x86_64-linux-gnu/libc.so.6)",
             f"frame #4: <unknown function> + 0x126850 (0x{base + 0x4066850:x} in /lib/x86_64-linux-gnu/libc.so.6)", ""]
    out += [(t + sec(0.001), x) for x in body]
    return out


def rank_logger(t: datetime, rank: int, msg: str, level: str = "INFO") -> str:
    return f"{iso_ms(t)} [rank {rank}] {level} {msg}"


# ==================================================================================================
# 4. Desynchronised collectives caught by TORCH_DISTRIBUTED_DEBUG=DETAIL
# ==================================================================================================

@scenario("collective-mismatch-debug-detail")
def collective_mismatch() -> Tree:
    name = "collective-mismatch-debug-detail"
    rng = random.Random(name)
    tree = Tree(name)
    hosts = ["node12", "node13"]
    c = Cluster(rng, hosts, 8, A100_BUS, {"node12": "10.128.4.112", "node13": "10.128.4.113"}, "ibs1",
                ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"], affinity=list(A100_AFFINITY))
    tv = Torch("2.2.2", site="/usr/local/lib/python3.10/dist-packages", python="/usr/bin/python")
    odd = c.ranks[5]
    t0 = datetime(2026, 4, 21, 7, 5, 12, 660000)
    t_x = datetime(2026, 4, 21, 10, 41, 13, 271000)
    job = "job-51920"
    app = "/workspace/asr-conformer"
    seqn = 24871
    rp = {r.rank: f"{job}/ranks/rank-{r.rank:03d}.log" for r in c.ranks}
    for h in hosts:
        ap, pid = f"{job}/{h}.torchrun.log", c.agent_pid[h]
        tree.add(ap, t0, "+ export TORCH_DISTRIBUTED_DEBUG=DETAIL",
                 f"+ torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint node12:29400 "
                 f"--redirects 3 --log-dir /scratch/{job}/torchrun {app}/train_ddp.py --config conf/conformer_l.yaml")
        for m in ["", "*" * 41, "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, "
                  "to avoid your system being overloaded, please further tune the variable for optimal performance in "
                  "your application as needed. ", "*" * 41]:
            tree.add(ap, t0 + sec(1.3), elastic(tv, t0 + sec(1.3), "WARNING", "torch.distributed.run", m, pid))
    for r in c.ranks:
        p = rp[r.rank]
        ti = t0 + sec(9.5 + rng.random())
        tree.add(p, ti, rank_logger(ti, r.rank, f"init_process_group(backend=nccl) world_size=16 local_rank={r.local} "
                                                f"host={r.host}"))
        tree.add(p, ti + sec(0.2), rank_logger(ti + sec(0.2), r.rank, "TORCH_DISTRIBUTED_DEBUG=DETAIL: collectives "
                                                                      "are checked through ProcessGroupWrapper (gloo)",
                                               "WARNING"))
        tree.block(p, ti + sec(0.6), nccl_init(c, r, "2.19.3", cuda="12.3", channels=8), 0.003)
        tree.add(p, ti + sec(4), rank_logger(ti + sec(4), r.rank, "train shards: 93 files, dynamic batching "
                                                                  "(max_frames=40000, shuffle per epoch)"))
        tree.add(p, ti + sec(4.5), f"{tv.site}/torch/functional.py:665: UserWarning: stft with return_complex=False is "
                                   "deprecated. In a future pytorch release, stft will return complex tensors for all "
                                   "inputs, and return_complex=False will raise an error.",
                 "Note: you can still call torch.view_as_real on the complex output to recover the old return format. "
                 "(Triggered internally at ../aten/src/ATen/native/SpectralOps.cpp:879.)",
                 "  return _VF.stft(input, n_fft, hop_length, win_length, window,  # type: ignore[attr-defined]")
        # four epochs of ~54 min; in epoch 3 the shuffle leaves rank 5 with 25 batches fewer than the others
        step_s = 2.13
        e3 = t_x - sec(1462 * step_s + 0.4)
        counts = [1490, 1484, 1489, 1487 if r is not odd else 1462]
        starts = [e3 - sec(step_s * sum(counts[e:3]) + 95 * (3 - e)) for e in range(3)] + [e3]
        for e in range(4):
            for step in range(250, counts[e] + 1, 250):
                tt = starts[e] + sec(step * step_s + rng.uniform(-1, 1))
                if tt >= t_x:
                    break
                tree.add(p, tt, rank_logger(tt, r.rank, f"epoch {e} step {step} loss "
                                                        f"{0.95 - e * 0.05 - step * 1e-5 + rng.uniform(-0.05, 0.05):.4f}"
                                                        f" ctc {0.7 - e * 0.03 + rng.uniform(-0.04, 0.04):.4f} "
                                                        f"lr {4.1e-4 * (1 - e * 0.08):.2e}"))
            if e < 3:
                te = starts[e] + sec(counts[e] * step_s + 95)
                tree.add(p, te, rank_logger(te, r.rank, f"epoch {e} done: {counts[e]} batches, valid loss "
                                                        f"{0.71 - e * 0.04:.4f} WER {11.9 - e * 0.8:.2f}"))
        if r is odd:
            tt = t_x - sec(0.4)
            tree.add(p, tt, rank_logger(tt, r.rank, "epoch 3: train iterator exhausted after 1462 batches, running "
                                                    "validation"))
    fp = ("TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda, layout=Strided (default), "
          "requires_grad=false (default), pinned_memory=false (default), memory_format=(nullopt))")
    bucket = f"CollectiveFingerPrint(SequenceNumber={seqn}, OpType=ALLREDUCE, TensorShape=[26214400], " \
             f"TensorDtypes=BFloat16, {fp})"
    valred = f"CollectiveFingerPrint(SequenceNumber={seqn}, OpType=ALLREDUCE, TensorShape=[2], TensorDtypes=Float, {fp})"
    for r in c.ranks:
        p = rp[r.rank]
        tt = t_x + sec(rng.uniform(0.0, 0.05))
        if r is odd:
            msg = (f"RuntimeError: Detected mismatch between collectives on ranks. Rank {r.rank} is running collective: "
                   f"{valred}, but Rank 0 is running collective: {bucket}.Collectives differ in the following aspects: "
                   f"  Tensor Tensor shapes: [2]vs [26214400]  Tensor Tensor dtypes: [Float]vs [BFloat16]")
            frames = [(f"{app}/train_ddp.py", 311, "<module>", "main()"),
                      (f"{app}/train_ddp.py", 298, "main", "val = evaluate(model, val_loader, args)"),
                      (f"{app}/train_ddp.py", 231, "evaluate", "dist.all_reduce(stats, op=dist.ReduceOp.SUM)"),
                      (f"{tv.site}/torch/distributed/c10d_logger.py", 72, "wrapper", "return func(*args, **kwargs)"),
                      (f"{tv.site}/torch/distributed/distributed_c10d.py", 1992, "all_reduce",
                       "work = group.allreduce([tensor], opts)")]
        else:
            msg = (f"RuntimeError: Detected mismatch between collectives on ranks. Rank {r.rank} is running collective: "
                   f"{bucket}, but Rank {odd.rank} is running collective: {valred}.Collectives differ in the following "
                   f"aspects:   Tensor Tensor shapes: [26214400]vs [2]  Tensor Tensor dtypes: [BFloat16]vs [Float]")
            frames = [(f"{app}/train_ddp.py", 311, "<module>", "main()"),
                      (f"{app}/train_ddp.py", 296, "main", "train_one_epoch(model, train_loader, optim, scaler, "
                                                           "epoch, args)"),
                      (f"{app}/train_ddp.py", 188, "train_one_epoch", "scaler.scale(loss).backward()"),
                      (f"{tv.site}/torch/_tensor.py", 522, "backward", "torch.autograd.backward("),
                      (f"{tv.site}/torch/autograd/__init__.py", 266, "backward",
                       "Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass")]
        tree.block(p, tt, py_traceback(frames, [msg]))
    for h in hosts:
        ap, pid = f"{job}/{h}.torchrun.log", c.agent_pid[h]
        fails = [(t_x + sec(0.3 + rng.random() * 0.2), r.rank, r.local, 1, r.pid) for r in c.on(h)]
        t_end = agent_teardown(tree, ap, tv, h, pid, t_x + sec(5.0), fails, [], "train_ddp.py")
        tree.add(ap, t_end + sec(0.5), f"srun: error: {h}: task {hosts.index(h)}: Exited with exit code 1")
    tree.collected = t_x + sec(1200)
    tree.expected = expected(
        "Rank 5 ran out of training shards one epoch step early and entered validation (all_reduce of 2 floats) while "
        "the other 15 ranks ran DDP's gradient all-reduce; TORCH_DISTRIBUTED_DEBUG=DETAIL reports the mismatch on "
        "every rank, all of them naming rank 5",
        "user_code", "collective_desync", "stop_and_notify", nodes=[], ranks=[5],
        not_subtypes=["python_exception", "launcher_teardown", "collective_timeout"],
        notes="Realism note: ProcessGroupWrapper all-gathers fingerprints, so every rank raises the mismatch (not\n"
              "only one); each rank names the odd rank. Layout: flat per-rank files (node only from NCCL lines).")
    return tree


# ==================================================================================================
# 5. Uncorrectable ECC error (Xid 94 + row remap Xid 63, dmesg -T) and the CUDA error on that rank
# ==================================================================================================

@scenario("ecc-xid94-dmesg-T")
def ecc_xid94() -> Tree:
    name = "ecc-xid94-dmesg-T"
    rng = random.Random(name)
    tree = Tree(name)
    hosts = [f"g0{n}" for n in range(121, 125)]
    c = Cluster(rng, hosts, 8, A100_BUS, {h: f"10.9.12.{h[-2:]}" for h in hosts}, "ib0",
                ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"],
                affinity=list(A100_AFFINITY))
    tv = Torch("2.2.2", site="/opt/conda/envs/fm/lib/python3.10/site-packages", python="/opt/conda/envs/fm/bin/python")
    culprit = next(r for r in c.ranks if r.host == "g0122" and r.local == 3)
    t0 = datetime(2026, 5, 12, 6, 20, 3, 5000)
    t_ecc = datetime(2026, 5, 12, 9, 41, 17, 640000)
    app = "/gpfs/projects/fm/pretrain"
    seq, numel = 40833, 67108864
    for r in c.ranks:
        p = f"{r.host}/rank{r.rank}.log"
        ti = t0 + sec(7 + rng.random())
        tree.add(p, ti, f"{iso_ms(ti)} | INFO | rank {r.rank:2d} | starting on {r.host} cuda:{r.local}")
        tree.block(p, ti + sec(0.5), nccl_init(c, r, "2.19.3", cuda="12.3", channels=16), 0.003)
        tree.block(p, ti + sec(9), warn(TYPED_STORAGE, tv))
        step, t = 17000, ti + sec(60)
        while True:
            step += 500
            t += sec(500 * 0.812 + rng.uniform(-0.5, 0.5))
            if t > t_ecc - sec(0.2):
                break
            tree.add(p, t, f"{iso_ms(t)} | INFO | rank {r.rank:2d} | step {step} | loss {2.31 - step * 1e-5 + rng.uniform(-.03, .03):.4f}"
                           f" | {rng.uniform(171, 176):.1f} TFLOP/s | mem {rng.uniform(61.1, 61.6):.1f} GiB")
    boots = {h: datetime(2026, 4, 28, 17, 3, 11) + timedelta(minutes=rng.randint(0, 900)) for h in hosts}
    for h in hosts:
        k = KernelLog(tree, f"{h}/dmesg.txt", h, boots[h], "T")
        k.since_boot(boot_lines(rng, "5.15.0-101-generic", "550.54.15", "Tue Mar  5 22:23:56 UTC 2024", A100_BUS,
                                ["0c", "12", "4b", "54", "8d", "94", "bb", "c1"], ["ib0", "ib1", "ib2", "ib3"]))
        if h == "g0124":
            k.at(t0 - timedelta(hours=6, minutes=13), "pcieport 0000:80:03.1: AER: Corrected error received: 0000:81:00.0",
                 "nvme 0000:81:00.0: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Transmitter ID)",
                 "nvme 0000:81:00.0:   device [144d:a824] error status/mask=00001000/0000e000",
                 "nvme 0000:81:00.0:    [12] Timeout               ")
        k.at(t0 + sec(3), "IPv4: martian source 10.9.12.255 from 10.9.12.1, on dev ib0")
    kx = KernelLog(tree, "g0122/dmesg.txt", "g0122", boots["g0122"], "T")
    kx.at(t_ecc, f"NVRM: Xid (PCI:{culprit.pci}): 94, pid={culprit.pid}, name=python, Contained: SM (0x1). RST: No, "
                 "D-RST: No")
    kx.at(t_ecc + sec(0.004), f"NVRM: Xid (PCI:{culprit.pci}): 63, pid='<unknown>', name=<unknown>, Row Remapper: New "
                              "row (0x00000000be4a17c0) Marked for remapping, reset gpu to activate.")
    # the rank using that GPU gets the error at its next synchronisation
    p = f"g0122/rank{culprit.rank}.log"
    te = t_ecc + sec(0.38)
    fail_step = 17000 + int((t_ecc - t0).total_seconds() / 0.812) - 80
    tree.add(p, te - sec(0.001), f"{iso_ms(te)} | ERROR | rank {culprit.rank:2d} | train_step failed at step "
                                 f"{fail_step}, aborting")
    tree.block(p, te, py_traceback([
        (f"{app}/pretrain.py", 402, "<module>", "main(cfg)"),
        (f"{app}/pretrain.py", 371, "main", "metrics = train_step(model, batch, optimizer, scaler)"),
        (f"{app}/pretrain.py", 214, "train_step", "loss_val = loss.detach().float().item()")],
        ["RuntimeError: CUDA error: uncorrectable ECC error encountered"] + cuda_error_tail()))
    for tt, line in nccl_error_abort(tv, rng, culprit, te + sec(0.02), "CUDA error: uncorrectable ECC error encountered",
                                     cuda_error_tail()[:3] + [""], where="c10_cuda_check_implementation"):
        tree.add(p, tt, line)
    agent = "launcher"
    # torchrun on g0122 stops its other ranks; the other nodes time out 10 minutes later
    for h in hosts:
        lp = f"{h}/{agent}.log"
        tree.add(lp, t0, elastic(tv, t0, "WARNING", "torch.distributed.run", "", c.agent_pid[h]),
                 elastic(tv, t0, "WARNING", "torch.distributed.run", "*" * 41, c.agent_pid[h]),
                 elastic(tv, t0, "WARNING", "torch.distributed.run", "Setting OMP_NUM_THREADS environment variable for "
                         "each process to be 1 in default, to avoid your system being overloaded, please further tune "
                         "the variable for optimal performance in your application as needed. ", c.agent_pid[h]),
                 elastic(tv, t0, "WARNING", "torch.distributed.run", "*" * 41, c.agent_pid[h]))
        if h == "g0122":
            others = [r for r in c.on(h) if r is not culprit]
            agent_teardown(tree, lp, tv, h, c.agent_pid[h], te + sec(3.4),
                           [(te + sec(0.05), culprit.rank, culprit.local, -6, culprit.pid)], [r.pid for r in others],
                           "pretrain.py")
            continue
        fails = []
        for r in c.on(h):
            t_r = t_ecc - sec(0.11) + sec(600 + rng.uniform(0.05, 0.9))
            for tt, line in watchdog_timeout(tv, rng, r, t_r, seq, "ALLREDUCE", numel, 600000):
                tree.add(f"{h}/rank{r.rank}.log", tt, line)
            fails.append((t_r + sec(0.01), r.rank, r.local, -6, r.pid))
        agent_teardown(tree, lp, tv, h, c.agent_pid[h], max(fails)[0] + sec(3.1), fails, [], "pretrain.py")
    tree.collected = t_ecc + sec(1500)
    tree.expected = expected(
        "Uncorrectable (contained) ECC error, Xid 94 + row-remap Xid 63, on GPU 0000:4e:00 of g0122 (dmesg -T); "
        "rank 11 on that GPU got 'CUDA error: uncorrectable ECC error encountered', the other nodes timed out",
        "hardware", "gpu_xid_ecc", "drain_and_restart", nodes=["g0122"], ranks=[culprit.rank], gpus=[culprit.pci],
        first="g0122/dmesg.txt", not_subtypes=["collective_timeout", "python_exception", "gpu_row_remap"],
        notes="Competing in the first-failure window: Xid 94 (gpu_xid_ecc, 95), Xid 63 (gpu_row_remap, 88),\n"
              "the rank's CUDA ECC error (gpu_ecc_uncorrectable, 88). Benign: corrected AER on g0124's NVMe.")
    return tree


# ==================================================================================================
# 6. RoCE link down on one node's NIC; NCCL IB completion errors on the peers name that node's IP
# ==================================================================================================

@scenario("ib-link-down-peers-blame-ip")
def ib_link_down() -> Tree:
    name = "ib-link-down-peers-blame-ip"
    rng = random.Random(name)
    tree = Tree(name)
    hosts = [f"trn-h100-04{i}" for i in range(1, 5)]
    c = Cluster(rng, hosts, 8, H100_BUS, {h: f"10.44.0.{h[-2:]}" for h in hosts}, "ens1f0np0",
                [f"mlx5_{i}" for i in range(8)], link="RoCE")
    tv = Torch("2.2.2", site="/usr/local/lib/python3.10/dist-packages", python="/usr/bin/python3")
    bad_host, nic = "trn-h100-043", 4
    nic_pci = ["1a", "3c", "4d", "5e", "9c", "bc", "cc", "dc"]
    netdev = f"enp{int(nic_pci[nic], 16)}s0np0"
    t0 = datetime(2026, 6, 3, 0, 52, 40, 210000)
    t_down = datetime(2026, 6, 3, 3, 12, 44, 118874)
    app = "/mnt/home/svc-train/recsys-dlrm"
    rk = {(r.host, r.local): r for r in c.ranks}
    for r in c.ranks:
        rp = f"{r.host}/rank-{r.rank:02d}.log"
        np_ = f"nccl/nccl-{r.host}.{r.pid}.log"
        ti = t0 + sec(8 + rng.random())
        tree.add(rp, ti, f"{iso_ms(ti)} INFO {app}/dlrm_train.py rank={r.rank} local_rank={r.local} "
                         "NCCL_DEBUG_FILE=/mnt/logs/nccl/nccl-%h.%p.log NCCL_IB_GID_INDEX=3")
        tree.block(np_, ti + sec(0.4), nccl_init(c, r, "2.19.3", cuda="12.3", channels=16,
                                                 env=["NCCL_IB_GID_INDEX set by environment to 3",
                                                      "NCCL_SOCKET_IFNAME set by environment to ens1f0np0"]), 0.003)
        tree.block(rp, ti + sec(12), warn(TYPED_STORAGE, tv))
        tt = ti + sec(30)
        while tt < t_down - sec(60):
            tt += sec(300 + rng.uniform(-2, 2))
            if r.rank == 0 or r.local == 0:
                tree.add(rp, tt, f"{iso_ms(tt)} INFO rank={r.rank} heartbeat: step={int((tt - t0).total_seconds() / 0.41)}"
                                 f" samples/s={rng.randint(181000, 186000)} emb_a2a_ms={rng.uniform(11, 14):.1f}")
    boots = {h: datetime(2026, 5, 19, 2, 40, 0) + timedelta(minutes=rng.randint(0, 3000)) for h in hosts}
    for h in hosts:
        k = KernelLog(tree, f"kernel/{h}-kern.log", h, boots[h], "syslog")
        serial = rng.randint(900, 1500)
        for dt in sorted(rng.uniform(-7200, 3 * 3600) for _ in range(3)):
            serial += rng.randint(40, 400)
            k.at(t0 + sec(dt), f"audit: type=1400 audit({int(calendar.timegm((t0 + sec(dt)).timetuple()))}.{rng.randint(100, 999)}:"
                               f"{serial}): apparmor=\"DENIED\" operation=\"open\" class=\"file\" "
                               f"profile=\"snap.lxd.activate\" name=\"/proc/{rng.randint(1000, 9000)}/mountinfo\" "
                               f"pid={rng.randint(1000, 9000)} comm=\"snap-exec\" requested_mask=\"r\" denied_mask=\"r\" "
                               "fsuid=0 ouid=0")
        k.at(t0 - sec(40), "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further "
                           "processing")
    kb = KernelLog(tree, f"kernel/{bad_host}-kern.log", bad_host, boots[bad_host], "syslog")
    kb.at(t_down, f"mlx5_core 0000:{nic_pci[nic]}:00.0 {netdev}: Link down")
    kb.at(t_down + sec(0.0006), f"mlx5_core 0000:{nic_pci[nic]}:00.0: port_module:1151:(pid 0): Port module event"
                                f"[error]: module 0, Cable error, Bad or shorted cable/module")
    kb.at(t_down + sec(74.1), f"mlx5_core 0000:{nic_pci[nic]}:00.0 {netdev}: Link up",
          f"IPv6: ADDRCONF(NETDEV_CHANGE): {netdev}: link becomes ready")
    kb.at(t_down + sec(79.6), f"mlx5_core 0000:{nic_pci[nic]}:00.0 {netdev}: Link down")
    # NCCL: the port error on the node itself, retry-exceeded completions on the peers that talk through that NIC
    victim = rk[(bad_host, nic)]
    gid = lambda h: f"::ffff:10.44.{10 + nic}.{h[-2:]}"  # noqa: E731

    def ib_err(r: Rank, peer: str, t: datetime, kind: str) -> None:
        port = rng.randint(32768, 60999)
        warn_txt = (f"NET/IB : Got completion from peer {c.ips[peer]}<{port}> with status=12 opcode=0 len=0 vendor err "
                    f"129 ({kind}) localGid {gid(r.host)} remoteGid {gid(peer)}")
        np_ = f"nccl/nccl-{r.host}.{r.pid}.log"
        tree.add(np_, t, "", c.nccl(r, warn_txt, tid=r.tid + 41, level="WARN", where="transport/net_ib.cc:1295"))
        tree.add(np_, t + sec(0.0002), c.nccl(r, "transport/net.cc:1178 -> 6", tid=r.tid + 41),
                 c.nccl(r, "proxy.cc:1530 -> 6", tid=r.tid + 41),
                 c.nccl(r, "proxy.cc:1571 -> 6", tid=r.tid + 41))
        tr = t + sec(rng.uniform(0.3, 1.1))
        for tt, line in nccl_error_abort(tv, rng, r, tr, "NCCL error: remote process exited or there was a network "
                                         "error, NCCL version 2.19.3",
                                         ["ncclRemoteError: A call failed possibly due to a network error or a remote "
                                          "process exiting prematurely.", "Last error:", warn_txt]):
            tree.add(f"{r.host}/rank-{r.rank:02d}.log", tt, line)

    tree.add(f"nccl/nccl-{victim.host}.{victim.pid}.log", t_down + sec(0.0021), "",
             c.nccl(victim, "NET/IB : Got async event : port error", tid=victim.tid + 7, level="WARN",
                    where="transport/net_ib.cc:99"))
    ib_err(rk[("trn-h100-042", nic)], bad_host, t_down + sec(7.52), "Send")
    ib_err(rk[("trn-h100-041", nic)], bad_host, t_down + sec(7.61), "Send")
    ib_err(victim, "trn-h100-044", t_down + sec(7.58), "Send")
    failed = {h: [rk[(h, nic)]] for h in ["trn-h100-041", "trn-h100-042", bad_host]}
    for h in hosts:
        lp = f"{h}/torchrun.log"
        tree.add(lp, t0, elastic(tv, t0, "WARNING", "torch.distributed.run", "*" * 41, c.agent_pid[h]),
                 elastic(tv, t0, "WARNING", "torch.distributed.run", "Setting OMP_NUM_THREADS environment variable for "
                         "each process to be 1 in default, to avoid your system being overloaded, please further tune "
                         "the variable for optimal performance in your application as needed. ", c.agent_pid[h]),
                 elastic(tv, t0, "WARNING", "torch.distributed.run", "*" * 41, c.agent_pid[h]))
        if h in failed:
            v = failed[h][0]
            td = t_down + sec(7.6 + rng.uniform(1.5, 4.9))
            agent_teardown(tree, lp, tv, h, c.agent_pid[h], td, [(td - sec(0.8), v.rank, v.local, -6, v.pid)],
                           [r.pid for r in c.on(h) if r is not v], "dlrm_train.py")
        else:
            fails = []
            for r in c.on(h):
                t_r = t_down + sec(600.4 + rng.uniform(0.05, 0.9))
                for tt, line in watchdog_timeout(tv, rng, r, t_r, 2118392, "ALLTOALL_BASE", 50331648, 600000):
                    tree.add(f"{h}/rank-{r.rank:02d}.log", tt, line)
                fails.append((t_r + sec(0.01), r.rank, r.local, -6, r.pid))
            agent_teardown(tree, lp, tv, h, c.agent_pid[h], max(fails)[0] + sec(2.2), fails, [], "dlrm_train.py")
    tree.collected = t_down + sec(1800)
    tree.expected = expected(
        f"RoCE port mlx5_4 ({netdev}) of trn-h100-043 went down (bad cable, kern.log); the ranks talking through it "
        "got NCCL 'Got completion from peer 10.44.0.43 ... status=12', trn-h100-044 timed out 10 minutes later",
        "hardware", "ib_link_down", "restart_excluding_nodes", nodes=[bad_host],
        first=f"kernel/{bad_host}-kern.log",
        not_subtypes=["collective_timeout", "nccl_aborted", "peer_lost", "nccl_ib_completion_error"],
        notes="Trap: the NCCL errors are printed on trn-h100-041/042 (victims) and name the culprit only by its\n"
              "OOB IP 10.44.0.43 (NET/IB ... OOB ens1f0np0:10.44.0.43 in nccl/); NCCL_DEBUG_FILE per process;\n"
              "NCCL WARN lines carry `file.cc:line` before `NCCL WARN` and follow a blank line.")
    return tree


# ==================================================================================================
# 7. CUDA OOM on one of 16 ranks launched directly by `srun --label`
# ==================================================================================================

@scenario("cuda-oom-one-of-16-srun-label")
def cuda_oom_srun() -> Tree:
    name = "cuda-oom-one-of-16-srun-label"
    rng = random.Random(name)
    tree = Tree(name)
    hosts = ["gpu-a07", "gpu-a08"]
    c = Cluster(rng, hosts, 8, H100_BUS, {"gpu-a07": "10.2.0.107", "gpu-a08": "10.2.0.108"}, "ibp26s0",
                ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"])
    tv = Torch("2.2.2", site="/scratch/ml/envs/vlm/lib/python3.11/site-packages", python="python")
    job = 88412
    out = f"slurm-{job}.out"
    culprit = c.ranks[6]
    t0 = datetime(2026, 6, 17, 19, 4, 51, 902000)
    t_oom = datetime(2026, 6, 17, 20, 27, 38, 412000)
    app = "/scratch/ml/vlm-train"

    def lab(r: Rank, line: str) -> str:
        return f"{r.rank:2d}: {line}"

    tree.add(out, t0, "+ srun --label --ntasks-per-node=8 --gpus-per-node=8 --cpus-per-task=12 python -u "
             f"{app}/train.py --config configs/vlm_13b_stage2.yaml")
    for r in c.ranks:
        ti = t0 + sec(6 + rng.random() * 2)
        tree.add(out, ti, lab(r, f"[{iso_s(ti)}] rank {r.rank}/16 (SLURM_PROCID) local {r.local} on {r.host}"))
        tree.block(out, ti + sec(8 + rng.random()), [lab(r, x) for x in nccl_init(c, r, "2.19.3", cuda="12.3",
                                                                                   channels=16)], 0.001)
        tree.add(out, ti + sec(31), lab(r, f"{tv.site}/transformers/modeling_utils.py:1051: FutureWarning: The `device` "
                                           "argument is deprecated and will be removed in v5 of Transformers."),
                 lab(r, "  warnings.warn("))
    r0 = c.ranks[0]
    step, t = 2600, t0 + sec(95)
    tree.add(out, t, lab(r0, f"[{iso_s(t)}] resumed from /scratch/ml/ckpt/vlm13b-s2/step_2600, images per batch 256, "
                             "max_tiles 12"))
    while True:
        step += 20
        t += sec(20 * 3.52 + rng.uniform(-3, 3))
        if t > t_oom - sec(2):
            break
        tree.add(out, t, lab(r0, f"[{iso_s(t)}] step {step} | lm_loss {1.43 - step * 2e-5 + rng.uniform(-.04, .04):.4f}"
                                 f" | lr 1.0e-05 | {rng.uniform(3.4, 3.7):.2f}s/step | max_mem "
                                 f"{rng.uniform(69.5, 72.4):.1f}GiB"))
    tree.add(out, t_oom - sec(1.1), lab(culprit, f"[{iso_s(t_oom - sec(1.1))}] WARNING batch 3 on rank 6: 12 tiles x "
                                                 "48 images, 58114 visual tokens (max seen 31072)"))
    tb = py_traceback([
        (f"{app}/train.py", 517, "<module>", "main()"),
        (f"{app}/train.py", 488, "main", "loss = model(**batch).loss"),
        (f"{tv.site}/torch/nn/modules/module.py", 1511, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
        (f"{tv.site}/torch/nn/modules/module.py", 1520, "_call_impl", "return forward_call(*args, **kwargs)"),
        (f"{tv.site}/torch/nn/parallel/distributed.py", 1523, "forward", "else self._run_ddp_forward(*inputs, **kwargs)"),
        (f"{app}/model/vlm.py", 212, "forward", "img_emb = self.vision(pixel_values, tile_mask)"),
        (f"{app}/model/vision.py", 143, "forward",
         "attn = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)")],
        ["torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 11.39 GiB. GPU 6 has a total capacity of "
         "79.11 GiB of which 3.72 GiB is free. Including non-PyTorch memory, this process has 75.37 GiB memory in use. "
         "Of the allocated memory 69.83 GiB is allocated by PyTorch, and 4.61 GiB is reserved by PyTorch but "
         "unallocated. If reserved but unallocated memory is large try setting "
         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
         "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"])
    tree.block(out, t_oom, [lab(culprit, x) for x in tb])
    tree.add(out, t_oom + sec(2.9), "srun: error: gpu-a07: task 6: Exited with exit code 1")
    # the 15 others wait in the next all-reduce until the 10 min watchdog
    for r in c.ranks:
        if r is culprit:
            continue
        t_r = t_oom - sec(0.35) + sec(600 + rng.uniform(0.05, 0.9))
        for tt, line in watchdog_timeout(tv, rng, r, t_r, 31209, "ALLREDUCE", 83886080, 600000):
            tree.add(out, tt, lab(r, line))
    t_ab = t_oom + sec(601.7)
    tree.add(out, t_ab, "srun: error: gpu-a07: tasks 0-5,7: Aborted (core dumped)")
    tree.add(out, t_ab + sec(0.4), "srun: error: gpu-a08: tasks 8-15: Aborted (core dumped)")
    for h in hosts:
        boot = datetime(2026, 6, 2, 11, 30) + timedelta(minutes=rng.randint(0, 600))
        k = KernelLog(tree, f"dmesg-{h}.log", h, boot, "plain")
        k.since_boot(boot_lines(rng, "5.15.0-107-generic", "550.54.15", "Tue Mar  5 22:23:56 UTC 2024", H100_BUS,
                                ["1a", "3c", "4d", "5e", "9c", "bc", "cc", "dc"], ["ibp26s0", "ibp60s0"]))
        k.at(t_ab + sec(0.3), "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping "
                              "further processing")
        for r in c.on(h):
            if r is culprit:
                continue
            k.at(t_ab + sec(0.5 + r.local * 0.05),
                 f"audit: type=1701 audit({int(calendar.timegm(t_ab.timetuple()))}.{rng.randint(100, 999)}:"
                 f"{rng.randint(300, 900)}): auid=4294967295 uid=31337 gid=31337 ses=4294967295 subj=unconfined "
                 f"pid={r.pid} comm=\"python\" exe=\"/scratch/ml/envs/vlm/bin/python3.11\" sig=6 res=1")
    tree.collected = t_ab + sec(120)
    tree.expected = expected(
        "Rank 6 (gpu-a07) ran out of GPU memory on an oversized image batch; the 15 other srun tasks aborted on NCCL "
        "watchdog timeouts 10 minutes later (srun --label prefixes are global task ids)",
        "user_code", "cuda_oom", "stop_and_notify", nodes=[], ranks=[6], first=out,
        not_subtypes=["collective_timeout", "nccl_aborted"],
        notes="srun --label prefixes (` 6: `) are the global rank; the kernel's audit type=1701 lines (sig=6) are the\n"
              "collateral aborts, not a fault.")
    return tree


def signal_exception(tv: Torch, agent_pid: int, sig: int = 15) -> list[str]:
    """The traceback torchrun prints when it is itself signalled (scancel, preemption, node failure)."""
    site = tv.site
    return py_traceback([
        (tv.torchrun, 8, "<module>", "sys.exit(main())"),
        (f"{site}/torch/distributed/elastic/multiprocessing/errors/__init__.py", 355 if tv.new else 346, "wrapper",
         "return f(*args, **kwargs)"),
        (f"{site}/torch/distributed/run.py", 919 if tv.new else 806, "main", "run(args)"),
        (f"{site}/torch/distributed/run.py", 910 if tv.new else 797, "run", "elastic_launch("),
        (f"{site}/torch/distributed/launcher/api.py", 138 if tv.new else 134, "__call__",
         "return launch_agent(self._config, self._entrypoint, list(args))"),
        (f"{site}/torch/distributed/launcher/api.py", 260 if tv.new else 255, "launch_agent",
         "result = agent.run()"),
        (f"{site}/torch/distributed/elastic/metrics/api.py", 124 if tv.new else 123, "wrapper",
         "result = f(*args, **kwargs)"),
        (f"{site}/torch/distributed/elastic/agent/server/api.py", 696 if tv.new else 727, "run",
         "result = self._invoke_run(role)"),
        (f"{site}/torch/distributed/elastic/agent/server/api.py", 855 if tv.new else 868, "_invoke_run",
         "time.sleep(monitor_interval)"),
        (f"{site}/torch/distributed/elastic/multiprocessing/api.py", 84 if tv.new else 62,
         "_terminate_process_handler", "raise SignalException(f\"Process {os.getpid()} got signal: {sigval}\", "
                                       "sigval=sigval)")],
        [f"torch.distributed.elastic.multiprocessing.api.SignalException: Process {agent_pid} got signal: {sig}"])


def agent_sigterm(tree: Tree, path: str, tv: Torch, c: Cluster, host: str, t: datetime, prefix: str = "",
                  unkillable: int | None = None) -> datetime:
    """torchrun receiving SIGTERM from Slurm: stop the workers, then die with SignalException."""
    pid = c.agent_pid[host]
    tree.add(path, t, prefix + elastic(tv, t, "WARNING", "torch.distributed.elastic.agent.server.api",
                                       "Received Signals.SIGTERM death signal, shutting down workers", pid))
    for r in c.on(host):
        t += sec(0.0004)
        tree.add(path, t, prefix + elastic(tv, t, "WARNING", "torch.distributed.elastic.multiprocessing.api",
                                           f"Sending process {r.pid} closing signal SIGTERM", pid))
    if unkillable:
        t += sec(30.01)
        tree.add(path, t, prefix + elastic(tv, t, "WARNING", "torch.distributed.elastic.multiprocessing.api",
                                           f"Unable to shutdown process {unkillable} via Signals.SIGTERM, forcefully "
                                           "exiting via Signals.SIGKILL", pid))
    t += sec(0.9)
    tree.block(path, t, [prefix + x for x in signal_exception(tv, pid)])
    return t


def lightning_banner(world: int) -> list[str]:
    return ["-" * 100, "distributed_backend=nccl", f"All distributed processes registered. Starting with {world} processes",
            "-" * 100, ""]


# ==================================================================================================
# 8. Slurm declares a node dead (DUE TO NODE FAILURE); its ranks simply stop logging
# ==================================================================================================

@scenario("slurm-node-failure")
def slurm_node_failure() -> Tree:
    name = "slurm-node-failure"
    rng = random.Random(name)
    tree = Tree(name)
    hosts = [f"gpu-{i:03d}" for i in range(1, 5)]
    c = Cluster(rng, hosts, 8, H100_BUS, {h: f"192.168.50.{int(h[-3:])}" for h in hosts}, "ibp26s0",
                ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"])
    tv = Torch("2.2.2", site="/usr/local/lib/python3.10/dist-packages", python="/usr/bin/python")
    job, dead = 4242, "gpu-003"
    out = f"slurm-{job}.out"
    t0 = datetime(2026, 8, 2, 10, 52, 8, 14000)
    t_freeze = datetime(2026, 8, 2, 11, 45, 22, 903000)
    t_down = datetime(2026, 8, 2, 11, 47, 23, 502000)
    tree.add(out, t0, "+ srun --kill-on-bad-exit=1 --ntasks-per-node=1 torchrun --nnodes=4 --nproc-per-node=8 "
                      "--rdzv-backend=c10d --rdzv-endpoint=gpu-001:29500 --tee 3 train_lightning.py "
                      "trainer.num_nodes=4 model=diffusion_xl data=laion_aesthetic_6p")
    for h in hosts:
        t = t0 + sec(2.1 + rng.random())
        for m in ["", "*" * 41, "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, "
                  "to avoid your system being overloaded, please further tune the variable for optimal performance in "
                  "your application as needed. ", "*" * 41]:
            tree.add(out, t, elastic(tv, t, "WARNING", "torch.distributed.run", m, c.agent_pid[h]))
    for r in c.ranks:
        ti = t0 + sec(14 + rng.random() * 3)
        tree.add(out, ti, tee(tv, r, f"Initializing distributed: GLOBAL_RANK: {r.rank}, MEMBER: {r.rank + 1}/32"))
    r0 = c.ranks[0]
    tb = t0 + sec(19)
    tree.block(out, tb, [tee(tv, r0, x) for x in lightning_banner(32)])
    for r in c.ranks:
        ti = tb + sec(1 + rng.random())
        tree.block(out, ti, [tee(tv, r, x) for x in nccl_init(c, r, "2.19.3", cuda="12.3", channels=16)], 0.002)
        tree.add(out, ti + sec(2), tee(tv, r, f"LOCAL_RANK: {r.local} - CUDA_VISIBLE_DEVICES: [0,1,2,3,4,5,6,7]"))
    tt = tb + sec(9)
    tree.add(out, tt, tee(tv, r0, ""), tee(tv, r0, "  | Name  | Type            | Params"),
             tee(tv, r0, "------------------------------------------"),
             tee(tv, r0, "0 | model | DiffusionWrapper | 2.6 B "), tee(tv, r0, "1 | vae   | AutoencoderKL   | 83.7 M"),
             tee(tv, r0, "2 | cond  | FrozenCLIPEmbed | 817 M "),
             tee(tv, r0, "------------------------------------------"),
             tee(tv, r0, "2.6 B     Trainable params"), tee(tv, r0, "900 M     Non-trainable params"),
             tee(tv, r0, "3.5 B     Total params"), tee(tv, r0, "14,007.392Total estimated model params size (MB)"))
    tree.add(out, tt + sec(2), tee(tv, r0, f"{tv.site}/lightning/pytorch/trainer/connectors/data_connector.py:441: The "
                                           "'val_dataloader' does not have many workers which may be a bottleneck. "
                                           "Consider increasing the value of the `num_workers` argument` to "
                                           "`num_workers=15` in the `DataLoader` to improve performance."))
    # progress bar of rank 0: Lightning redraws it many times per line
    step, t, total = 1100, tt + sec(30), 5902
    while t < t_freeze - sec(20):
        seg = []
        for _ in range(4):
            step += 4
            t += sec(4 * 1.18 + rng.uniform(-0.1, 0.1))
            el = (t - tt).total_seconds()
            seg.append(tqdm_bar("Epoch 3", step, total, el + 1100 * 1.18, 1 / 1.18,
                                f"v_num=0, train_loss={0.118 + rng.uniform(-0.01, 0.01):.3f}"))
        tree.add(out, t, tee(tv, r0, "\r" + "\r".join(seg)))
        if step % 200 < 16:
            tree.add(out, t + sec(0.2), f"[{iso_ms(t + sec(0.2))}] gpu-monitor: 32/32 GPUs busy, mean util "
                                        f"{rng.randint(94, 99)}%, IB tx {rng.uniform(38, 41):.1f} GB/s")
    # gpu-003 freezes (hard lockup); its ranks stop writing mid-line; the rest block in the next all-reduce
    tree.add(out, t_freeze - sec(3.2), tee(tv, c.ranks[19], f"{tv.site}/torch/utils/checkpoint.py:464: UserWarning: "
                                                             "torch.utils.checkpoint: the use_reentrant parameter "
                                                             "should be passed explicitly."))
    # slurmctld notices after SlurmdTimeout (120 s) and kills the job
    td = t_down + sec(0.3)
    tree.add(out, td, f"srun: error: Node failure on {dead}")
    tree.add(out, td + sec(0.1), f"slurmstepd: error: *** JOB {job} ON gpu-001 CANCELLED AT {slurm_ts(t_down)} DUE TO "
                                 "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***")
    tree.add(out, td + sec(0.12), "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
    for h in hosts:
        if h == dead:
            continue
        tree.add(out, td + sec(0.15), f"slurmstepd: error: *** STEP {job}.0 ON {h} CANCELLED AT {slurm_ts(t_down)} DUE "
                                      "TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***")
        te = agent_sigterm(tree, out, tv, c, h, td + sec(0.3 + rng.random() * 0.2))
        tree.add(out, te + sec(0.8), f"srun: error: {h}: task {hosts.index(h)}: Exited with exit code 1")
    # the scheduler's own records (collected by the on-call engineer)
    t_nr = t_freeze + sec(31.2)
    tree.add("slurm/slurmctld.log", t0 - sec(3.1), f"[{slurm_ts(t0 - sec(3.1))}.118] sched: Allocate JobId={job} "
                                                   f"NodeList=gpu-[001-004] #CPUs=896 Partition=h100")
    tree.add("slurm/slurmctld.log", t_nr + sec(60), f"[{slurm_ts(t_nr + sec(60))}.004] error: Nodes {dead} not "
                                                    "responding")
    tree.add("slurm/slurmctld.log", t_down, f"[{slurm_ts(t_down)}.502] error: Nodes {dead} not responding, setting DOWN")
    tree.add("slurm/slurmctld.log", t_down + sec(0.001), f"[{slurm_ts(t_down)}.503] Killing JobId={job} on failed "
                                                         f"node {dead}")
    tree.add("slurm/slurmctld.log", t_down + sec(0.002), f"[{slurm_ts(t_down)}.503] Requeuing JobId={job}")
    tree.add("slurm/slurmctld.log", t_down + sec(34), f"[{slurm_ts(t_down + sec(34))}.911] _job_complete: JobId={job} "
                                                      "WTERMSIG 15")
    tree.raw[f"slurm/sacct-{job}.txt"] = (
        f"$ sacct -j {job} --format=JobID,JobName%16,State,ExitCode,Start,End,NodeList%16\n"
        "JobID                 JobName      State ExitCode               Start                 End         NodeList \n"
        "------------ ---------------- ---------- -------- ------------------- ------------------- ---------------- \n"
        f"{job}          sdxl-pretrain  NODE_FAIL      1:0 {slurm_ts(t0 - sec(3))} {slurm_ts(t_down)}    gpu-[001-004] \n"
        f"{job}.batch            batch  CANCELLED     0:15 {slurm_ts(t0 - sec(3))} {slurm_ts(t_down + sec(34))}          gpu-001 \n"
        f"{job}.extern          extern  COMPLETED      0:0 {slurm_ts(t0 - sec(3))} {slurm_ts(t_down + sec(34))}    gpu-[001-004] \n"
        f"{job}.0             torchrun CANCELLED+     0:15 {slurm_ts(t0)} {slurm_ts(t_down + sec(33))}    gpu-[001-004] \n")
    tree.raw[f"slurm/{dead}.scontrol.txt"] = (
        f"$ scontrol show node {dead}\n"
        f"NodeName={dead} Arch=x86_64 CoresPerSocket=56 \n"
        "   CPUAlloc=0 CPUEfctv=224 CPUTot=224 CPULoad=N/A\n"
        "   AvailableFeatures=h100,ib,nvme\n"
        "   ActiveFeatures=h100,ib,nvme\n"
        "   Gres=gpu:h100:8(S:0-1)\n"
        f"   NodeAddr={dead} NodeHostName={dead} Version=23.02.7\n"
        "   OS=Linux 5.15.0-107-generic #117-Ubuntu SMP Fri Apr 26 12:26:49 UTC 2024 \n"
        "   RealMemory=2063731 AllocMem=0 FreeMem=N/A Sockets=2 Boards=1\n"
        "   State=DOWN+NOT_RESPONDING ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A\n"
        "   Partitions=h100 \n"
        f"   BootTime=2026-07-21T06:12:40 SlurmdStartTime=2026-07-21T06:14:02\n"
        f"   LastBusyTime={slurm_ts(t_freeze)} ResumeAfterTime=None\n"
        "   CfgTRES=cpu=224,mem=2063731M,billing=224,gres/gpu=8\n"
        "   AllocTRES=\n"
        "   CapWatts=n/a\n"
        "   CurrentWatts=0 AveWatts=0\n"
        "   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s\n"
        f"   Reason=Not responding [slurm@{slurm_ts(t_down)}]\n")
    for h in hosts:
        if h == dead:
            continue
        boot = datetime(2026, 7, 21, 6, 10) + timedelta(minutes=rng.randint(0, 100))
        k = KernelLog(tree, f"dmesg/{h}.log", h, boot, "plain")
        k.since_boot(boot_lines(rng, "5.15.0-107-generic", "550.54.15", "Tue Mar  5 22:23:56 UTC 2024", H100_BUS,
                                ["1a", "3c", "4d", "5e", "9c", "bc", "cc", "dc"], ["ibp26s0"]))
        k.at(t_down + sec(2.2), "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping "
                                "further processing")
    tree.collected = t_down + sec(2400)
    tree.expected = expected(
        "gpu-003 stopped responding (hard hang, no logs); after SlurmdTimeout slurmctld set it DOWN and cancelled job "
        "4242 DUE TO NODE FAILURE; torchrun agents on the 3 live nodes were SIGTERMed",
        "infra", "scheduler_node_failure", "restart", nodes=[dead],
        not_subtypes=["launcher_teardown", "python_exception"],
        notes="Trap: every slurmstepd line names the live nodes (gpu-001/002/004), never the dead one; only\n"
              "`srun: error: Node failure on gpu-003`, slurmctld.log and scontrol name the culprit.")
    return tree


# ==================================================================================================
# 9. Preemption by a higher-priority job: SIGTERM, emergency checkpoint cut short, requeue
# ==================================================================================================

@scenario("slurm-preemption")
def slurm_preemption() -> Tree:
    name = "slurm-preemption"
    rng = random.Random(name)
    tree = Tree(name)
    hosts = ["node0412", "node0413"]
    c = Cluster(rng, hosts, 8, H100_BUS, {"node0412": "10.60.4.12", "node0413": "10.60.4.13"}, "ibp12s0",
                [f"mlx5_{i}" for i in range(8)])
    tv = Torch("2.5.1", site="/opt/venv/lib/python3.11/site-packages", python="/opt/venv/bin/python3",
               torchrun="/opt/venv/bin/torchrun")
    job = 90817
    out = f"slurm-{job}.out"
    t0 = datetime(2026, 7, 29, 19, 40, 2, 511000)
    t_pre = datetime(2026, 7, 29, 22, 3, 11, 0)
    tree.add(out, t0, f"Starting job {job} (requeue count 0) on node[0412-0413] at {iso_s(t0)}",
             "+ srun --ntasks-per-node=1 torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d "
             "--rdzv-endpoint=node0412:29500 --tee 3 pretrain.py --deepspeed ds_zero2_bf16.json --model mistral-7b")
    for h in hosts:
        t = t0 + sec(1.9 + rng.random())
        for m in ["", "*" * 41, "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, "
                  "to avoid your system being overloaded, please further tune the variable for optimal performance in "
                  "your application as needed. ", "*" * 41]:
            tree.add(out, t, elastic(tv, t, "WARNING", "torch.distributed.run", m, c.agent_pid[h]))
    for r in c.ranks:
        ti = t0 + sec(12 + rng.random() * 2)
        tree.add(out, ti, tee(tv, r, f"[{iso_ms(ti)}] [INFO] [comm.py:652:init_distributed] cdb=None"))
        if r.rank == 0:
            tree.add(out, ti, tee(tv, r, f"[{iso_ms(ti)}] [INFO] [comm.py:683:init_distributed] Initializing "
                                         "TorchBackend in DeepSpeed with backend nccl"))
        tree.block(out, ti + sec(2), [tee(tv, r, x) for x in nccl_init(c, r, "2.21.5", cuda="12.4", channels=16)], 0.002)
    r0 = c.ranks[0]
    t = t0 + sec(60)
    tree.add(out, t, tee(tv, r0, f"[{iso_ms(t)}] [INFO] [logging.py:128:log_dist] [Rank 0] DeepSpeed info: version="
                                 "0.15.4, git-hash=unknown, git-branch=unknown"),
             tee(tv, r0, f"[{iso_ms(t)}] [INFO] [logging.py:128:log_dist] [Rank 0] Creating BF16 optimizer"),
             tee(tv, r0, f"[{iso_ms(t)}] [INFO] [engine.py:3097:_load_checkpoint] rank: 0 loading checkpoint: "
                         "/fsx/ckpt/mistral7b-cpt/global_step11000/mp_rank_00_model_states.pt"))
    step = 11000
    while True:
        step += 10
        t += sec(10 * 1.402 + rng.uniform(-0.2, 0.2))
        if t > t_pre:
            break
        if step % 50 == 0:
            tree.add(out, t, tee(tv, r0, f"[{iso_ms(t)}] [INFO] [logging.py:128:log_dist] [Rank 0] step={step}, "
                                         f"skipped=0, lr=[{1.9e-4 * (1 - (step - 11000) / 60000):.7f}], mom=[(0.9, 0.95)]"),
                     tee(tv, r0, f"steps: {step} loss: {1.98 - step * 1e-6 + rng.uniform(-.03, .03):.4f} iter time "
                                 f"(s): {rng.uniform(1.39, 1.42):.3f} samples/sec: {rng.uniform(728, 734):.3f}"))
    # PreemptMode=REQUEUE, GraceTime=60: SIGTERM now, SIGKILL in 60 s
    tree.add(out, t_pre, f"slurmstepd: error: *** JOB {job} ON node0412 CANCELLED AT {slurm_ts(t_pre)} DUE TO "
                         "PREEMPTION ***")
    for h in hosts:
        tree.add(out, t_pre + sec(0.02), f"slurmstepd: error: *** STEP {job}.0 ON {h} CANCELLED AT {slurm_ts(t_pre)} "
                                         "DUE TO PREEMPTION ***")
    tree.add(out, t_pre + sec(0.03), "srun: Job step aborted: Waiting up to 62 seconds for job step to finish.")
    tp = t_pre + sec(0.21)
    tree.add(out, tp, tee(tv, r0, f"[{iso_ms(tp)}] [WARNING] [pretrain.py:88:_on_sigterm] SIGTERM received: "
                                  f"requesting emergency checkpoint at step {step - 9}"))
    tree.add(out, tp + sec(1.3), tee(tv, r0, f"[{iso_ms(tp + sec(1.3))}] [INFO] [logging.py:128:log_dist] [Rank 0] "
                                             f"[Torch] Checkpoint global_step{step - 9} is about to be saved!"))
    for h in hosts:
        stuck = c.on(h)[0].pid
        te = agent_sigterm(tree, out, tv, c, h, t_pre + sec(0.4 + rng.random() * 0.1), unkillable=stuck)
        tree.add(out, te + sec(0.6), f"srun: error: {h}: task {hosts.index(h)}: Exited with exit code 1")
    tree.raw[f"sacct-{job}.txt"] = (
        f"$ sacct -j {job} -D --format=JobID,JobName%14,Partition,State,ExitCode,Start,End,Elapsed\n"
        "JobID               JobName  Partition      State ExitCode               Start                 End    Elapsed \n"
        "------------ -------------- ---------- ---------- -------- ------------------- ------------------- ---------- \n"
        f"{job}        mistral7b-cpt   low-prio  PREEMPTED      0:0 {slurm_ts(t0 - sec(1))} {slurm_ts(t_pre)}   "
        f"{str(t_pre - t0 + sec(1)).split('.')[0].rjust(8, '0')} \n"
        f"{job}.batch          batch             CANCELLED     0:15 {slurm_ts(t0 - sec(1))} {slurm_ts(t_pre + sec(61))}   "
        f"{str(t_pre - t0 + sec(62)).split('.')[0].rjust(8, '0')} \n"
        f"{job}.0           torchrun             CANCELLED     0:15 {slurm_ts(t0)} {slurm_ts(t_pre + sec(61))}   "
        f"{str(t_pre - t0 + sec(61)).split('.')[0].rjust(8, '0')} \n"
        f"{job}             mistral7b-cpt   low-prio    PENDING      0:0             Unknown             Unknown   00:00:00 \n")
    tree.collected = t_pre + sec(600)
    tree.expected = expected(
        "Job 90817 (partition low-prio) was preempted: slurmstepd CANCELLED ... DUE TO PREEMPTION, torchrun got "
        "SIGTERM, the emergency checkpoint was cut off by SIGKILL; sacct shows PREEMPTED and the job requeued",
        "infra", "scheduler_preemption", "restart", nodes=[],
        not_subtypes=["launcher_teardown", "python_exception"],
        notes="DeepSpeed-style logs under torchrun 2.5 with `[rankN]:` tee prefixes; SignalException tracebacks\n"
              "must not be taken for the root cause.")
    return tree


# ==================================================================================================
# 10. Lustre client eviction during a distributed checkpoint save: EIO on the ranks of that node
# ==================================================================================================

@scenario("storage-lustre-eio-on-checkpoint")
def storage_lustre_eio() -> Tree:
    name = "storage-lustre-eio-on-checkpoint"
    rng = random.Random(name)
    tree = Tree(name)
    hosts = [f"gpu-b1{i}" for i in range(11, 15)]
    c = Cluster(rng, hosts, 8, H100_BUS, {h: f"10.70.1.{h[-3:]}" for h in hosts}, "ibp26s0",
                ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"])
    tv = Torch("2.2.2", site="/usr/local/lib/python3.10/dist-packages", python="/usr/bin/python")
    bad = "gpu-b113"
    t0 = datetime(2026, 8, 11, 13, 2, 9, 331000)
    t_lost = datetime(2026, 8, 11, 16, 42, 5, 118000)
    t_evict = datetime(2026, 8, 11, 16, 42, 31, 402000)
    ck = "/lustre/scratch/llm/ckpt/olmo-13b-r3"
    step_ck = 20000
    t_save = datetime(2026, 8, 11, 16, 41, 49, 77000)
    paths = {h: f"{h}/train.log" for h in hosts}
    for h in hosts:
        for m in ["*" * 41, "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to "
                  "avoid your system being overloaded, please further tune the variable for optimal performance in "
                  "your application as needed. ", "*" * 41]:
            tree.add(paths[h], t0, elastic(tv, t0, "WARNING", "torch.distributed.run", m, c.agent_pid[h]))
        for r in c.on(h):
            ti = t0 + sec(10 + rng.random())
            tree.block(paths[h], ti, [tee(tv, r, x) for x in nccl_init(c, r, "2.19.3", cuda="12.3", channels=16)], .002)
    r0 = c.ranks[0]
    t, step = t0 + sec(80), 17500
    while t < t_save:
        step += 25
        t += sec(25 * 4.61 + rng.uniform(-1, 1))
        if t >= t_save:
            break
        tree.add(paths[hosts[0]], t, tee(tv, r0, f"{iso_ms(t)} - olmo.train - INFO - [step={step}/120000] "
                                                 f"train/CrossEntropyLoss={2.41 - step * 1e-6 + rng.uniform(-.02, .02):.3f}"
                                                 f" train/Perplexity={rng.uniform(10.9, 11.4):.2f} "
                                                 f"throughput/device/tokens_per_second={rng.randint(2780, 2840)}"))
    tree.add(paths[hosts[0]], t_save, tee(tv, r0, f"{iso_ms(t_save)} - olmo.train - INFO - Saving sharded checkpoint "
                                                  f"for step {step_ck} to {ck}/step{step_ck}..."))
    kb = KernelLog(tree, f"{bad}/kern.log", bad, datetime(2026, 7, 15, 8, 11, 40), "syslog")
    osc = "scratch-OST0012-osc-ffff8b2c7e3a5000"
    kb.at(t0 - timedelta(hours=2, minutes=11), "Lustre: Mounted scratch-client")
    kb.at(t_lost, f"LustreError: 11-0: {osc}: operation ost_write to node 10.60.1.22@o2ib failed: rc = -107")
    kb.at(t_lost + sec(0.00013), f"Lustre: {osc}: Connection to scratch-OST0012 (at 10.60.1.22@o2ib) was lost; in "
                                 "progress operations using this service will wait for recovery to complete")
    kb.at(t_evict, f"LustreError: 167-0: {osc}: This client was evicted by scratch-OST0012; in progress operations "
                   "using this service will fail.")
    kb.at(t_evict + sec(0.0008), f"LustreError: 3311082:0:(ldlm_resource.c:1128:ldlm_resource_complain()) {osc}: "
                                 "namespace resource [0x2c0000401:0x1f3a2b:0x0].0x0 (ffff9c8d3e7b1e40) refcount nonzero "
                                 "(1) after lock cleanup; forcing cleanup.")
    kb.at(t_evict + sec(0.9), f"Lustre: {osc}: Connection restored to 10.60.1.22@o2ib (at 10.60.1.22@o2ib)")
    for h in hosts:
        if h != bad:
            KernelLog(tree, f"{h}/kern.log", h, datetime(2026, 7, 15, 8, 11, 40), "syslog").at(
                t0 - timedelta(hours=2, minutes=11, seconds=rng.randint(0, 9)), "Lustre: Mounted scratch-client")
    failing = [r for r in c.on(bad) if r.local in (2, 5)]
    site = tv.site
    # the coordinator gathers the failures and every rank raises CheckpointException
    t_ex = t_evict + sec(1.8)
    bad_ranks = [r.rank for r in failing]
    for r in c.ranks:
        tt = t_ex + sec(rng.random() * 0.05)
        tree.add(paths[r.host], tt - sec(0.001), tee(tv, r, f"{iso_ms(tt)} - olmo.util - CRITICAL - Uncaught "
                                                          f"CheckpointException: CheckpointException "
                                                          f"ranks:dict_keys({bad_ranks})"))
        tb = py_traceback([
            ("/opt/olmo/scripts/train.py", 344, "<module>", "main(cfg)"),
            ("/opt/olmo/scripts/train.py", 316, "main", "trainer.fit()"),
            ("/opt/olmo/olmo/train.py", 1172, "fit", "checkpoint_path, _ = self.save_checkpoint(checkpoint_type="
                                                     "CheckpointType.sharded)"),
            ("/opt/olmo/olmo/checkpoint.py", 582, "save_checkpoint", "dist_cp.save_state_dict("),
            (f"{site}/torch/distributed/checkpoint/state_dict_saver.py", 218, "save_state_dict",
             "return distW.all_reduce(\"write\", write_data, finish_checkpoint)"),
            (f"{site}/torch/distributed/checkpoint/utils.py", 220, "all_reduce", "raise result")],
            [f"torch.distributed.checkpoint.api.CheckpointException: CheckpointException ranks:dict_keys({bad_ranks})"]
            + sum([[f"Traceback: (RANK {b})", "Traceback (most recent call last):",
                    f'  File "{site}/torch/distributed/checkpoint/filesystem.py", line 284, in _write_files_from_queue',
                    "    os.fsync(stream.fileno())", "OSError: [Errno 5] Input/output error"] for b in bad_ranks], []))
        tree.block(paths[r.host], tt, [tee(tv, r, x) for x in tb])
    for h in hosts:
        fails = [(t_ex + sec(0.2 + rng.random() * 0.1), r.rank, r.local, 1, r.pid) for r in c.on(h)]
        agent_teardown(tree, paths[h], tv, h, c.agent_pid[h], t_ex + sec(2.6 + rng.random()), fails, [], "train.py")
    tree.collected = t_ex + sec(1200)
    tree.expected = expected(
        "gpu-b113's Lustre client lost scratch-OST0012 and was evicted while ranks 18 and 21 were writing their "
        "checkpoint shards; fsync returned EIO and torch.distributed.checkpoint failed the save on all ranks",
        "infra", "storage_io_error", "escalate", nodes=[bad], first=f"{bad}/kern.log",
        not_subtypes=["python_exception", "launcher_teardown"],
        notes="All 32 ranks print CheckpointException naming ranks 18 and 21; only gpu-b113's kern.log shows the\n"
              "eviction. `Connection restored` afterwards must not hide it.")
    return tree


# ==================================================================================================
# 11. Loss spike then NaN; the training loop aborts on every rank
# ==================================================================================================

@scenario("nan-loss-detected")
def nan_loss() -> Tree:
    name = "nan-loss-detected"
    rng = random.Random(name)
    tree = Tree(name)
    hosts = [f"h100-{i:02d}" for i in range(7, 11)]
    c = Cluster(rng, hosts, 8, H100_BUS, {h: f"10.33.2.{int(h[-2:])}" for h in hosts}, "eth0",
                [f"mlx5_{i}" for i in range(8)])
    tv = Torch("2.5.1", site="/opt/conda/lib/python3.11/site-packages", python="/opt/conda/bin/python3.11",
               torchrun="/opt/conda/bin/torchrun")
    t0 = datetime(2026, 8, 26, 6, 12, 30, 818000)
    t_nan = datetime(2026, 8, 26, 11, 2, 19, 604000)
    paths = {h: f"{h}/stdout.log" for h in hosts}
    cyan, green, yellow, blue, magenta, reset = "\x1b[36m", "\x1b[32m", "\x1b[33m", "\x1b[34m", "\x1b[35m", "\x1b[39m"

    def titan(t: datetime, level: str, msg: str) -> str:
        return f"[titan] {iso_ms(t)} - root - {level} - {msg}"

    for h in hosts:
        for m in ["", "*" * 41, "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, "
                  "to avoid your system being overloaded, please further tune the variable for optimal performance in "
                  "your application as needed. ", "*" * 41]:
            tree.add(paths[h], t0, elastic(tv, t0, "WARNING", "torch.distributed.run", m, c.agent_pid[h]))
        for r in c.on(h):
            ti = t0 + sec(7 + rng.random())
            tree.add(paths[h], ti, tee(tv, r, titan(ti, "INFO", "Starting job: Llama 3 8B training")))
            tree.block(paths[h], ti + sec(1), [tee(tv, r, x) for x in nccl_init(c, r, "2.21.5", cuda="12.4",
                                                                                channels=16)], 0.002)
    r0, p0 = c.ranks[0], paths[hosts[0]]
    tt = t0 + sec(20)
    for m in ["Building 1-D device mesh with ['dp_shard'], [32]", "Building tiktoken tokenizer locally from "
              "./assets/tokenizer/original/tokenizer.model", "Preparing c4 dataset from allenai/c4",
              f"{blue}Model llama3 8B {reset}{yellow}size: 8,030,261,248 total parameters{reset}",
              "Applied selective activation checkpointing to the model", "Applied FSDP to the model",
              f"{green}CUDA memory usage for model: 3.77GiB(4.77%){reset}",
              "Loading the checkpoint at step 46000.", f"{green}Finished loading the checkpoint in 21.84 seconds.{reset}",
              "Training starts at step 46001, with local batch size 2, global batch size 64, sequence length 8192, "
              "total steps 100000 (warmup 2000)"]:
        tree.add(p0, tt, tee(tv, r0, titan(tt, "INFO", m)))
        tt += sec(2.1)
    step, t = 46000, tt + sec(5)
    loss = 2.0312
    spikes = {48209: 3.8713, 48210: 41.2247}
    while True:
        step += 1
        t += sec(7.79 + rng.uniform(-0.05, 0.05))
        if step > 48210:
            break
        loss = spikes.get(step, max(1.6, loss - 0.00001 + rng.uniform(-0.02, 0.02)) if step < 48209 else loss)
        if step % 10 and step not in spikes and step < 48205:
            continue
        tree.add(p0, t, tee(tv, r0, titan(t, "INFO", f"{cyan}step: {step:5d}  {green}loss: {loss:7.4f}  {yellow}memory: "
                                                     f"{rng.uniform(61.1, 61.4):5.2f}GiB({rng.uniform(77.2, 77.6):.2f}%)  "
                                                     f"{blue}tps: {rng.randint(3380, 3440):,}  {magenta}mfu: "
                                                     f"{rng.uniform(40.7, 41.3):.2f}%{reset}")))
        if step % 500 == 0:
            tree.add(p0, t + sec(0.3), tee(tv, r0, titan(t + sec(0.3), "WARNING", "Dataset c4 is being re-looped")))
        if step in spikes:
            tree.add(p0, t + sec(0.01), tee(tv, r0, titan(t + sec(0.01), "WARNING", f"grad norm {'1.93e+02' if step == 48209 else 'inf'} "
                                                          f"exceeds clip 1.0 by {'193' if step == 48209 else 'inf'}x at step {step}")))
    # step 48211: the all-reduced loss is NaN on every rank; the loop raises on all of them
    for r in c.ranks:
        te = t_nan + sec(rng.uniform(0, 0.02))
        if r is r0:
            tree.add(p0, te - sec(0.001), tee(tv, r0, titan(te, "INFO", f"{cyan}step: 48211  {green}loss:     nan  "
                                                                         f"{yellow}memory: 61.30GiB(77.44%)  {blue}tps: 3,409  "
                                                                         f"{magenta}mfu: 40.98%{reset}")))
        tb = py_traceback([
            ("/workspace/torchtitan/train.py", 468, "<module>", "main(config)"),
            (f"{tv.site}/torch/distributed/elastic/multiprocessing/errors/__init__.py", 355, "wrapper",
             "return f(*args, **kwargs)"),
            ("/workspace/torchtitan/train.py", 391, "main", "raise RuntimeError("),
        ], ["RuntimeError: Loss is NaN at step 48211 (global avg over 32 ranks); refusing to continue. Last good "
            "checkpoint: step 48000"])
        tree.block(paths[r.host], te, [tee(tv, r, x) for x in tb])
    for h in hosts:
        fails = [(t_nan + sec(0.9 + rng.random() * 0.2), r.rank, r.local, 1, r.pid) for r in c.on(h)]
        agent_teardown(tree, paths[h], tv, h, c.agent_pid[h], t_nan + sec(1.3), fails, [], "train.py")
    tree.collected = t_nan + sec(900)
    tree.expected = expected(
        "Loss spiked (3.87, 41.2, grad norm inf) and became NaN at step 48211; the training loop raised 'Loss is NaN' "
        "on all 32 ranks; last good checkpoint is step 48000",
        "user_code", "nan_loss", "stop_and_notify", nodes=[],
        not_subtypes=["python_exception", "launcher_teardown"],
        notes="torchtitan-style output with ANSI colours; no culprit node or rank (every rank saw the same loss). "
              "The verdict stops for a human (the recipe diverges again if resumed unchanged); `diagnoser run "
              "--rollback-on-divergence` rolls back once instead.")
    return tree


# ==================================================================================================
# 12. DNS outage at start-up: torchrun cannot resolve the rendezvous endpoint
# ==================================================================================================

@scenario("rendezvous-dns-failure-at-startup")
def rendezvous_dns() -> Tree:
    name = "rendezvous-dns-failure-at-startup"
    rng = random.Random(name)
    tree = Tree(name)
    hosts = [f"gpu-r02-n0{i}" for i in range(1, 5)]
    c = Cluster(rng, hosts, 8, H100_BUS, {h: f"10.12.2.{h[-1]}" for h in hosts}, "bond0", ["mlx5_0"])
    tv = Torch("2.2.2", site="/usr/local/lib/python3.10/dist-packages", python="/usr/bin/python3")
    job = 61733
    fqdn = "gpu-r02-n01.cluster.internal"
    t0 = datetime(2026, 9, 9, 14, 2, 7, 330000)
    out = f"slurm-{job}.out"
    tree.add(out, t0 - sec(0.4), f"MASTER_ADDR={fqdn} MASTER_PORT=29400 NNODES=4 GPUS_PER_NODE=8",
             f"+ srun --ntasks-per-node=1 --output=logs/launcher/%N.log torchrun --nnodes=4 --nproc-per-node=8 "
             f"--rdzv-backend=c10d --rdzv-endpoint={fqdn}:29400 --rdzv-id={job} --max-restarts=0 "
             "finetune.py --config cfg/sft_llama70b_lora.yaml")
    mod_rdzv = "torch.distributed.elastic.rendezvous.dynamic_rendezvous"
    for h in hosts:
        lp = f"launcher/{h}.log"
        pid = c.agent_pid[h]
        t = t0 + sec(rng.uniform(0.1, 0.9))
        tree.block(lp, t - sec(1.2), [f"== prolog {h} job {job} =="] +
                   nvidia_smi(rng, t - sec(1.2), "550.90.07", "12.4", H100_BUS, "NVIDIA H100 80GB HBM3", 81559) +
                   [f"NCCL_SOCKET_IFNAME=bond0 NCCL_IB_HCA=mlx5 NCCL_DEBUG=WARN HOSTNAME={h}"])
        for m in ["", "*" * 41, "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, "
                  "to avoid your system being overloaded, please further tune the variable for optimal performance in "
                  "your application as needed. ", "*" * 41]:
            tree.add(lp, t, elastic(tv, t, "WARNING", "torch.distributed.run", m, pid))
        if h == "gpu-r02-n01":
            # the store host resolves itself through /etc/hosts and waits for the others
            tree.add(lp, t + sec(0.2), elastic(tv, t + sec(0.2), "INFO", mod_rdzv, f"The node '{h}_{pid}_0' attempts to "
                                                                                   f"join the next round of the rendezvous "
                                                                                   f"'{job}'.", pid))
            tj = t + sec(600.2)
            site = tv.site
            tree.block(lp, tj, py_traceback([
                (tv.torchrun, 8, "<module>", "sys.exit(main())"),
                (f"{site}/torch/distributed/elastic/multiprocessing/errors/__init__.py", 346, "wrapper",
                 "return f(*args, **kwargs)"),
                (f"{site}/torch/distributed/run.py", 806, "main", "run(args)"),
                (f"{site}/torch/distributed/run.py", 797, "run", "elastic_launch("),
                (f"{site}/torch/distributed/launcher/api.py", 134, "__call__",
                 "return launch_agent(self._config, self._entrypoint, list(args))"),
                (f"{site}/torch/distributed/launcher/api.py", 255, "launch_agent", "result = agent.run()"),
                (f"{site}/torch/distributed/elastic/metrics/api.py", 123, "wrapper", "result = f(*args, **kwargs)"),
                (f"{site}/torch/distributed/elastic/agent/server/api.py", 727, "run",
                 "result = self._invoke_run(role)"),
                (f"{site}/torch/distributed/elastic/agent/server/api.py", 862, "_invoke_run",
                 "self._initialize_workers(self._worker_group)"),
                (f"{site}/torch/distributed/elastic/metrics/api.py", 123, "wrapper", "result = f(*args, **kwargs)"),
                (f"{site}/torch/distributed/elastic/agent/server/api.py", 699, "_initialize_workers",
                 "self._rendezvous(worker_group)"),
                (f"{site}/torch/distributed/elastic/metrics/api.py", 123, "wrapper", "result = f(*args, **kwargs)"),
                (f"{site}/torch/distributed/elastic/agent/server/api.py", 542, "_rendezvous",
                 "store, group_rank, group_world_size = spec.rdzv_handler.next_rendezvous()"),
                (f"{site}/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", 1044, "next_rendezvous",
                 "self._op_executor.run(join_op, deadline)"),
                (f"{site}/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", 648, "run",
                 "raise RendezvousTimeoutError()")],
                ["torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"]))
            tree.add(out, tj + sec(0.6), f"srun: error: {h}: task 0: Exited with exit code 1")
            continue
        # the three other nodes cannot resolve the endpoint (systemd-resolved lost its upstream)
        for n in range(4):
            tw = t + sec(0.3 + n * 15.0)
            tree.add(lp, tw, f"[W socket.cpp:697] [c10d] The IPv6 network addresses of ({fqdn}, 29400) cannot be "
                             "retrieved (gai error: -3 - Temporary failure in name resolution).",
                     f"[W socket.cpp:697] [c10d] The IPv4 network addresses of ({fqdn}, 29400) cannot be retrieved "
                     "(gai error: -3 - Temporary failure in name resolution).")
        tf = t + sec(60.3)
        site = tv.site
        tree.block(lp, tf, py_traceback([
            (f"{site}/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", 155, "_create_tcp_store",
             "store = TCPStore("),
        ], [f"torch.distributed.DistNetworkError: The client socket has timed out after 60s while trying to connect to "
            f"({fqdn}, 29400).", "", "The above exception was the direct cause of the following exception:", ""]) +
            py_traceback([
                (tv.torchrun, 8, "<module>", "sys.exit(main())"),
                (f"{site}/torch/distributed/elastic/multiprocessing/errors/__init__.py", 346, "wrapper",
                 "return f(*args, **kwargs)"),
                (f"{site}/torch/distributed/run.py", 806, "main", "run(args)"),
                (f"{site}/torch/distributed/run.py", 797, "run", "elastic_launch("),
                (f"{site}/torch/distributed/launcher/api.py", 134, "__call__",
                 "return launch_agent(self._config, self._entrypoint, list(args))"),
                (f"{site}/torch/distributed/launcher/api.py", 235, "launch_agent",
                 "rdzv_handler=rdzv_registry.get_rendezvous_handler(rdzv_parameters),"),
                (f"{site}/torch/distributed/elastic/rendezvous/registry.py", 66, "get_rendezvous_handler",
                 "return handler_registry.create_handler(params)"),
                (f"{site}/torch/distributed/elastic/rendezvous/api.py", 263, "create_handler",
                 "handler = creator(params)"),
                (f"{site}/torch/distributed/elastic/rendezvous/registry.py", 36, "_create_c10d_handler",
                 "backend, store = create_backend(params)"),
                (f"{site}/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", 255, "create_backend",
                 "store = _create_tcp_store(params)"),
                (f"{site}/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", 179, "_create_tcp_store",
                 "raise RendezvousConnectionError(")],
                ["torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store "
                 "has failed. See inner exception for details."]))
        tree.add(out, tf + sec(0.4), f"srun: error: {h}: task {hosts.index(h)}: Exited with exit code 1")
        # what systemd-resolved said on that node (journalctl -u systemd-resolved)
        jr = f"journal/{h}.log"
        rp = rng.randint(900, 1400)
        tr = t0 - sec(rng.uniform(90, 200))
        tree.add(jr, tr, f"{syslog_ts(tr)} {h} systemd-resolved[{rp}]: Using degraded feature set UDP instead of "
                         "UDP+EDNS0 for DNS server 10.12.0.53.")
        tree.add(jr, tr + sec(9.8), f"{syslog_ts(tr + sec(9.8))} {h} systemd-resolved[{rp}]: Using degraded feature set "
                                    "TCP instead of UDP for DNS server 10.12.0.53.")
        for k in range(12):
            tk = t - sec(100) + sec(k * 13.0 + rng.random())
            tree.add(jr, tk, f"{syslog_ts(tk)} {h} systemd-resolved[{rp}]: Server returned error NXDOMAIN, mitigating "
                             "potential DNS violation DVE-2018-0001, retrying transaction with reduced feature level UDP.")
    tree.collected = t0 + sec(900)
    tree.expected = expected(
        f"At start-up 3 of the 4 nodes could not resolve the rendezvous endpoint {fqdn} (gai error -3, "
        "temporary failure in name resolution); their torchrun failed with RendezvousConnectionError and the store "
        "host timed out waiting (RendezvousTimeoutError); no worker ever started",
        "infra", "dns_resolution", "retry_after_backoff", nodes=[],
        not_subtypes=["python_exception", "rendezvous_failure"],
        notes="The RendezvousConnectionError/RendezvousTimeoutError are consequences of the name-resolution failure;\n"
              "no NCCL output exists because no rank was spawned.")
    return tree


# ==================================================================================================
# 13. An Xid 79 from days ago sits in dmesg -T; the job actually died of a CUDA OOM
# ==================================================================================================

@scenario("old-xid-history-then-cuda-oom")
def old_xid_history() -> Tree:
    name = "old-xid-history-then-cuda-oom"
    rng = random.Random(name)
    tree = Tree(name)
    hosts = ["gpu-c21", "gpu-c22"]
    c = Cluster(rng, hosts, 8, H100_BUS, {"gpu-c21": "10.5.3.21", "gpu-c22": "10.5.3.22"}, "ibp26s0",
                ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"])
    tv = Torch("2.2.2", site="/usr/local/lib/python3.10/dist-packages", python="/usr/bin/python")
    culprit = c.ranks[11]  # gpu-c22, local 3, bus 5d -- the very GPU of the old Xid
    t_old = datetime(2026, 9, 19, 3, 17, 42)
    t0 = datetime(2026, 9, 22, 9, 58, 12, 5000)
    t_oom = datetime(2026, 9, 22, 10, 36, 51, 730000)
    rp = {r.rank: f"ranks/{r.host}-rank{r.rank}.log" for r in c.ranks}
    for r in c.ranks:
        p = rp[r.rank]
        ti = t0 + sec(9 + rng.random())
        tree.block(p, ti, nccl_init(c, r, "2.19.3", cuda="12.3", channels=16), 0.002)
        tree.add(p, ti + sec(6), f"[INFO|trainer.py:2128] {iso_ms(ti + sec(6))} >> ***** Running training *****"
                 if r.rank == 0 else f"{tv.site}/transformers/training_args.py:1525: FutureWarning: "
                                     "`evaluation_strategy` is deprecated and will be removed in version 4.46 of 🤗 "
                                     "Transformers. Use `eval_strategy` instead")
        if r.rank != 0:
            tree.add(p, ti + sec(6), "  warnings.warn(")
    p0 = rp[0]
    tt = t0 + sec(16)
    for m in ["  Num examples = 1,204,331", "  Num Epochs = 2", "  Instantaneous batch size per device = 4",
              "  Total train batch size (w. parallel, distributed & accumulation) = 512", "  Gradient Accumulation steps = 8",
              "  Total optimization steps = 4,704", "  Number of trainable parameters = 13,015,864,320"]:
        tree.add(p0, tt, f"[INFO|trainer.py:2129] {iso_ms(tt)} >> {m}")
    step, t = 0, tt + sec(5)
    while True:
        seg = []
        for _ in range(5):
            step += 1
            t += sec(10.9 + rng.uniform(-0.3, 0.3))
            seg.append(tqdm_bar("", step, 4704, (t - tt).total_seconds(), 1 / 10.9).lstrip(": ").rjust(0))
        if t > t_oom - sec(3):
            break
        line = "\r" + "\r".join(" " + x for x in seg)
        if step % 10 == 0:
            line += (f"{{'loss': {1.62 - step * 0.001 + rng.uniform(-.03, .03):.4f}, 'grad_norm': "
                     f"{rng.uniform(0.3, 0.6):.3f}, 'learning_rate': {2e-5 * min(1, step / 100):.4e}, "
                     f"'epoch': {step / 2352:.2f}}}")
        tree.add(p0, t, line)
    pc = rp[culprit.rank]
    tree.block(pc, t_oom, py_traceback([
        ("/home/ft/sft/run_sft.py", 233, "<module>", "main()"),
        ("/home/ft/sft/run_sft.py", 219, "main", "train_result = trainer.train(resume_from_checkpoint=ckpt)"),
        (f"{tv.site}/transformers/trainer.py", 1938, "train", "return inner_training_loop("),
        (f"{tv.site}/transformers/trainer.py", 2279, "_inner_training_loop",
         "tr_loss_step = self.training_step(model, inputs)"),
        (f"{tv.site}/transformers/trainer.py", 3349, "training_step",
         "self.accelerator.backward(loss, **kwargs)"),
        (f"{tv.site}/accelerate/accelerator.py", 2159, "backward", "loss.backward(**kwargs)"),
        (f"{tv.site}/torch/_tensor.py", 522, "backward", "torch.autograd.backward("),
        (f"{tv.site}/torch/autograd/__init__.py", 266, "backward",
         "Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass")],
        ["torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.83 GiB. GPU 3 has a total capacity of "
         "79.11 GiB of which 5.21 GiB is free. Including non-PyTorch memory, this process has 73.88 GiB memory in use. "
         "Of the allocated memory 66.42 GiB is allocated by PyTorch, and 6.77 GiB is reserved by PyTorch but "
         "unallocated. If reserved but unallocated memory is large try setting "
         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
         "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"]))
    for h in hosts:
        lp = f"launcher/{h}.log"
        for m in ["*" * 41, "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to "
                  "avoid your system being overloaded, please further tune the variable for optimal performance in "
                  "your application as needed. ", "*" * 41]:
            tree.add(lp, t0, elastic(tv, t0, "WARNING", "torch.distributed.run", m, c.agent_pid[h]))
        if h == culprit.host:
            others = [r for r in c.on(h) if r is not culprit]
            agent_teardown(tree, lp, tv, h, c.agent_pid[h], t_oom + sec(4.1),
                           [(t_oom + sec(0.3), culprit.rank, culprit.local, 1, culprit.pid)],
                           [r.pid for r in others], "run_sft.py")
        else:
            fails = []
            for r in c.on(h):
                t_r = t_oom - sec(0.6) + sec(600 + rng.uniform(0.05, 0.9))
                for tt2, line in watchdog_timeout(tv, rng, r, t_r, 18231, "ALLREDUCE", 131072000, 600000):
                    tree.add(rp[r.rank], tt2, line)
                fails.append((t_r + sec(0.01), r.rank, r.local, -6, r.pid))
            agent_teardown(tree, lp, tv, h, c.agent_pid[h], max(fails)[0] + sec(2.9), fails, [], "run_sft.py")
    boots = {"gpu-c21": datetime(2026, 9, 2, 22, 41, 7), "gpu-c22": datetime(2026, 9, 2, 22, 43, 55)}
    bad = culprit.pci
    for h in hosts:
        k = KernelLog(tree, f"dmesg/{h}.txt", h, boots[h], "T")
        k.since_boot(boot_lines(rng, "5.15.0-112-generic", "550.90.07", "Fri May 31 09:35:42 UTC 2024", H100_BUS,
                                ["1a", "3c", "4d", "5e", "9c", "bc", "cc", "dc"], ["ibp26s0", "ibp60s0", "ibp77s0"]))
        k.at(t0 - sec(28), "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further "
                           "processing")
        if h == "gpu-c22":
            k.at(t_old, f"NVRM: GPU at PCI:{bad}: GPU-a41c09e2-7d55-3b18-90f2-c6e8b1d4f720",
                 "NVRM: GPU Board Serial Number: 1654223008177",
                 f"NVRM: Xid (PCI:{bad}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
                 f"NVRM: GPU {bad}.0: GPU has fallen off the bus.",
                 "NVRM: A GPU crash dump has been created. If possible, please run",
                 "NVRM: nvidia-bug-report.sh as root to collect this data before",
                 "NVRM: the NVIDIA kernel module is unloaded.")
            # the on-call engineer reset the GPU through PCI remove/rescan the next morning
            tr = t_old + timedelta(hours=6, minutes=41, seconds=12)
            k.at(tr, f"pci {bad}.0: Removing from iommu group 41",
                 f"pci {bad}.0: [10de:2330] type 00 class 0x030200", f"pci {bad}.0: reg 0x10: [mem 0xa8000000-0xa8ffffff 64bit pref]",
                 f"pci {bad}.0: Adding to iommu group 41", f"nvidia {bad}.0: enabling device (0000 -> 0002)",
                 f"NVRM: GPU at PCI:{bad}: GPU-a41c09e2-7d55-3b18-90f2-c6e8b1d4f720")
    tree.collected = t_oom + sec(1800)
    tree.expected = expected(
        "gpu-c22's dmesg -T still holds an Xid 79 on 0000:5d:00 from 2026-09-19 (3 days before the job, GPU reset "
        "since); the job died of a CUDA OOM on rank 11 (same GPU) and gpu-c21's ranks timed out afterwards",
        "user_code", "cuda_oom", "stop_and_notify", nodes=[], ranks=[11],
        first=rp[culprit.rank], not_subtypes=["gpu_xid_79", "gpu_fell_off_bus", "collective_timeout"],
        notes="Trap: the old Xid names the culprit rank's GPU; it is 3 days older than the job's first log line\n"
              "and must be treated as history. Rank files are named <host>-rank<N>.log in a flat directory.")
    return tree


# ==================================================================================================
# 14. Nothing failed: noise, then a user's scancel (SIGTERM teardown without a reason)
# ==================================================================================================

@scenario("clean-logs-no-failure-signature")
def clean_logs() -> Tree:
    name = "clean-logs-no-failure-signature"
    rng = random.Random(name)
    tree = Tree(name)
    hosts = ["node-b17", "node-b18"]
    c = Cluster(rng, hosts, 8, A100_BUS, {"node-b17": "10.81.17.17", "node-b18": "10.81.17.18"}, "ib0",
                ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"], affinity=list(A100_AFFINITY))
    tv = Torch("2.5.1", site="/home/jdoe/.venvs/mm/lib/python3.11/site-packages", python="/home/jdoe/.venvs/mm/bin/python",
               torchrun="/home/jdoe/.venvs/mm/bin/torchrun")
    job = 77310
    out = f"slurm-{job}.out"
    t0 = datetime(2026, 10, 6, 15, 12, 44, 9000)
    t_cancel = datetime(2026, 10, 6, 16, 40, 2, 0)
    tree.add(out, t0, "+ srun --ntasks-per-node=1 torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d "
                      "--rdzv-endpoint=node-b17:29500 --tee 3 train.py experiment=mm_projector_ablation_b")
    for h in hosts:
        t = t0 + sec(1.8 + rng.random())
        for m in ["", "*" * 41, "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, "
                  "to avoid your system being overloaded, please further tune the variable for optimal performance in "
                  "your application as needed. ", "*" * 41]:
            tree.add(out, t, elastic(tv, t, "WARNING", "torch.distributed.run", m, c.agent_pid[h]))

    def loguru(t: datetime, level: str, where: str, msg: str) -> str:
        col = {"INFO": "\x1b[1m", "WARNING": "\x1b[33m\x1b[1m", "DEBUG": "\x1b[34m\x1b[1m"}[level]
        return (f"\x1b[32m{t:%Y-%m-%d %H:%M:%S}.{t.microsecond // 1000:03d}\x1b[0m | {col}{level:<8}\x1b[0m | "
                f"\x1b[36m{where.split(':')[0]}\x1b[0m:\x1b[36m{where.split(':')[1]}\x1b[0m:\x1b[36m{where.split(':')[2]}"
                f"\x1b[0m - {col}{msg}\x1b[0m")

    for r in c.ranks:
        ti = t0 + sec(11 + rng.random() * 2)
        tree.block(out, ti, [tee(tv, r, x) for x in nccl_init(c, r, "2.21.5", cuda="12.4", channels=8)], 0.002)
        tree.add(out, ti + sec(4), tee(tv, r, f"{tv.site}/torch/utils/checkpoint.py:295: FutureWarning: "
                                              "`torch.cpu.amp.autocast(args...)` is deprecated. Please use "
                                              "`torch.amp.autocast('cpu', args...)` instead."),
                 tee(tv, r, "  with torch.enable_grad(), device_autocast_ctx, torch.cpu.amp.autocast(**ctx.cpu_autocast_kwargs):"
                            "  # type: ignore[attr-defined]"))
        tree.add(out, ti + sec(5), tee(tv, r, f"{tv.site}/transformers/tokenization_utils_base.py:1601: "
                                              "FutureWarning: `clean_up_tokenization_spaces` was not set. It will be "
                                              "set to `True` by default. This behavior will be depracted in "
                                              "transformers v4.45, and will be then set to `False` by default. For "
                                              "more details check this issue: "
                                              "https://github.com/huggingface/transformers/issues/31884"),
                 tee(tv, r, "  warnings.warn("))
    r0 = c.ranks[0]
    t = t0 + sec(40)
    tree.add(out, t, tee(tv, r0, loguru(t, "INFO", "train:setup:88", "Run mm_projector_ablation_b: vision=siglip-so400m, "
                                                                       "llm=qwen2-7b, projector=mlp2x_gelu, lr=1e-3")),
             tee(tv, r0, loguru(t, "WARNING", "data.mixture:load:141", "sampling weights do not sum to 1 (0.97); "
                                                                         "renormalising")))
    step = 0
    while t < t_cancel - sec(30):
        step += 50
        t += sec(50 * 1.93 + rng.uniform(-2, 2))
        tree.add(out, t, tee(tv, r0, loguru(t, "INFO", "train:run:212", f"step {step} | loss "
                                                                        f"{2.9 - step * 4e-4 + rng.uniform(-.05, .05):.4f}"
                                                                        f" | lr {1e-3 * min(1, step / 300):.2e} | "
                                                                        f"{rng.uniform(1.9, 1.96):.2f}s/it")))
        if step % 1000 == 0:
            tree.add(out, t + sec(1), tee(tv, r0, loguru(t + sec(1), "DEBUG", "train:evaluate:260",
                                                         f"eval step {step}: mmbench_dev acc "
                                                         f"{0.41 + step * 1e-5 + rng.uniform(-.01, .01):.3f}")))
    # scancel by the user: no reason given by Slurm
    tree.add(out, t_cancel, f"slurmstepd: error: *** JOB {job} ON node-b17 CANCELLED AT {slurm_ts(t_cancel)} ***")
    for h in hosts:
        tree.add(out, t_cancel + sec(0.01), f"slurmstepd: error: *** STEP {job}.0 ON {h} CANCELLED AT "
                                            f"{slurm_ts(t_cancel)} ***")
    tree.add(out, t_cancel + sec(0.02), "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
    for h in hosts:
        te = agent_sigterm(tree, out, tv, c, h, t_cancel + sec(0.3 + rng.random() * 0.2))
        tree.add(out, te + sec(0.4), f"srun: error: {h}: task {hosts.index(h)}: Exited with exit code 1")
    for h in hosts:
        boot = datetime(2026, 9, 30, 4, 0) + timedelta(minutes=rng.randint(0, 900))
        k = KernelLog(tree, f"kernel/journal-{h}.log", h, boot, "journal")
        k.at(t0 - sec(3), "IPv6: ADDRCONF(NETDEV_CHANGE): veth8c1a2f3: link becomes ready")
        k.at(t0 + timedelta(minutes=31, seconds=12), "pcieport 0000:c0:01.1: AER: Corrected error received: 0000:c1:00.0",
             "mlx5_core 0000:c1:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
             "mlx5_core 0000:c1:00.0:   device [15b3:101b] error status/mask=00000001/00000000",
             "mlx5_core 0000:c1:00.0:    [ 0] RxErr                  (First)")
        k.at(t_cancel + sec(1.4), "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping "
                                  "further processing")
    tree.collected = t_cancel + sec(300)
    tree.expected = expected(
        "No failure signature: 90 minutes of normal training (warnings, progress, corrected PCIe errors), then a "
        "scancel (CANCELLED without a reason) and torchrun's SIGTERM teardown; nothing names a fault",
        "unknown", "launcher_teardown", "escalate", nodes=[],
        not_subtypes=["python_exception", "pcie_aer_fatal", "scheduler_preemption", "scheduler_node_failure"],
        notes="Traps: SignalException tracebacks (a Python exception line), `ERROR detected invalid context`\n"
              "from nvidia-peermem, Corrected AER errors, loguru ANSI colours.")
    return tree


# ==================================================================================================
# 15. NFS server failover: the checkpoint directory handle went stale under rank 0
# ==================================================================================================

@scenario("nfs-stale-file-handle-on-save")
def nfs_stale() -> Tree:
    name = "nfs-stale-file-handle-on-save"
    rng = random.Random(name)
    tree = Tree(name)
    hosts = ["ws-gpu-31", "ws-gpu-32"]
    c = Cluster(rng, hosts, 8, A100_BUS, {"ws-gpu-31": "10.40.7.31", "ws-gpu-32": "10.40.7.32"}, "eno1",
                ["mlx5_0", "mlx5_1"], affinity=list(A100_AFFINITY))
    tv = Torch("2.1.2", site="/opt/conda/lib/python3.10/site-packages", python="/opt/conda/bin/python3",
               torchrun="/opt/conda/bin/torchrun")
    t0 = datetime(2026, 10, 14, 0, 48, 31, 220000)
    t_stale = datetime(2026, 10, 14, 2, 31, 7, 880000)
    paths = {h: f"{h}.out" for h in hosts}
    r0 = c.ranks[0]
    ck = "/mnt/nfs/ckpt/seg3d-run7"
    for h in hosts:
        tree.add(paths[h], t0 - sec(0.5), f"+ torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d "
                                          f"--rdzv_endpoint=ws-gpu-31:29400 --tee 3 train.py --cfg cfgs/unet3d_l.yaml "
                                          f"--out-dir {ck}")
        for m in ["", "*" * 41, "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, "
                  "to avoid your system being overloaded, please further tune the variable for optimal performance in "
                  "your application as needed. ", "*" * 41]:
            tree.add(paths[h], t0, elastic(tv, t0, "WARNING", "torch.distributed.run", m, c.agent_pid[h]))
        for r in c.on(h):
            ti = t0 + sec(6 + rng.random())
            tree.block(paths[h], ti, [tee(tv, r, x) for x in nccl_init(c, r, "2.18.6", cuda="12.1", channels=8)], .002)
    t = t0 + sec(30)
    epoch = 38
    while t < t_stale - sec(60):
        for it in range(0, 1201, 200):
            t += sec(200 * 0.94 + rng.uniform(-2, 2))
            tree.add(paths["ws-gpu-31"], t, tee(tv, r0, f"{iso_ms(t)} train INFO: Epoch: [{epoch}]  [{it:4d}/1204]  eta: "
                                                        f"0:{(1204 - it) * 94 // 6000:02d}:{rng.randint(10, 59):02d}  "
                                                        f"lr: 0.000{rng.randint(200, 240)}  loss: "
                                                        f"{0.31 + rng.uniform(-0.02, 0.02):.4f} (0.3127)  dice: "
                                                        f"{0.83 + rng.uniform(-0.01, 0.01):.4f}  time: 0.9412  data: "
                                                        f"0.0{rng.randint(21, 48)}  max mem: 61244"))
        t += sec(41)
        tree.add(paths["ws-gpu-31"], t, tee(tv, r0, f"{iso_ms(t)} train INFO: Epoch: [{epoch}] Total time: 0:18:52 "
                                                    f"(0.9404 s / it)"),
                 tee(tv, r0, f"{iso_ms(t)} train INFO: val dice {0.81 + epoch * 1e-3:.4f} (best "
                             f"{0.80 + epoch * 1e-3:.4f})"),
                 tee(tv, r0, f"{iso_ms(t)} train INFO: saved {ck}/epoch_{epoch:03d}/checkpoint.pth"))
        epoch += 1
    # the NFS HA pair failed over at 02:30:58; the new head exports a different fsid/fileid for the run dir
    k = KernelLog(tree, "kernel/ws-gpu-31.messages", "ws-gpu-31", datetime(2026, 9, 28, 9, 0), "journal")
    tree.add("kernel/ws-gpu-31.messages", t0 - sec(1201), f"{syslog_ts(t0 - sec(1201))} ws-gpu-31 systemd[1]: Started "
                                                          "Session 4012 of user svc-ws.")
    tree.add("kernel/ws-gpu-31.messages", t0 + sec(3000), f"{syslog_ts(t0 + sec(3000))} ws-gpu-31 systemd[1]: Starting "
                                                          "dnf makecache...")
    tree.add("kernel/ws-gpu-31.messages", t0 + sec(3002), f"{syslog_ts(t0 + sec(3002))} ws-gpu-31 dnf[2281734]: "
                                                          "Metadata cache created.")
    k.at(t_stale - sec(0.35), "NFS: server nfs-ckpt01 error: fileid changed",
         "fsid 0:56: expected fileid 0x2c40a1f, got 0x2c40e02")
    tree.add("kernel/ws-gpu-31.messages", t_stale + sec(52), f"{syslog_ts(t_stale + sec(52))} ws-gpu-31 "
                                                             "systemd[1]: Started Session 4013 of user svc-ws.")
    tb = py_traceback([
        ("/home/svc-ws/seg3d/train.py", 290, "<module>", "main()"),
        ("/home/svc-ws/seg3d/train.py", 271, "main", "save_checkpoint(model, optimizer, scaler, epoch, args.out_dir)"),
        ("/home/svc-ws/seg3d/utils/ckpt.py", 37, "save_checkpoint", "os.makedirs(ckpt_dir, exist_ok=True)"),
        ("/opt/conda/lib/python3.10/os.py", 225, "makedirs", "mkdir(name, mode)")],
        [f"OSError: [Errno 116] Stale file handle: '{ck}/epoch_{epoch:03d}'"])
    tree.add(paths["ws-gpu-31"], t_stale - sec(0.02), tee(tv, r0, f"{iso_ms(t_stale - sec(0.02))} train INFO: Epoch: "
                                                                 f"[{epoch}] Total time: 0:18:49 (0.9381 s / it)"))
    tree.block(paths["ws-gpu-31"], t_stale, [tee(tv, r0, x) for x in tb])
    others = [r for r in c.on("ws-gpu-31") if r is not r0]
    agent_teardown(tree, paths["ws-gpu-31"], tv, "ws-gpu-31", c.agent_pid["ws-gpu-31"], t_stale + sec(4.4),
                   [(t_stale + sec(4.4), 0, 0, 1, r0.pid)], [r.pid for r in others], "train.py")
    fails = []
    for r in c.on("ws-gpu-32"):
        t_r = t_stale - sec(0.3) + sec(1800 + rng.uniform(0.05, 0.9))
        for tt, line in watchdog_timeout(tv, rng, r, t_r, 185517, "ALLREDUCE", 1, 1800000):
            tree.add(paths["ws-gpu-32"], tt, tee(tv, r, line))
        fails.append((t_r + sec(0.02), r.rank, r.local, -6, r.pid))
    agent_teardown(tree, paths["ws-gpu-32"], tv, "ws-gpu-32", c.agent_pid["ws-gpu-32"], max(fails)[0] + sec(4.1), fails,
                   [], "train.py")
    tree.collected = t_stale + sec(2400)
    tree.expected = expected(
        "The checkpoint NFS server failed over; rank 0 on ws-gpu-31 got '[Errno 116] Stale file handle' creating the "
        "next epoch directory (kernel: NFS fileid changed); ws-gpu-32's ranks timed out in the barrier 30 min later",
        "infra", "storage_stale_handle", "retry_after_backoff", nodes=["ws-gpu-31"], ranks=[0],
        not_subtypes=["python_exception", "collective_timeout", "storage_io_error"],
        notes="RHEL-style /var/log/messages (journal short format, no uptime); torch 2.1 `[defaultN]:` prefixes.")
    return tree


# ==================================================================================================
# 16. NVLink fatal error (Xid 74, journalctl -k); CUDA errors on the ranks of that node
# ==================================================================================================

@scenario("xid74-nvlink-journalctl")
def xid74_nvlink() -> Tree:
    name = "xid74-nvlink-journalctl"
    rng = random.Random(name)
    tree = Tree(name)
    hosts = ["dgx-h100-b05", "dgx-h100-b06"]
    c = Cluster(rng, hosts, 8, H100_BUS, {"dgx-h100-b05": "10.16.5.5", "dgx-h100-b06": "10.16.5.6"}, "bond0",
                ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"])
    tv = Torch("2.2.2", site="/usr/local/lib/python3.10/dist-packages", python="/usr/bin/python")
    culprit = next(r for r in c.ranks if r.host == "dgx-h100-b06" and r.local == 4)
    t0 = datetime(2026, 10, 27, 12, 14, 2, 61000)
    t_x = datetime(2026, 10, 27, 14, 5, 31, 404000)
    app = "/workspace/nemo-run"
    for r in c.ranks:
        p = f"{r.host}/rank{r.rank:02d}.log"
        ti = t0 + sec(12 + rng.random())
        tree.add(p, ti, f"[NeMo I {ti:%Y-%m-%d %H:%M:%S} megatron_init:263] Rank {r.rank} has data parallel group : "
                        f"[{', '.join(str(x) for x in range(r.rank % 2, 16, 2))}]")
        tree.add(p, ti + sec(0.01), f"[NeMo I {ti:%Y-%m-%d %H:%M:%S} megatron_init:269] Rank {r.rank} has tensor model "
                                    f"parallel group: [{r.rank - r.rank % 2}, {r.rank - r.rank % 2 + 1}]")
        tree.block(p, ti + sec(1), nccl_init(c, r, "2.19.3", cuda="12.3", channels=32), 0.003)
        tree.block(p, ti + sec(8), warn(TYPED_STORAGE, tv))
        if r.rank in (0, 15):
            tt, step = ti + sec(90), 3000
            while tt < t_x - sec(60):
                step += 25
                tt += sec(25 * 5.02 + rng.uniform(-1, 1))
                tree.add(p, tt, f"Epoch 0: :  {100 * step / 80000:3.0f}%|          | {step}/80000 [{iso_s(tt)[11:]}, "
                                f"reduced_train_loss={1.72 - step * 1e-6 + rng.uniform(-.03, .03):.3f}, "
                                f"global_step={step}.0, consumed_samples={step * 512}.0, train_step_timing in s=5.02]")
    j = KernelLog(tree, "journal/dgx-h100-b06.log", "dgx-h100-b06", datetime(2026, 10, 19, 7, 0), "journal")
    j5 = KernelLog(tree, "journal/dgx-h100-b05.log", "dgx-h100-b05", datetime(2026, 10, 19, 7, 0), "journal")
    for kk in (j, j5):
        kk.at(t0 - sec(77), "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping "
                            "further processing")
        kk.at(t0 + sec(3601), "IPv6: ADDRCONF(NETDEV_CHANGE): veth71be0c2: link becomes ready")
    j.at(t_x, f"NVRM: Xid (PCI:{culprit.pci}): 74, pid={culprit.pid}, name=python, NVLink: fatal error detected on link "
              "11(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)")
    j.at(t_x + sec(0.0002), f"NVRM: Xid (PCI:{culprit.pci}): 74, pid={culprit.pid}, name=python, NVLink: fatal error "
                            "detected on link 12(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)")
    j.at(t_x + sec(0.41), f"NVRM: Xid (PCI:{culprit.pci}): 45, pid={culprit.pid}, name=python, Ch 00000008")
    # rank 12 (GPU 4) sees the NVLink error; its tensor-parallel peer 13 reads garbage -> illegal memory access
    p12 = f"{culprit.host}/rank{culprit.rank:02d}.log"
    tree.add(p12, t_x + sec(0.06), "", c.nccl(culprit, "Cuda failure 'an uncorrectable NVLink error was detected during "
                                                       "the execution'", tid=culprit.tid + 3, level="WARN",
                                              where="transport/p2p.cc:275"))
    for tt, line in nccl_error_abort(tv, rng, culprit, t_x + sec(0.3), "CUDA error: an uncorrectable NVLink error was "
                                     "detected during the execution", cuda_error_tail()[:3] + [""],
                                     where="c10_cuda_check_implementation"):
        tree.add(p12, tt, line)
    peer = c.ranks[13]
    p13 = f"{peer.host}/rank{peer.rank:02d}.log"
    tree.block(p13, t_x + sec(0.9), py_traceback([
        (f"{app}/examples/nlp/language_modeling/megatron_gpt_pretraining.py", 42, "main", "trainer.fit(model)"),
        (f"{tv.site}/megatron/core/tensor_parallel/mappings.py", 68, "_reduce",
         "torch.distributed.all_reduce(input_, group=get_tensor_model_parallel_group())")],
        ["RuntimeError: CUDA error: an illegal memory access was encountered"] + cuda_error_tail()))
    dead = {"dgx-h100-b06": [(t_x + sec(0.35), culprit.rank, culprit.local, -6, culprit.pid),
                             (t_x + sec(0.95), peer.rank, peer.local, 1, peer.pid)]}
    for h in hosts:
        lp = f"{h}/launcher.log"
        for m in ["*" * 41, "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to "
                  "avoid your system being overloaded, please further tune the variable for optimal performance in "
                  "your application as needed. ", "*" * 41]:
            tree.add(lp, t0, elastic(tv, t0, "WARNING", "torch.distributed.run", m, c.agent_pid[h]))
        if h in dead:
            agent_teardown(tree, lp, tv, h, c.agent_pid[h], t_x + sec(4.9), dead[h],
                           [r.pid for r in c.on(h) if r.rank not in (culprit.rank, peer.rank)], "megatron_gpt_pretraining.py")
        else:
            fails = []
            for r in c.on(h):
                t_r = t_x - sec(0.2) + sec(600 + rng.uniform(0.05, 0.9))
                for tt, line in watchdog_timeout(tv, rng, r, t_r, 66211, "_ALLGATHER_BASE", 10485760, 600000,
                                                 numel_out=167772160):
                    tree.add(f"{h}/rank{r.rank:02d}.log", tt, line)
                fails.append((t_r + sec(0.01), r.rank, r.local, -6, r.pid))
            agent_teardown(tree, lp, tv, h, c.agent_pid[h], max(fails)[0] + sec(3.3), fails, [],
                           "megatron_gpt_pretraining.py")
    tree.collected = t_x + sec(1500)
    tree.expected = expected(
        "NVLink fatal error (Xid 74, links 11/12) on GPU 0000:9a:00 of dgx-h100-b06 (journalctl -k): rank 12 failed "
        "with 'uncorrectable NVLink error', its TP peer rank 13 with 'illegal memory access'; dgx-h100-b05 timed out",
        "hardware", "gpu_xid_74_nvlink", "drain_and_restart", nodes=["dgx-h100-b06"], ranks=[culprit.rank],
        gpus=[culprit.pci], first="journal/dgx-h100-b06.log",
        not_subtypes=["cuda_illegal_memory_access", "gpu_xid_app_fault", "collective_timeout"],
        notes="Trap: 'an illegal memory access was encountered' usually means a user bug; here it is collateral of\n"
              "the NVLink failure on the same node. Xid 45 (channel teardown) follows the Xid 74.")
    return tree


# ==================================================================================================
# 17. Out-of-range label -> device-side assert (with an Xid 43 in dmesg that is NOT a hardware fault)
# ==================================================================================================

@scenario("device-side-assert-bad-labels")
def device_side_assert() -> Tree:
    name = "device-side-assert-bad-labels"
    rng = random.Random(name)
    tree = Tree(name)
    hosts = ["gx-d01", "gx-d02"]
    c = Cluster(rng, hosts, 8, A100_BUS, {"gx-d01": "10.77.0.1", "gx-d02": "10.77.0.2"}, "ib0",
                ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"], affinity=list(A100_AFFINITY))
    tv = Torch("2.2.2", site="/usr/local/lib/python3.10/dist-packages", python="/usr/bin/python")
    culprit = c.ranks[3]
    t0 = datetime(2026, 11, 5, 8, 30, 12, 400000)
    t_a = datetime(2026, 11, 5, 9, 12, 48, 106000)
    paths = {h: f"{h}/torchrun.log" for h in hosts}
    for h in hosts:
        for m in ["", "*" * 41, "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, "
                  "to avoid your system being overloaded, please further tune the variable for optimal performance in "
                  "your application as needed. ", "*" * 41]:
            tree.add(paths[h], t0, elastic(tv, t0, "WARNING", "torch.distributed.run", m, c.agent_pid[h]))
        for r in c.on(h):
            ti = t0 + sec(8 + rng.random())
            tree.block(paths[h], ti, [tee(tv, r, x) for x in nccl_init(c, r, "2.19.3", cuda="12.3", channels=8)], .002)
            tree.add(paths[h], ti + sec(3), tee(tv, r, f"{tv.site}/torchvision/transforms/v2/_deprecated.py:42: "
                                                       "UserWarning: The transform `ToTensor()` is deprecated and will be "
                                                       "removed in a future release. Instead, please use "
                                                       "`v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])`."
                                                       "Output is equivalent up to float precision."),
                     tee(tv, r, "  warnings.warn("))
    r0 = c.ranks[0]
    t = t0 + sec(40)
    tree.add(paths["gx-d01"], t, tee(tv, r0, f"[{iso_s(t)}] INFO datasets: train=inat21+inhouse-v3 (2,911,402 images, "
                                             "num_classes=1000 from classes.json), val=inat21-val"))
    it = 0
    while t < t_a - sec(20):
        it += 100
        t += sec(100 * 0.61 + rng.uniform(-1, 1))
        tree.add(paths["gx-d01"], t, tee(tv, r0, f"[{iso_s(t)}] INFO Train: 4 [{it:5d}/11372 ({100 * it / 11372:3.0f}%)]"
                                                 f"  Loss: {2.31 + rng.uniform(-.05, .05):.3f} ({2.33:.3f})  Time: 0.611s,"
                                                 f" 3351.23/s  LR: 1.183e-03  Data: 0.021 (0.024)"))
    pa = paths["gx-d01"]
    asserts = [tee(tv, culprit, f"../aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block:"
                                f" [0,0,0], thread: [{th},0,0] Assertion `t >= 0 && t < n_classes` failed.")
               for th in (11, 12, 57, 90)]
    tree.block(pa, t_a, asserts)
    tb = py_traceback([
        ("/srv/vision/train_cls.py", 402, "<module>", "main()"),
        ("/srv/vision/train_cls.py", 377, "main", "train_metrics = train_one_epoch("),
        ("/srv/vision/train_cls.py", 166, "train_one_epoch", "losses_m.update(loss.item(), inputs.size(0))")],
        ["RuntimeError: CUDA error: device-side assert triggered"] + cuda_error_tail())
    tree.block(pa, t_a + sec(0.02), [tee(tv, culprit, x) for x in tb])
    for tt, line in nccl_error_abort(tv, rng, culprit, t_a + sec(0.08), "CUDA error: device-side assert triggered",
                                     cuda_error_tail()[:3] + [""], where="c10_cuda_check_implementation"):
        tree.add(pa, tt, tee(tv, culprit, line))
    agent_teardown(tree, pa, tv, "gx-d01", c.agent_pid["gx-d01"], t_a + sec(4.2),
                   [(t_a + sec(0.1), culprit.rank, culprit.local, -6, culprit.pid)],
                   [r.pid for r in c.on("gx-d01") if r is not culprit], "train_cls.py")
    fails = []
    for r in c.on("gx-d02"):
        t_r = t_a - sec(0.5) + sec(600 + rng.uniform(0.05, 0.9))
        for tt, line in watchdog_timeout(tv, rng, r, t_r, 92204, "ALLREDUCE", 88213504, 600000):
            tree.add(paths["gx-d02"], tt, tee(tv, r, line))
        fails.append((t_r + sec(0.01), r.rank, r.local, -6, r.pid))
    agent_teardown(tree, paths["gx-d02"], tv, "gx-d02", c.agent_pid["gx-d02"], max(fails)[0] + sec(2.2), fails, [],
                   "train_cls.py")
    for h in hosts:
        k = KernelLog(tree, f"{h}/dmesg.log", h, datetime(2026, 10, 30, 18, 21, 5), "T")
        k.since_boot(boot_lines(rng, "5.15.0-125-generic", "550.127.05", "Tue Oct  8 04:08:04 UTC 2024", A100_BUS,
                                ["0c", "12", "4b", "54"], ["ib0", "ib1"]))
        k.at(t0 - sec(5), "IPv6: ADDRCONF(NETDEV_CHANGE): veth3f9e0a1: link becomes ready")
    KernelLog(tree, "gx-d01/dmesg.log", "gx-d01", datetime(2026, 10, 30, 18, 21, 5), "T").at(
        t_a + sec(0.2), f"NVRM: Xid (PCI:{culprit.pci}): 43, pid={culprit.pid}, name=python, Ch 00000010")
    tree.collected = t_a + sec(1500)
    tree.expected = expected(
        "A new data shard carried label 1000 for a 1000-class head: rank 3 hit the CUDA assert `t >= 0 && t < "
        "n_classes` (device-side assert triggered); the driver logged Xid 43 for the killed channel; gx-d02 timed out",
        "user_code", "device_side_assert", "stop_and_notify", nodes=[], ranks=[3],
        not_subtypes=["gpu_xid_79", "gpu_cuda_unknown_error", "python_exception", "collective_timeout"],
        notes="Trap: an Xid in dmesg (43: GPU stopped processing) that is the application's fault, not hardware.")
    return tree

def main(argv: list[str]) -> int:
    wanted = argv[1:]
    total = 0
    for name, fn in SCENARIOS.items():
        if wanted and not any(w in name for w in wanted):
            continue
        tree = fn()
        size = tree.write()
        total += size
        lines = sum(len(v) for v in tree.files.values()) + sum(t.count("\n") for t in tree.raw.values())
        print(f"{name:45s} {len(tree.files) + len(tree.raw):4d} files {lines:6d} lines {size / 1024:8.1f} KiB")
    print(f"{'total':45s} {total / 1024:.1f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
