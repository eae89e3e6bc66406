"""The corpus of real incidents: labelled excerpts from public bug reports and postmortems.

`diagnoser/data/corpus/*.jsonl` holds one case per line (verbatim `log`, `source_url`,
`source_repo`, `category`, `subtype`, `expected_action`, `culprit`, `label_confidence`,
`rationale`). It is what the incident memory starts with (`corpus_incidents` -> seed incidents),
and what `bench/corpus_eval.py` scores leave-one-repo-out. `expected_action` uses the broader
vocabulary of the labelled sets; `ACTION_OF` maps it onto diagnoser's actions.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from diagnoser.models import Action, Category
from diagnoser.retrieve.incident import Incident
from diagnoser.retrieve.seed import LabelledText, from_labelled

ACTION_OF = {
    "restart_same": Action.RESTART, "resume_from_checkpoint": Action.RESTART,
    "restart_excluding_node": Action.RESTART_EXCLUDING_NODES, "drain_node_and_restart": Action.DRAIN_AND_RESTART,
    "retry_after_backoff": Action.RETRY_AFTER_BACKOFF, "abort_notify_user": Action.STOP_AND_NOTIFY,
    "escalate_to_operator": Action.ESCALATE,
}
_REPO = re.compile(r"https?://github\.com/([^/\s]+/[^/\s#?]+)", re.I)


class CorpusError(ValueError):
    """A corpus file that cannot be used; the message names the file and line."""


class CorpusCase(BaseModel):
    """One labelled real failure."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str = Field(min_length=3)
    source_url: str
    source_repo: str = ""
    log: str = Field(min_length=1)
    log_kind: str = "stderr"
    category: Category
    subtype: str
    expected_action: str
    culprit: str | None = None
    label_confidence: str = "medium"
    rationale: str = ""
    decoy: bool = False

    @property
    def action(self) -> Action:
        return ACTION_OF[self.expected_action]


def repo_of(url: str) -> str:
    m = _REPO.search(url)
    return m.group(1).lower().removesuffix(".git") if m else url.split("/")[2] if "//" in url else url


def load_corpus(directory: Path, require_repo: bool = True) -> list[CorpusCase]:
    """Every case of every `*.jsonl` in `directory` (ids unique; the repo taken from the URL if absent)."""
    cases: list[CorpusCase] = []
    seen: dict[str, str] = {}
    for path in sorted(Path(directory).glob("*.jsonl")):
        for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                case = CorpusCase(**raw)
            except (ValueError, ValidationError, TypeError) as exc:
                raise CorpusError(f"{path}:{no}: {exc}") from exc
            if case.expected_action not in ACTION_OF:
                raise CorpusError(f"{path}:{no}: unknown expected_action {case.expected_action!r}")
            if not case.source_repo:
                if require_repo and not case.source_url:
                    raise CorpusError(f"{path}:{no}: no source_repo and no source_url")
                case = case.model_copy(update={"source_repo": repo_of(case.source_url)})
            case = case.model_copy(update={"source_repo": case.source_repo.lower()})
            if case.id in seen:
                raise CorpusError(f"{path}:{no}: duplicate id {case.id!r} (also in {seen[case.id]})")
            seen[case.id] = str(path.name)
            cases.append(case)
    return cases


def corpus_incidents(cases: list[CorpusCase]) -> list[Incident]:
    """Seed incidents for the cases (origin `seed/corpus/<id>`; resolution = the label's rationale)."""
    items = [LabelledText(origin=f"seed/corpus/{c.id}", text=c.log, category=c.category.value, subtype=c.subtype,
                          action=c.action.value, root_cause=c.rationale[:300],
                          resolution=f"{c.rationale} ({c.source_url})".strip())
             for c in cases if c.category is not Category.UNKNOWN]
    return [inc.model_copy(update={"id": f"corpus:{inc.origin.rsplit('/', 1)[-1]}"}) for inc in from_labelled(items)]
