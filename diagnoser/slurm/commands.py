"""`SlurmCLI`: the Slurm commands diagnoser runs, each bounded by a timeout with a clear error.

A thin layer over the command-line tools (no libslurm, no REST API): what an operator would type.
Every call raises `SlurmError` naming the command, its exit status and Slurm's own message (or the
timeout); reads return typed records (`records.py`). `env` selects the cluster (`SLURM_CONF`).

Mutating calls (`requeue`, `update_job`, `drain`, `resume`, `sbatch`, `cancel`) go through `_mutate`,
which in `dry_run` only records the command line in `self.planned` and runs nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from diagnoser.slurm.records import JobRecord, NodeRecord, parse_job, parse_kv, parse_nodes

DEFAULT_TIMEOUT_S = 20.0


class SlurmError(RuntimeError):
    """A Slurm command failed or timed out; `str()` is one line for a person."""

    def __init__(self, argv: Sequence[str], message: str, returncode: int | None = None) -> None:
        self.argv = tuple(argv)
        self.returncode = returncode
        self.message = message
        super().__init__(f"{' '.join(argv)}: {message}")


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


@dataclass
class SlurmCLI:
    """Runs Slurm client commands. `env`: overrides for the child environment (e.g. SLURM_CONF)."""

    env: Mapping[str, str] | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    dry_run: bool = False
    planned: list[tuple[str, ...]] = field(default_factory=list)  # dry-run: what would have run
    calls: int = 0

    def _env(self) -> dict[str, str]:
        return {**os.environ, **(self.env or {})}

    def available(self) -> bool:
        """Whether the Slurm client tools are installed."""
        return shutil.which("scontrol", path=self._env().get("PATH")) is not None

    def run(self, *argv: str, timeout_s: float | None = None, check: bool = True) -> subprocess.CompletedProcess:
        """Run one command; SlurmError on timeout, missing tool, or (with `check`) non-zero exit."""
        self.calls += 1
        limit = timeout_s or self.timeout_s
        try:
            proc = subprocess.run(list(argv), capture_output=True, text=True, env=self._env(), timeout=limit,
                                  stdin=subprocess.DEVNULL, check=False)
        except FileNotFoundError:
            raise SlurmError(argv, f"{argv[0]} not found (is Slurm installed? apt-get install slurm-client)") from None
        except subprocess.TimeoutExpired as exc:
            said = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            hint = _first_line(said) or "slurmctld down or overloaded?"
            raise SlurmError(argv, f"no answer within {limit:g} s ({hint})") from None
        if check and proc.returncode != 0:
            raise SlurmError(argv, _first_line(proc.stderr) or _first_line(proc.stdout) or "failed",
                             proc.returncode)
        return proc

    def _mutate(self, *argv: str, timeout_s: float | None = None) -> str:
        if self.dry_run:
            self.planned.append(tuple(argv))
            return ""
        return self.run(*argv, timeout_s=timeout_s).stdout

    # -------------------------------------------------------------------------------- reads
    def show_job(self, job_id: str) -> JobRecord | None:
        """The job's record, or None when slurmctld no longer knows it (after MinJobAge)."""
        proc = self.run("scontrol", "show", "job", "-o", str(job_id), check=False)
        if proc.returncode != 0:
            if "Invalid job id" in proc.stderr:
                return None
            raise SlurmError(("scontrol", "show", "job", str(job_id)), _first_line(proc.stderr) or "failed",
                             proc.returncode)
        return parse_job(proc.stdout)

    def show_job_text(self, job_id: str) -> str:
        """`scontrol show job` in its multi-line form (for people and the triage)."""
        return self.run("scontrol", "show", "job", str(job_id)).stdout

    def show_nodes(self, names: Sequence[str] | None = None) -> list[NodeRecord]:
        """Records of the named nodes (all nodes when None)."""
        argv = ["scontrol", "show", "node", "-o"]
        if names:
            argv.append(",".join(names))
        return parse_nodes(self.run(*argv).stdout)

    def show_node(self, name: str) -> NodeRecord | None:
        found = [n for n in self.show_nodes([name]) if n.name == name]
        return found[0] if found else None

    def partition_nodes(self, partition: str) -> list[str]:
        """The nodes of a partition (expanded)."""
        from diagnoser.slurm.records import expand_hostlist

        out = self.run("scontrol", "show", "partition", "-o", partition).stdout
        for line in out.splitlines():
            kv = parse_kv(line)
            if kv.get("PartitionName") == partition:
                return expand_hostlist(kv.get("Nodes"))
        return []

    def config(self) -> dict[str, str]:
        """`scontrol show config` as a dict (JobCompType, JobCompLoc, AccountingStorageType ...)."""
        out: dict[str, str] = {}
        for line in self.run("scontrol", "show", "config").stdout.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                out[key.strip()] = value.strip()
        return out

    def sacct(self, job_id: str, fields: str = "JobID,JobName,State,ExitCode,DerivedExitCode,Start,End,"
              "Elapsed,NodeList,Restarts,Reason") -> str:
        """`sacct -P` rows of the job and its steps (needs accounting: slurmdbd)."""
        return self.run("sacct", "-P", "-D", "-j", str(job_id), f"--format={fields}").stdout

    # ------------------------------------------------------------------------------ actions
    def sbatch(self, args: Sequence[str], env: Mapping[str, str] | None = None, cwd: str | None = None) -> str:
        """Submit (`sbatch --parsable ...`, from `cwd`: the job's default WorkDir); the job id."""
        argv = ("sbatch", "--parsable", *args)
        if self.dry_run:
            self.planned.append(argv)
            return "0"
        self.calls += 1
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout_s, check=False,
                                  stdin=subprocess.DEVNULL, env={**self._env(), **(env or {})}, cwd=cwd)
        except FileNotFoundError:
            raise SlurmError(argv, "sbatch not found (is Slurm installed?)") from None
        except subprocess.TimeoutExpired:
            raise SlurmError(argv, f"no answer within {self.timeout_s:g} s") from None
        job = proc.stdout.strip().split(";")[0]
        if proc.returncode != 0 or not job.isdigit():
            raise SlurmError(argv, _first_line(proc.stderr) or f"unexpected output {proc.stdout!r}", proc.returncode)
        return job

    def requeue(self, job_id: str, hold: bool = False) -> None:
        self._mutate("scontrol", "requeuehold" if hold else "requeue", str(job_id))

    def update_job(self, job_id: str, **fields: str) -> None:
        """`scontrol update JobId=X Key=Value ...` (e.g. ExcNodeList=n2, StartTime=now)."""
        self._mutate("scontrol", "update", f"JobId={job_id}", *(f"{k}={v}" for k, v in fields.items()))

    def release(self, job_id: str) -> None:
        self._mutate("scontrol", "release", str(job_id))

    def drain(self, node: str, reason: str) -> None:
        self._mutate("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")

    def resume(self, node: str) -> None:
        self._mutate("scontrol", "update", f"NodeName={node}", "State=RESUME")

    def cancel(self, job_id: str, signal: str | None = None, full: bool = True) -> None:
        """`scancel` the job, or with `signal` only signal it (batch shell and steps with `full`)."""
        argv = ["scancel"]
        if signal:
            argv.append(f"--signal={signal}")
            if full:
                argv.append("--full")
        self._mutate(*argv, str(job_id))

    def wait_job(self, job_id: str, until: str = "ended", timeout_s: float = 60.0, poll_s: float = 0.5
                 ) -> JobRecord | None:
        """Poll (bounded) until the job has `ended`, is `running`, or is `gone`; the last record."""
        deadline = time.monotonic() + timeout_s
        rec = None
        while True:
            rec = self.show_job(job_id)
            if until == "gone" and rec is None:
                return None
            if rec is not None and getattr(rec, until, False):
                return rec
            if time.monotonic() >= deadline:
                state = rec.state if rec else "gone"
                raise SlurmError(("wait", str(job_id)), f"not {until} after {timeout_s:g} s (state {state})")
            time.sleep(max(0.2, poll_s))
