"""The shared memory's records on a chromadb server, and how every host folds them into incidents.

Several hosts write at once and chromadb has no transaction or compare-and-set, so the server
holds an append-only ledger instead of one mutable record per incident: every write adds records
with fresh ids and never changes one. A sighting (`add`, `vouch`), an import batch and an update by
id (`confirm`/`correct` of an incident id) are records; the incidents are the fold of all records
in (written, id) order with the embedded store's own rules (`dedup.merge`, `dedup.plan_import`).
So no concurrent write is lost (two hosts seeing the same failure both count), every host folds the
same incidents from the same records, and the number of records is the memory's generation.

An incident's id comes from its signature fingerprint (`inc-` and 15 digits), so hosts agree on it
without a shared counter.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from diagnoser.retrieve.dedup import ImportPlan, merge, plan_import
from diagnoser.retrieve.incident import Incident, format_id

SIGHTING, IMPORT, UPDATE = "sighting", "import", "update"


def incident_id(fingerprint: str) -> str:
    """The id every host gives the incident with this signature fingerprint."""
    return format_id(int(fingerprint[:12], 16))


@dataclass(frozen=True)
class Record:
    """One ledger entry: `payload` is an incident (sighting, import) or {"id", "fields"} (update)."""

    id: str
    kind: str
    written: int  # ns since the epoch on the writing host
    payload: dict[str, Any]
    document: str  # the signature (what the vector channel embeds)
    batch: str = ""  # import records of one import share it

    def metadata(self) -> dict[str, Any]:
        return {"kind": self.kind, "written": self.written, "batch": self.batch, "host": socket.gethostname()[:200],
                "json": json.dumps(self.payload, ensure_ascii=False),
                **({"fingerprint": Incident.model_validate(self.payload).fingerprint} if self.kind != UPDATE else {})}

    @classmethod
    def from_chroma(cls, rid: str, document: str | None, meta: dict[str, Any]) -> Record:
        return cls(rid, str(meta["kind"]), int(meta["written"]), json.loads(meta["json"]), document or "",
                   str(meta.get("batch") or ""))

    def to_json(self) -> str:
        return json.dumps({"id": self.id, "kind": self.kind, "written": self.written, "payload": self.payload,
                           "document": self.document, "batch": self.batch}, ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str) -> Record:
        return cls(**json.loads(line))


def _new(kind: str, payload: dict[str, Any], document: str, batch: str = "") -> Record:
    return Record(uuid.uuid4().hex, kind, time.time_ns(), payload, document or kind, batch)


def sightings(incidents: Iterable[Incident]) -> list[Record]:
    return [_new(SIGHTING, i.to_json_dict(), i.signature) for i in incidents]


def import_batch(incidents: Iterable[Incident]) -> list[Record]:
    batch = uuid.uuid4().hex
    return [_new(IMPORT, i.to_json_dict(), i.signature, batch) for i in incidents]


def update(incident: str, fields: dict[str, Any]) -> Record:
    plain = {k: v.value if hasattr(v, "value") else v for k, v in fields.items()}
    return _new(UPDATE, {"id": incident, "fields": plain}, f"update {incident}")


class Fold:
    """The incidents a ledger describes; `apply` records in ledger order."""

    def __init__(self, origin_prefix: str) -> None:
        self.prefix = origin_prefix
        self.by_fp: dict[str, Incident] = {}
        self.records = 0

    def assign(self, inc: Incident, taken: set[str] | None = None) -> Incident:
        new_id = incident_id(inc.fingerprint)
        if taken is not None:
            taken.add(new_id)
        return inc.model_copy(update={"id": new_id, "origin": inc.origin or f"{self.prefix}/{new_id}"})

    def plan(self, incoming: Iterable[Incident]) -> ImportPlan:
        return plan_import(self.by_fp.values(), incoming, self.assign)

    def apply(self, records: Iterable[Record]) -> Fold:
        ordered = sorted(records, key=lambda r: (r.written, r.id))
        self.records += len(ordered)
        for (kind, _batch), group in groupby(ordered, key=lambda r: (r.kind, r.batch)):
            if kind == IMPORT:
                plan = self.plan(Incident.model_validate(r.payload) for r in group)
                self.by_fp.update((i.fingerprint, i) for i in [*plan.new, *plan.changed])
                continue
            for rec in group:
                if kind == SIGHTING:
                    inc = Incident.model_validate(rec.payload)
                    old = self.by_fp.get(inc.fingerprint)
                    self.by_fp[inc.fingerprint] = self.assign(inc) if old is None else merge(old, inc, observe=True)
                elif kind == UPDATE:
                    fp = next((f for f, i in self.by_fp.items() if i.id == rec.payload["id"]), None)
                    if fp is not None:
                        old = self.by_fp[fp]
                        self.by_fp[fp] = Incident.model_validate({**old.to_json_dict(), **rec.payload["fields"]})
        return self

    def incidents(self) -> list[Incident]:
        return sorted(self.by_fp.values(), key=lambda i: i.id)
