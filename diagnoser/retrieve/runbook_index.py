"""The runbook index: every runbooks/*.md retrievable by similarity to a failure's evidence.

A failure that no signature matches still gets the closest runbooks. Each runbook is read leniently
(YAML front matter parsed with PyYAML, then the Markdown body; a file the rule engine would reject
is still indexed), masked like incident signatures and indexed by TF-IDF (see lexical.py) over its
title, summary, example lines and body.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from diagnoser.retrieve.lexical import LexicalIndex
from diagnoser.retrieve.mask import mask_text
from diagnoser.retrieve.signature import signature_text

_FRONT = re.compile(r"\A---\s*\n(.*?)\n---\s*\n?(.*)\Z", re.S)


@dataclass(frozen=True)
class RunbookDoc:
    """The parts of a runbook that retrieval and the seed memory use."""

    id: str
    path: str  # "runbooks/<file>.md", as in diagnosis/v1 `runbook`
    title: str = ""
    category: str = "unknown"
    subtype: str = ""
    action: str = "escalate"
    summary: str = ""
    examples: tuple[str, ...] = ()
    body: str = ""
    meta: dict = field(default_factory=dict, compare=False, repr=False)

    def text(self) -> str:
        """What the index sees: title, summary, example log lines, body."""
        return "\n".join([self.title, self.summary, *self.examples, self.body])


def read_runbook(path: Path) -> RunbookDoc | None:
    """Parse one runbook; None if it has no usable front matter."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    m = _FRONT.match(text)
    if not m:
        return None
    try:
        meta = yaml.safe_load(m.group(1)) or {}
    except yaml.YAMLError:
        return None
    if not isinstance(meta, dict):
        return None
    examples = meta.get("examples") or {}
    matches = examples.get("match") if isinstance(examples, dict) else None
    return RunbookDoc(
        id=str(meta.get("id") or path.stem), path=f"runbooks/{path.name}", title=str(meta.get("title") or ""),
        category=str(meta.get("category") or "unknown"), subtype=str(meta.get("subtype") or path.stem),
        action=str(meta.get("action") or "escalate"), summary=str(meta.get("summary") or ""),
        examples=tuple(str(x) for x in (matches or []) if isinstance(x, str | int | float)),
        body=m.group(2), meta=meta,
    )


def read_runbooks(directory: Path) -> list[RunbookDoc]:
    """Every readable runbook of a directory (README and _-prefixed files skipped), sorted by id."""
    if not directory.is_dir():
        return []
    docs = [read_runbook(p) for p in sorted(directory.glob("*.md")) if not p.name.startswith(("_", "README"))]
    return sorted((d for d in docs if d is not None), key=lambda d: d.id)


class RunbookIndex:
    """TF-IDF search over runbook texts."""

    def __init__(self, docs: list[RunbookDoc]) -> None:
        self.docs = {d.id: d for d in docs}
        self.index = LexicalIndex.build((d.id, mask_text(d.text())) for d in docs)

    @classmethod
    def from_dir(cls, directory: Path) -> RunbookIndex:
        return cls(read_runbooks(directory))

    @classmethod
    def from_dirs(cls, directories: list[Path]) -> RunbookIndex:
        """Runbooks of several directories; a later directory's runbook replaces an earlier one of the same id."""
        docs = {d.id: d for directory in directories for d in read_runbooks(directory)}
        return cls(sorted(docs.values(), key=lambda d: d.id))

    def __len__(self) -> int:
        return len(self.docs)

    def search(self, evidence_text: str, k: int = 3) -> list[tuple[RunbookDoc, float]]:
        """The `k` runbooks closest to the (unmasked) evidence, best first."""
        signature = signature_text(evidence_text)
        if not signature:
            return []
        return [(self.docs[i], s) for i, s in self.index.search(signature, k)]
