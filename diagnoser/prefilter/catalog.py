"""Failure vocabularies published by vendors and projects, kept as data tables.

Each `diagnoser/data/catalog/*.yaml` file is one published vocabulary (NVIDIA's Xid catalog, CUDA's
error enum, NCCL's result codes, errno, Slurm job states, ...) with the document it was taken
from. A table is either *keyed* (one line shape, many codes: `template` holds `{key}`) or
*phrases* (each entry brings its own patterns). Every entry becomes a rule the engine matches
alongside the hand-written runbooks; an entry that names a `runbook` points the verdict at that
runbook's on-call text and takes that runbook's decision (category, action, localised action) for
whatever it does not set itself: the decision is written once, in the runbook, and the table's
`defaults` apply only to entries that name no runbook or where the runbook is silent.

    id: nvidia-xid
    title: NVIDIA Xid errors
    source: "NVIDIA, Xid Errors (https://docs.nvidia.com/deploy/xid-errors/), r575"
    kind: keyed
    template: 'NVRM: Xid \\((?:PCI:)?(?P<gpu>[0-9a-fA-F:]+)\\): {key}\\b'
    defaults: {priority: 80, confidence: 0.85, category: hardware, action: drain_and_restart}
    entries:
      - key: 79
        title: GPU has fallen off the bus
        subtype: gpu_xid_79
        runbook: gpu-xid-79
        examples: ['NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.']
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from functools import lru_cache
from pathlib import Path

import platformdirs
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from diagnoser import atomic
from diagnoser.models import Action, Category, Role
from diagnoser.prefilter.runbooks import Examples, Runbook, RunbookError

CATALOG_DIR = Path(__file__).resolve().parents[1] / "data" / "catalog"
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SLUG = re.compile(r"[^a-z0-9]+")
_PREFIX_TOKEN = re.compile(r"\{prefix:(\w+)\}")


def _with_prefixes(pattern: str, prefixes: dict[str, str]) -> str:
    """The pattern with each `{prefix:NAME}` replaced by that prefix's fragment."""
    return _PREFIX_TOKEN.sub(lambda m: prefixes[m.group(1)], pattern)


class Entry(BaseModel):
    """One code or phrase of a vocabulary and what it means for a training job."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str | None = None
    id: str | None = None  # a phrase entry's id (default: from its title)
    patterns: list[str] = Field(default_factory=list)
    title: str
    category: Category | None = None
    subtype: str | None = None
    action: Action | None = None
    localised_action: Action | None = None  # the action when the evidence names a node (runbooks.Runbook)
    role: Role | None = None
    priority: int | None = Field(default=None, ge=0, le=100)
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    severity: str | None = None
    scope: str | None = None
    derived_from: list[str] = Field(default_factory=list)  # corpus repositories the entry was written from
    given_by: str | None = None  # a job-wide analysis gives this verdict (no patterns of its own; runbooks.py)
    part_fault_after: int | None = None  # distinct processes on one GPU that make the fault the GPU's
    runbook: str | None = None
    source: str | None = None  # overrides the table's source for this entry
    note: str = ""  # the documented cause / operator action, in the source's words where possible
    examples: list[str] = Field(default_factory=list)
    no_match: list[str] = Field(default_factory=list)


class Catalog(BaseModel):
    """One published failure vocabulary."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    title: str
    source: str = Field(min_length=10)
    kind: str = Field(pattern="^(keyed|phrases)$")
    template: str | None = None
    # named regex fragments many entries share (how printers introduce a code); a pattern says
    # `{prefix:NAME}` (a quantifier is never `{prefix`, so str.format-style braces stay free), and so may
    # a prefix, naming one defined above it (stored expanded)
    prefixes: dict[str, str] = Field(default_factory=dict)
    extractors: dict[str, str] = Field(default_factory=dict)
    summary: str = ""  # format string; {title} and the match's named groups are filled in
    defaults: dict = Field(default_factory=dict)
    entries: list[Entry] = Field(min_length=1)

    @field_validator("prefixes")
    @classmethod
    def _expand_prefixes(cls, prefixes: dict[str, str]) -> dict[str, str]:
        expanded: dict[str, str] = {}
        for name, fragment in prefixes.items():
            unknown = set(_PREFIX_TOKEN.findall(fragment)) - set(expanded)
            if unknown:
                raise ValueError(f"prefix {name!r} uses prefixes not defined above it: {sorted(unknown)}")
            expanded[name] = _with_prefixes(fragment, expanded)
        return expanded

    @model_validator(mode="after")
    def _shape(self) -> Catalog:
        if self.kind == "keyed":
            if not self.template or "{key}" not in self.template:
                raise ValueError("a keyed catalog needs a template containing {key}")
            missing = [e.title for e in self.entries if e.key is None]
            if missing:
                raise ValueError(f"keyed entries without key: {missing[:3]}")
        else:
            missing = [e.title for e in self.entries if not e.patterns and not e.given_by]
            if missing:
                raise ValueError(f"phrase entries without patterns: {missing[:3]}")
        used = {name for e in self.entries for p in [*e.patterns, self.template or ""]
                for name in _PREFIX_TOKEN.findall(p)}
        if used - set(self.prefixes):
            raise ValueError(f"patterns use undefined prefixes: {sorted(used - set(self.prefixes))}")
        return self


