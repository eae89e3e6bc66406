"""`collect_job`: everything Slurm knows about one job, laid out so `diagnoser triage DIR` works.

    DIR/.collect.json                what was collected (hidden: the triage skips dot-files)
    DIR/scontrol-<job>.txt           `scontrol show job` (JobState=, Reason=, ExitCode=, NodeList=)
    DIR/sacct-<job>.txt              `sacct -P` when accounting is on, else
    DIR/jobcomp-<job>.sacct.txt      the job's lines of the jobcomp/filetxt completion log
    DIR/nodes/<node>.scontrol.txt    `scontrol show node` of every node of the job
    DIR/slurm-<job>.out (.err)       the batch script's output (StdOut / StdErr)
    DIR/tasks/[<node>/]rank<t>.log   per-task outputs found through `%t`/`%n`/`%N` patterns
    DIR/dmesg/<node>.log             kernel logs of the job's nodes (see nodelogs.py)

Output patterns are resolved like Slurm does (`%j %J %A %a %x %u %%`); `%t %n %N %s` become
wildcards, and a file's task (and node, from `%n` as the index in NodeList or a `%N` that names a
node of the job) comes from the match. Srun-level per-task patterns are not in the job record:
pass them as `task_output` (relative to the job's WorkDir). Everything is bounded: at most
`max_files` task files, the last `max_bytes` of each file.
"""

from __future__ import annotations

import glob
import json
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from diagnoser.slurm.commands import SlurmCLI, SlurmError
from diagnoser.slurm.nodelogs import KernelSource, collect_kernel_logs
from diagnoser.slurm.records import JobRecord, expand_hostlist, job_from_kv, jobcomp_lines, parse_kv

MANIFEST = ".collect.json"
_TOKEN = re.compile(r"%(\d*)([AajJNnstuxb%])")
_GROUPS = {"t": r"(?P<t>\d+)", "n": r"(?P<n>\d+)", "N": r"(?P<N>[^/]+?)", "s": r"(?P<s>[\w.]+?)",
           "b": r"\d"}


@dataclass(frozen=True)
class CollectOptions:
    kernel: KernelSource = field(default_factory=KernelSource)
    task_output: tuple[str, ...] = ()  # srun --output patterns of the job's steps
    since: datetime | None = None  # only this run of a requeued job (jobcomp, kernel lines)
    batch_output: bool = True  # copy the batch script's StdOut/StdErr (the controller routes it itself)
    output_offset: int = 0  # skip this much of StdOut/StdErr: earlier runs of a requeued job (append mode)
    node_records: bool = True
    nodes: tuple[str, ...] = ()  # nodes known to have run the job (a COMPLETING record lists fewer)
    max_files: int = 4096
    max_bytes: int = 64 << 20


@dataclass
class Collected:
    job_id: str
    out_dir: Path
    job: JobRecord | None = None
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    run_nodes: list[str] = field(default_factory=list)  # nodes of this run named by the completion log
    seconds: float = 0.0

    def manifest(self) -> dict:
        j = self.job
        return {"schema": "slurm-collect/v1", "job_id": self.job_id, "state": j.state if j else None,
                "reason": j.reason if j else None, "exit_code": j.exit_code if j else None,
                "exit_signal": j.exit_signal if j else None, "restarts": j.restarts if j else None,
                "nodes": list(j.nodes) if j else [], "batch_host": j.batch_host if j else None,
                "files": self.files, "notes": self.notes, "seconds": round(self.seconds, 3)}


def pattern_regex(pattern: str, job: JobRecord) -> tuple[str, re.Pattern[str]]:
    """A Slurm filename pattern -> (glob, regex with groups t/n/N/s) for this job."""
    job_id = job.job_id
    values = {"j": job_id, "J": job_id, "A": job.raw.get("ArrayJobId", job_id), "a": job.raw.get("ArrayTaskId", ""),
              "x": job.name, "u": job.user, "%": "%"}
    globbed, regex, pos = "", "", 0
    seen: set[str] = set()
    for m in _TOKEN.finditer(pattern):
        literal = pattern[pos:m.start()]
        globbed += glob.escape(literal)
        regex += re.escape(literal)
        width, code = m.group(1), m.group(2)
        if code in values:
            value = values[code].zfill(int(width)) if width and values[code].isdigit() else values[code]
            globbed += glob.escape(value)
            regex += re.escape(value)
        else:
            globbed += "*"
            regex += _GROUPS[code] if code not in seen and code in "tnNs" else r".+?"
            seen.add(code)
        pos = m.end()
    globbed += glob.escape(pattern[pos:])
    regex += re.escape(pattern[pos:])
    return globbed, re.compile(regex + r"\Z")


def _absolute(pattern: str, job: JobRecord) -> str:
    return pattern if pattern.startswith("/") or not job.work_dir else str(Path(job.work_dir) / pattern)


def find_task_files(pattern: str, job: JobRecord, limit: int) -> list[tuple[Path, int | None, str | None]]:
    """Files matching the pattern: (path, task id, node) each."""
    globbed, regex = pattern_regex(_absolute(pattern, job), job)
    out = []
    for name in sorted(glob.glob(globbed))[: limit * 4]:
        m = regex.match(name)
        if not m:
            continue
        groups = m.groupdict()
        task = int(groups["t"]) if groups.get("t") else None
        node = None
        if groups.get("n") and int(groups["n"]) < len(job.nodes):
            node = job.nodes[int(groups["n"])]
        elif groups.get("N") in job.nodes:
            node = groups["N"]
        out.append((Path(name), task, node))
        if len(out) >= limit:
            break
    return out


