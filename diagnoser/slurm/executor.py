"""`SlurmExecutor`: the restart controller's executor for Slurm batch jobs.

The controller runs outside the job (login node, or a supervisor service) and the command it is
given is a submission: `sbatch [OPTIONS] SCRIPT [ARGS]` (or `SCRIPT [ARGS]`):

- attempt 1 -> `sbatch --parsable --requeue --open-mode=append [--output=<run>/slurm/job-%j.out] ...`;
- attempt n -> `scontrol requeue JOB` (the same job id: accounting and the user's view stay one job),
  then `scontrol update JobId=JOB ExcNodeList=...` when the command's `--exclude` changed, and
  `StartTime=now` (a requeued job otherwise waits cred_expire+1 s). A job Slurm requeued itself
  (NODE_FAIL, preemption) is held when seen, and released (not requeued again) when the policy
  decides to restart: the policy, not Slurm, decides whether it runs again;
- exclusions are `--exclude=...` in the command (`exclude()` returns the edited command), so the
  controller's launch record stays the one source of truth across its own restarts;
- drain -> `scontrol update NodeName=N State=DRAIN Reason="diagnoser: <subtype> job<J>-a<n>"`
  under the cluster-wide cap of `drain.DrainGuard`.

The handle (`handle.py`) follows the job and copies this run's output into the attempt's console
file, which the controller's watcher reads. Per-attempt values the controller puts in the
environment (DIAGNOSER_ATTEMPT, DIAGNOSER_RESUME_FROM ...) cannot reach a requeued job's
environment: they are written to `$DIAGNOSER_ENV_FILE` (set at submission) before every start;
the batch script sources it (`[ -f "$DIAGNOSER_ENV_FILE" ] && . "$DIAGNOSER_ENV_FILE"`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from diagnoser import atomic
from diagnoser.act.executors import AttemptSpec, Executor, Handle, Placement
from diagnoser.slurm.collect import MANIFEST, CollectOptions, collect_job
from diagnoser.slurm.commands import SlurmCLI, SlurmError
from diagnoser.slurm.drain import DrainGuard, drain_nodes, drain_reason, subtype_from
from diagnoser.slurm.handle import FailedStart, SlurmHandle
from diagnoser.slurm.nodelogs import KernelSource
from diagnoser.slurm.records import JobRecord, join_hostlist
from diagnoser.slurm.sbatch import parse_sbatch, required_nodes, with_exclusions

SILENT_RUN_S = 2.0  # a run this short that wrote nothing did not start its script
REVOCATION_GAP = timedelta(seconds=3)  # Slurm times have 1 s resolution, slurmd's revocation lags the end


class SlurmExecutor(Executor):
    """Runs attempts as (re)queued Slurm batch jobs; see the module docstring."""

    name = "slurm"
    can_drain = True

    def __init__(self, run_dir: Path, cli: SlurmCLI | None = None, kernel: KernelSource | None = None,
                 task_output: tuple[str, ...] = (), guard: DrainGuard | None = None, ops_log: Path | None = None,
                 poll_s: float = 1.0, requeue_timeout_s: float = 30.0, settle_s: float = 10.0) -> None:
        self.cli = cli or SlurmCLI()
        self.state_dir = Path(run_dir) / "slurm"
        self.kernel = kernel or KernelSource()
        self.task_output = task_output
        self.guard = guard or DrainGuard()
        self.ops_log = ops_log
        self.poll_s = poll_s
        self.requeue_timeout_s = requeue_timeout_s
        self.settle_s = settle_s  # wait this long for a failed run to leave COMPLETING before collecting
        self.handle: SlurmHandle | None = None
        self.last_collect: dict = {}

    # ------------------------------------------------------------------------- persistence
    @property
    def _state_file(self) -> Path:
        return self.state_dir / "job.json"

    @property
    def env_file(self) -> Path:
        return self.state_dir / "attempt.env"

    def _load(self) -> dict:
        try:
            return json.loads(self._state_file.read_text())
        except (OSError, ValueError):
            return {}

    def _save(self, handle: SlurmHandle) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        atomic.write_text(self._state_file, json.dumps(handle.record()), durable=True)

    @property
    def job_id(self) -> str | None:
        return self.handle.job_id if self.handle else self._load().get("job_id")

    # ----------------------------------------------------------------------------- attempts
    def nodes(self) -> list[str]:
        """The nodes of the current run (empty while it is pending)."""
        if self.handle is None:
            return []
        return list(self.handle.nodes_seen or (self.handle.rec.nodes if self.handle.rec else ()))

    def prepare(self, command: tuple[str, ...]) -> tuple[tuple[str, ...], str]:
        try:
            sb = parse_sbatch(command)
        except ValueError as exc:
            return command, f"slurm executor: {exc}"
        note = ""
        if any("{resume" in a or "{attempt}" in a for a in sb.script):
            note = ("slurm executor: {resume}/{attempt} in the script's arguments are fixed at submission; "
                    "a requeued job reads them from $DIAGNOSER_ENV_FILE")
        return command, note

    def _write_env(self, env: dict[str, str]) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        body = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items()) if k.isidentifier())
        self.env_file.write_text(body, encoding="utf-8")

    def start(self, spec: AttemptSpec) -> Handle:
        self._write_env(spec.env)
        saved = self._load()
        if saved.get("console") == str(spec.log_path) and saved.get("job_id"):
            adopted = self._adopt(saved, spec)  # this attempt was started by a controller that died
            if adopted is not None:
                return adopted
        if spec.attempt == 1 or not saved.get("job_id"):
            return self._submit(spec)
        try:
            return self._requeue(str(saved["job_id"]), spec)
        except SlurmError as exc:
            return FailedStart(spec.log_path, f"requeue of job {saved['job_id']} failed: {exc}")

    def _adopt(self, saved: dict, spec: AttemptSpec) -> SlurmHandle | None:
        h = self.attach(saved)
        if h is None or h.refresh(force=True) is None:
            return None
        self.handle = h
        return h

    def _submit(self, spec: AttemptSpec) -> SlurmHandle:
        sb = parse_sbatch(spec.command)
        if sb.get("--output") is None:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            sb = sb.with_option("--output", str(self.state_dir.resolve() / "job-%j.out"))
        sb = sb.without("--no-requeue", "--parsable", "--wait").with_option("--requeue") \
               .with_option("--open-mode", "append")
        env = {**spec.env, "DIAGNOSER_ENV_FILE": str(self.env_file.resolve())}
        given = sb.get("--output") or ""
        fixed = Path(sb.get("--chdir") or spec.cwd or Path.cwd()) / given if "%" not in given else None
        before = fixed.stat().st_size if fixed is not None and fixed.is_file() else 0  # appended to: skip that
        job_id = self.cli.sbatch(sb.argv(), env=env, cwd=str(spec.cwd) if spec.cwd else None)
        rec = self.cli.show_job(job_id)
        outputs = [[rec.std_out, before if fixed is not None and rec.std_out == str(fixed) else 0]] \
            if rec and rec.std_out else []
        if rec and rec.std_err and rec.std_err != rec.std_out:
            outputs.append([rec.std_err, 0])
        h = SlurmHandle(self.cli, job_id, spec.attempt, spec.log_path, outputs, rec.restarts if rec else 0,
                        self.poll_s)
        h.rec = rec
        self.handle = h
        self._save(h)
        return h

    def _requeue(self, job_id: str, spec: AttemptSpec) -> Handle:
        rec = self.cli.show_job(job_id)
        if rec is None:  # gone from slurmctld (MinJobAge): a new submission
            return self._submit(spec)
        deadline = time.monotonic() + self.requeue_timeout_s
        while rec is not None and rec.state == "COMPLETING" and time.monotonic() < deadline:
            time.sleep(0.3)
            rec = self.cli.show_job(job_id)
        assert rec is not None
        outputs = self._outputs_now(rec)
        if rec.pending:  # requeued by Slurm (and held by us), or by a controller that died
            if "Held" in rec.reason or rec.raw.get("Priority") == "0":
                self.cli.release(job_id)
        elif rec.ended:
            self.cli.requeue(job_id)
        # running: a run we did not start (a requeue raced us): adopt it as this attempt
        sb = parse_sbatch(spec.command)
        if set(sb.required) != set(rec.required):  # a culprit taken out of the job's --nodelist
            self.cli.update_job(job_id, ReqNodeList=join_hostlist(sb.required))
        if set(sb.excluded) != set(rec.excluded):
            self.cli.update_job(job_id, ExcNodeList=join_hostlist(sb.excluded))
        after = self.cli.show_job(job_id) or rec
        if after.pending:
            self._wait_out_revocation(rec.end_time)
            with contextlib.suppress(SlurmError):  # it may have started meanwhile
                self.cli.update_job(job_id, StartTime="now")
        h = SlurmHandle(self.cli, job_id, spec.attempt, spec.log_path, outputs, after.restarts, self.poll_s)
        h.rec = after
        self.handle = h
        self._save(h)
        return h

    @staticmethod
    def _wait_out_revocation(ended: datetime | None) -> None:
        """Slurm delays a requeued job by cred_expire+1 s; `StartTime=now` skips that wait, but not
        entirely: when a run ends, slurmd revokes the job's launch credential, and it refuses any new
        credential of the job created in a second not after that revocation (cred.c: `ctime <= revoked`).
        A requeue started within that second fails at once, on healthy nodes, with no output. Waiting
        REVOCATION_GAP past the previous run's end costs seconds and avoids it."""
        if ended is None:
            return
        wait = (ended + REVOCATION_GAP - datetime.now(UTC)).total_seconds()
        if 0 < wait <= REVOCATION_GAP.total_seconds():
            time.sleep(wait)

    def _outputs_now(self, rec: JobRecord) -> list[list]:
        """The job's output files with their current sizes (where the next run starts appending)."""
        prev = self.handle.outputs if self.handle and self.handle.job_id == rec.job_id else None
        paths = [e[0] for e in prev] if prev else [p for p in dict.fromkeys([rec.std_out, rec.std_err]) if p]
        out = []
        for p in paths:
            try:
                size = os.path.getsize(p) if "%" not in p else 0
            except OSError:
                size = 0
            out.append([p, size])
        return out

    def attach(self, record: dict) -> Handle | None:
        if not record.get("job_id"):
            return None
        h = SlurmHandle(self.cli, str(record["job_id"]), int(record.get("attempt", 1)),
                        Path(record.get("console", "")), [list(e) for e in record.get("outputs", [])],
                        int(record.get("restarts", 0)), self.poll_s)
        h.nodes_seen = [str(n) for n in record.get("nodes", [])]
        self.handle = h
        return h

    # -------------------------------------------------------------------- placement, drain
    def exclude(self, command: tuple[str, ...], env: dict[str, str], nodes: tuple[str, ...],
                ranks: tuple[int, ...]) -> Placement:
        try:
            sb = parse_sbatch(command)
            new = with_exclusions(command, nodes)
        except ValueError as exc:
            return Placement(False, f"slurm executor: {exc}")
        rec = self.handle.rec if self.handle else None
        need = (rec.num_nodes if rec and rec.num_nodes else None) or required_nodes(sb)
        excluded = set(parse_sbatch(new).excluded)
        try:
            partition = (rec.partition if rec else "") or (sb.get("--partition") or "")
            pool = self.cli.partition_nodes(partition) if partition else [n.name for n in self.cli.show_nodes()]
            records = self.cli.show_nodes(pool) if pool else []
        except SlurmError as exc:
            return Placement(False, f"slurm executor: cannot check the partition: {exc}")
        usable = [n.name for n in records if n.name not in excluded and n.usable]
        if len(usable) < need:
            return Placement(False, f"slurm executor: excluding {sorted(excluded)} leaves {len(usable)} usable "
                             f"node(s) in {partition or 'the cluster'} ({', '.join(usable) or 'none'}); "
                             f"the job needs {need}")
        return Placement(True, f"--exclude={join_hostlist(excluded)} ({len(usable)} usable nodes for {need})",
                         new, dict(env), tuple(sorted(excluded)))

    def incident_id(self) -> str:
        h = self.handle
        return f"job{h.job_id}-a{h.attempt}" if h else f"run-{datetime.now(UTC):%Y%m%dT%H%M%S}"

    def drain(self, nodes: tuple[str, ...], reason: str) -> tuple[bool, str]:
        text = drain_reason(subtype_from(reason), self.incident_id())
        result = drain_nodes(self.cli, nodes, text, self.guard, self.ops_log)
        return result.ok, result.detail

    # ------------------------------------------------------------------------- collection
    def collect_kernel(self, since: datetime, out_dir: Path) -> str:
        """Everything Slurm knows about this run of the job (record, completion log, nodes, task
        outputs, kernel logs, why the handle ended it) into the attempt's log dir for the triage; the
        batch output is there through the console, or copied here when the console has none of it."""
        if self.handle is None:
            return "slurm: no job"
        deadline = time.monotonic() + self.settle_s  # the final state (TIMEOUT, NODE_FAIL ...) and NodeList
        rec = self.handle.rec
        while rec is not None and rec.state == "COMPLETING" and time.monotonic() < deadline:
            time.sleep(0.25)
            rec = self.cli.show_job(self.handle.job_id)
        self.handle.pump(final=True)
        # The job's own output is evidence whatever happened to the console copy (a run that ended
        # before the console caught up, a pattern resolved late): without console bytes for this
        # run, the collection copies this run's slice of StdOut/StdErr itself.
        console_empty = not self.handle.console.is_file() or self.handle.console.stat().st_size == 0
        offset = min(self.handle.start_offsets, default=0)
        opts = CollectOptions(kernel=self.kernel, task_output=self.task_output, since=since,
                              batch_output=console_empty, output_offset=offset, nodes=tuple(self.handle.nodes_seen))
        result = collect_job(self.cli, self.handle.job_id, out_dir, opts)
        copied = out_dir / f"slurm-{self.handle.job_id}.out"
        output_bytes = (copied.stat().st_size if copied.exists() else 0) if console_empty else \
            self.handle.console.stat().st_size
        seen = handle_evidence(self.handle, result.job, output_bytes)
        if seen:  # why the attempt ended, as the handle saw it (e.g. a requeue Slurm did itself)
            (out_dir / f"slurm-{self.handle.job_id}.handle.txt").write_text("\n".join(seen) + "\n", encoding="utf-8")
            result.files.append(f"slurm-{self.handle.job_id}.handle.txt")
        console = self.handle.console
        self.last_collect = result.manifest() | {"console": {
            "path": str(console), "bytes": 0 if console_empty else console.stat().st_size,
            "batch_output_copied": console_empty}}
        (out_dir / MANIFEST).write_text(json.dumps(self.last_collect, indent=1) + "\n", encoding="utf-8")
        return f"slurm: {len(result.files)} files in {result.seconds:.2f} s" + (
            f"; {'; '.join(result.notes)}" if result.notes else "")


