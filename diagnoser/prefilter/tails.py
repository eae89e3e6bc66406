"""A file's last lines, kept compact: 100,000 rank logs x 12 tail records would otherwise hold a GB.

The records are packed (field tuples, pickled, zlib) in the worker that built them and unpacked only
where they are read: the LLM's evidence window and the lookup of a verdict's own lines. The job's
ranks and their nodes, which every verdict's policy check needs, are kept unpacked beside them.
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from diagnoser.models import LogRecord

_FIELDS = ("line", "text", "time", "time_inferred", "time_not_after", "node", "rank", "local_rank", "kind",
           "first_line", "context")


@dataclass(frozen=True, slots=True)
class PackedTail:
    blob: bytes  # zlib(pickle([field tuple per record]))
    ranks: tuple[tuple[int, str | None], ...]  # see SourceResult.tail_ranks

    def records(self, source: str) -> list[LogRecord]:
        rows = pickle.loads(zlib.decompress(self.blob))  # noqa: S301 - our own worker's bytes
        return [LogRecord(source=source, **dict(zip(_FIELDS, row, strict=True))) for row in rows]


def pack_tail(records: Iterable[LogRecord], covered: set[int]) -> PackedTail:
    """Pack one file's tail; `covered`: lines that a match or error record of the file already
    stands for (their rank and node count from there)."""
    records = list(records)
    rows = [tuple(map(r.__dict__.__getitem__, _FIELDS)) for r in records]
    seen: dict[tuple[int, str | None], None] = {}
    for r in records:
        if r.rank is not None and r.line not in covered:
            key = (r.rank, r.node)
            seen.pop(key, None)  # keep the last occurrence: later records win in a rank -> node map
            seen[key] = None
    return PackedTail(zlib.compress(pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL), 1), tuple(seen))