def copy_tail(src: Path, dst: Path, max_bytes: int, offset: int = 0) -> int:
    """Copy `src` from `offset` (at most its last `max_bytes`) to `dst`; bytes copied."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as fh:
        size = fh.seek(0, 2)
        offset = offset if offset <= size else 0  # shorter than the offset: truncated since, all of it is new
        fh.seek(max(offset, size - max_bytes))
        data = fh.read(max_bytes)
    dst.write_bytes(data)
    return len(data)


class _Writer:
    def __init__(self, result: Collected) -> None:
        self.r = result

    def text(self, rel: str, text: str) -> None:
        path = self.r.out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text if text.endswith("\n") or not text else text + "\n", encoding="utf-8")
        self.r.files.append(rel)


def collect_record(cli: SlurmCLI, job_id: str, w: _Writer, opts: CollectOptions) -> JobRecord | None:
    """The job record (scontrol), then accounting (sacct) or the completion log (jobcomp)."""
    try:
        job = cli.show_job(job_id)
        if job is not None:
            w.text(f"scontrol-{job_id}.txt", cli.show_job_text(job_id))
        else:
            w.r.notes.append(f"scontrol: job {job_id} no longer known to slurmctld (MinJobAge passed)")
    except SlurmError as exc:
        job = None
        w.r.notes.append(f"scontrol: {exc}")
    try:
        conf = cli.config()
    except SlurmError as exc:
        w.r.notes.append(f"scontrol show config: {exc}")
        return job
    if conf.get("AccountingStorageType", "accounting_storage/none") != "accounting_storage/none":
        try:
            w.text(f"sacct-{job_id}.txt", cli.sacct(job_id))
        except SlurmError as exc:
            w.r.notes.append(f"sacct: {exc}")
    if conf.get("JobCompType") == "jobcomp/filetxt" and conf.get("JobCompLoc"):
        try:
            text = Path(conf["JobCompLoc"]).read_text(encoding="utf-8", errors="replace")
            lines = jobcomp_lines(text, job_id, opts.since)
            if lines:
                w.text(f"jobcomp-{job_id}.sacct.txt", "\n".join(lines))
                for line in lines:  # a run Slurm requeued itself keeps its nodes only here
                    w.r.run_nodes += [n for n in expand_hostlist(parse_kv(line).get("NodeList"))
                                      if n not in w.r.run_nodes]
                if job is None:  # the completion record is all that is left of the job
                    job = job_from_kv(parse_kv(lines[-1]))
        except OSError as exc:
            w.r.notes.append(f"jobcomp log {conf['JobCompLoc']}: {exc.strerror}")
    return job


def collect_outputs(job: JobRecord, w: _Writer, opts: CollectOptions) -> None:
    """The batch output (StdOut/StdErr) and the per-task files of the job's steps."""
    if opts.batch_output:
        targets = {"out": job.std_out, "err": job.std_err if job.std_err != job.std_out else ""}
        for suffix, pattern in targets.items():
            if not pattern:
                continue
            found = find_task_files(pattern, job, 1) if "%" in pattern else [(Path(pattern), None, None)]
            for path, _, _ in found:
                rel = f"slurm-{job.job_id}.{suffix}"
                try:
                    copy_tail(path, w.r.out_dir / rel, opts.max_bytes, opts.output_offset)
                    w.r.files.append(rel)
                except OSError as exc:
                    w.r.notes.append(f"batch {suffix} {path}: {exc.strerror or exc} (not on this host's filesystem?)")
    count = 0
    for pattern in opts.task_output:
        found = find_task_files(pattern, job, opts.max_files - count)
        if not found:
            w.r.notes.append(f"task output {pattern}: no file found")
        for path, task, node in found:
            name = f"rank{task}.log" if task is not None else path.name
            rel = f"tasks/{node}/{name}" if node else f"tasks/{name}"
            try:
                copy_tail(path, w.r.out_dir / rel, opts.max_bytes)
                w.r.files.append(rel)
                count += 1
            except OSError as exc:
                w.r.notes.append(f"task output {path}: {exc.strerror or exc}")


def collect_job(cli: SlurmCLI, job_id: str, out_dir: Path, opts: CollectOptions | None = None) -> Collected:
    """Gather the job's evidence into `out_dir` (see the module docstring); never raises on a
    missing piece: what could not be collected is in `notes`."""
    opts = opts or CollectOptions()
    t0 = time.monotonic()
    out_dir.mkdir(parents=True, exist_ok=True)
    result = Collected(str(job_id), out_dir)
    w = _Writer(result)
    job = collect_record(cli, str(job_id), w, opts)
    result.job = job
    if job is None:
        result.notes.append(f"job {job_id}: no record (unknown job id, or gone and no completion log)")
    else:
        collect_outputs(job, w, opts)
        # A COMPLETING record lists only the nodes still completing, and a run Slurm requeued
        # (launch failure, node failure) lists none: take every source of this run's nodes.
        nodes = list(dict.fromkeys([*job.nodes, *opts.nodes, *result.run_nodes, *expand_hostlist(job.batch_host)]))
        if opts.node_records and nodes:
            try:
                for node in cli.show_nodes(nodes):
                    w.text(f"nodes/{node.name}.scontrol.txt", " ".join(f"{k}={v}" for k, v in node.raw.items()))
            except SlurmError as exc:
                result.notes.append(f"scontrol show node: {exc}")
        if nodes:
            since = opts.since or job.start_time
            result.notes += collect_kernel_logs(cli, nodes, out_dir, since, opts.kernel)
            result.files += [f"dmesg/{n}.log" for n in nodes if (out_dir / "dmesg" / f"{n}.log").exists()]
    result.seconds = time.monotonic() - t0
    (out_dir / MANIFEST).write_text(json.dumps(result.manifest(), indent=1) + "\n", encoding="utf-8")
    return result