def _entry_id(catalog: Catalog, entry: Entry) -> str:
    tail = entry.id or (entry.key if entry.key is not None else entry.title[:60])
    return f"{catalog.id}.{_SLUG.sub('-', str(tail).lower()).strip('-')}"


def _signatures(catalog: Catalog, entry: Entry) -> list[str]:
    if catalog.kind == "phrases":
        patterns = list(entry.patterns)
    else:
        assert catalog.template is not None and entry.key is not None
        patterns = [catalog.template.replace("{key}", re.escape(entry.key)), *entry.patterns]
    return [_with_prefixes(p, catalog.prefixes) for p in patterns]


# what an entry that names a runbook takes from it when it does not say itself
INHERITED = ("category", "action", "localised_action")


def runbook_decisions(runbooks: list[Runbook]) -> tuple[tuple[str, str, str, str, str | None], ...]:
    """(id, path, category, action, localised action) of each runbook: what catalog entries point at."""
    return tuple(sorted((b.id, b.path, b.category.value, b.action.value,
                         b.localised_action.value if b.localised_action else None) for b in runbooks))


def to_runbook(catalog: Catalog, entry: Entry, file_name: str,
               runbooks: dict[str, dict[str, str | None]]) -> Runbook:
    """The rule an entry becomes; a field the entry does not set comes from the runbook it names
    (category, action, localised action), then from the table's defaults."""
    d = catalog.defaults
    named = runbooks.get(entry.runbook or "", {})

    def pick(name: str, fallback: object = None) -> object:
        value = getattr(entry, name)
        # the localised action goes with the action it refines: an entry that decides its own
        # action does not take the runbook's localisation of another one
        own_decision = name == "localised_action" and entry.action is not None
        if value is None and name in INHERITED and not own_decision:
            value = named.get(name)
        return value if value is not None else d.get(name, fallback)

    source = entry.source or catalog.source
    summary = (catalog.summary or "{title}").replace("{title}", entry.title.replace("{", "{{").replace("}", "}}"))
    path = named.get("path") or f"catalog/{file_name}"
    # the shipped tables' patterns are compiled by tests/test_catalog.py; compiling 1,600 of them at
    # every start would cost half a second, and only the patterns that hit a line are ever compiled
    return Runbook.model_validate(dict(
        id=_entry_id(catalog, entry), title=entry.title, category=pick("category"),
        subtype=pick("subtype") or _SLUG.sub("_", f"{catalog.id}_{entry.key}".lower()).strip("_"),
        action=pick("action"), localised_action=pick("localised_action"), role=pick("role", Role.ROOT),
        severity=pick("severity", "medium"),
        priority=pick("priority"), confidence=pick("confidence"), scope=pick("scope"),
        derived_from=[r.lower() for r in entry.derived_from], part_fault_after=entry.part_fault_after,
        given_by=entry.given_by,
        signatures=_signatures(catalog, entry),
        extractors=catalog.extractors, summary=summary,
        examples=Examples(match=entry.examples, no_match=entry.no_match),
        body=f"{entry.note}\n\nSource: {source}".strip(), path=path, catalog=f"catalog/{file_name}",
    ), context={"patterns_checked": True})


