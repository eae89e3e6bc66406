"""Masking: replace the parts of a log line that differ between two occurrences of one failure.

`mask_text` turns `[Rank 5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234 on gpu-017` into
`[Rank <RANK>] NVRM: Xid (PCI:<PCI>): 79, pid=<NUM> on <HOST>`: times, numbers, hosts, ranks,
paths, IP and memory addresses, hex ids, UUIDs and PCI bus ids become placeholders, so the same
failure on another node, rank or day yields the same text. Numbers that name the failure itself
(`Xid 79`, `exit code 137`, `signal 9`, `[Errno 28]`, `status=12`, HTTP status) are kept.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

PLACEHOLDERS = ("<TIME>", "<UUID>", "<PCI>", "<IP>", "<HEX>", "<PATH>", "<HOST>", "<RANK>", "<NUM>")

_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"

# Numbers that identify the failure, not the occurrence: kept verbatim (protected before masking).
_KEEP = re.compile(
    r"(?i)(?=[xsehcw\[])(?:\bXid\s*(?:\(PCI:[0-9a-f:.]+\))?\s*:?\s*|\bSXid\b[^:\n]{0,40}:\s*"
    r"|\bexit(?:\s*code|code|\s*status)\s*[:=]?\s*|\bsignal\s*:?\s*|\bSIG\w*:\s*|\berrno\s*[:=]?\s*|\[errno\s+"
    r"|\bstatus\s*[:=]\s*|\bwith error\s+|\berror\s+code\s*[:=]?\s*|\bHTTP/\d\.\d\"?\s+|\bcuda\s*error\s*)"
    r"(-?\d{1,4})\b"
)

_DIGIT = re.compile(r"\d")
_KEEP_WORDS = ("xid", "exit", "signal", "sig", "errno", "status", "error", "http", "cuda")


def _has(*needles: str) -> Callable[[str, str], bool]:
    """Gate: the line (or its lower-case form, for lower-case needles) contains one of `needles`."""
    return lambda line, low: any(n in low for n in needles)


def _re(pattern: str) -> Callable[[str, str], bool]:
    """Gate: a cheap regex that starts with a literal (Python's re finds those fast) must match."""
    gate = re.compile(pattern)
    return lambda line, low: gate.search(line) is not None


_ANY: Callable[[str, str], bool] = lambda line, low: True  # noqa: E731
_CLOCK = _re(r":\d\d:\d\d")


def _standalone(m: re.Match[str]) -> str:
    """<NUM> for a number that stands alone (not glued to a word: cuda12, python3.10 stay); a unit
    right after it stays (`22s`, `1037kB` -> `<NUM>s`, `<NUM>kB`)."""
    start = m.start()
    before = m.string[start - 1] if start else " "
    return m.group(0) if before.isalnum() or before in "_." else "<NUM>" + (m.group(1) or "")


def _hex(m: re.Match[str]) -> str:
    """<HEX> for a long hex word with both digits and letters (not a plain number, not a word)."""
    word = m.group(0)
    return "<HEX>" if any(c.isdigit() for c in word) and any(c.isalpha() for c in word) else word


# (pattern, placeholder, gate, needs a digit), applied in order. A gate is a cheap substring test
# that every match needs: most lines skip most patterns, which keeps masking at microseconds a line.
_RULES: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str], Callable[[str, str], bool], bool]] = [
    # times: ISO / Slurm / torchrun / logger, dmesg -T, syslog, glog, plain dmesg uptime
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T _]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"), "<TIME>",
     _CLOCK, True),
    (re.compile(rf"\b{_DAY}[ \t]+{_MONTH}[ \t]+\d{{1,2}}[ \t]+\d{{2}}:\d{{2}}:\d{{2}}(?:[ \t]+\d{{4}})?"), "<TIME>",
     _CLOCK, True),
    (re.compile(rf"\b{_MONTH}[ \t]+\d{{1,2}}[ \t]+\d{{2}}:\d{{2}}:\d{{2}}(?:\.\d+)?"), "<TIME>", _CLOCK, True),
    (re.compile(r"\b[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+"), "<TIME>", _CLOCK, True),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}\b"), "<TIME>", _re(r"-\d\d-\d\d"), True),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b"), "<TIME>", _CLOCK, True),
    (re.compile(r"\[[ \t]*\d+\.\d{3,}\]"), "[<TIME>]", _has("["), True),
    # identifiers
    (re.compile(r"(?i)\b(?:GPU-|MIG-)?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<UUID>",
     _re(r"-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"), True),
    (re.compile(r"(?i)\b[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}(?:\.[0-7])?\b"), "<PCI>",
     _re(r":[0-9a-fA-F]{2}:[0-9a-fA-F]{2}"), True),
    (re.compile(r"(?i)\b(?:[0-9a-f]{2}:){5}[0-9a-f]{2}\b"), "<HEX>",  # MAC
     _re(r":[0-9a-fA-F]{2}:[0-9a-fA-F]{2}:"), True),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?\b"), "<IP>", _re(r"\.\d{1,3}\.\d{1,3}\."), True),
    (re.compile(r"(?i)\[?\b(?=[0-9a-f:]*(?:::|[a-f]))(?:[0-9a-f]{0,4}:){2,7}[0-9a-f]{1,4}\b\]?(?::\d{1,5})?"), "<IP>",
     _re(r"::|:[0-9a-fA-F]{1,4}:[0-9a-fA-F]{1,4}:"), True),
    (re.compile(r"(?i)\b0x[0-9a-f]+\b"), "<HEX>", _has("0x"), True),
    (re.compile(r"\b[0-9a-fA-F]{8,}\b"), _hex, _ANY, True),
    # paths: absolute, ~/, ./ and relative paths with at least one directory
    (re.compile(r"(?:(?<=[\s\"'=(,:\[])|^)(?:~|\.{1,2})?(?:/[\w.+@%-]+){2,}/?|(?<![\w/])/[\w.+@%-]+\.\w+"), "<PATH>",
     _has("/"), False),
    (re.compile(r"(?<![\w/<])(?:[\w.-]+/){2,}[\w.-]+"), "<PATH>", _re(r"/[\w.-]+/"), False),
    # ranks (before hosts and numbers): "[Rank 5]", "rank=3", "[rank3]:", "[default3]:", "global rank 7"
    (re.compile(r"\b((?:[Gg]lobal[_ ]|[Ll]ocal[_ ])?[Rr](?:ank|ANK))([ \t]*[:=]?[ \t]*)(\d+)\b"), r"\1\2<RANK>",
     _has("rank"), True),
    (re.compile(r"\b([Rr]ank|default)(\d+)(?=\]|:)"), r"\1<RANK>", _has("rank", "default"), True),
    # hosts: names ending in a number (gpu-017, node12, dgx-a100-03, ip-10-0-0-1.ec2.internal)
    (re.compile(r"(?i)\b(?!utf-|x86-|iso-|sha-|md-)[a-z][a-z0-9_]*-(?:[a-z0-9_]+-)*[a-z]*\d+[a-z0-9]*"
                r"(?:\.[a-z][a-z0-9-]*)*\b"), "<HOST>", _re(r"-[a-zA-Z0-9_-]*\d"), True),
    (re.compile(r"\b(?:node|gpu|host|compute|worker|dgx|cn|nid|n)\d+\b"), "<HOST>", _re(r"n\d|[a-z]\d"), True),
    (re.compile(r"(?i)(?<=@)[a-z][\w.-]*"), "<HOST>", _has("@"), False),
    # remaining standalone numbers
    (re.compile(r"-?\d+(?:\.\d+)*(?:e[+-]?\d+)?((?:[kKMGTP]i?)?[bB]|ms|us|ns|[smh])?(?!\w)"), _standalone, _ANY, True),
]

