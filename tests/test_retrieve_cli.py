"""`diagnoser incidents ...` through typer's CliRunner: the learning loop a user runs, with --json."""

import json

import pytest
import typer
from typer.testing import CliRunner

from diagnoser.retrieve.cli import register
from diagnoser.retrieve.seed import shipped_seed
from diagnoser.retrieve.store import IncidentStore

XID79 = "[Tue Mar  4 05:06:01 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus."
VERDICT = {
    "schema": "diagnosis/v1", "category": "hardware", "subtype": "gpu_xid_79", "action": "drain_and_restart",
    "confidence": 0.97, "culprit": {"nodes": ["gpu-017"], "ranks": [5], "gpus": ["0000:3b:00"]},
    "root_cause": "GPU on gpu-017 fell off the bus (Xid 79)",
    "evidence": [{"source": "dmesg/gpu-017.log", "line": 812, "text": XID79}],
    "first_failure": {"source": "dmesg/gpu-017.log", "line": 812, "time": "2026-03-04T05:06:01Z"},
    "similar_incidents": [], "decided_by": "rule", "runbook": "runbooks/gpu-xid-79.md",
}


def make_cli(tmp_path, precreate: bool):
    app = typer.Typer()
    register(app)

    @app.callback()
    def main() -> None:
        """diagnoser"""

    runner = CliRunner()
    store = str(tmp_path / "store")
    if precreate:  # an empty store: no seed memory to wade through
        IncidentStore.create(store, seed=False).close()

    def run(*args: str, input: str | None = None, code: int = 0):
        result = runner.invoke(app, ["incidents", *args, "--store", store], input=input)
        assert result.exit_code == code, result.output
        return result

    return run


@pytest.fixture
def cli(tmp_path):
    return make_cli(tmp_path, precreate=True)


@pytest.fixture
def fresh_cli(tmp_path):
    return make_cli(tmp_path, precreate=False)


def test_confirm_then_search_list_show_with_json(cli, tmp_path):
    out = cli("confirm", "-", "--by", "alice", "--resolution", "drained gpu-017", "--outcome", "worked", "--json",
              input=json.dumps(VERDICT))
    confirmed = json.loads(out.stdout)
    assert confirmed["status"] == "confirmed" and confirmed["confirmed_by"] == "alice"
    assert confirmed["signature"] == ("[<TIME>] NVRM: Xid (PCI:<PCI>): 79, pid=<NUM>, name=python, "
                                      "GPU has fallen off the bus.")
    assert confirmed["culprit"]["nodes"] == ["gpu-017"] and confirmed["last_seen"] == "2026-03-04T05:06:01Z"
    inc_id = confirmed["id"]

    found = json.loads(cli("search", XID79.replace("0000:3b:00", "0000:af:00"), "--json").stdout)
    assert found["results"][0]["incident"]["id"] == inc_id and found["results"][0]["score"] == pytest.approx(1.0)
    assert found["vote"]["category"] == "hardware" and found["vote"]["resolution"] == "drained gpu-017"

    listed = json.loads(cli("list", "--status", "confirmed", "--json").stdout)
    assert [i["id"] for i in listed] == [inc_id]
    assert json.loads(cli("show", inc_id, "--json").stdout)["outcome"] == "worked"
    human = cli("show", inc_id).stdout
    assert "confirmed_by: alice" in human and "GPU has fallen off the bus" in human
    assert "no incident inc-99999" in cli("show", "inc-99999", code=1).output


def test_add_counts_sightings_and_correct_replaces_the_verdict(cli, tmp_path):
    log = tmp_path / "excerpt.log"
    log.write_text("step 5 ok\n[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    args = ("add", str(log), "--category", "user_code", "--subtype", "cuda_oom", "--action", "stop_and_notify")
    first = json.loads(cli(*args, "--json").stdout)
    second = json.loads(cli(*args, "--json").stdout)
    assert first["id"] == second["id"] and second["count"] == 2
    assert "needs --category" in cli("add", str(log), code=2).output
    fixed = json.loads(cli("correct", first["id"], "--by", "bob", "--action", "escalate", "--json").stdout)
    assert (fixed["action"], fixed["status"], fixed["count"]) == ("escalate", "corrected", 2)
    assert "at least one of" in cli("correct", first["id"], "--by", "bob", code=2).output
    verdict_file = tmp_path / "verdict.json"
    verdict_file.write_text(json.dumps(VERDICT))
    corrected = json.loads(cli("correct", str(verdict_file), "--by", "carol", "--category", "infra", "--json").stdout)
    assert (corrected["category"], corrected["subtype"]) == ("infra", "gpu_xid_79")
    assert "not a diagnosis/v1 verdict" in cli("confirm", str(log), "--by", "x", code=2).output


def test_export_import_through_the_cli(cli, tmp_path):
    cli("add", "-", "--json", input=json.dumps(VERDICT))
    exported = tmp_path / "memory.jsonl"
    assert json.loads(cli("export", str(exported), "--json").stdout) == {"exported": 1, "path": str(exported)}
    lines = cli("export").stdout.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["schema"] == "incident/v1"
    assert json.loads(cli("import", str(exported), "--json").stdout) == {"added": 0, "merged": 0, "skipped": 1,
                                                                         "unread": []}
    (tmp_path / "bad.jsonl").write_text("not json\n")
    assert "line 1 is not an incident/v1 record" in cli("import", str(tmp_path / "bad.jsonl"), code=2).output


def test_first_use_creates_the_store_with_the_seed_memory(fresh_cli):
    assert len(json.loads(fresh_cli("list", "--limit", "0", "--json").stdout)) == len(shipped_seed())
    again = json.loads(fresh_cli("import", "--seed", "--json").stdout)
    assert again["added"] == 0 and again["skipped"] + again["merged"] == len(shipped_seed())
    assert "give a JSONL file" in fresh_cli("import", code=2).output


def test_a_damaged_store_is_reported_in_one_line_with_the_recovery(fresh_cli, tmp_path):
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "store.json").write_text("{broken")
    result = fresh_cli("list", code=2)
    assert result.output.startswith(f"diagnoser: incident store at {tmp_path / 'store'} is damaged")
    assert "diagnoser incidents import" in result.output


