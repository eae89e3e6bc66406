"""The incident store: past incidents in an embedded chromadb, with dedup, a lock and a journal.

Layout of a store directory (default: the user data dir, `DIAGNOSER_STORE` or `--store` override):

    store.json     format, version, store id, embedder, next id, generation (rewritten atomically)
    chroma/        chromadb PersistentClient: one document (signature) + metadata per incident
    index/         the search cache (see cache.py), derived from chroma, rebuildable
    journal.jsonl  every incident snapshot ever written, in export format (append-only)
    .lock          file lock: one writer at a time, across processes

Readers take no lock. Writers hold the lock for a whole operation, reconnect to chromadb when
another process wrote since (chromadb clients do not see each other's vector index), write
chroma, the journal and the cache, and bump the generation last. A damaged or foreign-version
store raises `StoreError` with the recovery: rebuild from an export (the journal is one).
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from filelock import FileLock, Timeout

from diagnoser import atomic
from diagnoser.retrieve.cache import CacheError, SearchCache
from diagnoser.retrieve.dedup import ImportReport, merge, plan_import
from diagnoser.retrieve.embed import HashingEmbedder, chroma_function, make_embedder
from diagnoser.retrieve.incident import Incident, format_id, id_number, utcnow
from diagnoser.retrieve.lines import MAX_LINE_BYTES
from diagnoser.retrieve.paths import resolve_store_path
from diagnoser.retrieve.seed import shipped_seed
from diagnoser.retrieve.signature import signature_text
from diagnoser.retrieve.transfer import ImportFileError, read_import, write_export

STORE_FORMAT = "diagnoser-incident-store"
STORE_VERSION = 1
COLLECTION = "incidents"
LOCK_TIMEOUT = 60.0
BATCH = 1000
META_FIELDS = (("store_id", str, None), ("embedder", dict, None), ("collection", str, None),
               ("next_id", int, 1), ("generation", int, 0))  # key, type, least value


class StoreError(RuntimeError):
    """The store cannot be used; the message says why and how to recover."""


def recovery(path: Path) -> str:
    return (f"Recovery: move it aside and rebuild it from an export: `mv {path} {path}.broken && "
            f"diagnoser incidents import {path}.broken/journal.jsonl --store {path}` (journal.jsonl is the "
            f"store's own running export; a file written by `diagnoser incidents export` works as well).")


def _acquire(lock: FileLock, path: Path, timeout: float) -> None:
    try:
        lock.acquire()
    except Timeout as exc:
        raise StoreError(f"incident store at {path} is locked by another writer for more than "
                         f"{timeout:.0f}s (lock file {path / '.lock'})") from exc
    except OSError as exc:
        raise StoreError(f"incident store at {path} cannot be locked: lock file {path / '.lock'}: "
                         f"{exc.strerror or exc}") from exc


def _check_dir(path: Path) -> None:
    """A store path that exists must be a directory we can list."""
    if path.exists() and not path.is_dir():
        raise StoreError(f"incident store path {path} is not a directory (give --store a directory)")


class IncidentStore:
    """Past incidents: add (deduplicated), get, list, search, confirm, correct, export, import."""

    def __init__(self, path: Path, meta: dict[str, Any], lock_timeout: float = LOCK_TIMEOUT) -> None:
        self.path = path
        self._meta = meta
        self.embedder = make_embedder(meta["embedder"])
        self.lock_timeout = lock_timeout
        self._lock = FileLock(str(path / ".lock"), timeout=lock_timeout)
        self._client: Any = None
        self._collection: Any = None
        self._cache: SearchCache | None = None
        self._dirty = False  # a write operation has started changing files

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: Path | None = None, lock_timeout: float = LOCK_TIMEOUT) -> IncidentStore:
        """Open an existing store; StoreError if there is none or it is damaged.

        `lock_timeout`: how long a write (or a cache rebuild) waits for another writer.
        """
        path = resolve_store_path(path)
        _check_dir(path)
        if not (path / "store.json").is_file():
            raise StoreError(f"no incident store at {path} (create one with `diagnoser incidents add` or `import`)")
        store = cls(path, cls._read_meta(path), lock_timeout)
        store._connect()
        return store

    @classmethod
    def create(cls, path: Path | None = None, seed: bool = True) -> IncidentStore:
        """Open the store at `path`, creating it (with the seed memory) if there is none."""
        path = resolve_store_path(path)
        _check_dir(path)
        if (path / "store.json").is_file():
            return cls.open(path)
        try:
            if path.exists() and any(p.name != ".lock" for p in path.iterdir()):
                raise StoreError(f"{path} exists and is not an incident store (no store.json); refusing to use it")
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create an incident store at {path}: {exc.strerror or exc}") from exc
        lock = FileLock(str(path / ".lock"), timeout=LOCK_TIMEOUT)
        _acquire(lock, path, LOCK_TIMEOUT)
        try:
            if not (path / "store.json").is_file():  # another process may have won the race
                meta = {"format": STORE_FORMAT, "version": STORE_VERSION, "store_id": uuid.uuid4().hex,
                        "created": utcnow().isoformat(), "embedder": HashingEmbedder().describe(),
                        "collection": COLLECTION, "next_id": 1, "generation": 0}
                store = cls(path, meta)
                store._connect(create=True)
                cls._write_meta(path, meta)
                store.close()
        finally:
            lock.release()
        store = cls.open(path)
        if seed and store._meta["generation"] == 0:
            store.import_incidents(shipped_seed())
        return store

    @staticmethod
    def _read_meta(path: Path) -> dict[str, Any]:
        try:
            meta = json.loads((path / "store.json").read_text(encoding="utf-8"))
            if not isinstance(meta, dict) or meta.get("format") != STORE_FORMAT:
                raise ValueError("store.json is not an incident store description")
        except (OSError, ValueError) as exc:
            raise StoreError(f"incident store at {path} is damaged: {exc}. {recovery(path)}") from exc
        version = meta.get("version")
        if type(version) is not int or version != STORE_VERSION:
            raise StoreError(f"incident store at {path} has format version {version!r}; this diagnoser "
                             f"reads version {STORE_VERSION}. Export it with the diagnoser version that wrote it. "
                             f"{recovery(path)}")
        try:
            for key, kind, low in META_FIELDS:
                if key not in meta:
                    raise ValueError(f"store.json lacks {key!r}")
                value = meta[key]
                if type(value) is not kind or (low is not None and value < low):
                    wanted = f"an integer >= {low}" if low is not None else f"a {kind.__name__}"
                    raise ValueError(f"store.json has {key}={value!r}, not {wanted}")
            make_embedder(meta["embedder"])
        except (ValueError, TypeError) as exc:
            raise StoreError(f"incident store at {path} is damaged: {exc}. {recovery(path)}") from exc
        return meta

    @staticmethod
    def _write_meta(path: Path, meta: dict[str, Any]) -> None:
        atomic.write_text(path / "store.json", json.dumps(meta, indent=1))

    def _connect(self, create: bool = False) -> None:
        self._disconnect()
        try:
            import chromadb
            from chromadb.config import Settings
        except ImportError as exc:
            raise StoreError("the incident store needs chromadb: pip install 'diagnoser[retrieval]'") from exc
        try:
            self._client = chromadb.PersistentClient(path=str(self.path / "chroma"),
                                                     settings=Settings(anonymized_telemetry=False))
            ef = chroma_function(self.embedder)
            get = self._client.get_or_create_collection if create else self._client.get_collection
            self._collection = get(self._meta["collection"], embedding_function=ef)
            self._collection.count()
        except Exception as exc:  # noqa: BLE001 - chromadb raises many kinds; all mean the same here
            self._disconnect()
            self._forget_chroma_system()
            raise StoreError(f"incident store at {self.path} is damaged: chromadb cannot open it "
                             f"({type(exc).__name__}: {str(exc)[:200]}). {recovery(self.path)}") from exc

    def _forget_chroma_system(self) -> None:
        """Drop chromadb's per-process cache entry for this path after a failed open; otherwise every
        later client for the path (e.g. the rebuilt store) inherits the half-started system."""
        with suppress(Exception):
            from chromadb.api.shared_system_client import SharedSystemClient

            key = str(self.path / "chroma")
            system = SharedSystemClient._identifier_to_system.pop(key, None)
            SharedSystemClient._identifier_to_refcount.pop(key, None)
            if system is not None:
                system.stop()

    def _disconnect(self) -> None:
        if self._client is not None:
            with suppress(Exception):  # closing a broken client must not mask the real error
                self._client.close()
        self._client = self._collection = None

    def close(self) -> None:
        self._disconnect()
        if self._cache:
            self._cache.close()
            self._cache = None

    def __enter__(self) -> IncidentStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reading
    def _fresh(self) -> None:
        """Reconnect if another process wrote since we connected (our vector index would be stale)."""
        meta = self._read_meta(self.path)
        if meta["generation"] != self._meta["generation"]:
            self._meta = meta
            self._connect()

    @staticmethod
    def _from_chroma(metadatas: Iterable[dict[str, Any]]) -> list[Incident]:
        return [Incident.model_validate_json(m["json"]) for m in metadatas]

    def get(self, incident_id: str) -> Incident | None:
        got = self._collection.get(ids=[incident_id], include=["metadatas"])
        return self._from_chroma(got["metadatas"])[0] if got["ids"] else None

    def __len__(self) -> int:
        return self._collection.count()

    def iter_incidents(self, where: dict[str, Any] | None = None) -> Iterator[Incident]:
        offset = 0
        while True:
            got = self._collection.get(where=where, include=["metadatas"], limit=BATCH, offset=offset)
            yield from self._from_chroma(got["metadatas"])
            if len(got["ids"]) < BATCH:
                return
            offset += BATCH

    def list(self, category: str | None = None, status: str | None = None, limit: int | None = None) -> list[Incident]:
        """Incidents, most recently seen first (filters: category, status)."""
        clauses = [{k: v} for k, v in (("category", category), ("status", status)) if v]
        where = clauses[0] if len(clauses) == 1 else ({"$and": clauses} if clauses else None)
        found = sorted(self.iter_incidents(where), key=lambda i: (i.last_seen, i.id), reverse=True)
        return found[:limit] if limit else found

    def _find(self, fingerprints: Iterable[str]) -> dict[str, Incident]:
        """The stored incidents with these signature fingerprints (one query per batch)."""
        wanted = list(dict.fromkeys(fingerprints))
        found: dict[str, Incident] = {}
        for i in range(0, len(wanted), BATCH):
            part = wanted[i:i + BATCH]
            where = {"fingerprint": part[0]} if len(part) == 1 else {"fingerprint": {"$in": part}}
            got = self._collection.get(where=where, include=["metadatas"])
            found.update((inc.fingerprint, inc) for inc in self._from_chroma(got["metadatas"]))
        return found

    def cache(self) -> SearchCache:
        """The search cache, rebuilt first if it is missing, stale or damaged."""
        self._fresh()
        if self._cache is None or self._cache.generation < self._meta["generation"]:
            if self._cache:
                self._cache.close()
            try:
                self._cache = SearchCache.load(self.path / "index")
                if self._cache.generation < self._meta["generation"]:  # ahead: a writer is committing
                    raise CacheError("stale")
            except CacheError:
                with self._writing(bump=False):
                    self._cache = SearchCache.rebuild(self.path / "index", self.iter_incidents(),
                                                      self._meta["generation"])
        return self._cache

    def search(self, text: str, k: int = 5, mode: str = "lexical") -> list[tuple[Incident, float]]:
        """The `k` incidents closest to `text` (masked into a signature first), best first.

        mode `lexical` (default): TF-IDF cosine over the search cache; `vector`: chromadb's
        nearest neighbours over the hashing embedding (score = 1 - cosine distance).
        """
        signature = signature_text(text)
        if not signature:
            return []
        if mode == "lexical":
            return self.cache().search(signature, k)
        if mode != "vector":
            raise ValueError(f"unknown search mode {mode!r} (lexical | vector)")
        self._fresh()
        n = min(k, self._collection.count())
        if not n:
            return []
        got = self._collection.query(query_texts=[signature], n_results=n, include=["metadatas", "distances"])
        return [(inc, min(1.0, max(0.0, 1.0 - d))) for inc, d in
                zip(self._from_chroma(got["metadatas"][0]), got["distances"][0], strict=True)]

    # ------------------------------------------------------------------ writing
    @contextmanager
    def _writing(self, bump: bool = True) -> Iterator[dict[str, Any]]:
        _acquire(self._lock, self.path, self.lock_timeout)
        try:
            self._fresh()
            meta = dict(self._meta)
            self._dirty = False
            try:
                yield meta
            except BaseException:
                if bump and self._dirty:  # half-written: persist the ids handed out, invalidate caches
                    meta["generation"] += 1
                    self._write_meta(self.path, meta)
                raise
            if bump:
                meta["generation"] += 1
                self._write_meta(self.path, meta)
            self._meta = meta
        finally:
            self._lock.release()

    def _save(self, meta: dict[str, Any], new: list[Incident], changed: list[Incident]) -> None:
        """Write new and changed incidents to chroma, the journal and the search cache."""
        self._dirty = True

        def chroma_meta(inc: Incident) -> dict[str, Any]:
            return {"category": inc.category.value, "subtype": inc.subtype, "action": inc.action.value,
                    "status": inc.status.value, "count": inc.count, "last_seen": inc.last_seen.isoformat(),
                    "fingerprint": inc.fingerprint, "origin": inc.origin, "json": inc.model_dump_json(by_alias=True)}

        for i in range(0, len(new), BATCH):
            part = new[i:i + BATCH]
            self._collection.add(ids=[x.id for x in part], documents=[x.signature for x in part],
                                 metadatas=[chroma_meta(x) for x in part])
        for i in range(0, len(changed), BATCH):
            part = changed[i:i + BATCH]
            self._collection.update(ids=[x.id for x in part], metadatas=[chroma_meta(x) for x in part])
        with (self.path / "journal.jsonl").open("a", encoding="utf-8") as fh:
            fh.writelines(x.model_dump_json(by_alias=True) + "\n" for x in [*new, *changed])
        generation = meta["generation"] + 1
        try:
            cache = SearchCache.load(self.path / "index")
            if cache.generation != meta["generation"]:
                raise CacheError("stale")
            cache.update([*new, *changed], generation)
        except CacheError:
            cache = SearchCache.rebuild(self.path / "index", self.iter_incidents(), generation)
        if self._cache:
            self._cache.close()
        self._cache = cache

    @staticmethod
    def _assign(meta: dict[str, Any], inc: Incident, taken: set[str] | None = None) -> Incident:
        """Give `inc` an id: its own if it has one that is free in `taken`, else the next one."""
        number = id_number(inc.id) if taken is not None else None
        if number is None or format_id(number) in taken:  # type: ignore[operator]
            number = meta["next_id"]
        meta["next_id"] = max(meta["next_id"], number + 1)
        new_id = format_id(number)
        if taken is not None:
            taken.add(new_id)
        return inc.model_copy(update={"id": new_id, "origin": inc.origin or f"{meta['store_id']}/{new_id}"})

    def _upsert(self, incidents: Iterable[Incident], observe: bool) -> list[Incident]:
        incidents = list(incidents)
        with self._writing() as meta:
            stored_before = self._find(inc.fingerprint for inc in incidents)
            new: dict[str, Incident] = {}
            changed: dict[str, Incident] = {}
            out = []
            for inc in incidents:
                fp = inc.fingerprint
                old = new.get(fp) or changed.get(fp) or stored_before.get(fp)
                if old is None:
                    stored = new[fp] = self._assign(meta, inc)
                else:
                    stored = merge(old, inc, observe)
                    (new if fp in new else changed)[fp] = stored
                out.append(stored)
            self._save(meta, list(new.values()), list(changed.values()))
        return out

    def add(self, incident: Incident) -> str:
        """Record a sighting; the same signature again adds to its count. Returns the incident id.

        A confirmed or corrected incident (`status`) is a sighting a person checked: its verdict
        replaces an unconfirmed or seed one (see dedup.py); `confirm`/`correct` store verdicts so.
        """
        return self._upsert([incident], observe=True)[0].id

    def vouch(self, incident: Incident) -> Incident:
        """Store a confirmed or corrected verdict (a checked sighting, see `add`); returns the stored incident."""
        return self._upsert([incident], observe=True)[0]

    def add_many(self, incidents: Iterable[Incident]) -> list[str]:
        return [inc.id for inc in self._upsert(incidents, observe=True)]

    def update(self, incident_id: str, **fields: Any) -> Incident:
        """Change fields of one incident (confirm/correct by id)."""
        with self._writing() as meta:
            old = self.get(incident_id)
            if old is None:
                raise KeyError(f"no incident {incident_id} in {self.path}")
            new = Incident.model_validate({**old.to_json_dict(), **fields})
            self._save(meta, [], [new])
        return new

    # ------------------------------------------------------------------ export / import
    def export_jsonl(self, out: Path | IO[str]) -> int:
        """Write every incident as one `incident/v1` JSON line (sorted by id); returns the count."""
        return write_export(self.iter_incidents(), out)

    def import_jsonl(self, source: Path | IO, max_line_bytes: int = MAX_LINE_BYTES) -> ImportReport:
        """Import an export or a journal (see `transfer.read_import`); importing the same file twice
        changes nothing. Lines left out are listed in the report's `unread`."""
        try:
            incidents, unread = read_import(source, max_line_bytes)
        except ImportFileError as exc:
            raise StoreError(str(exc)) from exc
        return dataclasses.replace(self.import_incidents(incidents), unread=unread)

    def import_incidents(self, incidents: Iterable[Incident]) -> ImportReport:
        """Fold incidents into the store (see `dedup.plan_import`); one write for all of them."""
        with self._writing() as meta:
            plan = plan_import(self.iter_incidents(), incidents, lambda inc, taken: self._assign(meta, inc, taken))
            if plan.new or plan.changed:
                self._save(meta, plan.new, plan.changed)
        return plan.report
