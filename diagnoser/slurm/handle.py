"""The handle of one attempt of a Slurm batch job (`SlurmHandle`), and of a start that failed.

One attempt is one run of the job; a requeue starts the next run under the same job id. The
handle follows the job with `scontrol show job` (at most every `poll_s`), and copies the job's
output (StdOut/StdErr, appended across requeues) from this attempt's offset into the attempt's
console file, which the controller's watcher reads; whole lines only until the run ended.
A run Slurm requeued by itself (node failure, preemption) ends the attempt, and the job is held:
the restart policy decides whether it runs again (`SlurmExecutor.start` releases it).
"""

from __future__ import annotations

import signal as signals
import time
from pathlib import Path

from diagnoser.act.executors import Handle
from diagnoser.slurm.collect import find_task_files
from diagnoser.slurm.commands import SlurmCLI, SlurmError
from diagnoser.slurm.records import JobRecord

PUMP_CHUNK = 4 << 20


class SlurmHandle(Handle):
    """One attempt = one run of the batch job (a requeue starts the next run of the same job id)."""

    def __init__(self, cli: SlurmCLI, job_id: str, attempt: int, console: Path, outputs: list[list],
                 restarts: int, poll_s: float = 1.0) -> None:
        self.pid = 0  # nothing runs on this host
        self.cli = cli
        self.job_id = job_id
        self.attempt = attempt
        self.console = console
        self.outputs = outputs  # [[path or pattern, offset], ...]
        self.start_offsets = [int(e[1]) for e in outputs]  # where this run's output begins in each file
        self.restarts = restarts  # the job's Restarts when this attempt began
        self.poll_s = poll_s
        self.rec: JobRecord | None = None
        self.nodes_seen: list[str] = []  # every node this run was seen on (COMPLETING lists fewer)
        self.note = ""
        self._polled = 0.0
        self._ended = False
        self._code: int | None = None

    # ----------------------------------------------------------------------------- state
    def refresh(self, force: bool = False) -> JobRecord | None:
        now = time.monotonic()
        if self._ended or (not force and now - self._polled < self.poll_s):
            return self.rec
        self._polled = now
        try:
            rec = self.cli.show_job(self.job_id)
        except SlurmError as exc:  # slurmctld busy: keep the last view, try again next poll
            self.note = str(exc)
            return self.rec
        if rec is not None and rec.restarts == self.restarts:
            self.nodes_seen += [n for n in rec.nodes if n not in self.nodes_seen]
        if rec is None:
            self._end(self._code if self.rec is None else self.rec.status,
                      f"job {self.job_id} vanished from slurmctld")
        elif rec.restarts > self.restarts:  # Slurm requeued it (node failure, preemption)
            self.rec = rec
            self._hold_own_requeue()
            self._end(1, f"job {self.job_id} requeued by Slurm (state {rec.state}, reason {rec.reason}); held "
                      "until the controller decides")
        else:
            self.rec = rec
            if rec.ended or rec.failed_completing:
                self._end(rec.status, f"job {self.job_id} {rec.state} ({rec.reason}), ExitCode "
                          f"{rec.exit_code}:{rec.exit_signal}")
        return self.rec

    def _hold_own_requeue(self) -> None:
        try:
            self.cli.run("scontrol", "hold", self.job_id)
        except SlurmError as exc:
            self.note = f"could not hold the job Slurm requeued: {exc}"

    def _end(self, code: int | None, why: str) -> None:
        self.pump(final=True)
        self._ended, self._code, self.note = True, code, why

    def ended(self) -> bool:
        self.pump()
        self.refresh()
        return self._ended

    @property
    def exit_code(self) -> int | None:
        return self._code if self._ended else None

    def rank_pids(self) -> dict[int, int]:
        return {}  # ranks run on the cluster's nodes, not here

    def signal(self, sig: int) -> int:
        """SIGKILL cancels the job; other signals go to the batch shell and every step (`--full`)."""
        rec = self.refresh(force=True)
        if self._ended or rec is None:
            return 0
        try:
            if sig == signals.SIGKILL or rec.pending:  # nothing runs yet: a signal would wait for the start
                self.cli.cancel(self.job_id)
            else:
                self.cli.cancel(self.job_id, signal=signals.Signals(sig).name.removeprefix("SIG"))
        except SlurmError as exc:
            self.note = str(exc)
            return 0
        return 1

    def alive(self) -> int:
        self.pump()
        if self._ended:
            return 0
        rec = self.refresh(force=time.monotonic() - self._polled >= 0.5)
        return 0 if rec is None or self._ended else 1

    def record(self) -> dict:
        return {"executor": "slurm", "job_id": self.job_id, "attempt": self.attempt, "console": str(self.console),
                "outputs": self.outputs, "restarts": self.restarts, "nodes": self.nodes_seen}

    # ---------------------------------------------------------------------------- output
    def _resolve(self, entry: list) -> Path | None:
        path = entry[0]
        if "%" not in path:
            return Path(path)
        if self.rec is None:
            return None
        found = find_task_files(path, self.rec, 1)
        if found:
            entry[0] = str(found[0][0])
            return found[0][0]
        return None

    def pump(self, final: bool = False) -> int:
        """Copy the job's new output (whole lines; everything when `final`) into the console file."""
        copied = 0
        for entry in self.outputs:
            path = self._resolve(entry)
            if path is None:
                continue
            try:
                with open(path, "rb") as fh:
                    if fh.seek(0, 2) < entry[1]:  # truncated since (a requeue that did not append, a rotation):
                        entry[1] = 0  # this run's output starts at the beginning again
                        self.note = self.note or f"{path} was truncated; reading this run's output from its start"
                    fh.seek(entry[1])
                    data = fh.read(PUMP_CHUNK)
            except OSError:
                continue
            if not final:
                cut = data.rfind(b"\n")
                data = data[: cut + 1] if cut >= 0 else b""
            if not data:
                continue
            self.console.parent.mkdir(parents=True, exist_ok=True)
            with open(self.console, "ab") as out:
                out.write(data if data.endswith(b"\n") else data + b"\n")
            entry[1] += len(data)
            copied += len(data)
        return copied


class FailedStart(Handle):
    """A start that could not submit or requeue: ended at once, the reason in the console."""

    def __init__(self, console: Path, reason: str) -> None:
        self.pid = 0
        console.parent.mkdir(parents=True, exist_ok=True)
        with open(console, "a", encoding="utf-8") as fh:
            fh.write(f"diagnoser: slurm executor: {reason}\n")
        self.reason = reason

    def ended(self) -> bool:
        return True

    @property
    def exit_code(self) -> int | None:
        return 1

    def rank_pids(self) -> dict[int, int]:
        return {}

    def signal(self, sig: int) -> int:
        return 0

    def alive(self) -> int:
        return 0

    def record(self) -> dict:
        return {"executor": "slurm", "failed_start": self.reason}
