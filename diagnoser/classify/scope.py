"""The nodes of this job: the only names a culprit (and so a drain or an exclusion) may carry.

A node is a node of the job when the job's own records say so: the file or directory a log came
from (`gpu-017/rank5.log`), the host field of NCCL lines, the host of a syslog/kernel line, the node
in a slurmstepd or srun record, a torchrun failure block's host, NCCL's rank placement and
bootstrap addresses, or a node field a signature captured from a scheduler record ("JOB 7 ON cn119",
"Node failure on gpu-003"). A word that merely occurs in a log line ("NVRM", "python3", "ERROR",
"Wed") is not a node.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from diagnoser.models import LogRecord

if TYPE_CHECKING:
    from diagnoser.triage import Analysis


def job_nodes(analysis: Analysis, extra: Iterable[LogRecord] = ()) -> frozenset[str]:
    """Every node name the job's records attribute a line, a rank or a file to."""
    scan = analysis.scan
    names: set[str] = {s.node for s in scan.sources if s.node}
    for m in scan.matches:
        names.add(m.record.node or "")
        names.add(m.fields.get("node") or "")
    for s in scan.sources:
        names.update(e.record.node or "" for e in s.weak)
    names.update(r.node or "" for r in extra)
    topo = scan.topology
    names.update(p.node for p in topo.placements.values() if p.node)
    names.update(topo.task_nodes.values())
    names.update(topo.node_ips.values())
    names.update(analysis.diagnosis.culprit.nodes)
    return frozenset(n for n in names if n and n not in {"?", "...", "localhost"})
