"""Rank prefixes that launchers put in front of every line of a rank's output.

- torchrun `--tee`/`--log-dir` and `TORCH_DISTRIBUTED` logs: `[rank3]:` (global rank)
- torchrun `--role`: `[default3]:` (role name + LOCAL rank)
- `srun --label`: `3: ` (global task id, right-aligned)
- some wrappers: `[stderr]` / `[stdout]` (no rank)
- Ray workers and actors (ray/_private/ray_logging.py): `(RayTrainWorker pid=4242, ip=10.1.2.3) `, and the raylet's
  lines forwarded to the driver, `(raylet, ip=10.1.2.3) ` (the node, by address: the driver's log gathers every
  node's lines)
- SkyPilot job logs: `(head, rank=0, pid=4773) `, `(worker1, rank=1, pid=812) ` (rank)
- `docker compose logs`: `trainer-1  | ` (v2) and `trainer_1  | ` (v1)
- Open MPI `mpirun --tag-output` (so Horovod and SageMaker's MPI launcher): `[1,12]<stdout>:` (`[jobid,rank]`
  then the stream: stdout, stderr or stddiag), documented in mpirun(1)

A collector's receive time in front of all that (`kubectl logs --timestamps`: RFC 3339 with
nanoseconds) is not split off here, because the line's time is read from it; `without_stamp` drops it
where only the words matter (matching a signature).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TORCH_RANK = re.compile(r"^\[rank(\d{1,6})\]:\s?")
_TORCH_ROLE = re.compile(r"^\[(?:default|worker|trainer)(\d{1,4})\]:\s?")
_SRUN_LABEL = re.compile(r"^ {0,6}(\d{1,6}): ")
_STREAM = re.compile(r"^\[std(?:err|out)\]\s?")
_RAY = re.compile(r"^\((?:(?:[\w.<>:-]+ )?pid=\d+|raylet)(?:, ip=(?P<ip>[0-9A-Fa-f.:]+))?\) ?")
_SKYPILOT = re.compile(r"^\((?:head|worker\d+), rank=(\d{1,6}), pid=\d+\) ?")
_COMPOSE = re.compile(r"^[\w.-]+[-_]\d+ +\| ")
_MPI_TAG = re.compile(r"^\[\d{1,10},(\d{1,6})\]<std(?:out|err|diag)>: ?")
_COLLECTOR_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d) ")


@dataclass(frozen=True, slots=True)
class Prefix:
    rank: int | None
    local_rank: int | None
    rest: str  # the line without its prefix
    node: str | None = None  # the node the prefix names (Ray's `ip=`)


def split_prefix(line: str) -> Prefix:
    """Remove a launcher prefix, returning the rank it names."""
    m = _TORCH_RANK.match(line)
    if m:
        return Prefix(int(m.group(1)), None, line[m.end():])
    m = _TORCH_ROLE.match(line)
    if m:
        return Prefix(None, int(m.group(1)), line[m.end():])
    m = _SRUN_LABEL.match(line) or _MPI_TAG.match(line)
    if m:
        return Prefix(int(m.group(1)), None, line[m.end():])
    if line.startswith("("):
        m = _SKYPILOT.match(line)
        if m:
            return Prefix(int(m.group(1)), None, line[m.end():])
        m = _RAY.match(line)
        if m:
            return Prefix(None, None, line[m.end():], m.group("ip"))
    m = _STREAM.match(line) or _COMPOSE.match(line)
    if m:
        return Prefix(None, None, line[m.end():])
    return Prefix(None, None, line)



def without_stamp(line: str) -> str:
    """The line without a collector's leading RFC 3339 receive time (`kubectl logs --timestamps`)."""
    m = _COLLECTOR_STAMP.match(line)
    return line[m.end():] if m else line


def body_of(line: str) -> str:
    """The line without a collector's receive time and up to two stacked launcher prefixes.

    Wrappers stack (`srun --label` around a job that already tags `[rank3]:`, a Ray worker's prefix
    around torchrun's): what is left is what the program itself printed.
    """
    line = without_stamp(line)
    for _ in range(2):
        rest = split_prefix(line).rest
        if rest == line:
            break
        line = rest
    return line