def _job_with_an_empty_memory(tmp_path, monkeypatch):
    """A job directory, and an incident store with no seed so only this test's corrections are in it."""
    pytest.importorskip("chromadb")
    store = tmp_path / "store"
    IncidentStore.create(store, seed=False).close()
    monkeypatch.setenv("DIAGNOSER_STORE", str(store))
    logs = tmp_path / "job"
    logs.mkdir()
    return logs


def _alice_corrects_to_infra_retry(app, tmp_path, verdict: dict, subtype: str):
    path = tmp_path / "verdict.json"
    path.write_text(json.dumps(verdict))
    fixed = CliRunner().invoke(app, ["incidents", "correct", str(path), "--by", "alice", "--category", "infra",
                                     "--subtype", subtype, "--action", "retry_after_backoff", "--json"])
    assert fixed.exit_code == 0, fixed.output
    return json.loads(fixed.stdout)


def test_a_corrected_verdict_decides_the_next_occurrence_even_over_a_rule(tmp_path, monkeypatch):
    """The learning loop: a person corrects a rule verdict; the same failure next time gets the
    person's category and action, and the verdict says a correction decided it."""
    from diagnoser.cli import app as main_app

    logs = _job_with_an_empty_memory(tmp_path, monkeypatch)
    # a bare exception class the generic rule calls user code; on this cluster it is the storage gateway
    line = "[rank2]: StorageGatewayError: upstream returned status 503 for shard-00{n}.tar"
    (logs / "rank2.log").write_text("step 10 loss 2.1\n" + line.format(n=17) + "\n")
    runner = CliRunner()
    first = json.loads(runner.invoke(main_app, ["triage", str(logs), "--json"]).stdout)
    assert (first["category"], first["decided_by"]) == ("user_code", "rule")
    _alice_corrects_to_infra_retry(main_app, tmp_path, first, "storage_gateway_unavailable")
    (logs / "rank2.log").write_text("step 99 loss 1.7\n" + line.format(n=93) + "\n")  # next week, another shard
    again = json.loads(runner.invoke(main_app, ["triage", str(logs), "--json"]).stdout)
    assert (again["category"], again["subtype"], again["action"]) == (
        "infra", "storage_gateway_unavailable", "retry_after_backoff")
    assert again["decided_by"] == "retrieval" and any("correction" in n for n in again["notes"])


def test_a_failure_no_rule_knows_is_quoted_and_once_corrected_recognised_next_time(tmp_path, monkeypatch):
    """A log with no known signature and no error-looking line still shows where it stopped, and a
    person's classification of it decides the next occurrence."""
    from diagnoser.cli import app as main_app

    logs = _job_with_an_empty_memory(tmp_path, monkeypatch)
    line = "shardsvc: lease lost for volume vol-{n} (epoch {e}), reader exiting"
    (logs / "rank0.log").write_text("step 10 loss 2.1\n" + line.format(n=17, e=3412) + "\n")
    runner = CliRunner()
    first = json.loads(runner.invoke(main_app, ["triage", str(logs), "--json"]).stdout)
    assert (first["category"], first["decided_by"]) == ("unknown", "none")
    assert first["evidence"][-1]["text"] == line.format(n=17, e=3412) and "ends with" in first["root_cause"]
    assert "lease lost" in _alice_corrects_to_infra_retry(main_app, tmp_path, first, "shard_lease_lost")["signature"]
    (logs / "rank0.log").write_text("step 99 loss 1.7\n" + line.format(n=93, e=9911) + "\n")
    again = json.loads(runner.invoke(main_app, ["triage", str(logs), "--json"]).stdout)
    assert (again["category"], again["action"], again["decided_by"]) == ("infra", "retry_after_backoff", "retrieval")
