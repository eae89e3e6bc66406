"""What triage calls: similar past incidents, the neighbours' verdict, the closest runbooks.

Built never to slow down or break a triage:
- the read path loads the store's search cache (numpy files) and never imports chromadb; only a
  stale or damaged cache sends it to the store (chromadb) for a rebuild;
- with no store on this machine yet, the shipped seed memory answers (in memory, milliseconds);
- with a shared memory server, the host's synced view answers (remote.server_neighbours);
- any failure is logged and answered with "nothing similar" ([] / None).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from diagnoser.models import SimilarIncident
from diagnoser.retrieve.cache import CacheError, SearchCache
from diagnoser.retrieve.incident import Incident
from diagnoser.retrieve.lexical import LexicalIndex
from diagnoser.retrieve.paths import resolve_store_path
from diagnoser.retrieve.runbook_index import RunbookDoc, RunbookIndex
from diagnoser.retrieve.seed import shipped_seed
from diagnoser.retrieve.server_config import memory_server
from diagnoser.retrieve.signature import signature_text
from diagnoser.retrieve.vote import Vote, neighbour_vote

log = logging.getLogger(__name__)
REBUILD_WAIT = 5.0  # seconds a triage waits for a busy writer before answering without the store

_caches: dict[Path, SearchCache] = {}
_seed: tuple[LexicalIndex, dict[str, Incident]] | None = None
_runbooks: dict[tuple[Path, tuple[tuple[str, float], ...]], RunbookIndex] = {}


def _store_generation(path: Path) -> int | None:
    try:
        return int(json.loads((path / "store.json").read_text(encoding="utf-8"))["generation"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _from_store(path: Path, signature: str, k: int) -> list[tuple[Incident, float]]:
    generation = _store_generation(path)
    if generation is None:
        raise CacheError(f"no readable store.json in {path}")
    cache = _caches.get(path)
    if cache is None or cache.generation < generation:
        if cache is not None:
            cache.close()
        _caches.pop(path, None)
        try:
            cache = SearchCache.load(path / "index")
            if cache.generation < generation:  # ahead is fine: a writer is committing
                raise CacheError("stale")
        except CacheError:  # slow path: the store rebuilds its cache (imports chromadb)
            from diagnoser.retrieve.store import IncidentStore

            with IncidentStore.open(path, lock_timeout=REBUILD_WAIT) as store:
                return store.search(signature, k)
        _caches[path] = cache
    return cache.search(signature, k)


def _from_seed(signature: str, k: int) -> list[tuple[Incident, float]]:
    global _seed
    if _seed is None:
        seed = shipped_seed()
        by_key = {i.id or i.origin: i for i in seed}
        _seed = (LexicalIndex.build((key, i.signature) for key, i in by_key.items()), by_key)
    index, by_key = _seed
    return [(by_key[key], s) for key, s in index.search(signature, k)]


def use_seed(incidents: list[Incident] | None) -> None:
    """Answer from these incidents instead of the shipped seed (None: the shipped seed again).
    For evaluation, e.g. a memory with one source repository's cases held out."""
    global _seed
    if incidents is None:
        _seed = None
        return
    by_key = {i.id or i.origin: i for i in incidents}
    _seed = (LexicalIndex.build((key, i.signature) for key, i in by_key.items()), by_key)


def neighbours(evidence_text: str, k: int = 5, store_path: Path | None = None) -> list[tuple[Incident, float]]:
    """The `k` past incidents most similar to the evidence, with their scores (best first)."""
    try:
        signature = signature_text(evidence_text)
        if not signature:
            return []
        path = resolve_store_path(store_path)
        server = memory_server()
        if server is not None:
            from diagnoser.retrieve.remote import server_neighbours

            return server_neighbours(server, path, signature, k)
        if (path / "store.json").is_file():
            return _from_store(path, signature, k)
        return _from_seed(signature, k)
    except Exception as exc:  # noqa: BLE001 - retrieval must never break a triage
        log.warning("incident retrieval skipped: %s: %s", type(exc).__name__, exc)
        return []


def similar_incidents(evidence_text: str, k: int = 5, store_path: Path | None = None) -> list[SimilarIncident]:
    """`similar_incidents` of a diagnosis/v1 verdict: id, score, category, action, subtype, resolution."""
    return [inc.similar(score) for inc, score in neighbours(evidence_text, k, store_path)]


def retrieval_verdict(evidence_text: str, k: int = 5, store_path: Path | None = None) -> Vote | None:
    """The neighbours' verdict when they agree confidently enough to decide (see vote.py), else None."""
    return neighbour_vote(neighbours(evidence_text, k, store_path))


def similar_runbooks(evidence_text: str, k: int = 3, runbook_dir: Path | None = None) -> list[tuple[RunbookDoc, float]]:
    """The `k` runbooks whose text is closest to the evidence (for failures no signature matched): the shipped
    ones and a site directory's (`runbook_dir`, else $DIAGNOSER_RUNBOOKS), which override them by id."""
    try:
        from diagnoser.prefilter.runbooks import default_runbook_dir, shipped_runbook_dir

        dirs = list(dict.fromkeys([shipped_runbook_dir(), Path(runbook_dir or default_runbook_dir())]))
        files = tuple(sorted((str(p), p.stat().st_mtime) for d in dirs for p in d.glob("*.md")))
        key = (tuple(dirs), files)
        if key not in _runbooks:
            _runbooks.clear()
            _runbooks[key] = RunbookIndex.from_dirs(dirs)
        return _runbooks[key].search(evidence_text, k)
    except Exception as exc:  # noqa: BLE001 - retrieval must never break a triage
        log.warning("runbook retrieval skipped: %s: %s", type(exc).__name__, exc)
        return []
