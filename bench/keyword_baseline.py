"""The keyword baseline that triage must beat: grep for a few words, first hit decides.

Issue #13 measured diagnoser against "a twelve-line keyword script" on unseen cases and found it no
better. That script is not in the repository; this is one of the same kind, kept as the yardstick
`bench/corpus_eval.py` scores side by side with triage on every set. The words come from the failure
classes themselves (DESIGN.md's categories and the vendors' own words for their faults); they were chosen
once, before the first scoring, and are not tuned to the corpus: a baseline fitted to the cases it is
scored on would say nothing about either side. Order matters: hardware words first
(they name a part), then scheduler/orchestrator events, transient services, the environment, and
finally any error at all, which a keyword script can only call the job's own.
"""

from __future__ import annotations

import re

# (words, category, action family): the first row with a hit decides
TABLE: list[tuple[str, str, str]] = [
    (r"\bXid\b|uncorrectable ECC|ECC error|double.bit|fallen off the bus|fell off the bus|GPU is lost"
     r"|row remap|retired pages|Hardware Error|Machine Check|NVLink.{0,40}(?:error|down|inactive)"
     r"|(?:port|link) (?:is )?down|lost carrier", "hardware", "exclude_or_drain"),
    (r"preempt|NODE_FAIL|node fail|node (?:was )?(?:lost|died|down)|evicted|spot instance", "infra", "restart"),
    (r"\b429\b|\b50[0234]\b.{0,20}error|rate.limit|temporarily unavailable|Name or service not known"
     r"|Temporary failure in name resolution", "infra", "retry"),
    (r"NCCL (?:WARN|error)|nccl\w*Error|Connection (?:refused|reset|timed out)|NET/IB|NET/Socket|InfiniBand"
     r"|timed? ?out|No space left|Disk quota|Input/output error|Stale file handle|driver version|NVIDIA-SMI has failed"
     r"|libcuda|Permission denied", "infra", "escalate"),
    (r"out of memory|OutOfMemoryError|\bnan\b|Traceback|Error|Exception|Segmentation fault|Killed",
     "user_code", "stop"),
]
_COMPILED = [(re.compile(words, re.I), category, family) for words, category, family in TABLE]


def classify(log: str) -> tuple[str, str]:
    """(category, action family) by the first table row whose words occur in the log; unknown/escalate if none."""
    for pattern, category, family in _COMPILED:
        if pattern.search(log):
            return category, family
    return "unknown", "escalate"
