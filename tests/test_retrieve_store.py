"""The incident store on a real chromadb on disk: dedup, search, learning, export/import, faults, concurrency."""

import json
import multiprocessing
import sqlite3
from datetime import UTC, datetime, timedelta

import pytest

from diagnoser.retrieve import api
from diagnoser.retrieve.incident import Incident, Outcome, Status
from diagnoser.retrieve.seed import shipped_seed
from diagnoser.retrieve.signature import signature_text
from diagnoser.retrieve.store import IncidentStore, StoreError

T0 = datetime(2026, 3, 4, 5, 0, tzinfo=UTC)
FAILURES = {
    "gpu_xid_79": ("hardware", "drain_and_restart",
                   "[{t}] NVRM: Xid (PCI:0000:{b}:00): 79, pid={n}, name=python, GPU has fallen off the bus."),
    "gpu_xid_48_dbe": ("hardware", "drain_and_restart",
                       "[{t}] NVRM: Xid (PCI:0000:{b}:00): 48, pid={n}, name=python, An uncorrectable double bit error "
                       "(DBE) has been detected on GPU in the framebuffer at partition 1"),
    "cuda_oom": ("user_code", "stop_and_notify",
                 "[rank{n}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {n}.00 MiB. GPU 0 has a "
                 "total capacity of 79.15 GiB of which {n}.50 MiB is free."),
    "host_oom": ("user_code", "stop_and_notify",
                 "[{t}] Out of memory: Killed process {n} (python) total-vm:{n}kB, anon-rss:{n}kB"),
    "nccl_ib_completion_error": ("infra", "restart_excluding_nodes",
                                 "gpu-{b}:{n}:{n} [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from "
                                 "peer 10.0.{n}.7<{n}> with error 12, opcode 0, len 0, vendor err 129 (Recv)"),
    "storage_stale_handle": ("infra", "retry_after_backoff",
                             "OSError: [Errno 116] Stale file handle: '/lustre/u{n}/x'"),
    "storage_full": ("infra", "escalate", "OSError: [Errno 28] No space left on device: '/scratch/u{n}/ckpt'"),
    "port_in_use": ("user_code", "stop_and_notify",
                    "torch.distributed.DistNetworkError: The server socket has failed to bind to [::]:{n} "
                    "(errno: 98 - Address already in use)."),
    "dns_resolution": ("infra", "retry_after_backoff", "socket.gaierror: [Errno -2] Name or service not known"),
    "collective_timeout": ("unknown", "escalate",
                           "[Rank {n}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={n}, "
                           "OpType=ALLREDUCE, Timeout(ms)=600000) ran for {n} milliseconds before timing out."),
}


def occurrence(subtype: str, k: int) -> str:
    """The failure as it appears the k-th time: another host, bus, pid, time."""
    return FAILURES[subtype][2].format(t=f"Tue Mar  {k % 9 + 1} 0{k % 10}:1{k % 10}:00 2026", b=f"{16 + k:02x}",
                                       n=1000 + 37 * k)


def incident(subtype: str, k: int = 0, **kw) -> Incident:
    category, action, _ = FAILURES[subtype]
    fields = {"category": category, "subtype": subtype, "action": action, **kw}
    return Incident(signature=signature_text(occurrence(subtype, k)), **fields)


@pytest.fixture
def store(tmp_path):
    with IncidentStore.create(tmp_path / "store", seed=False) as st:
        yield st


def test_the_same_failure_seen_again_is_one_incident_with_a_count_and_last_seen(store):
    first = store.add(incident("gpu_xid_79", 1, first_seen=T0, last_seen=T0))
    for k in range(2, 6):
        t = T0 + timedelta(hours=k)
        assert store.add(incident("gpu_xid_79", k, first_seen=t, last_seen=t)) == first
    other = store.add(incident("gpu_xid_48_dbe", 1))
    got = store.get(first)
    assert other != first and len(store) == 2
    assert (got.count, got.first_seen, got.last_seen) == (5, T0, T0 + timedelta(hours=5))
    assert first == "inc-00001" and other == "inc-00002"


def test_search_finds_the_right_past_incident_among_close_distractors(store):
    ids = {sub: store.add(incident(sub, 1)) for sub in FAILURES}
    for sub in FAILURES:
        hits = store.search("step 10 ok\n" + occurrence(sub, 7) + "\nstep 11 ok", k=3)
        assert hits[0][0].id == ids[sub], sub
        assert hits[0][1] > 0.9 and all(s < hits[0][1] for _, s in hits[1:])
    vector = store.search(occurrence("cuda_oom", 9), k=3, mode="vector")
    assert vector[0][0].id == ids["cuda_oom"] and 0 < vector[0][1] <= 1


