"""Helpers around one attempt: its command and environment, the resume checkpoint, kernel logs,
and the watchdog's own account of a hang (a citable line for the verdict).

The job learns where to resume from the environment and/or its command line:
- `DIAGNOSER_RESUME_FROM` (path, empty when starting from scratch), `DIAGNOSER_RESUME_STEP`,
  `DIAGNOSER_ATTEMPT`, `DIAGNOSER_RUN_DIR`; on a rollback also `DIAGNOSER_ROLLBACK=1` and
  `DIAGNOSER_FAILED_STEP` (the last step the failed attempt reached: a job may skip data after it);
- `{resume}`, `{resume_step}`, `{attempt}` in the command are replaced (empty when none).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from diagnoser.act.checkpoints import Checkpoint, CheckpointStore, Selection
from diagnoser.models import Action, Category, Culprit, DecidedBy, Diagnosis, Evidence, FirstFailure

HANG_CONFIDENCE = 0.65
MAX_KERNEL_LINES = 5000


def job_env(resume: Checkpoint | None, attempt: int, run_dir: Path, resume_env: str,
            rollback_from: int | None = None) -> dict[str, str]:
    env = {
        resume_env: str(resume.path) if resume else "",
        "DIAGNOSER_RESUME_STEP": str(resume.step) if resume else "",
        "DIAGNOSER_ATTEMPT": str(attempt),
        "DIAGNOSER_RUN_DIR": str(run_dir),
    }
    if resume_env != "DIAGNOSER_RESUME_FROM":
        env["DIAGNOSER_RESUME_FROM"] = env[resume_env]
    if rollback_from is not None:
        env["DIAGNOSER_ROLLBACK"] = "1"
        env["DIAGNOSER_FAILED_STEP"] = str(rollback_from)
    return env


def render_command(template: tuple[str, ...], resume: Checkpoint | None, attempt: int) -> tuple[str, ...]:
    values = {"{resume}": str(resume.path) if resume else "", "{resume_step}": str(resume.step) if resume else "",
              "{attempt}": str(attempt)}
    out = []
    for arg in template:
        for key, value in values.items():
            arg = arg.replace(key, value)
        out.append(arg)
    return tuple(out)


def abandoned_by(rollbacks: list[tuple[int, datetime]]):
    """A checkpoint newer than a rollback target, written before the rollback, is abandoned."""
    def veto(ckpt: Checkpoint) -> str | None:
        for step, when in rollbacks:
            if ckpt.step > step and ckpt.mtime < when.timestamp():
                return f"abandoned by the rollback to step {step}"
        return None
    return veto


def choose_resume(store: CheckpointStore | None, rollbacks: list[tuple[int, datetime]], rollback: bool,
                  below_step: int | None = None) -> Selection:
    """The checkpoint to resume from. A rollback skips the newest valid checkpoint (it may already
    hold the bad state) and anything at or beyond `below_step`."""
    if store is None:
        return Selection(None)
    veto = abandoned_by(rollbacks)
    newest = store.select(exclude=veto)
    if not rollback or newest.checkpoint is None:
        return newest
    limit = newest.checkpoint.step if below_step is None else min(below_step, newest.checkpoint.step)
    older = store.select(below_step=limit, exclude=veto)
    skipped = ((newest.checkpoint, "rolled back past it"), *newest.skipped, *older.skipped)
    return Selection(older.checkpoint, skipped)


def collect_kernel_log(since: datetime, out_dir: Path, host: str, timeout_s: float = 10.0) -> str:
    """This host's kernel messages since `since` (dmesg, ISO times) into `out_dir/dmesg/<host>.log`."""
    try:
        proc = subprocess.run(["dmesg", "--time-format", "iso"], capture_output=True, timeout=timeout_s,
                              check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"dmesg not collected: {exc}"
    if proc.returncode != 0:
        return f"dmesg not collected: {proc.stderr.decode(errors='replace').strip()[:120]}"
    cutoff = since.astimezone(UTC).timestamp() - 120
    keep = []
    for line in proc.stdout.decode("utf-8", errors="replace").splitlines()[-MAX_KERNEL_LINES * 4:]:
        stamp = line.split(" ", 1)[0].replace(",", ".")
        try:
            t = datetime.fromisoformat(stamp).timestamp()
        except ValueError:
            continue
        if t >= cutoff:
            keep.append(line)
    if not keep:
        return "dmesg: nothing since the attempt started"
    target = out_dir / "dmesg" / f"{host}.log"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(keep[-MAX_KERNEL_LINES:]) + "\n", encoding="utf-8")
    return f"dmesg: {len(keep)} lines"


def write_watchdog_note(logs_dir: Path, at: datetime, text: str) -> tuple[str, int, str]:
    """Append the watchdog's finding to `logs/watchdog.log`; (source, line, text) to cite it."""
    path = logs_dir / "watchdog.log"
    logs_dir.mkdir(parents=True, exist_ok=True)
    line = f"{at.astimezone(UTC).isoformat()} diagnoser watchdog: {text}"
    existing = path.read_text(encoding="utf-8").count("\n") if path.exists() else 0
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
    return "watchdog.log", existing + 1, line


def hang_verdict(verdict: Diagnosis, note: tuple[str, int, str], min_confidence: float) -> Diagnosis:
    """A hang the logs do not explain: the watchdog's own evidence supports a plain restart.

    Used only when the triage found nothing better (unknown, below `min_confidence`)."""
    if verdict.category is not Category.UNKNOWN or verdict.confidence >= min_confidence:
        return verdict
    source, line, text = note
    return Diagnosis(
        category=Category.UNKNOWN, subtype="hang", action=Action.RESTART, confidence=HANG_CONFIDENCE,
        culprit=Culprit(), root_cause="the job stopped making progress and no rank's logs or stacks single out "
        "a culprit; a plain restart from the last checkpoint", evidence=[Evidence(source=source, line=line, text=text),
                                                                          *verdict.evidence[:4]],
        first_failure=FirstFailure(source=source, line=line), decided_by=DecidedBy.RULE,
        notes=[f"decided by the controller's watchdog; the triage said {verdict.subtype} "
               f"({verdict.confidence:.2f})", *verdict.notes], warnings=verdict.warnings, stats=verdict.stats)


def failed_verdict(reason: str) -> Diagnosis:
    """The verdict when the triage itself could not run."""
    return Diagnosis(category=Category.UNKNOWN, subtype="triage_failed", action=Action.ESCALATE, confidence=0.0,
                     root_cause=f"the logs of the attempt could not be triaged: {reason}",
                     decided_by=DecidedBy.NONE)


@dataclass(frozen=True)
class Launch:
    """The command template and extra environment the next attempts use (after exclusions)."""

    template: tuple[str, ...]
    env: dict[str, str]
