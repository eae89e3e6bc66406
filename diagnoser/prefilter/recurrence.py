"""A fault that is usually the program's, recurring on one GPU across unrelated processes, is the GPU.

NVIDIA's Xid catalog lists "HW error" among the possible causes of Xid 13 (graphics engine exception)
and Xid 31 (MMU fault) next to "user app error": one occurrence is the program's, but the same Xid
following one physical GPU through unrelated processes is the GPU (drain it, `dcgmi diag -r 3`). A
program bug shows on every GPU it runs on; a bad GPU shows on itself. Catalog entries say so with
`part_fault_after: N` (the number of distinct processes on one GPU that make it the part's fault).

Only a verdict whose symptom a faulty GPU also produces (an application-class Xid, an illegal memory
access, a launch failure) is reconsidered: a CUDA OOM or a Python exception stays the program's,
whatever the node's history. Only kernel lines count (an Xid the job printed itself is not evidence),
including kernel events from before the job (the history across jobs is the point).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from diagnoser.models import Action, Category, Culprit, Diagnosis, SignatureMatch
from diagnoser.prefilter.culprit import gpu_id
from diagnoser.prefilter.runbooks import Runbook
from diagnoser.prefilter.trust import job_output
from diagnoser.prefilter.verdict import evidence_led_by

# verdicts a faulty GPU can also produce (the program's by default)
GPU_SYMPTOMS = frozenset({"gpu_xid_app_fault", "cuda_illegal_memory_access", "cuda_unknown_error",
                          "gpu_memory_access_fault", "no_signature"})
PID = re.compile(r"\bpid=(\d+)")  # NVIDIA's "pid=N"; other drivers' formats come as a captured `pid` field
CONFIDENCE = 0.75


@dataclass(frozen=True)
class RecurringFault:
    node: str | None
    gpu: str
    processes: list[str]
    matches: list[SignatureMatch]
    book: Runbook


def recurring_gpu_fault(matches: list[SignatureMatch], books: dict[str, Runbook]) -> RecurringFault | None:
    """The one GPU on which an application-class fault recurred in enough distinct processes, if
    exactly one GPU did (the same fault on many GPUs is the program's)."""
    pids: dict[tuple[str | None, str], set[str]] = defaultdict(set)
    seen: dict[tuple[str | None, str], list[SignatureMatch]] = defaultdict(list)
    threshold: dict[tuple[str | None, str], int] = {}
    for m in matches:
        book = books.get(m.runbook_id)
        gpu = m.fields.get("gpu")
        said = PID.search(m.record.text)
        pid = m.fields.get("pid") or (said.group(1) if said else None)
        if book is None or not book.part_fault_after or not gpu or pid is None or job_output(m.record):
            continue
        key = (m.record.node, gpu_id(gpu))
        pids[key].add(pid)
        seen[key].append(m)
        threshold[key] = min(threshold.get(key, book.part_fault_after), book.part_fault_after)
    faulty = [k for k, p in pids.items() if len(p) >= threshold[k]]
    if len(faulty) != 1:
        return None
    (key,) = faulty
    first = seen[key][0]
    return RecurringFault(node=key[0], gpu=key[1], processes=sorted(pids[key], key=int), matches=seen[key],
                          book=books[first.runbook_id])


def with_recurring_gpu_fault(verdict: Diagnosis, matches: list[SignatureMatch],
                             books: dict[str, Runbook]) -> Diagnosis:
    """The verdict, or a hardware verdict naming the GPU when an application-class fault follows it."""
    if verdict.category not in (Category.USER_CODE, Category.UNKNOWN) or verdict.subtype not in GPU_SYMPTOMS:
        return verdict
    fault = recurring_gpu_fault(matches, books)
    if fault is None:
        return verdict
    where = f"GPU {fault.gpu}" + (f" on {fault.node}" if fault.node else "")
    shown = ", ".join(fault.processes[:6]) + (" ..." if len(fault.processes) > 6 else "")
    return verdict.model_copy(update={
        "category": Category.HARDWARE, "subtype": "gpu_recurring_fault",
        "action": Action.DRAIN_AND_RESTART, "confidence": CONFIDENCE,
        "culprit": Culprit(nodes=[fault.node] if fault.node else [], gpus=[fault.gpu]),
        "root_cause": (f"{fault.book.title} recurred on {where} in {len(fault.processes)} unrelated processes "
                       f"(pids {shown}): a fault that follows one GPU is the GPU, not the program "
                       f"(NVIDIA lists hardware among its causes); drain the node and run dcgmi diag -r 3"),
        "evidence": evidence_led_by([m.record for m in fault.matches], verdict),
        "rule": f"recurrence.{fault.book.id}", "runbook": fault.book.path or verdict.runbook,
        "notes": [*verdict.notes, f"was {verdict.category.value}/{verdict.subtype}: the same fault recurred "
                  f"on one GPU in {len(fault.processes)} processes"],
    })