_COLLAPSE = re.compile(r"<(NUM|TIME|HEX)>(?:[.:,/x-]?<\1>)+")
_SENTINEL = re.compile("\x00([a-z]+)\x00")


def _letters(i: int) -> str:
    """A sentinel index written in letters, so that no masking rule can touch it."""
    out = ""
    while True:
        out = chr(ord("a") + i % 26) + out
        i //= 26
        if not i:
            return out


def _index(letters: str) -> int:
    i = 0
    for ch in letters:
        i = i * 26 + ord(ch) - ord("a")
    return i


@lru_cache(maxsize=65536)
def mask_line(line: str) -> str:
    """Mask one line (cached: the same line logged by many ranks is masked once)."""
    low = line.lower()
    digits = _DIGIT.search(line) is not None
    kept: list[str] = []

    def protect(m: re.Match[str]) -> str:
        kept.append(m.group(1))
        return m.group(0)[: m.start(1) - m.start(0)] + f"\x00{_letters(len(kept) - 1)}\x00"

    out = _KEEP.sub(protect, line) if digits and any(w in low for w in _KEEP_WORDS) else line
    for pattern, repl, gate, needs_digit in _RULES:
        if (digits or not needs_digit) and gate(out, low):
            out = pattern.sub(repl, out)
    out = _COLLAPSE.sub(r"<\1>", out)
    return _SENTINEL.sub(lambda m: kept[_index(m.group(1))], out) if kept else out


def mask_text(text: str) -> str:
    """Mask every line of `text` (see the module docstring); the line structure is kept."""
    return "\n".join(mask_line(line) for line in text.split("\n"))