def handle_evidence(handle: SlurmHandle, job: JobRecord | None, output_bytes: int) -> list[str]:
    """What the handle saw of the run, as lines the triage reads: why it ended it (e.g. a requeue
    Slurm did itself), and a run that ended at once without a byte of output (it never ran its script)."""
    seen = [f"diagnoser slurm handle: {handle.note}"] if handle.note else []
    if output_bytes == 0 and job and job.start_time and job.end_time:
        lasted = (job.end_time - job.start_time).total_seconds()
        if lasted <= SILENT_RUN_S:
            seen.append(f"diagnoser slurm handle: run of job {handle.job_id} on {','.join(job.nodes) or '?'} ended "
                        f"{lasted:.0f} s after it started without any output: the batch script never ran (launch "
                        "failure)")
    return seen


def executor_from_env(run_dir: Path, env: dict[str, str] | None = None) -> SlurmExecutor:
    """A SlurmExecutor configured by the `[slurm]` settings (for `diagnoser run --executor slurm`): the settings
    file, `DIAGNOSER_SLURM__<KEY>` or the older DIAGNOSER_SLURM_* variables: KERNEL_LOG_DIR (template with {node}),
    KERNEL_VIA_SRUN=1, TASK_OUTPUT (patterns, ':'-separated), MAX_DRAINS (default 2), DRAIN_WINDOW_S (3600),
    POLL_S (1.0), OPS_LOG (path), DRY_RUN=1."""
    from diagnoser.settings import load_settings
    from diagnoser.slurm.drain import default_ops_log

    s = load_settings(env=env).settings.slurm
    kernel = KernelSource(log_dir=s.kernel_log_dir, via_srun=s.kernel_via_srun)
    guard = DrainGuard(s.max_drains, s.drain_window_s, s.drain_lock)
    return SlurmExecutor(run_dir, SlurmCLI(dry_run=s.dry_run), kernel, s.task_output, guard,
                         s.ops_log or default_ops_log(), s.poll_s)


def make_executor(name: str, config) -> Executor:
    """`--executor local|slurm` for `diagnoser run` (`config`: its RunConfig)."""
    from diagnoser.act.executors import LocalExecutor

    if name == "local":
        return LocalExecutor(tee=config.tee)
    if name == "slurm":
        return executor_from_env(Path(config.run_dir))
    raise ValueError(f"unknown executor {name!r} (local or slurm)")
