"""Drain nodes with a diagnoser reason, under a cluster-wide cap, and resume them (operators).

The reason names what was found and where to read about it: `diagnoser: <subtype> <incident>`
(e.g. `diagnoser: gpu_xid_79 job4242-a1`); Slurm appends `[user@time]`, which is how the cap
counts: nodes whose reason starts with `diagnoser:` and were drained within `window_s` count
against `max_nodes`, whichever job or controller drained them (the restart policy's own
`max_excluded_nodes` is per job; this guard is per cluster). A drain is all or nothing.

Idempotent: a node already drained by diagnoser is not drained again; a node drained by someone
else keeps that reason (it is out of service either way). Resume refuses nodes drained by someone
else unless forced, and does nothing for a node already in service.

Every drain and resume is appended to an operations log (JSON lines, `slurm-ops/v1`).

The cap holds under concurrency: a rack failure ends several jobs at once, and their hooks and
controllers drain at the same moment. Every drain takes an exclusive lock on one file that they all
share (`$DIAGNOSER_DRAIN_LOCK`, else `drain.lock` beside the operations log), reads the nodes'
state again under it, counts, drains, and only then releases it. Node names are expanded as
hostlists before they are counted (`gpu-[001-100]` is 100 nodes).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from diagnoser.hostlist import compress_hostlist
from diagnoser.slurm.commands import SlurmCLI, SlurmError
from diagnoser.slurm.records import NodeRecord

REASON_PREFIX = "diagnoser:"
OPS_SCHEMA = "slurm-ops/v1"
_VERDICT_IN_REASON = re.compile(r"\b(?:hardware|infra|user_code|unknown)/(?P<subtype>[\w.-]+)")


def drain_reason(subtype: str, incident: str) -> str:
    """`diagnoser: <subtype> <incident>` (Slurm keeps reasons short: at most ~120 characters)."""
    text = f"{REASON_PREFIX} {subtype or 'unknown'} {incident}".strip()
    return re.sub(r"\s+", " ", text)[:120]


def subtype_from(text: str) -> str:
    """The subtype named in a controller decision reason (`hardware/gpu_xid_79 -> ...`)."""
    m = _VERDICT_IN_REASON.search(text)
    return m.group("subtype") if m else "unknown"


def default_ops_log() -> Path:
    """$DIAGNOSER_SLURM_OPS_LOG, else the user's state dir (`.../diagnoser/slurm-ops.jsonl`)."""
    env = os.environ.get("DIAGNOSER_SLURM_OPS_LOG")
    if env:
        return Path(env)
    from platformdirs import user_state_path

    return user_state_path("diagnoser") / "slurm-ops.jsonl"


def log_op(path: Path | None, op: str, node: str, ok: bool, detail: str, **extra: object) -> None:
    """Append one operation (fsynced); a log that cannot be written never blocks the action."""
    if path is None:
        return
    record = {"schema": OPS_SCHEMA, "time": datetime.now(UTC).isoformat(), "op": op, "node": node, "ok": ok,
              "detail": detail, **extra}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
    except OSError:
        pass


@dataclass(frozen=True)
class DrainGuard:
    """At most `max_nodes` nodes drained by diagnoser within `window_s`, cluster-wide."""

    max_nodes: int = 2
    window_s: float = 3600.0
    lock: Path | None = None  # shared by every hook and controller (None: see `drain_lock_path`)
    lock_timeout_s: float = 60.0

    def recent(self, nodes: list[NodeRecord], now: datetime | None = None) -> list[NodeRecord]:
        cutoff = (now or datetime.now(UTC)) - timedelta(seconds=self.window_s)
        return [n for n in nodes if n.drained and n.reason.startswith(REASON_PREFIX)
                and (n.reason_time is None or n.reason_time >= cutoff)]


def drain_lock_path(ops_log: Path | None) -> Path:
    """$DIAGNOSER_DRAIN_LOCK, else `drain.lock` beside the operations log (or the default one)."""
    env = os.environ.get("DIAGNOSER_DRAIN_LOCK")
    if env:
        return Path(env)
    return (ops_log or default_ops_log()).with_name("drain.lock")


class DrainLockBusy(RuntimeError):
    """Another drain held the shared lock for longer than the timeout."""


