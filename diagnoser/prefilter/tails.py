"""A file's last lines, kept compact: 100,000 rank logs x 12 tail records would otherwise hold a GB.

The records are packed (field tuples, pickled, zlib) by the worker that built them, the tails of a
whole batch of files in one compressed blob (ranks' last lines differ in a few digits, so together
they compress several times better than one by one), and unpacked only where they are read: the
LLM's evidence window and the lookup of a verdict's own lines. The job's ranks and their nodes, which
every verdict's policy check needs, are kept unpacked beside them.
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from diagnoser.models import LogRecord

_FIELDS = ("line", "text", "time", "time_inferred", "time_not_after", "node", "rank", "local_rank", "kind",
           "first_line", "context")

Rows = list[tuple]


@dataclass(frozen=True, slots=True)
class TailBlob:
    """The packed tails of one batch of files (shared by their results)."""

    data: bytes  # zlib(pickle([rows of file 0, rows of file 1, ...]))

    def rows(self, index: int) -> Rows:
        return pickle.loads(zlib.decompress(self.data))[index]  # noqa: S301 - our own worker's bytes


@dataclass(frozen=True, slots=True)
class PackedTail:
    blob: TailBlob
    index: int  # which file of the blob
    ranks: tuple[tuple[int, str | None], ...] | None  # see SourceResult.tail_ranks (None: the file's own)

    def records(self, source: str) -> list[LogRecord]:
        return [LogRecord(source=source, **dict(zip(_FIELDS, row, strict=True))) for row in self.blob.rows(self.index)]


def tail_rows(records: Iterable[LogRecord]) -> Rows:
    return [tuple(map(r.__dict__.__getitem__, _FIELDS)) for r in records]


def tail_ranks(records: Iterable[LogRecord], covered: set[int]) -> tuple[tuple[int, str | None], ...]:
    """(rank, node) of the records in order, repeats left out (the last one kept: later records win
    in a rank -> node map); `covered`: lines that a match or error record of the file stands for."""
    seen: dict[tuple[int, str | None], None] = {}
    for r in records:
        if r.rank is not None and r.line not in covered:
            key = (r.rank, r.node)
            seen.pop(key, None)
            seen[key] = None
    return tuple(seen)


def pack_tails(rows: list[Rows]) -> TailBlob:
    """One blob for the tails of several files (`PackedTail.index` says which)."""
    return TailBlob(zlib.compress(pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL), 6))
