"""Failure signatures: the masked, de-duplicated, error-bearing lines of a piece of evidence.

Two occurrences of one failure give the same signature: every line is masked (`mask_text`),
lines repeated by many ranks collapse to one, and when the text has lines that look like an
error (exception, fault, timeout, kill ...) only those are kept, since noise lines (step logs,
NCCL INFO chatter) drown the signal for every retrieval method we measured.
`tokens` is the tokenizer every index of this package shares.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache

from diagnoser.classify.redact import redact
from diagnoser.collect.prefixes import body_of
from diagnoser.retrieve.mask import mask_line

MAX_LINES = 40
MAX_LINE_CHARS = 300
MAX_SCAN = 2000

# A line is salient (looks like an error) if its lower-case text contains one of these stems, or
# one of its words is in SALIENT_WORDS. Substring tests: a big case-insensitive regex alternation
# costs about a millisecond a line in Python, these cost microseconds.
SALIENT_STEMS = (
    "error", "exception", "fail", "fatal", "abort", "timed out", "timeout", "killed", "kill ",
    "out of memory", "xid", "nvlink", "segfault", "segmentation", "signal", "traceback", "no such", "denied",
    "refused", "unreachable", "not found", "cannot", "can't", "unable", "invalid", "mismatch", "lost",
    "fell off", "reset", "preempt", "cancel", "terminat", "evict", "stale", "panic", "assert", "illegal",
    "overflow", "underflow", "corrupt", "degrad", "retry", "unknown", "unexpected", "exceed", "insufficient",
    "not responding", "stuck", "deadlock", "hardware", "exit code", "exitcode", "exited", "died",
    "crash", "missing", "expected", "must be", "divisible", "unrecognized", "required", "already at minimum",
    "below minimum",
    "throttl", "thermal", "quota", "no space", "disk full", "read-only", "i/o", "lustre",
    "resolve", "name or service", "warn",
)
SALIENT_WORDS = frozenset({"ecc", "aer", "nan", "inf", "down", "mce", "oom", "hang", "hangs", "hung", "dns", "nfs",
                           "sigkill", "sigterm", "sigsegv", "sigabrt", "sigbus", "sigill", "sigfpe"})
_WORD = re.compile(r"[a-z]+")


def is_salient(line: str) -> bool:
    """Does the line look like it reports a failure (error, fault, timeout, kill ...)?"""
    low = line.lower()
    return any(stem in low for stem in SALIENT_STEMS) or not SALIENT_WORDS.isdisjoint(_WORD.findall(low))


_WS = re.compile(r"\s+")
_TOKEN = re.compile(r"<[A-Z]+>|[A-Za-z][A-Za-z0-9_]*|\d+")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_DROP = frozenset({"<num>", "<time>"})


def _body(line: str) -> str:
    """The line as the program printed it: `[rank3]:`, `(RayTrainWorker pid=.., ip=..)`, `3: ` say where
    a line came from, not what failed; left in, they make a Ray job's failure look like every other Ray
    incident."""
    return body_of(line.strip()).strip()


def signature_lines(text: str, max_lines: int = MAX_LINES) -> list[str]:
    """The masked, unique lines of `text`; only the salient ones if there are any.

    Lines are picked before they are masked (masking is the costly part): exact duplicates
    go first, then the non-salient lines if any line is salient; at most `MAX_SCAN` lines are
    masked, half from the start and half from the end.
    """
    raw = list(dict.fromkeys(_body(ln)[: 4 * MAX_LINE_CHARS] for ln in text.splitlines()))
    raw = [ln for ln in raw if ln]
    salient = [ln for ln in raw if is_salient(ln)]
    pick = salient or raw
    if len(pick) > MAX_SCAN:
        pick = pick[: MAX_SCAN // 2] + pick[-(MAX_SCAN // 2):]
    keep = list(dict.fromkeys(_WS.sub(" ", mask_line(redact(ln))).strip()[:MAX_LINE_CHARS] for ln in pick))
    if len(keep) > max_lines:  # the first failure and the final exception both matter
        half = max_lines // 2
        keep = keep[:half] + keep[-(max_lines - half):]
    return keep


def signature_text(text: str, max_lines: int = MAX_LINES) -> str:
    """The failure signature of `text` (see the module docstring), lines joined by newlines."""
    return "\n".join(signature_lines(text, max_lines))


# Launcher prefixes as masking leaves them, in signatures stored before prefixes were stripped.
_MASKED_PREFIX = re.compile(r"^(?:<TIME> |\[(?:rank|default|worker|trainer)<RANK>\]: ?|<NUM>: |\[std(?:err|out)\] ?"
                            r"|\((?:[\w.<>:-]+ )?pid=<NUM>(?:, ip=<IP>)?\) ?)+", re.MULTILINE)


def same_failure_key(signature: str) -> str:
    """The fingerprint of a stored signature with any masked launcher prefix removed.

    A person's correction recorded on `[rank<RANK>]: ...` lines by an older diagnoser still matches
    the same failure signed without them.
    """
    return fingerprint("\n".join(dict.fromkeys(_MASKED_PREFIX.sub("", signature).splitlines())))


def fingerprint(signature: str) -> str:
    """A stable key for deduplication: same signature (up to case and spacing), same key."""
    norm = _WS.sub(" ", signature.lower()).strip()
    return hashlib.sha256(norm.encode("utf-8")).hexdigest()[:32]


@lru_cache(maxsize=262144)
def _expand(tok: str) -> tuple[str, ...]:
    """A raw token's index terms: itself lower-cased, plus its CamelCase / snake_case parts."""
    low = tok.lower()
    if low in _DROP:
        return ()
    if tok.startswith("<") or ("_" not in tok and tok.islower()):
        return (low,)
    parts = _CAMEL.findall(tok.replace("_", " "))
    return (low, *(p.lower() for p in parts)) if len(parts) > 1 else (low,)


def tokens(text: str) -> list[str]:
    """Lower-case word tokens of a (masked) text; CamelCase words also yield their parts.

    Placeholders stay tokens (`<host>`, `<pci>`) except the ubiquitous `<num>` and `<time>`.
    """
    return [term for tok in _TOKEN.findall(text) for term in _expand(tok)]
