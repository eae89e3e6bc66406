"""Process identity: signal a process (group) only when it is provably the one that was started.

A pid number is reused by the kernel once its process is gone, and a run directory's records
(`attempt-NNN/launcher.json`) are files anyone with write access can edit. So before the
controller signals anything it re-checks what it recorded when it started the process:

- the attempt's leader: pid, create time and session id (the local executor starts it as the
  leader of a new session, so pid == process group == session); only then is the whole group
  signalled with `killpg`;
- a descendant: pid and create time, and it must have been created after the leader (pid 1, the
  controller itself and its ancestors never qualify).

`pgid <= 1` is refused outright: `killpg(1, ...)` and `kill(-1, ...)` reach every process root can
signal. A pid that no longer matches its record (reused, or edited) is not signalled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psutil

CREATE_TIME_TOLERANCE_S = 0.01


@dataclass(frozen=True)
class Identity:
    """What identifies a started process beyond its pid number."""

    pid: int
    create_time: float
    sid: int | None = None

    @classmethod
    def of(cls, pid: int) -> Identity | None:
        """The identity of a live process now (None when it is gone)."""
        try:
            p = psutil.Process(pid)
            return cls(pid, p.create_time(), os.getsid(pid))
        except (psutil.Error, OSError):
            return None


def _protected() -> set[int]:
    """Pids never signalled: init, this process and its ancestors (and their groups)."""
    out = {0, 1, os.getpid(), os.getpgrp()}
    try:
        for p in psutil.Process().parents():
            out.add(p.pid)
    except psutil.Error:
        pass
    return out


def _live(pid: int, create_time: float) -> psutil.Process | str:
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - create_time) > CREATE_TIME_TOLERANCE_S:
            return f"pid {pid} now belongs to another process (created at a different time)"
        if p.status() == psutil.STATUS_ZOMBIE:
            return f"pid {pid} has exited"
        return p
    except psutil.NoSuchProcess:
        return f"pid {pid} has exited"
    except psutil.Error as exc:
        return f"pid {pid} cannot be inspected ({type(exc).__name__})"


def leader_mismatch(ident: Identity) -> str | None:
    """Why the process group led by `ident.pid` must not be signalled (None: it is ours)."""
    if ident.pid <= 1:
        return f"refused: process group {ident.pid} would reach every process"
    if ident.pid in _protected():
        return f"refused: process group {ident.pid} is the controller's own"
    if ident.sid is not None and ident.sid != ident.pid:
        return f"refused: the record names session {ident.sid}, not a session led by pid {ident.pid}"
    p = _live(ident.pid, ident.create_time)
    if isinstance(p, str):
        return p
    try:
        sid, pgid = os.getsid(ident.pid), os.getpgid(ident.pid)
    except OSError:
        return f"pid {ident.pid} has exited"
    if sid != ident.pid or pgid != ident.pid:
        return f"pid {ident.pid} no longer leads its session/group (session {sid}, group {pgid})"
    return None


def descendant_ok(pid: int, create_time: float, leader: Identity) -> psutil.Process | None:
    """The live descendant process recorded as (pid, create_time), or None if it is not provably it."""
    if pid <= 1 or pid in _protected() or create_time + CREATE_TIME_TOLERANCE_S < leader.create_time:
        return None
    p = _live(pid, create_time)
    return None if isinstance(p, str) else p


def signal_group(ident: Identity, sig: int) -> tuple[bool, str]:
    """`killpg(ident.pid, sig)` after checking the leader's identity: (sent, why not)."""
    why = leader_mismatch(ident)
    if why is not None:
        return False, why
    try:
        os.killpg(ident.pid, sig)
    except (ProcessLookupError, PermissionError) as exc:
        return False, f"killpg {ident.pid}: {exc}"
    return True, ""


def find_wrapper(wrapper: str, exit_file: Path) -> Identity | None:
    """The live session leader running `wrapper EXIT_FILE -- ...` for this attempt (how a controller
    finds its attempt again when `launcher.json` is missing or damaged): matched by the wrapper's
    path and the attempt's own exit file, resolved against the process's working directory."""
    want = exit_file.resolve()
    for p in psutil.process_iter(["pid", "cmdline"]):
        argv = p.info.get("cmdline") or []
        if len(argv) < 4 or argv[1] != wrapper or argv[3] != "--" or p.pid <= 1:
            continue
        try:
            if (Path(p.cwd()) / argv[2]).resolve() != want:
                continue
            ident = Identity(p.pid, p.create_time(), os.getsid(p.pid))
        except (psutil.Error, OSError):
            continue
        if leader_mismatch(ident) is None:
            return ident
    return None
