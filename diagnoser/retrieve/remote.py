"""The incident store on a chromadb server (`chroma run`): one memory shared by a fleet.

Where the truth lives: on the server, as the append-only ledger of ledger.py; nothing on a host is
needed to rebuild it. Each host keeps, under its store directory (`servers/<key>/`), a derived view:
the search cache of cache.py (TF-IDF index + incident snapshots) stamped with the number of ledger
records it folds, rebuilt when the server holds more; and a spool of records not yet sent.

Searching uses that local index, not chromadb's own query: on the retrieval bench the TF-IDF index
finds the right incident far more often than the vector channel (README, "Shared memory").

Server down: a write is appended to the spool (nothing is lost), then `Spooled` (a StoreError) says
so; the next use that reaches the server sends the spool first. A read fails with StoreError, except
triage's retrieval (`server_neighbours`), which answers from the last synced view with a warning.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from filelock import FileLock, Timeout

from diagnoser.retrieve import ledger
from diagnoser.retrieve.cache import CacheError, SearchCache
from diagnoser.retrieve.dedup import ImportReport
from diagnoser.retrieve.embed import HashingEmbedder
from diagnoser.retrieve.incident import Incident
from diagnoser.retrieve.lines import MAX_LINE_BYTES
from diagnoser.retrieve.seed import shipped_seed
from diagnoser.retrieve.server_config import MemoryServer
from diagnoser.retrieve.signature import signature_text
from diagnoser.retrieve.store import BATCH, StoreError
from diagnoser.retrieve.transfer import ImportFileError, read_import, write_export

log = logging.getLogger(__name__)
TIMEOUT = 10.0  # seconds for one request to the server
LOCK_TIMEOUT = 60.0


class Unreachable(StoreError):
    """The chromadb server did not answer."""


class Spooled(StoreError):
    """A write could not reach the server and waits in the local spool."""


def _unreachable(exc: BaseException) -> bool:
    while exc is not None:
        name = type(exc).__name__
        if isinstance(exc, (ConnectionError, TimeoutError)) or name in ("ConnectError", "ConnectTimeout",
                                                                        "ReadTimeout", "RemoteProtocolError") \
                or "Could not connect" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


def view_dir(server: MemoryServer, store_path: Path) -> Path:
    return store_path / "servers" / server.key


class RemoteStore:
    """Past incidents on a chromadb server; the same operations as `IncidentStore`."""

    def __init__(self, server: MemoryServer, store_path: Path) -> None:
        self.server = server
        self.path = view_dir(server, store_path)
        self.embedder = HashingEmbedder()
        self._collection: Any = None
        self._cache: SearchCache | None = None
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the local view of {server.describe()} at {self.path}: "
                             f"{exc.strerror or exc}") from exc
        self._lock = FileLock(str(self.path / ".lock"), timeout=LOCK_TIMEOUT)

    # ------------------------------------------------------------------ connection
    @classmethod
    def create(cls, server: MemoryServer, store_path: Path, seed: bool = True) -> RemoteStore:
        """Connect (creating the collection if needed); an empty memory gets the seed memory."""
        store = cls(server, store_path)
        try:
            store.sync()
        except Unreachable:
            return store  # reads will say so; writes go to the spool
        if seed and store._call("failed a read", "count") == 0:
            store.import_incidents(shipped_seed())
        return store

    def _connect(self) -> Any:
        if self._collection is not None:
            return self._collection
        try:
            import chromadb
            from chromadb.config import Settings
        except ImportError as exc:
            raise StoreError("the incident store needs chromadb: pip install 'diagnoser[retrieval]'") from exc
        try:
            client = chromadb.HttpClient(host=self.server.host, port=self.server.port, ssl=self.server.ssl,
                                         tenant=self.server.tenant, database=self.server.database,
                                         settings=Settings(anonymized_telemetry=False))
            self._collection = client.get_or_create_collection(
                self.server.collection, embedding_function=None, configuration={"hnsw": {"space": "cosine"}},
                metadata={"diagnoser": "incident ledger", "embedder": json.dumps(self.embedder.describe())})
        except Exception as exc:  # noqa: BLE001 - chromadb raises many kinds; two meanings here
            self._collection = None
            raise self._error("cannot be reached", exc) from None
        (self.path / "server.json").write_text(json.dumps({"collection_id": str(self._collection.id),
                                                           "url": self.server.url}))
        return self._collection

    def _error(self, what: str, exc: BaseException) -> StoreError:
        kind = Unreachable if _unreachable(exc) else StoreError
        return kind(f"incident server {self.server.describe()} {what}: {type(exc).__name__}: {str(exc)[:200]}")

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        collection = self._connect()
        try:
            return getattr(collection, fn)(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            raise self._error(what, exc) from None

    def close(self) -> None:
        if self._cache:
            self._cache.close()
            self._cache = None
        self._collection = None

    def __enter__(self) -> RemoteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the ledger
    def _upsert(self, records: list[ledger.Record]) -> None:
        for i in range(0, len(records), BATCH):
            part = records[i:i + BATCH]
            self._call("refused a write", "upsert", ids=[r.id for r in part], documents=[r.document for r in part],
                       embeddings=self.embedder.embed([r.document for r in part]).tolist(),
                       metadatas=[r.metadata() for r in part])

    def _flush_spool(self) -> None:
        spool = self.path / "spool.jsonl"
        if not spool.is_file() or not spool.stat().st_size:
            return
        records = [ledger.Record.from_json(line) for line in spool.read_text(encoding="utf-8").splitlines() if line]
        self._upsert(records)  # ids are fixed: sending a record twice stores it once
        spool.unlink()
        log.warning("sent %d spooled incident record(s) to %s", len(records), self.server.describe())

    def _write(self, records: list[ledger.Record]) -> None:
        """Send records, or keep them in the spool and raise Spooled."""
        with self._locked():
            try:
                self._flush_spool()
                self._upsert(records)
                return
            except Unreachable as exc:
                with (self.path / "spool.jsonl").open("a", encoding="utf-8") as fh:
                    fh.writelines(r.to_json() + "\n" for r in records)
                raise Spooled(f"{exc}. The write is kept in {self.path / 'spool.jsonl'} and is sent by the next "
                              f"command that reaches the server") from None

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            self._lock.acquire()
        except Timeout as exc:
            raise StoreError(f"the local view {self.path} is locked for more than {LOCK_TIMEOUT:.0f}s") from exc
        try:
            yield
        finally:
            self._lock.release()

    def _records(self) -> list[ledger.Record]:
        out: dict[str, ledger.Record] = {}
        offset = 0
        while True:
            got = self._call("failed a read", "get", include=["metadatas", "documents"], limit=BATCH, offset=offset)
            for rid, doc, meta in zip(got["ids"], got["documents"], got["metadatas"], strict=True):
                out[rid] = ledger.Record.from_chroma(rid, doc, meta)
            if len(got["ids"]) < BATCH:
                return list(out.values())
            offset += BATCH

    def sync(self) -> SearchCache:
        """The local view, rebuilt from the server's ledger when the server holds more records."""
        with self._locked():
            self._flush_spool()
            count = self._call("failed a read", "count")
            if self._cache is None:
                try:
                    self._cache = SearchCache.load(self.path / "index")
                except CacheError:
                    self._cache = None
            if self._cache is None or self._cache.generation != count:
                records = self._records()
                fold = ledger.Fold(self._origin()).apply(records)
                if self._cache:
                    self._cache.close()
                self._cache = SearchCache.rebuild(self.path / "index", fold.incidents(), len(records))
            return self._cache

    def _origin(self) -> str:
        return f"chroma/{self.server.tenant}/{self.server.database}/{self.server.collection}"

    # ------------------------------------------------------------------ the store's operations
    def get(self, incident_id: str) -> Incident | None:
        cache = self.sync()
        try:
            return cache.record(cache.index.row(incident_id))
        except (KeyError, ValueError):
            return None

    def __len__(self) -> int:
        return len(self.sync().index)

    def iter_incidents(self) -> Iterator[Incident]:
        return iter(list(self.sync().incidents()))

    def list(self, category: str | None = None, status: str | None = None, limit: int | None = None) -> list[Incident]:
        found = [i for i in self.iter_incidents() if (not category or i.category.value == category)
                 and (not status or i.status.value == status)]
        found.sort(key=lambda i: (i.last_seen, i.id), reverse=True)
        return found[:limit] if limit else found

    def search(self, text: str, k: int = 5, mode: str = "lexical") -> list[tuple[Incident, float]]:
        """The `k` incidents closest to `text` over the local view (TF-IDF); `mode` must be lexical."""
        if mode != "lexical":
            raise StoreError("with a shared memory server only --mode lexical searches (the local TF-IDF view; "
                             "see the README for why)")
        signature = signature_text(text)
        return self.sync().search(signature, k) if signature else []

    def add(self, incident: Incident) -> str:
        """Record a sighting; returns its id (known before the server answers: it comes from the signature)."""
        self._write(ledger.sightings([incident]))
        return ledger.incident_id(incident.fingerprint)

    def add_many(self, incidents: Iterable[Incident]) -> list[str]:
        incidents = list(incidents)
        self._write(ledger.sightings(incidents))
        return [ledger.incident_id(i.fingerprint) for i in incidents]

    def vouch(self, incident: Incident) -> Incident:
        return self._stored(self.add(incident))

    def _stored(self, incident_id: str) -> Incident:
        got = self.get(incident_id)
        if got is None:  # pragma: no cover - the server lost a record it acknowledged
            raise StoreError(f"{incident_id} was written to {self.server.describe()} but is not there")
        return got

    def update(self, incident_id: str, **fields: Any) -> Incident:
        if self.get(incident_id) is None:
            raise KeyError(f"no incident {incident_id} in {self.server.describe()}")
        self._write([ledger.update(incident_id, fields)])
        return self._stored(incident_id)

    def export_jsonl(self, out: Path | IO[str]) -> int:
        return write_export(self.iter_incidents(), out)

    def import_jsonl(self, source: Path | IO, max_line_bytes: int = MAX_LINE_BYTES) -> ImportReport:
        try:
            incidents, unread = read_import(source, max_line_bytes)
        except ImportFileError as exc:
            raise StoreError(str(exc)) from exc
        report = self.import_incidents(incidents)
        return ImportReport(report.added, report.merged, report.skipped, unread)

    def import_incidents(self, incidents: Iterable[Incident]) -> ImportReport:
        """Fold incidents in (as `IncidentStore.import_incidents`); the report is what this host's
        view predicts: a concurrent writer may fold the same incidents first."""
        incidents = list(incidents)
        fold = ledger.Fold(self._origin())
        fold.by_fp = {i.fingerprint: i for i in self.sync().incidents()}
        plan = fold.plan(incidents)
        if plan.new or plan.changed:
            self._write(ledger.import_batch(incidents))
        return plan.report


