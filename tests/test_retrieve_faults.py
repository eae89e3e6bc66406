"""The incident store under real faults: a torn journal, a directory at the lock path, a file at the
store path, mistyped or foreign-version store.json and records, a 20 MB line in an import file."""

import json

import pytest
import typer
from typer.testing import CliRunner

from diagnoser.retrieve.cli import register
from diagnoser.retrieve.incident import Incident
from diagnoser.retrieve.signature import signature_text
from diagnoser.retrieve.store import IncidentStore, StoreError

LINES = [
    "[Tue Mar  4 05:06:01 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.",
    "OSError: [Errno 28] No space left on device: '/scratch/u1/ckpt'",
    "OSError: [Errno 116] Stale file handle: '/lustre/u7/x'",
]
KINDS = [("hardware", "gpu_xid_79", "drain_and_restart"), ("infra", "storage_full", "escalate"),
         ("infra", "storage_stale_handle", "retry_after_backoff")]


def incident(i: int) -> Incident:
    category, subtype, action = KINDS[i]
    return Incident(signature=signature_text(LINES[i]), category=category, subtype=subtype, action=action)


def cli():
    app = typer.Typer()
    register(app)

    @app.callback()
    def main() -> None:
        """diagnoser"""

    runner = CliRunner()

    def run(*args: str, code: int):
        result = runner.invoke(app, ["incidents", *args])
        assert result.exit_code == code, (result.output, result.exception)
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        return result

    return run


@pytest.fixture
def broken(tmp_path):
    """A store whose last journal write was cut mid-line, moved aside as the README says."""
    path = tmp_path / "store"
    with IncidentStore.create(path, seed=False) as st:
        st.add(incident(0))
        st.add(incident(1))
    journal = path / "journal.jsonl"
    torn = incident(2).model_dump_json(by_alias=True)
    with journal.open("a") as fh:
        fh.write(torn[: len(torn) // 2])  # the crash: half a record, no newline
    path.rename(tmp_path / "store.broken")
    return tmp_path / "store.broken" / "journal.jsonl"


def test_a_journal_with_a_torn_last_line_rebuilds_the_store_and_names_the_torn_line(broken, tmp_path):
    result = cli()("import", str(broken), "--store", str(tmp_path / "store"), "--json", code=0)
    out = json.loads(result.stdout)
    torn = "line 3 is cut short (no newline: a writer stopped mid-line), left out"
    assert (out["added"], out["unread"]) == (2, [torn])
    assert result.stderr.strip().splitlines() == [f"diagnoser: {broken}: {out['unread'][0]}"]
    with IncidentStore.open(tmp_path / "store") as st:
        assert sorted(i.subtype for i in st.list() if i.status != "seed") == ["gpu_xid_79", "storage_full"]


def test_a_bad_line_that_is_not_the_last_still_refuses_the_file(broken, tmp_path):
    broken.write_text(broken.read_text() + "\n" + incident(2).model_dump_json(by_alias=True) + "\n")
    result = cli()("import", str(broken), "--store", str(tmp_path / "store"), code=2)
    assert "line 3 is not an incident/v1 record" in result.stderr


def test_a_directory_at_the_lock_path_is_a_one_line_error(tmp_path):
    store = tmp_path / "store"
    (store / ".lock").mkdir(parents=True)
    result = cli()("list", "--store", str(store), code=2)
    assert result.stderr.strip() == (f"diagnoser: incident store at {store} cannot be locked: "
                                     f"lock file {store}/.lock: Is a directory")
    IncidentStore.create(tmp_path / "ok", seed=False).close()
    (tmp_path / "ok" / ".lock").unlink(missing_ok=True)
    (tmp_path / "ok" / ".lock").mkdir()
    with IncidentStore.open(tmp_path / "ok") as st, pytest.raises(StoreError, match="cannot be locked"):
        st.add(incident(0))


def test_a_file_at_the_store_path_is_a_one_line_error(tmp_path):
    (tmp_path / "store").write_text("not a directory")
    result = cli()("list", "--store", str(tmp_path / "store"), code=2)
    assert result.stderr.strip() == (f"diagnoser: incident store path {tmp_path / 'store'} is not a directory "
                                     "(give --store a directory)")


@pytest.mark.parametrize(("key", "value", "says"), [
    ("next_id", "7", "store.json has next_id='7', not an integer >= 1"),
    ("next_id", 0, "store.json has next_id=0, not an integer >= 1"),
    ("generation", None, "store.json has generation=None, not an integer >= 0"),
    ("generation", True, "store.json has generation=True, not an integer >= 0"),
    ("embedder", "hashing", "store.json has embedder='hashing', not a dict"),
    ("embedder", {"name": "bert"}, "unknown embedder 'bert'"),
    ("collection", 3, "store.json has collection=3, not a str"),
    ("store_id", ["x"], "store.json has store_id=['x'], not a str"),
])
def test_mistyped_store_descriptions_are_one_line_errors(tmp_path, key, value, says):
    path = tmp_path / "store"
    IncidentStore.create(path, seed=False).close()
    meta = json.loads((path / "store.json").read_text())
    (path / "store.json").write_text(json.dumps({**meta, key: value}))
    result = cli()("list", "--store", str(path), code=2)
    assert f"incident store at {path} is damaged: {says}" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("version", [2, "1", True, None])
def test_store_descriptions_of_unknown_versions_are_refused(tmp_path, version):
    path = tmp_path / "store"
    IncidentStore.create(path, seed=False).close()
    meta = json.loads((path / "store.json").read_text())
    (path / "store.json").write_text(json.dumps({**meta, "version": version}))
    with pytest.raises(StoreError, match=f"has format version {version!r}; this diagnoser reads version 1"):
        IncidentStore.open(path)


def test_incident_records_of_an_unknown_schema_are_refused(tmp_path):
    record = {**incident(0).to_json_dict(), "schema": "incident/v2"}
    (tmp_path / "v2.jsonl").write_text(json.dumps(record) + "\n")
    result = cli()("import", str(tmp_path / "v2.jsonl"), "--store", str(tmp_path / "store"), code=2)
    assert "line 1 is not an incident/v1 record" in result.stderr
    assert "schema 'incident/v2' is unknown; this diagnoser reads incident/v1" in result.stderr
    with IncidentStore.open(tmp_path / "store") as st:
        assert not any(i.subtype == "gpu_xid_79" for i in st.list())


def test_a_20_mb_line_is_skipped_unread_and_named(tmp_path):
    src = tmp_path / "big.jsonl"
    huge = json.dumps({**incident(1).to_json_dict(), "root_cause": "x" * (20 << 20)})
    src.write_text(incident(0).model_dump_json(by_alias=True) + "\n" + huge + "\n"
                   + incident(2).model_dump_json(by_alias=True) + "\n")
    with IncidentStore.create(tmp_path / "store", seed=False) as st:
        report = st.import_jsonl(src)
        assert (report.added, report.unread) == (2, ["line 2 is longer than 1048576 bytes, skipped"])
        assert sorted(i.subtype for i in st.list()) == ["gpu_xid_79", "storage_stale_handle"]
