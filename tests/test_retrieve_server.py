"""The shared incident memory on a real chromadb server (`chroma run` on loopback): several writer
processes at once, a third client that sees everything, and what happens when the server is down."""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("chromadb")

from chroma_server import ChromaServer  # noqa: E402

from diagnoser.retrieve import api  # noqa: E402
from diagnoser.retrieve.backend import open_store  # noqa: E402
from diagnoser.retrieve.incident import Incident, Status  # noqa: E402
from diagnoser.retrieve.remote import RemoteStore, Spooled  # noqa: E402
from diagnoser.retrieve.seed import shipped_seed  # noqa: E402
from diagnoser.retrieve.server_config import memory_server  # noqa: E402
from diagnoser.retrieve.store import StoreError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WRITERS, EACH = 3, 12


def word(n: int) -> str:
    """A distinct letters-only word (signature masking keeps words, masks numbers)."""
    out = ""
    for _ in range(3):
        n, d = divmod(n, 26)
        out += string.ascii_lowercase[d]
    return out


def failure(writer: int, i: int) -> str:
    return f"FATAL pipeline stage {word(writer * 100 + i)} aborted: checkpoint shard {word(i + 7)} unreadable"


SHARED = "FATAL fleetwide sentinel failure: object store bucket quorum lost"
WRITER = """
import sys
from diagnoser.retrieve.backend import open_store
from diagnoser.retrieve.incident import Incident
sys.path.insert(0, sys.argv[3])
from test_retrieve_server import SHARED, failure
writer, each = int(sys.argv[1]), int(sys.argv[2])
with open_store() as st:
    for i in range(each):
        st.add(Incident(signature=failure(writer, i), category="infra", subtype=f"w{writer}", action="escalate"))
        st.add(Incident(signature=SHARED, category="infra", subtype="fleet", action="escalate"))
"""


@pytest.fixture
def chroma(tmp_path):
    server = ChromaServer(tmp_path / "chroma").start()
    yield server
    server.stop()


def _env(server: ChromaServer, host_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIAGNOSER_", "OPENAI_"))}
    env.update(PYTHONPATH=str(ROOT), DIAGNOSER_STORE=str(host_dir), DIAGNOSER_LLM="none",
               DIAGNOSER_MEMORY__SERVER=server.url, DIAGNOSER_MEMORY__COLLECTION="fleet-memory")
    return env


def _host(monkeypatch, server: ChromaServer, host_dir: Path) -> None:
    """This test process acts as one more host (its own view directory)."""
    for key, value in _env(server, host_dir).items():
        if key.startswith("DIAGNOSER_"):
            monkeypatch.setenv(key, value)


def _cli(server: ChromaServer, host_dir: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diagnoser.cli", *args], input=stdin, capture_output=True, text=True,
                          env=_env(server, host_dir), timeout=180)


def test_concurrent_writers_keep_every_incident(chroma, tmp_path, monkeypatch):
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(w), str(EACH), str(ROOT / "tests")],
                                env=_env(chroma, tmp_path / f"host{w}"), stderr=subprocess.PIPE, text=True)
               for w in range(WRITERS)]
    # and one more host records through the CLI while they write
    cli = _cli(chroma, tmp_path / "host-cli", "incidents", "add", "-", "--category", "infra", "--subtype", "cli",
               "--action", "escalate", "--json", stdin=SHARED)
    for proc in writers:
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    assert cli.returncode == 0, cli.stderr

    _host(monkeypatch, chroma, tmp_path / "reader")
    with open_store() as st:
        assert isinstance(st, RemoteStore)
        everything = {i.signature: i for i in st.iter_incidents()}
        for w in range(WRITERS):
            for i in range(EACH):
                sig = failure(w, i)
                assert everything[sig].count == 1 and everything[sig].subtype == f"w{w}"
                assert st.search(sig, k=1)[0][0].signature == sig
        shared = everything[SHARED]
        assert shared.count == WRITERS * EACH + 1, "no concurrent sighting of the same failure is lost"
        assert len([s for s in everything if s not in (SHARED,)]) == WRITERS * EACH + len(shipped_seed())
    # the seed memory went in once although four hosts created the memory at the same time
    seed_origins = [i.origin for i in everything.values() if i.status is Status.SEED]
    assert len(seed_origins) == len(set(seed_origins)) == len(shipped_seed())
    # a triage on yet another host finds the shared incident through its own view
    assert api.neighbours(SHARED, k=1, store_path=tmp_path / "triage-host")[0][0].count == WRITERS * EACH + 1


