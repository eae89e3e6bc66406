"""The controller's pluggable defaults: the triage of an attempt's logs and the notifier."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from diagnoser.act.approval import write_json
from diagnoser.classify.redact import scrub
from diagnoser.models import Diagnosis

log = logging.getLogger(__name__)
TriageFn = Callable[[list[str]], Diagnosis]


def default_triage(runbooks: Path | None) -> TriageFn:
    """The rule triage of the attempt's logs; its runbooks are loaded and compiled in the
    background at start-up, so the first failure does not pay for it."""
    lock = threading.Lock()  # the triage keeps per-process state: one call at a time

    def run(paths: list[str]) -> Diagnosis:
        from diagnoser.triage import triage

        with lock:
            return triage(paths, runbook_dir=runbooks)

    def warm() -> None:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            probe = Path(tmp) / "rank0.log"
            probe.write_text("warm-up\n")
            with contextlib.suppress(Exception):  # the real triage reports problems later
                run([str(probe)])

    thread = threading.Thread(target=warm, name="triage-warm-up", daemon=True)
    thread.start()
    run.warm_up = thread  # type: ignore[attr-defined]  # joined before exit (see Controller.run)
    return run


def default_notifier(command: str | None) -> Callable[[Path, dict], None]:
    """Write `notification.json` in the run directory; run `command` with DIAGNOSER_NOTIFY_FILE."""
    def notify(run_dir: Path, payload: dict) -> None:
        path = run_dir / "notification.json"
        write_json(path, scrub(payload))
        if command:
            try:
                subprocess.run(command, shell=True, timeout=30, check=False, stdin=subprocess.DEVNULL,
                               env={**os.environ, "DIAGNOSER_NOTIFY_FILE": str(path)})
            except (OSError, subprocess.TimeoutExpired) as exc:
                log.warning("notify command failed: %s", exc)
    return notify
