"""The search cache: what a triage reads to find similar incidents without starting chromadb.

chromadb holds the incidents (and takes ~2 s to import); triage must stay fast. The cache is a
derived, rebuildable view in `<store>/index/`: the lexical index over every incident's signature
plus a snapshot of each incident (an append-only `records-<epoch>.jsonl`, located by `offsets.npy`),
stamped with the store generation it reflects (`cache.json`, written last). Writers update it under
the store lock; a reader that finds it stale, missing or damaged asks the store to rebuild it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO

import numpy as np

from diagnoser import atomic
from diagnoser.retrieve.incident import Incident
from diagnoser.retrieve.lexical import LexicalIndex

CACHE_FORMAT = 1


class CacheError(RuntimeError):
    """The cache is missing, stale or damaged: rebuild it from the store."""


class SearchCache:
    """Lexical index + incident snapshots, consistent with one store generation."""

    def __init__(self, directory: Path, index: LexicalIndex, offsets: np.ndarray, epoch: int, generation: int) -> None:
        self.directory = directory
        self.index = index
        self.offsets = offsets  # (docs, 2): byte offset and length of each incident's latest snapshot
        self.epoch = epoch
        self.generation = generation
        self._fh: IO[bytes] | None = None

    @property
    def records_path(self) -> Path:
        return self.directory / f"records-{self.epoch}.jsonl"

    # ------------------------------------------------------------------ reading
    @classmethod
    def load(cls, directory: Path, attempts: int = 3) -> SearchCache:
        """Load the cache (retrying briefly if a writer is replacing its files); CacheError if unusable."""
        last: Exception | None = None
        for attempt in range(attempts):
            try:
                stamp = json.loads((directory / "cache.json").read_text())
                if stamp.get("format") != CACHE_FORMAT:
                    raise CacheError(f"cache format {stamp.get('format')!r} is not {CACHE_FORMAT}")
                index = LexicalIndex.load(directory)
                offsets = np.load(directory / "offsets.npy", allow_pickle=False)
                if not (len(index) == len(offsets) == stamp["docs"]):
                    raise CacheError("cache files disagree on the number of incidents")
                cache = cls(directory, index, offsets, int(stamp["epoch"]), int(stamp["generation"]))
                if not cache.records_path.is_file():
                    raise CacheError(f"{cache.records_path.name} is missing")
                return cache
            except (OSError, ValueError, KeyError, TypeError, CacheError) as exc:
                last = exc
                time.sleep(0.05 * (attempt + 1))
        raise CacheError(f"search cache in {directory} is unusable: {last}")

    def record(self, row: int) -> Incident:
        if self._fh is None:
            self._fh = self.records_path.open("rb")
        offset, length = (int(x) for x in self.offsets[row])
        self._fh.seek(offset)
        return Incident.model_validate_json(self._fh.read(length))

    def search(self, signature: str, k: int = 5) -> list[tuple[Incident, float]]:
        """The `k` incidents whose signatures are closest to `signature` (TF-IDF cosine), best first."""
        return [(self.record(self.index.row(doc_id)), score) for doc_id, score in self.index.search(signature, k)]

    def incidents(self) -> Iterable[Incident]:
        for row in range(len(self.index)):
            yield self.record(row)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    # ------------------------------------------------------------------ writing (under the store lock)
    @classmethod
    def rebuild(cls, directory: Path, incidents: Iterable[Incident], generation: int) -> SearchCache:
        """Write a fresh cache (new epoch) from every incident of the store."""
        directory.mkdir(parents=True, exist_ok=True)
        epoch = time.time_ns()  # unique: a reader may still hold an older records file open
        index = LexicalIndex()
        offsets: list[tuple[int, int]] = []
        cache = cls(directory, index, np.zeros((0, 2), dtype=np.int64), epoch, generation)
        with cache.records_path.open("wb") as fh:
            for inc in incidents:
                line = inc.model_dump_json(by_alias=True).encode("utf-8")
                offsets.append((fh.tell(), len(line)))
                fh.write(line + b"\n")
                index.add(inc.id, inc.signature)
            fh.flush()
            os.fsync(fh.fileno())
        cache.offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
        cache._commit(docs_changed=True)
        for old in directory.glob("records-*.jsonl"):
            if old != cache.records_path:
                old.unlink(missing_ok=True)
        return cache

    def update(self, incidents: Iterable[Incident], generation: int) -> None:
        """Record new or changed incidents (appended snapshots; new signatures enter the index)."""
        self.close()
        rows = {doc_id: row for row, doc_id in enumerate(self.index.ids)}
        new_offsets: dict[int, tuple[int, int]] = {}
        added = False
        with self.records_path.open("ab") as fh:
            for inc in incidents:
                line = inc.model_dump_json(by_alias=True).encode("utf-8")
                pos = fh.tell()
                fh.write(line + b"\n")
                if inc.id not in rows:
                    self.index.add(inc.id, inc.signature)
                    rows[inc.id] = len(rows)
                    added = True
                new_offsets[rows[inc.id]] = (pos, len(line))
            fh.flush()
            os.fsync(fh.fileno())
        offsets = np.zeros((len(rows), 2), dtype=np.int64)
        offsets[: len(self.offsets)] = self.offsets
        for row, value in new_offsets.items():
            offsets[row] = value
        self.offsets = offsets
        self.generation = generation
        self._commit(docs_changed=added)

    def _commit(self, docs_changed: bool) -> None:
        if docs_changed or not (self.directory / "ids.npy").exists():
            self.index.save(self.directory)
        with atomic.replacing(self.directory / "offsets.npy") as tmp, tmp.open("wb") as fh:
            np.save(fh, self.offsets, allow_pickle=False)
        stamp = {"format": CACHE_FORMAT, "generation": self.generation, "epoch": self.epoch, "docs": len(self.index)}
        atomic.write_text(self.directory / "cache.json", json.dumps(stamp))
