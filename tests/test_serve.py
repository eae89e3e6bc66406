"""`diagnoser serve` end to end: the real server (uvicorn, worker processes) on a loopback port,
called over HTTP with httpx. Verdicts are compared with `diagnoser triage --json` run on the same logs."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_support import FIXTURES, TOKEN, XID79, Server, cli_triage, metric, same_verdict, tgz

pytestmark = pytest.mark.slow
MAX_UPLOAD = 2 << 20


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    base = tmp_path_factory.mktemp("serve")
    root, outside, tmp = base / "root", base / "outside", base / "tmp"
    for d in (root, outside, tmp):
        d.mkdir()
    for name in (XID79, "cuda-oom-one-of-16-srun-label", "user-exception-then-timeouts"):
        shutil.copytree(FIXTURES / name, root / name)
    # a secret-looking kernel line outside the root, reachable only through symlinks inside it
    (outside / "dmesg.log").write_text("[  1.0] NVRM: Xid (PCI:0000:99:00): 48, DBE (0x1) OUTSIDE-ROOT\n")
    (root / "escape").symlink_to(outside)
    mixed = root / "mixed"
    shutil.copytree(FIXTURES / "user-exception-then-timeouts", mixed)
    (mixed / "dmesg-link.log").symlink_to(outside / "dmesg.log")
    env = {"DIAGNOSER_STORE": str(base / "store"), "TMPDIR": str(tmp), "DIAGNOSER_LLM_BASE_URL": "",
           "DIAGNOSER_SERVE__TOKEN": TOKEN, "DIAGNOSER_SERVE__MAX_UPLOAD_BYTES": str(MAX_UPLOAD)}
    server = Server("--root", str(root), "--workers", "2", env=env)
    try:
        with server.client(TOKEN) as client:
            yield {"server": server, "client": client, "root": root, "tmp": tmp, "env": env, "outside": outside}
    finally:
        server.stop()


def test_token_is_required_on_api_routes_but_not_on_probes(world: dict) -> None:
    server = world["server"]
    with server.client() as anonymous, server.client("wrong") as wrong:
        for c in (anonymous, wrong):
            r = c.post("/v1/triage", json={"paths": [str(world["root"] / XID79)]})
            assert r.status_code == 401 and r.json() == {"detail": "missing or wrong bearer token"}
            assert r.headers["www-authenticate"] == "Bearer"
            assert c.get("/v1/jobs/abc").status_code == 401
            assert c.get("/v1/incidents/inc-00001").status_code == 401
        assert anonymous.get("/healthz").json() == {"status": "ok", "checks": {}}
        assert anonymous.get("/metrics").status_code == 200
    assert world["client"].get("/v1/jobs/abc").status_code == 404  # the right token passes


def test_path_triage_is_the_cli_verdict(world: dict) -> None:
    path = world["root"] / XID79
    r = world["client"].post("/v1/triage", json={"paths": [str(path)]})
    assert r.status_code == 200, r.text
    got = r.json()
    assert (got["schema"], got["category"], got["subtype"], got["culprit"]["nodes"]) == (
        "diagnosis/v1", "hardware", "gpu_xid_79", ["gpu-014"])
    same_verdict(got, cli_triage(path, world["env"]))


def test_a_job_id_is_the_newest_attempt_of_a_run_directory(world: dict) -> None:
    run = world["root"] / "job-4711"
    for n, fixture in ((1, XID79), (2, "cuda-oom-one-of-16-srun-label")):
        shutil.copytree(FIXTURES / fixture, run / f"attempt-00{n}" / "logs")
        os.utime(run / f"attempt-00{n}", (time.time() - 100 + n, time.time() - 100 + n))
    got = world["client"].post("/v1/triage", json={"paths": ["job-4711"]}).json()
    same_verdict(got, cli_triage(run / "attempt-002" / "logs", world["env"]))
    assert world["client"].post("/v1/triage", json={"paths": ["no-such-job"]}).status_code == 403


def test_paths_outside_the_roots_are_refused(world: dict) -> None:
    c, root = world["client"], world["root"]
    for path in ("/etc", str(root / ".." / "outside"), str(root / "escape"), str(root / "escape" / "dmesg.log"),
                 "relative/path", "..", "escape"):
        r = c.post("/v1/triage", json={"paths": [str(root / XID79), path]})
        assert r.status_code == 403, (path, r.text)
        assert "below an allowed log root" in r.json()["detail"]
    r = c.post("/v1/triage", json={"paths": [str(root / "no-such-job")]})
    assert r.status_code == 403 and "no such file" in r.json()["detail"]
    # a symlink inside an allowed directory that leads out is not read
    d = c.post("/v1/triage", json={"paths": [str(root / "mixed")]}).json()
    assert d["category"] == "user_code"
    assert "OUTSIDE-ROOT" not in json.dumps(d) and not any("dmesg-link" in e["source"] for e in d["evidence"])


def test_bad_bodies_get_json_errors(world: dict) -> None:
    c = world["client"]
    r = c.post("/v1/triage", json={"paths": []})
    assert r.status_code == 422 and isinstance(r.json()["detail"], list)
    r = c.post("/v1/triage", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422
    r = c.post("/v1/triage", json={"paths": ["x"], "unknown": 1})
    assert r.status_code == 422
    empty = world["root"] / "empty"
    empty.mkdir(exist_ok=True)
    (empty / "rank0.log").write_text("")
    r = c.post("/v1/triage", json={"paths": [str(empty)]})
    assert r.status_code == 422 and "empty input" in r.json()["detail"]


def test_upload_of_a_tgz_is_the_cli_verdict_and_leaves_nothing_behind(world: dict) -> None:
    c = world["client"]
    for name in (XID79, "cuda-oom-one-of-16-srun-label", "user-exception-then-timeouts"):
        r = c.post("/v1/triage/upload", files=[("files", (f"{name}.tar.gz", tgz(FIXTURES / name)))])
        assert r.status_code == 200, r.text
        same_verdict(r.json(), cli_triage(FIXTURES / name, world["env"]))
    assert not list(world["tmp"].glob("diagnoser-*"))


def test_upload_of_files_keeps_their_relative_names(world: dict) -> None:
    job = FIXTURES / XID79
    parts = [("files", (str(p.relative_to(job)), p.read_bytes())) for p in sorted(job.rglob("*")) if p.is_file()]
    r = world["client"].post("/v1/triage/upload", files=parts)
    assert r.status_code == 200, r.text
    same_verdict(r.json(), cli_triage(job, world["env"]))


LEAKY = ("[rank0]: step 1\n[rank0]: Traceback (most recent call last):\n[rank0]:   File \"train.py\", line 10\n"
         "[rank0]: sqlalchemy.exc.OperationalError: could not connect to "
         "postgres://trainer:pa/ss@w0rd@db.internal:5432/runs with "
         "SLACK_APP_TOKEN=xapp-1-A0123456789-1234567890123-abcdefabcdef0123 after mysql -uroot -pS3cr3tPass\n")


def test_secrets_in_uploaded_logs_are_redacted_as_by_the_cli(world: dict, tmp_path: Path) -> None:
    (tmp_path / "rank0.log").write_text(LEAKY)
    r = world["client"].post("/v1/triage/upload", files=[("files", ("rank0.log", LEAKY.encode()))])
    assert r.status_code == 200, r.text
    assert "sqlalchemy" in r.text and "[REDACTED]" in r.text
    for secret in ("pa/ss@w0rd", "w0rd@db", "xapp-1-A0123456789", "S3cr3tPass"):
        assert secret not in r.text
    same_verdict(r.json(), cli_triage(tmp_path, world["env"]))


def test_an_upload_may_hold_thousands_of_files(world: dict) -> None:
    job = FIXTURES / XID79
    parts = [("files", (str(p.relative_to(job)), p.read_bytes())) for p in sorted(job.rglob("*")) if p.is_file()]
    parts += [("files", (f"extra/node{i}/rank{i}.log", b"step 1 loss 2.0\n")) for i in range(2000)]
    r = world["client"].post("/v1/triage/upload", files=parts)
    assert r.status_code == 200, r.text
    assert (r.json()["subtype"], r.json()["stats"]["files"]) == ("gpu_xid_79", len(parts))


def test_unsafe_archives_and_names_are_refused(world: dict, tmp_path: Path) -> None:
    c = world["client"]
    small = FIXTURES / "user-exception-then-timeouts"
    for member in ("..__evil.log", "a__..__..__evil.log", "__etc__evil.log"):
        r = c.post("/v1/triage/upload", files=[("files", ("job.tgz", tgz(small, **{member: b"x\n"})))])
        assert r.status_code == 400, (member, r.text)
        assert "refused file name" in r.json()["detail"]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        link = tarfile.TarInfo("rank0.log")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    r = c.post("/v1/triage/upload", files=[("files", ("job.tgz", buf.getvalue()))])
    assert r.status_code == 400 and "link or special file" in r.json()["detail"]
    r = c.post("/v1/triage/upload", files=[("files", ("../rank0.log", b"boom\n"))])
    assert r.status_code == 400
    r = c.post("/v1/triage/upload", files=[("files", ("a/rank0.log", b"one\n")), ("files", ("a/rank0.log", b"two\n"))])
    assert r.status_code == 400 and "given twice" in r.json()["detail"]
    r = c.post("/v1/triage/upload", data={"note": "x"}, files=[("files", ("rank0.log", b"boom\n"))])
    assert r.status_code == 400 and "only `files` file parts" in r.json()["detail"]
    body = b'--b\r\nContent-Disposition: form-data; name="files"; filename="rank0.log"\r\n\r\nRuntimeError: boom\n'
    r = c.post("/v1/triage/upload", content=body, headers={"content-type": "multipart/form-data; boundary=b"})
    assert r.status_code == 400 and "truncated" in r.json()["detail"]
    r = c.post("/v1/triage/upload", content=b"rank0 log", headers={"content-type": "text/plain"})
    assert r.status_code == 400 and "multipart/form-data" in r.json()["detail"]
    r = c.post("/v1/triage/upload", files=[("files", ("job.tgz", b"not an archive"))])
    assert r.status_code == 400 and "not a readable tar archive" in r.json()["detail"]
    assert not (world["tmp"] / "evil.log").exists() and not list(world["tmp"].glob("diagnoser-*"))


def test_oversize_uploads_get_413_declared_or_streamed(world: dict) -> None:
    c = world["client"]
    big = b"step 1 loss 2.0\n" * (MAX_UPLOAD // 16 + 1024)
    r = c.post("/v1/triage/upload", files=[("files", ("rank0.log", big))])
    assert r.status_code == 413 and "over the limit" in r.json()["detail"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds while the body streams
        boundary = b"--xyz\r\n"
        yield boundary + b'Content-Disposition: form-data; name="files"; filename="rank0.log"\r\n\r\n'
        for _ in range(MAX_UPLOAD // len(big) * 4 + 4):
            yield big
    r = c.post("/v1/triage/upload", content=chunks(), headers={"content-type": "multipart/form-data; boundary=xyz"})
    assert r.status_code == 413
    # a gzip bomb stops at 8x the upload limit
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("rank0.log")
        info.size = MAX_UPLOAD * 9
        tar.addfile(info, io.BytesIO(b"\0" * info.size))
    assert len(buf.getvalue()) < MAX_UPLOAD
    r = c.post("/v1/triage/upload", files=[("files", ("bomb.tgz", buf.getvalue()))])
    assert r.status_code == 413 and "unpacks to more than" in r.json()["detail"]
    assert c.get("/healthz").status_code == 200
    assert not list(world["tmp"].glob("diagnoser-*"))


def test_async_triage_answers_202_then_the_result(world: dict) -> None:
    c = world["client"]
    r = c.post("/v1/triage/upload", params={"async": "true"}, files=[("files", ("j.tgz", tgz(FIXTURES / XID79)))])
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["status"] == "pending" and r.headers["location"] == f"/v1/jobs/{job['id']}"
    deadline = time.monotonic() + 60
    while (job := c.get(r.headers["location"]).json())["status"] == "pending":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert job["status"] == "done" and job["seconds"] > 0
    same_verdict(job["result"], cli_triage(FIXTURES / XID79, world["env"]))
    r = c.post("/v1/triage", json={"paths": [str(world["root"] / "empty")], "async": True})
    assert r.status_code == 202
    while (job := c.get(r.headers["location"]).json())["status"] == "pending":
        time.sleep(0.1)
    assert job["status"] == "failed" and "empty input" in job["error"] and job["result"] is None


def test_feedback_changes_the_incident_and_the_next_verdict(world: dict) -> None:
    c = world["client"]
    path = str(world["root"] / "cuda-oom-one-of-16-srun-label")
    before = c.post("/v1/triage", json={"paths": [path]}).json()
    assert before["category"] == "user_code"
    r = c.post("/v1/feedback", json={"verdict": "correct", "by": "alice", "diagnosis": before, "category": "infra",
                                     "subtype": "bad_node_memory", "action": "restart_excluding_nodes"})
    assert r.status_code == 200, r.text
    inc = r.json()
    assert (inc["status"], inc["category"], inc["confirmed_by"]) == ("corrected", "infra", "alice")
    got = c.get(f"/v1/incidents/{inc['id']}").json()
    assert got == inc and got["schema"] == "incident/v1"
    after = c.post("/v1/triage", json={"paths": [path]}).json()  # a person's correction beats the rule
    assert (after["category"], after["subtype"], after["decided_by"]) == ("infra", "bad_node_memory", "retrieval")
    r = c.post("/v1/feedback", json={"verdict": "confirm", "by": "bob", "incident": inc["id"], "outcome": "worked"})
    assert r.status_code == 200 and (r.json()["status"], r.json()["confirmed_by"]) == ("confirmed", "bob")
    assert c.get(f"/v1/incidents/{inc['id']}").json()["outcome"] == "worked"
    assert c.post("/v1/feedback", json={"verdict": "confirm", "by": "x", "incident": "inc-99999"}).status_code == 404
    assert c.post("/v1/feedback", json={"verdict": "correct", "by": "x", "incident": inc["id"]}).status_code == 422
    assert c.post("/v1/feedback", json={"verdict": "confirm", "by": "x"}).status_code == 422
    assert c.get("/v1/incidents/inc-99999").status_code == 404
    assert c.get("/v1/incidents/etc-passwd").status_code == 400


def test_health_and_readiness(world: dict) -> None:
    assert world["client"].get("/healthz").json() == {"status": "ok", "checks": {}}
    r = world["client"].get("/readyz")
    assert r.status_code == 200 and r.json() == {"status": "ok", "checks": {"rules": "ok", "store": "ok"}}


def test_openapi_response_is_the_diagnosis_model(world: dict) -> None:
    from diagnoser.models import Diagnosis

    spec = world["client"].get("/openapi.json").json()
    schemas = spec["components"]["schemas"]

    def resolve(node: dict) -> dict:
        return schemas[node["$ref"].rsplit("/", 1)[1]] if "$ref" in node else node

    for route in ("/v1/triage", "/v1/triage/upload"):
        responses = spec["paths"][route]["post"]["responses"]
        model = resolve(responses["200"]["content"]["application/json"]["schema"])
        assert set(model["properties"]) == set(Diagnosis.model_json_schema(by_alias=True)["properties"])
        assert {"category", "subtype", "action", "confidence", "root_cause"} <= set(model["required"])
        assert resolve(model["properties"]["category"])["enum"] == ["hardware", "infra", "user_code", "unknown"]
        job = resolve(responses["202"]["content"]["application/json"]["schema"])
        assert "result" in job["properties"] and "status" in job["properties"]
    upload = spec["paths"]["/v1/triage/upload"]["post"]["requestBody"]["content"]
    assert "multipart/form-data" in upload


def test_metrics_move_after_a_triage(world: dict) -> None:
    c = world["client"]
    before = c.get("/metrics").text
    assert c.post("/v1/triage", json={"paths": [str(world["root"] / XID79)]}).status_code == 200
    after = c.get("/metrics").text
    for name, labels in (("diagnoser_failures_total", {"category": "hardware"}),
                         ("diagnoser_llm_stage_total", {"outcome": "off"}),
                         ("diagnoser_triage_seconds_count", {"via": "service"}),
                         ("diagnoser_triage_requests_total", {"kind": "path", "status": "ok"})):
        assert metric(after, name, **labels) == metric(before, name, **labels) + 1, name
