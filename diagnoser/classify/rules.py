"""Rule learning: turn an LLM-diagnosed incident into a DRAFT runbook for a human to review.

The decisive evidence line becomes a signature: timestamps and launcher prefixes are cut, the
variable parts (numbers, hex ids, PCI ids, IPs, paths, host names) become classes, the rest is
escaped literally. Candidates go from general (the longest constant phrase) to specific (the whole
masked message); the first one that passes every check is written:
- it compiles (and in Hyperscan, when installed) and has a literal of at least 4 characters;
- it matches the incident's own line and at least one line of the incident's logs;
- it matches no line of any `log_fixtures/*/logs` scenario labelled with another subtype, no
  runbook example of another class, no `no_match` example, no ordinary training output.
Drafts go to a drafts directory, never into `runbooks/`.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from diagnoser.collect.prefixes import split_prefix
from diagnoser.collect.text import clean_line, visible_segments
from diagnoser.models import DecidedBy, Diagnosis
from diagnoser.prefilter.runbooks import Runbook, RunbookError, default_runbook_dir, load_runbooks, parse_runbook

MAX_LINE = 4096
ORDINARY = [
    "[rank0]: step 1200 | loss 2.314 | lr 3.0e-4 | 412 TFLOPS",
    "gpu-017:1234:1234 [0] NCCL INFO comm 0x55 rank 5 nranks 16 cudaDev 0 nvmlDev 0 busId 3b000 - Init COMPLETE",
    "  0%|          | 0/387 [00:00<?, ?it/s]",
    "[2025-03-04 05:06:07,123] torch.distributed.run: [WARNING] Setting OMP_NUM_THREADS environment variable",
    "Epoch 3: 45%|####5     | 450/1000 [02:13<02:43, 3.37it/s, loss=0.321, v_num=12]",
    "Saving checkpoint to /checkpoints/step_1200 ... done in 12.3 s",
]
_LEADING = [
    re.compile(r"^\[[^\]]{0,40}\d{2}:\d{2}:\d{2}[^\]]{0,20}\]\s*"),  # [Tue Mar  4 05:06:07 2025], [2026-...]
    re.compile(r"^\[\s*\d+\.\d+\]\s*"),  # dmesg [  811.203344]
    re.compile(r"^\d{4}-\d{2}-\d{2}[T ][\d:.,]+(?:Z|[+-]\d{2}:?\d{2})?\s*"),  # ISO
    re.compile(r"^[A-Z][a-z]{2}\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}\s+\S+\s+[\w\-.\[\]]+:\s*(?:\[\s*\d+\.\d+\]\s*)?"),
    re.compile(r"^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+\s+\S+\]\s*"),  # glog
]
# variable parts of a message, most specific first: (regex, replacement pattern)
_VARIABLE = [
    (r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", r"[0-9a-fA-F-]{36}"),
    (r"\b[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?\b",
     r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"),
    (r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b", r"\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?"),
    (r"(?:\.{0,2}/[\w.\-]+)+/?", r"\S+"),
    (r"\b0x[0-9a-fA-F]+\b", r"0x[0-9a-fA-F]+"),
    (r"\b[a-zA-Z][\w]*-\d+[\w.-]*\b", r"[\w.-]+"),  # host names like gpu-017, node-b17-3
    (r"\b[0-9a-f]{12,}\b", r"[0-9a-f]+"),
    (r"(?<![A-Za-z_])\d+(?:\.\d+)?(?![A-Za-z_])", r"\d+(?:\.\d+)?"),
]
_VARIABLE_RE = re.compile("|".join(f"({p})" for p, _ in _VARIABLE))
_LITERAL = re.compile(r"[A-Za-z_][A-Za-z_ ]{3,}")


class ProposeError(ValueError):
    """No draft can be proposed; the message says why."""


@dataclass
class Draft:
    """A verified draft runbook (written to `path` unless it was a dry run)."""

    id: str
    signature: str
    text: str
    anchor: str
    incident_matches: int
    fixture_files: int
    examples_checked: int
    path: Path | None = None
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (candidate, reason)
    overlaps: list[str] = field(default_factory=list)  # existing runbooks matching the anchor line


def message_of(line: str) -> str:
    """The line without launcher prefix and leading timestamps."""
    text = split_prefix(clean_line(line)).rest
    for _ in range(3):
        before = text
        for pattern in _LEADING:
            text = pattern.sub("", text, count=1)
        if text == before:
            break
    return text.strip()


def _segments(message: str) -> list[tuple[bool, str]]:
    """(is_variable, text) pieces of a message."""
    out: list[tuple[bool, str]] = []
    pos = 0
    for m in _VARIABLE_RE.finditer(message):
        if m.start() > pos:
            out.append((False, message[pos:m.start()]))
        if m.end() > m.start():
            out.append((True, m.group(0)))
        pos = m.end()
    if pos < len(message):
        out.append((False, message[pos:]))
    return out


def _pattern(pieces: list[tuple[bool, str]]) -> str:
    out = []
    for variable, text in pieces:
        if variable:
            out.append(next(rep for pat, rep in _VARIABLE if re.fullmatch(pat, text)))
        else:
            out.append(re.sub(r"\\ ", " ", re.escape(text)))
    return re.sub(r"(?: )+", " ", "".join(out)).strip()


def candidates(line: str) -> list[str]:
    """Signature candidates for a line, most general first."""
    pieces = _segments(message_of(line))
    constant = sorted(((len(t.strip()), i) for i, (v, t) in enumerate(pieces) if not v), reverse=True)
    out: list[str] = []
    for _, i in constant[:2]:
        text = pieces[i][1].strip(" :,;=()[]'\"")
        if len(text) >= 12 and len(text.split()) >= 2:
            out.append(re.sub(r"\\ ", " ", re.escape(text)))
    whole = _pattern(pieces)
    if whole:
        out.append(whole)
    return list(dict.fromkeys(p for p in out if _LITERAL.search(p.replace("\\", ""))))


def _matches(regex: re.Pattern[str], line: str) -> bool:
    for segment in visible_segments(clean_line(line)):
        if regex.search(split_prefix(segment).rest) or regex.search(segment):
            return True
    return False


def _read_lines(path: Path) -> Iterator[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            for line in f:
                yield line[:MAX_LINE]
    except (OSError, EOFError):
        return


def _files(paths: list[Path]) -> Iterator[Path]:
    for p in paths:
        if p.is_dir():
            yield from sorted(x for x in p.rglob("*") if x.is_file())
        elif p.is_file():
            yield p


def _fixture_sets(fixtures_dir: Path) -> list[tuple[str | None, list[Path]]]:
    """(expected subtype, log files) per scenario."""
    out = []
    for scenario in sorted(p for p in fixtures_dir.iterdir() if (p / "logs").is_dir()):
        subtype = None
        expected = scenario / "expected.yaml"
        if expected.is_file():
            subtype = (yaml.safe_load(expected.read_text()) or {}).get("subtype")
        out.append((subtype, list(_files([scenario / "logs"]))))
    return out


def _hyperscan_ok(pattern: str) -> bool:
    from diagnoser.prefilter.engine import HyperscanMatcher, hyperscan

    if hyperscan is None:
        return True
    try:
        HyperscanMatcher([pattern])
    except hyperscan.error:
        return False
    return True


def verify(pattern: str, anchor: str, subtype: str, incident: list[Path], fixtures: list[tuple[str | None, list[Path]]],
           books: list[Runbook]) -> tuple[str | None, int, int, int]:
    """(reason it fails or None, incident lines matched, fixture files checked, examples checked)."""
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        return f"does not compile: {exc}", 0, 0, 0
    if not _hyperscan_ok(pattern):
        return "not Hyperscan-compatible", 0, 0, 0
    if not _matches(regex, anchor):
        return "does not match the incident's line", 0, 0, 0
    hits = sum(1 for f in _files(incident) for line in _read_lines(f) if _matches(regex, line))
    if hits == 0:
        return "matches no line of the incident's logs", 0, 0, 0
    for line in ORDINARY:
        if _matches(regex, line):
            return f"matches ordinary output: {line!r}", hits, 0, 0
    examples = 0
    for book in books:
        own = book.subtype == subtype
        for line in ([] if own else book.examples.match) + book.examples.no_match:
            examples += 1
            if _matches(regex, line):
                return f"matches an example of {book.id}: {line[:120]!r}", hits, 0, examples
    nfiles = 0
    for expected, files in fixtures:
        for f in files:
            nfiles += 1
            if expected == subtype:
                continue  # a scenario of this very class may match
            for line in _read_lines(f):
                if _matches(regex, line):
                    return f"false match in {f}: {line.strip()[:120]!r}", hits, nfiles, examples
    return None, hits, nfiles, examples


def _kebab(subtype: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", subtype.lower()).strip("-") or "proposed"


def render_draft(d: Diagnosis, rid: str, signature: str, anchor: str, priority: int, header: list[str]) -> str:
    title = d.root_cause.split(";")[0].strip().rstrip(".")[:100] or d.subtype.replace("_", " ")
    meta = {"id": rid, "title": title, "category": d.category.value, "subtype": d.subtype, "action": d.action.value,
            "role": "root", "severity": "medium", "priority": priority, "confidence": 0.6,
            "signatures": [signature], "summary": title,
            "examples": {"match": [clean_line(anchor)], "no_match": []}}
    front = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000)
    evidence = "\n".join(f"- `{e.source}:{e.line}`: {e.text[:200]}" for e in d.evidence[:5])
    explanation = next((n.removeprefix("LLM explanation: ") for n in d.notes if n.startswith("LLM explanation:")), "")
    return (
        "---\n" + "".join(f"# {h}\n" for h in header) + front + "---\n"
        f"# {title}\n\n## What it means\n{d.root_cause}\n{explanation}\n\n"
        f"Proposed from an incident diagnosed by the LLM stage. Evidence:\n{evidence}\n\n"
        "## What to check\n- TODO(reviewer): the commands an on-call engineer runs to confirm this class.\n"
        "- Whether the signature is specific enough: widen or narrow it, add `no_match` examples.\n\n"
        f"## How to fix\n1. diagnoser's action: `{d.action.value}`. TODO(reviewer): confirm it fits every "
        "occurrence of this signature.\n2. TODO(reviewer): the manual fix.\n"
    )


def propose_rule(d: Diagnosis, incident_logs: list[Path], drafts_dir: Path, fixtures_dir: Path,
                 runbook_dir: Path | None = None, *, write: bool = True, force: bool = False) -> Draft:
    """Derive, verify and (unless `write=False`) write a draft runbook for an LLM-diagnosed incident."""
    if d.decided_by not in (DecidedBy.LLM, DecidedBy.RETRIEVAL):
        raise ProposeError(f"the verdict was decided by {d.decided_by.value}, not by the LLM: "
                           + (f"{d.runbook} already covers it" if d.runbook else "nothing to learn from"))
    if d.category.value == "unknown" or not d.evidence:
        raise ProposeError("the verdict has no category or no evidence line to learn a signature from")
    books = load_runbooks(runbook_dir)
    rundir = (runbook_dir or default_runbook_dir()).resolve()
    out = drafts_dir.resolve()
    if out == rundir or rundir in out.parents:
        raise ProposeError(f"drafts are never written into the runbook directory {rundir}: choose another --out")
    if not fixtures_dir.is_dir():
        raise ProposeError(f"fixtures not found: {fixtures_dir} (every draft is checked against them)")
    fixtures = _fixture_sets(fixtures_dir)
    first = d.first_failure
    anchors = sorted(d.evidence, key=lambda e: not (first and (e.source, e.line) == (first.source, first.line)))
    rejected: list[tuple[str, str]] = []
    for evidence in anchors:
        for pattern in candidates(evidence.text):
            reason, hits, nfiles, nexamples = verify(pattern, evidence.text, d.subtype, incident_logs, fixtures, books)
            if reason:
                rejected.append((pattern, reason))
                continue
            return _write(d, books, pattern, evidence.text, hits, nfiles, nexamples, rejected, drafts_dir,
                          write, force)
    detail = "; ".join(f"{p!r}: {r}" for p, r in rejected[:4])
    raise ProposeError(f"no signature passed verification ({detail})")


def _write(d: Diagnosis, books: list[Runbook], pattern: str, anchor: str, hits: int, nfiles: int, nexamples: int,
           rejected: list[tuple[str, str]], drafts_dir: Path, write: bool, force: bool) -> Draft:
    overlaps = [b for b in books if any(r.search(split_prefix(clean_line(anchor)).rest) or r.search(anchor)
                                        for r in b.compiled)]
    priority = min(99, max([60] + [b.priority + 1 for b in overlaps]))
    ids = {b.id for b in books}
    rid = _kebab(d.subtype)
    if rid in ids:
        rid += "-variant"
    same = [b.path for b in books if b.subtype == d.subtype]
    header = ["DRAFT proposed by `diagnoser rules propose` from an LLM-diagnosed incident. A human reviews it:",
              "check the signature, action and text, then move it into runbooks/.",
              f"Verified: matches {hits} line(s) of the incident's logs; no false match in {nfiles} fixture "
              f"file(s), {nexamples} runbook example(s) and {len(ORDINARY)} ordinary lines."]
    if overlaps:
        header.append("Already matched by: " + ", ".join(b.id for b in overlaps) + " (priority set above them).")
    if same:
        header.append(f"Same subtype as {', '.join(same)}: consider adding the signature there instead.")
    text = render_draft(d, rid, pattern, anchor, priority, header)
    draft = Draft(rid, pattern, text, anchor, hits, nfiles, nexamples, rejected=rejected,
                  overlaps=[b.id for b in overlaps])
    if not write:
        return draft
    drafts_dir.mkdir(parents=True, exist_ok=True)
    path = drafts_dir / f"{rid}.md"
    if path.exists() and not force:
        raise ProposeError(f"{path} exists (use --force to replace it)")
    tmp = drafts_dir / f".{rid}.md.tmp"
    tmp.write_text(text, encoding="utf-8")
    try:
        parse_runbook(tmp)  # the draft must be a valid runbook once it is moved in
    except RunbookError as exc:
        tmp.unlink(missing_ok=True)
        raise ProposeError(f"the draft would not load as a runbook: {exc}") from exc
    tmp.replace(path)
    draft.path = path
    return draft