def test_cli_on_two_hosts_confirm_export(chroma, tmp_path):
    added = _cli(chroma, tmp_path / "a", "incidents", "add", "-", "--category", "hardware", "--subtype",
                 "gpu_xid_79", "--action", "drain_and_restart", "--json",
                 stdin="NVRM: Xid (PCI:0000:3b:00): 79, pid=42, GPU has fallen off the bus. fleet-host-a")
    assert added.returncode == 0, added.stderr
    inc = json.loads(added.stdout)["id"]
    confirmed = _cli(chroma, tmp_path / "b", "incidents", "confirm", inc, "--by", "alice", "--json")
    assert confirmed.returncode == 0, confirmed.stderr
    assert json.loads(confirmed.stdout)["status"] == "confirmed"
    shown = _cli(chroma, tmp_path / "a", "incidents", "show", inc, "--json")
    assert json.loads(shown.stdout)["confirmed_by"] == "alice"
    missing = _cli(chroma, tmp_path / "a", "incidents", "confirm", "inc-00001", "--by", "bob")
    assert missing.returncode == 1 and "no incident inc-00001" in missing.stderr
    vector = _cli(chroma, tmp_path / "a", "incidents", "search", "Xid 79", "--mode", "vector")
    assert vector.returncode == 2 and "only --mode lexical" in vector.stderr
    # the shared memory exports like a local store, and the export imports into an embedded store
    out = tmp_path / "export.jsonl"
    assert _cli(chroma, tmp_path / "a", "incidents", "export", str(out)).returncode == 0
    lines = out.read_text().splitlines()
    assert inc in {json.loads(x)["id"] for x in lines}
    env = _env(chroma, tmp_path / "local")
    del env["DIAGNOSER_MEMORY__SERVER"]
    imported = subprocess.run([sys.executable, "-m", "diagnoser.cli", "incidents", "import", str(out), "--json"],
                              capture_output=True, text=True, env=env, timeout=180)
    assert imported.returncode == 0, imported.stderr
    again = _cli(chroma, tmp_path / "a", "incidents", "import", str(out), "--json")
    assert json.loads(again.stdout)["added"] == 0, "importing the memory's own export changes nothing"


def test_server_down_spools_and_flushes(chroma, tmp_path, monkeypatch):
    first = "FATAL before outage: tokenizer cache corrupt on shard alpha"
    assert _cli(chroma, tmp_path / "h", "incidents", "add", "-", "--category", "user_code", "--subtype", "tok",
                "--action", "stop_and_notify", stdin=first).returncode == 0
    chroma.stop()

    during = "FATAL during outage: dataloader worker crashed reading parquet footer"
    got = _cli(chroma, tmp_path / "h", "incidents", "add", "-", "--category", "user_code", "--subtype", "parquet",
               "--action", "stop_and_notify", "--json", stdin=during)
    assert got.returncode == 2
    assert "cannot be reached" in got.stderr and "spool.jsonl" in got.stderr and "Traceback" not in got.stderr
    listed = _cli(chroma, tmp_path / "h", "incidents", "list")
    assert listed.returncode == 2 and "cannot be reached" in listed.stderr
    # triage's retrieval answers from this host's last synced view while the server is down
    _host(monkeypatch, chroma, tmp_path / "h")
    assert api.neighbours(first, k=1)[0][0].subtype == "tok"
    with pytest.raises(Spooled), RemoteStore(memory_server(), tmp_path / "h") as st:
        st.add(Incident(signature="FATAL second outage write: lost lease on nfs lock", category="infra",
                        subtype="nfs", action="retry_after_backoff"))

    chroma.start()  # same data, same port
    listed = _cli(chroma, tmp_path / "h", "incidents", "list", "--json", "--limit", "0")
    assert listed.returncode == 0, listed.stderr
    subtypes = {i["subtype"] for i in json.loads(listed.stdout)}
    assert {"tok", "parquet", "nfs"} <= subtypes, "the spooled writes reached the server"
    assert not list((tmp_path / "h").rglob("spool.jsonl"))
    # and another host sees them
    other = _cli(chroma, tmp_path / "other", "incidents", "search", during, "--json")
    assert json.loads(other.stdout)["results"][0]["incident"]["subtype"] == "parquet"


def test_memory_server_config():
    assert memory_server({}) is None
    s = memory_server({"DIAGNOSER_MEMORY__SERVER": "http://mem.example:8000/", "DIAGNOSER_MEMORY__TENANT": "t",
                       "DIAGNOSER_MEMORY__DATABASE": "d", "DIAGNOSER_MEMORY__COLLECTION": "team-a"})
    assert (s.host, s.port, s.ssl, s.tenant, s.database, s.collection) == ("mem.example", 8000, False, "t", "d",
                                                                           "team-a")
    for bad in ("mem.example:8000", "ftp://x", "http://x:99999", "http://x/path"):
        with pytest.raises(ValueError, match="DIAGNOSER_MEMORY__SERVER"):
            memory_server({"DIAGNOSER_MEMORY__SERVER": bad})
    with pytest.raises(ValueError, match="collection names"):
        memory_server({"DIAGNOSER_MEMORY__SERVER": "http://x:1", "DIAGNOSER_MEMORY__COLLECTION": "a"})


def test_bad_server_config_is_a_store_error(tmp_path, monkeypatch):
    monkeypatch.setenv("DIAGNOSER_MEMORY__SERVER", "not-a-url")
    with pytest.raises(StoreError, match="DIAGNOSER_MEMORY__SERVER"):
        open_store(tmp_path)


def test_the_settings_files_memory_section_selects_the_server_and_the_environment_wins(tmp_path) -> None:
    from diagnoser.retrieve.server_config import memory_server

    cfg = tmp_path / "config.toml"
    cfg.write_text('[memory]\nserver = "http://chroma.internal:8000"\ncollection = "team-a"\n')
    server = memory_server({"DIAGNOSER_CONFIG": str(cfg)})
    assert (server.url, server.collection) == ("http://chroma.internal:8000", "team-a")
    env = {"DIAGNOSER_CONFIG": str(cfg), "DIAGNOSER_MEMORY__SERVER": "http://127.0.0.1:9000"}
    assert memory_server(env).url == "http://127.0.0.1:9000"
    assert memory_server({"DIAGNOSER_CONFIG": str(tmp_path / "absent.toml")}) is None