def test_confirmed_and_corrected_verdicts_beat_unconfirmed_sightings(store):
    inc_id = store.add(incident("cuda_oom", 1))
    corrected = store.get(store.add(incident("cuda_oom", 2, action="escalate", status=Status.CORRECTED,
                                             confirmed_by="bob", resolution="smaller micro-batch",
                                             outcome=Outcome.WORKED)))
    assert corrected.id == inc_id and corrected.count == 2 and corrected.action.value == "escalate"
    again = store.get(store.add(incident("cuda_oom", 3)))  # an automatic sighting does not undo a person's verdict
    assert (again.count, again.action.value, again.status, again.resolution) == (
        3, "escalate", Status.CORRECTED, "smaller micro-batch")
    updated = store.update(inc_id, status=Status.CONFIRMED, confirmed_by="alice", outcome="failed")  # by id: no count
    assert (updated.count, updated.confirmed_by, updated.outcome) == (3, "alice", Outcome.FAILED)
    assert store.search(occurrence("cuda_oom", 4), 1)[0][0].confirmed_by == "alice"  # the cache follows
    with pytest.raises(KeyError):
        store.update("inc-09999", confirmed_by="x")


def test_a_sighting_of_a_seed_example_starts_counting_from_itself(tmp_path):
    with IncidentStore.create(tmp_path / "s") as st:
        seed = next(i for i in shipped_seed() if i.category.value == "hardware")
        t = datetime(2026, 6, 1, tzinfo=UTC)
        seen = st.get(st.add(seed.model_copy(update={"id": "", "origin": "", "status": Status.CONFIRMED,
                                                     "confirmed_by": "alice", "first_seen": t, "last_seen": t})))
        assert seen.id == seed.id and (seen.count, seen.first_seen, seen.status) == (1, t, Status.CONFIRMED)


def test_export_import_round_trip_is_lossless_and_idempotent(store, tmp_path):
    for k, sub in enumerate(FAILURES):
        store.add(incident(sub, k, source_job=f"job-{k}"))
    store.add(incident("cuda_oom", 99))
    out = tmp_path / "memory.jsonl"
    assert store.export_jsonl(out) == len(FAILURES)
    with IncidentStore.create(tmp_path / "other", seed=False) as other:
        report = other.import_jsonl(out)
        assert (report.added, report.merged) == (len(FAILURES), 0)
        mine = {i.id: i.to_json_dict() for i in store.iter_incidents()}
        theirs = {i.id: i.to_json_dict() for i in other.iter_incidents()}
        assert mine == theirs
        assert other.import_jsonl(out).added == 0 and len(other) == len(FAILURES)  # again: nothing changes
        assert other.get("inc-00003").count == 2  # cuda_oom, seen twice
        # a third cluster's sighting of a known failure merges: the counts add up, once
        with IncidentStore.create(tmp_path / "third", seed=False) as third:
            third.add(incident("cuda_oom", 5))
            third.add(incident("cuda_oom", 6))
            third.export_jsonl(tmp_path / "third.jsonl")
        assert other.import_jsonl(tmp_path / "third.jsonl").merged == 1
        assert other.import_jsonl(tmp_path / "third.jsonl").merged == 0
        oom = other.search(occurrence("cuda_oom", 1), 1)[0][0]
        assert oom.count == 4 and len(oom.merged_from) == 1