def parse_catalog(path: Path) -> Catalog:
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_YAML_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise RunbookError(f"{path}: not a readable YAML catalog: {exc}") from exc
    if not isinstance(raw, dict):
        raise RunbookError(f"{path}: a catalog must be a mapping")
    for entry in raw.get("entries") or []:
        if isinstance(entry, dict) and entry.get("key") is not None:
            entry["key"] = str(entry["key"])  # `key: 79` in YAML is an int
    try:
        return Catalog(**raw)
    except (ValidationError, TypeError) as exc:
        raise RunbookError(f"{path}: {exc}") from exc


CACHE_FORMAT = "catalog-rules-4"  # bump when Runbook or to_runbook changes: it keys the parsed-rules cache


def _stats(directory: Path) -> tuple[tuple[str, int, int], ...]:
    return tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(directory.glob("*.yaml")))


def _cache_file(directory: Path, decisions: tuple, stats: tuple) -> Path:
    # a runbook's changed action changes the entries that point at it: its decision is in the key
    key = hashlib.sha256(repr((CACHE_FORMAT, str(directory), stats, decisions)).encode()).hexdigest()[:24]
    cache = Path(os.environ.get("DIAGNOSER_CACHE") or platformdirs.user_cache_dir("diagnoser"))
    return cache / f"catalog-{key}.json"


@lru_cache(maxsize=4)
def _load(directory: Path, decisions: tuple, stats: tuple) -> tuple[Runbook, ...]:
    """Parsing the YAML tables costs ~0.4 s a start; the parsed rules are kept in the user's cache,
    keyed by the tables' names, sizes and times (a changed table is parsed again)."""
    cached = _cache_file(directory, decisions, stats)
    try:  # plain JSON, validated again on load: a cache file is data, never code
        return tuple(Runbook.model_validate(d, context={"patterns_checked": True})
                     for d in json.loads(cached.read_bytes()))
    except (OSError, ValueError, TypeError):
        pass  # no cache entry yet, or a damaged one: parse
    named = {i: {"path": p, "category": c, "action": a, "localised_action": la} for i, p, c, a, la in decisions}
    rules = _parse_all(directory, named)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        # a concurrent start never reads half a file
        atomic.write_text(cached, json.dumps([r.model_dump(mode="json") for r in rules]))
    except OSError:
        pass  # a read-only home: just slower
    return rules


def _parse_all(directory: Path, named: dict[str, dict[str, str | None]]) -> tuple[Runbook, ...]:
    out: list[Runbook] = []
    for file in sorted(directory.glob("*.yaml")):
        catalog = parse_catalog(file)
        for entry in catalog.entries:
            try:
                out.append(to_runbook(catalog, entry, file.name, named))
            except (ValidationError, TypeError) as exc:
                raise RunbookError(f"{file}: entry {entry.title!r}: {exc}") from exc
    return tuple(out)


def load_catalog_rules(runbooks: list[Runbook], directory: Path | None = None) -> list[Runbook]:
    """Every catalog entry as a rule; entries whose id a runbook already uses are skipped."""
    directory = directory or CATALOG_DIR
    if not directory.is_dir():
        return []
    taken = {b.id for b in runbooks}
    rules = [r for r in _load(directory, runbook_decisions(runbooks), _stats(directory)) if r.id not in taken]
    seen: dict[str, str] = {}
    for r in rules:
        if r.id in seen:
            raise RunbookError(f"duplicate catalog entry id {r.id!r} ({r.path})")
        seen[r.id] = r.path
    return rules
