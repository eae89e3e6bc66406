"""What a worker process of the service runs: the same triage as `diagnoser triage --json`.

rules + retrieval (`triage.analyse`), the LLM stage when an endpoint is configured (the same
`DIAGNOSER_LLM_*` settings as the CLI), then the one redaction. Runs in a separate process: the
scan keeps per-process state (compiled rules, matcher scratch), so one triage per process at a time.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def setup(store: str | None) -> None:
    """Worker start-up: the incident store the service uses, and the rules compiled once."""
    if store:
        os.environ["DIAGNOSER_STORE"] = store
    from diagnoser.prefilter.runbooks import load_runbooks

    load_runbooks()


def ready() -> bool:
    """A no-op job: True once a worker has started and loaded the rules."""
    return True


def triage_job(paths: list[str], within: list[str] | None) -> dict[str, Any]:
    """{"ok": True, "diagnosis": diagnosis/v1, "llm": outcome, "seconds": s} or {"ok": False, "error": reason}."""
    from diagnoser.classify import load_config
    from diagnoser.classify.redact import redact, redact_diagnosis
    from diagnoser.classify.stage import review, without_off_note
    from diagnoser.collect.files import UnusableInput
    from diagnoser.metrics_export import llm_outcome
    from diagnoser.prefilter.runbooks import RunbookError
    from diagnoser.triage import analyse

    started = time.monotonic()
    try:
        analysis = analyse(paths, within=tuple(Path(p) for p in within) if within else None)
        config = load_config()
        diagnosis = redact_diagnosis(without_off_note(review(analysis, config), config))
    except (UnusableInput, RunbookError, ValueError) as exc:
        return {"ok": False, "error": redact(str(exc))}
    return {"ok": True, "diagnosis": diagnosis.to_json_dict(), "llm": llm_outcome(config, diagnosis),
            "seconds": time.monotonic() - started}