def test_import_rejects_a_bad_line_with_its_number(store, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(incident("cuda_oom").model_dump_json() + "\n{\"schema\": \"incident/v1\"}\n")
    with pytest.raises(StoreError, match="line 2 is not an incident/v1 record"):
        store.import_jsonl(bad)
    assert len(store) == 0


def test_corrupted_store_gives_a_clear_error_and_the_journal_rebuilds_it(tmp_path):
    path = tmp_path / "store"
    with IncidentStore.create(path, seed=False) as st:
        st.add(incident("gpu_xid_79", 1))
        st.add(incident("gpu_xid_79", 2))
        st.add(incident("storage_full", 1))
        st.add(incident("storage_full", 3, status=Status.CONFIRMED, confirmed_by="ops", resolution="purged"))
    (path / "chroma" / "chroma.sqlite3").write_bytes(b"\x00garbage" * 4096)
    with pytest.raises(StoreError) as err:
        IncidentStore.open(path)
    message = str(err.value)
    assert f"incident store at {path} is damaged" in message
    assert f"mv {path} {path}.broken && diagnoser incidents import {path}.broken/journal.jsonl" in message
    path.rename(tmp_path / "store.broken")
    with IncidentStore.create(path, seed=False) as rebuilt:
        rebuilt.import_jsonl(tmp_path / "store.broken" / "journal.jsonl")
        xid, full = rebuilt.get("inc-00001"), rebuilt.get("inc-00002")
        assert (xid.count, full.count, full.resolution, full.status) == (2, 2, "purged", Status.CONFIRMED)
        assert len(rebuilt) == 2


def test_damaged_or_foreign_store_descriptions_are_refused(tmp_path):
    path = tmp_path / "store"
    IncidentStore.create(path, seed=False).close()
    meta = json.loads((path / "store.json").read_text())
    (path / "store.json").write_text(json.dumps({**meta, "version": 99}))
    with pytest.raises(StoreError, match="has format version 99; this diagnoser reads version 1"):
        IncidentStore.open(path)
    (path / "store.json").write_text("{not json")
    with pytest.raises(StoreError, match="is damaged"):
        IncidentStore.open(path)
    with pytest.raises(StoreError, match="no incident store at"):
        IncidentStore.open(tmp_path / "nowhere")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("x")
    with pytest.raises(StoreError, match="is not an incident store"):
        IncidentStore.create(tmp_path / "notes")


def test_a_damaged_search_cache_is_rebuilt_from_chromadb(store):
    inc_id = store.add(incident("host_oom", 1))
    store.close()
    (store.path / "index" / "ids.npy").write_bytes(b"broken")
    api._caches.clear()
    assert api.similar_incidents(occurrence("host_oom", 2), store_path=store.path)[0].id == inc_id
    with IncidentStore.open(store.path) as again:
        assert again.search(occurrence("host_oom", 3), 1)[0][0].id == inc_id


def test_a_new_store_starts_with_the_seed_memory_once(tmp_path):
    seed = shipped_seed()
    assert seed, "diagnoser/data/seed_incidents.jsonl is missing (python bench/build_seed.py)"
    with IncidentStore.create(tmp_path / "s") as st:
        assert len(st) == len(seed)
        assert st.get(seed[0].id).status is Status.SEED
    with IncidentStore.create(tmp_path / "s") as st:
        assert len(st) == len(seed)
        assert st.add(incident("dns_resolution")) == f"inc-{len(seed) + 1:05d}"


def _writer(path: str, worker: int, n: int) -> None:
    with IncidentStore.create(path, seed=False) as st:
        for k in range(n):
            st.add(Incident(signature=f"RuntimeError: worker{'abcdefgh'[worker]} failure {'xyzw'[k % 4]}{k // 4}a",
                            category="user_code", subtype=f"w{worker}", action="stop_and_notify"))


def test_two_writers_at_once_lose_nothing_and_the_store_still_opens(tmp_path):
    path = tmp_path / "store"
    IncidentStore.create(path, seed=False).close()
    api.similar_incidents("RuntimeError: warm the reader's cache", store_path=path)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), w, 12)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    with IncidentStore.open(path) as st:
        incidents = list(st.iter_incidents())
        assert len(incidents) == 24 and len({i.id for i in incidents}) == 24
        assert {i.subtype for i in incidents} == {"w0", "w1"}
        assert len(st.cache().index) == 24
        assert st.search("RuntimeError: workerb failure y2a", 1)[0][0].subtype == "w1"
    # a reader that cached the store before the writers ran sees their incidents
    assert api.similar_incidents("RuntimeError: workera failure z1a", store_path=path)[0].score > 0.99
    with sqlite3.connect(path / "chroma" / "chroma.sqlite3") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_the_store_never_reaches_the_network(tmp_path, monkeypatch):
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args[1:]!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    with IncidentStore.create(tmp_path / "offline") as st:  # with the seed memory
        inc_id = st.add(incident("port_in_use", 1))
        assert st.search(occurrence("port_in_use", 2), 1)[0][0].id == inc_id
        assert st.search(occurrence("port_in_use", 2), 1, mode="vector")[0][0].id == inc_id
