"""Runbooks: one markdown file per failure class, signatures in YAML front matter.

The library lives in `runbooks/` at the top of the project (installed under
`<prefix>/share/diagnoser/runbooks`). A site directory (`--runbooks` or `DIAGNOSER_RUNBOOKS`) adds to it: a
site runbook with a new id is one more rule, one with a shipped id replaces that runbook (`source` and
`overrides` say which file replaced which).
"""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from diagnoser.models import Action, Category, Role
from diagnoser.shipped import shipped_dir

FIELD_NAMES = frozenset({"node", "rank", "local_rank", "gpu", "peer", "pid", "detail"})


class RunbookError(ValueError):
    """A runbook file that cannot be used; the message names the file and the problem."""


class Examples(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    match: list[str] = Field(default_factory=list)
    no_match: list[str] = Field(default_factory=list)


class Runbook(BaseModel):
    """A failure class: what it looks like in logs and what to do about it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    title: str
    category: Category
    subtype: str
    action: Action
    # the action when the evidence localises the failure to a node (a peer several processes name, a node
    # the line names): a connection or device error on one node is that node's, the same error with no
    # node to blame is configuration or fabric, which `action` (usually escalate) covers
    localised_action: Action | None = None
    role: Role = Role.ROOT
    severity: str = "medium"
    priority: int = Field(ge=0, le=100)
    confidence: float = Field(ge=0.0, le=1.0)
    signatures: list[str] = Field(default_factory=list)  # at least one, unless `given_by`
    # the job-wide analysis that gives this verdict from many lines together (prefilter/consistency.py),
    # for a failure no single line shows: such a rule has no signatures of its own
    given_by: str | None = None
    extractors: dict[str, str] = Field(default_factory=dict)
    summary: str = ""
    examples: Examples = Field(default_factory=Examples)
    body: str = ""
    path: str = ""
    catalog: str | None = None  # the published vocabulary (data/catalog/*.yaml) this rule came from
    # what the failure can be attributed to: a node (hardware, a broken node stack), a rank (the job's
    # code on one rank: its node is not named), nothing narrower than the job (preemption, DNS,
    # NaN loss, a cancellation), or one connection between two processes, reported from one end
    # (a node only where the reports localise it: prefilter/culprit.py)
    scope: Literal["node", "rank", "job", "connection"] | None = None
    # corpus repositories whose incidents this rule was written from: bench/corpus_eval.py turns the
    # rule off for their cases, so leave-one-repo-out accuracy stays honest
    derived_from: list[str] = Field(default_factory=list)
    # a fault the vendor attributes to the program or the part: this many distinct processes hitting it on
    # one GPU make it the GPU's (prefilter/recurrence.py)
    part_fault_after: int | None = Field(default=None, ge=2)
    source: str = ""  # the file this runbook was read from
    overrides: str | None = None  # the shipped runbook file a site runbook of the same id replaces

    @property
    def names_peer(self) -> bool:
        """A connection between processes: some signature captures the other end (`peer`)."""
        return any("(?P<peer>" in sig for sig in self.signatures)

    @property
    def about_connection(self) -> bool:
        """The failure of one connection between processes: the reporting end is no more to blame than the
        other, whether or not the line names the other end."""
        return self.names_peer or self.scope == "connection"

    @property
    def culprit_scope(self) -> str:
        if self.scope:
            return self.scope
        return "rank" if self.category in (Category.USER_CODE, Category.UNKNOWN) else "node"

    @model_validator(mode="after")
    def _has_a_signature(self) -> Runbook:
        if not self.signatures and not self.given_by:
            raise ValueError("a runbook needs at least one signature (or `given_by`: the analysis that gives it)")
        return self

    @field_validator("signatures")
    @classmethod
    def _compile(cls, patterns: list[str], info: ValidationInfo) -> list[str]:
        if info.context and info.context.get("patterns_checked"):
            return patterns  # the shipped catalogs: compiled by the test suite, compiled here only when they hit
        for pattern in patterns:
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"signature {pattern!r} does not compile: {exc}") from exc
            unknown = set(compiled.groupindex) - FIELD_NAMES
            if unknown:
                raise ValueError(f"signature {pattern!r} uses unknown group names {sorted(unknown)}")
        return patterns

    @cached_property
    def compiled(self) -> list[re.Pattern[str]]:
        return [re.compile(p) for p in self.signatures]

    @cached_property
    def compiled_extractors(self) -> list[re.Pattern[str]]:
        return [re.compile(p) for p in self.extractors.values()]

    def section(self, heading: str) -> str:
        """The text under a `## heading` of the body ('' if absent)."""
        m = re.search(rf"^##\s+{re.escape(heading)}\s*$(.*?)(?=^##\s|\Z)", self.body, re.M | re.S | re.I)
        return m.group(1).strip() if m else ""


# libyaml's C loader parses the library ~10x faster than the pure-Python one (same safe subset)
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_FRONT = re.compile(r"\A---\s*\n(.*?)\n---\s*\n?(.*)\Z", re.S)


def parse_runbook(path: Path) -> Runbook:
    text = path.read_text(encoding="utf-8")
    m = _FRONT.match(text)
    if not m:
        raise RunbookError(f"{path}: no YAML front matter between '---' lines")
    try:
        meta = yaml.load(m.group(1), Loader=_YAML_LOADER) or {}
    except yaml.YAMLError as exc:
        raise RunbookError(f"{path}: front matter is not valid YAML: {exc}") from exc
    if not isinstance(meta, dict):
        raise RunbookError(f"{path}: front matter must be a mapping")
    try:
        return Runbook(**meta, body=m.group(2), path=f"runbooks/{path.name}", source=str(path))
    except (ValueError, TypeError) as exc:
        raise RunbookError(f"{path}: {exc}") from exc


def default_runbook_dir() -> Path:
    """The site directory if one is set (`DIAGNOSER_RUNBOOKS`), else the shipped one."""
    return shipped_dir("runbooks", "DIAGNOSER_RUNBOOKS")


def shipped_runbook_dir() -> Path:
    """The runbooks shipped with diagnoser: the source checkout, then the installed share dir."""
    return shipped_dir("runbooks", None)


def _read_dir(directory: Path) -> list[Runbook]:
    books = [parse_runbook(p) for p in sorted(directory.glob("*.md")) if not p.name.startswith(("_", "README"))]
    seen: dict[str, str] = {}
    for book in books:
        if book.id in seen:
            raise RunbookError(f"duplicate runbook id {book.id!r} in {book.source} and {seen[book.id]}")
        seen[book.id] = book.source
    if not books:
        raise RunbookError(f"no runbooks in {directory}")
    return books


def load_runbooks(directory: Path | None = None, catalogs: bool = True) -> list[Runbook]:
    """The shipped runbooks, with a site directory's on top (`directory`, else `$DIAGNOSER_RUNBOOKS`): new ids
    are added, shipped ids replaced in place; then the rules of the shipped failure catalogs
    (`prefilter/catalog.py`) that no runbook overrides by id."""
    shipped = shipped_runbook_dir()
    site = directory or default_runbook_dir()
    if not site.is_dir():
        raise RunbookError(f"runbook directory not found: {site} (--runbooks / DIAGNOSER_RUNBOOKS)")
    by_id = {b.id: b for b in _read_dir(shipped)} if shipped.is_dir() else {}
    if not shipped.is_dir() or site.resolve() != shipped.resolve():
        for book in _read_dir(site):
            replaced = by_id.get(book.id)
            by_id[book.id] = book.model_copy(update={"overrides": replaced.source}) if replaced else book
    books = list(by_id.values())  # shipped in file order, site additions after them
    if catalogs:
        from diagnoser.prefilter.catalog import load_catalog_rules  # the catalog builds on this module

        books += load_catalog_rules(books)
    return books