@contextmanager
def drain_lock(path: Path, timeout_s: float) -> Iterator[None]:
    """An exclusive fcntl lock on `path`, waited for at most `timeout_s` (released by the kernel
    if the holder dies)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise DrainLockBusy(f"drain lock {path} busy for {timeout_s:g} s") from None
                time.sleep(0.02)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@dataclass
class DrainResult:
    ok: bool
    detail: str
    drained: list[str] = field(default_factory=list)  # drained now
    already: list[str] = field(default_factory=list)  # out of service before (idempotent)


def drain_nodes(cli: SlurmCLI, nodes: tuple[str, ...] | list[str], reason: str, guard: DrainGuard,
                ops_log: Path | None = None, now: datetime | None = None) -> DrainResult:
    """Drain `nodes` (hostlists expanded) with `reason` unless that breaks the cap (then none is
    drained). Serialised with every other drain through the shared lock; the count is read under it."""
    from diagnoser.act.targets import expand_nodes

    nodes = expand_nodes(nodes)
    if not nodes:
        return DrainResult(False, "no node to drain")
    if len(nodes) > guard.max_nodes:  # before asking anyone: the cap alone refuses it
        detail = f"drain cap: draining {len(nodes)} node(s) would exceed {guard.max_nodes}"
        log_op(ops_log, "drain", ",".join(nodes[:5]), False, detail, reason=reason)
        return DrainResult(False, detail)
    lock = guard.lock or drain_lock_path(ops_log)
    try:
        with drain_lock(lock, guard.lock_timeout_s):
            return _drain_locked(cli, nodes, reason, guard, ops_log, now)
    except (DrainLockBusy, OSError) as exc:
        return DrainResult(False, f"not drained: {exc}")


def _drain_locked(cli: SlurmCLI, nodes: list[str], reason: str, guard: DrainGuard, ops_log: Path | None,
                  now: datetime | None) -> DrainResult:
    try:
        everyone = cli.show_nodes()
    except SlurmError as exc:
        return DrainResult(False, str(exc))
    by_name = {n.name: n for n in everyone}
    unknown = [n for n in nodes if n not in by_name]
    if unknown:
        return DrainResult(False, f"unknown node(s) {unknown}")
    already = [n for n in nodes if by_name[n].drained]
    todo = [n for n in nodes if n not in already]
    recent = [n.name for n in guard.recent(everyone, now) if n.name not in nodes]
    if todo and len(recent) + len(todo) > guard.max_nodes:
        detail = (f"drain cap: {len(recent)} node(s) drained by diagnoser within {guard.window_s:.0f} s "
                  f"({compress_hostlist(recent) or 'none'}); draining {compress_hostlist(todo)} would exceed "
                  f"{guard.max_nodes}")
        for n in todo:
            log_op(ops_log, "drain", n, False, detail, reason=reason)
        return DrainResult(False, detail, [], already)
    done: list[str] = []
    for n in todo:
        try:
            cli.drain(n, reason)
        except SlurmError as exc:
            log_op(ops_log, "drain", n, False, str(exc), reason=reason)
            return DrainResult(False, f"drain {n}: {exc.message}", done, already)
        done.append(n)
        log_op(ops_log, "drain", n, True, "dry-run" if cli.dry_run else "drained", reason=reason)
    notes = [f"drained {done} ({reason!r})" if done else ""]
    for n in already:
        who = "diagnoser" if by_name[n].reason.startswith(REASON_PREFIX) else "someone else"
        notes.append(f"{n} already drained by {who} ({by_name[n].reason!r})")
    return DrainResult(True, "; ".join(x for x in notes if x), done, already)


def resume_node(cli: SlurmCLI, node: str, force: bool = False, ops_log: Path | None = None,
                by: str = "operator") -> tuple[bool, str]:
    """Return a node to service (`State=RESUME`): (changed, detail). Raises SlurmError if refused."""
    rec = cli.show_node(node)
    if rec is None:
        raise SlurmError(("scontrol", "show", "node", node), "unknown node")
    flags = rec.flags
    if not rec.drained and not flags & {"DOWN", "FAIL", "FAILING"}:
        return False, f"{node} is already in service ({rec.state})"
    if rec.reason and not rec.reason.startswith(REASON_PREFIX) and not force:
        raise SlurmError(("resume", node), f"drained by someone else ({rec.reason!r}, by {rec.reason_user or '?'}): "
                         "use --force to resume it anyway")
    cli.resume(node)
    log_op(ops_log, "resume", node, True, "dry-run" if cli.dry_run else f"resumed (was {rec.state}: {rec.reason})",
           by=by, previous_reason=rec.reason)
    return True, f"{node} resumed (was {rec.state}: {rec.reason or 'no reason'})"


def diagnoser_drained(cli: SlurmCLI) -> list[NodeRecord]:
    """Nodes currently drained by diagnoser (for `diagnoser nodes drained`)."""
    return [n for n in cli.show_nodes() if n.drained and n.reason.startswith(REASON_PREFIX)]