def server_neighbours(server: MemoryServer, store_path: Path, signature: str, k: int) -> list[tuple[Incident, float]]:
    """Triage's retrieval against the shared memory, built not to slow a triage down: when the local
    view counts as many records as the server (one HTTP request, no chromadb import) it answers at
    once; otherwise it syncs; when the server is down it answers from the last synced view."""
    directory = view_dir(server, store_path)
    try:
        cache = SearchCache.load(directory / "index")
    except CacheError:
        cache = None
    try:
        if cache is not None and cache.generation == _server_count(server, directory):
            return cache.search(signature, k)
        with RemoteStore(server, store_path) as store:
            return store.sync().search(signature, k)
    except (OSError, StoreError, ValueError) as exc:
        if cache is None:
            raise
        log.warning("incident server %s unusable (%s); answering from the last synced view", server.describe(),
                    str(exc)[:200])
        return cache.search(signature, k)


def _server_count(server: MemoryServer, directory: Path) -> int:
    collection = json.loads((directory / "server.json").read_text())["collection_id"]
    url = (f"{server.url}/api/v2/tenants/{server.tenant}/databases/{server.database}/collections/"
           f"{collection}/count")
    with urllib.request.urlopen(url, timeout=2.0) as resp:  # noqa: S310 - the configured server
        return int(json.loads(resp.read()))
