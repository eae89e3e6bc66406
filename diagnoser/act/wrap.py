"""Runs one attempt's launch command and records how it ended: `wrap.py EXIT_FILE -- CMD...`.

Started by the local executor (as a script: stdlib only, fast) as the leader of the attempt's
process group. It records the command's exit status in EXIT_FILE (JSON `{"returncode": N,
"signals": [{"signal": "SIGTERM", "time": T}]}`, negative for a signal, like subprocess; `signals`
are those the process group received while the command ran, with their wall-clock time) so a
restarted controller that re-attaches to a job it did not start still learns how it ended, and the
triage learns whether a scheduler or an operator signalled the job before it failed.
SIGTERM/SIGINT/SIGHUP/SIGUSR1/SIGUSR2 sent to the group reach the command
directly; the wrapper only waits (its handlers are reset on exec, so the command sees defaults),
then exits the way the command did (same code, or the same signal).

The wrapper is the attempt's child subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`, Linux): a daemon the
job double-forks is re-parented to the wrapper, not to init, so it stays a descendant the
controller tracks and stops. When the command has exited, whatever it left behind (those daemons,
stray workers) gets SIGTERM, then SIGKILL after `LEFTOVER_GRACE_S`, and is reaped: nothing of an
attempt outlives it.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

CAUGHT = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
RECEIVED: list[dict] = []


def _note(signum: int, _frame: object) -> None:
    if len(RECEIVED) < 100:
        RECEIVED.append({"signal": signal.Signals(signum).name, "time": time.time()})


PR_SET_CHILD_SUBREAPER = 36
LEFTOVER_GRACE_S = 3.0


def _become_subreaper() -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children() -> list[int]:
    """This process's live children (from /proc; stdlib only)."""
    me = str(os.getpid())
    out = []
    try:
        with open(f"/proc/{me}/task/{me}/children") as fh:
            out = [int(x) for x in fh.read().split()]
    except OSError:
        pass
    return out


def _reap_leftovers() -> None:
    """SIGTERM what the command left behind, SIGKILL it after the grace, reap everything."""
    for sig, wait_s in ((signal.SIGTERM, LEFTOVER_GRACE_S), (signal.SIGKILL, 2.0)):
        kids = _children()
        if not kids:
            return
        for pid in kids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while _children() and time.monotonic() < deadline:
            try:
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            except ChildProcessError:
                return
            time.sleep(0.05)


def _record(path: str, returncode: int) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({"returncode": returncode, "signals": RECEIVED}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: wrap.py EXIT_FILE -- COMMAND...", file=sys.stderr)
        return 2
    exit_file, command = argv[0], argv[2:]
    for sig in CAUGHT:
        signal.signal(sig, _note)  # keep waiting; the command got the signal itself
    _become_subreaper()
    try:
        proc = subprocess.Popen(command)
    except OSError as exc:
        print(f"diagnoser: cannot start {command[0]!r}: {exc}", file=sys.stderr, flush=True)
        _record(exit_file, 127)
        return 127
    rc = proc.wait()
    _reap_leftovers()
    _record(exit_file, rc)
    if rc < 0:
        for sig in CAUGHT:
            signal.signal(sig, signal.SIG_DFL)
        sys.stdout.flush()
        os.kill(os.getpid(), -rc)
        return 128 - rc
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
