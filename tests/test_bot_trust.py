"""The bot reads only below its roots (symlinks included) and handles each signed request once:
real symlinks, a real server on loopback, the same signed request sent twice."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

pytest.importorskip("slack_bolt")

from bot_support import SECRET, command_body, slack_post, start_bot  # noqa: E402

from diagnoser.triage import triage  # noqa: E402

OUTSIDE_LINE = "torch.OutOfMemoryError: CUDA out of memory. SECRET-OUTSIDE-MARKER"



@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "elsewhere"
    d.mkdir()
    (d / "rank0.log").write_text(f"[rank0]: step 1\n[rank0]: {OUTSIDE_LINE}\n")
    return d


def test_a_job_id_that_is_a_symlink_out_of_the_runs_root_is_refused(tmp_path, fake, outside) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    os.symlink(outside, runs / "evil")
    server, url = start_bot(tmp_path, fake, runs_root=str(runs))
    try:
        status, body = slack_post(url, command_body("evil"), SECRET)
        assert status == 200 and "outside the runs root" in body
        time.sleep(0.3)
        assert "SECRET-OUTSIDE-MARKER" not in fake.raw() and fake.calls("chat.postMessage") == []
    finally:
        server.stop()


def test_the_walker_does_not_follow_symlinks_out_of_the_allowed_roots(tmp_path, outside) -> None:
    root = tmp_path / "logs"
    (root / "job").mkdir(parents=True)
    (root / "job" / "rank1.log").write_text("[rank1]: step 1\n[rank1]: ValueError: bad config value\n")
    os.symlink(outside, root / "job" / "linked-dir")
    os.symlink(outside / "rank0.log", root / "job" / "linked.log")
    d = triage([str(root / "job")], within=(root.resolve(),))
    assert "SECRET-OUTSIDE-MARKER" not in d.model_dump_json()
    skipped = {w.source.rsplit("/", 1)[-1] for w in d.warnings if "outside the allowed roots" in w.message}
    assert skipped == {"linked-dir", "linked.log"}
    free = triage([str(root / "job")])  # the command line, run by a person: symlinks are followed
    assert "SECRET-OUTSIDE-MARKER" in free.model_dump_json()


def test_an_identical_signed_request_is_handled_once(tmp_path, fake) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank0.log").write_text("[rank0]: step 1\n[rank0]: ValueError: bad config value\n")
    server, url = start_bot(tmp_path, fake, allowed_roots=[str(logs)])
    try:
        body, stamp = command_body(str(logs)), int(time.time())
        first = slack_post(url, body, SECRET, ts=stamp)
        again = slack_post(url, body, SECRET, ts=stamp)  # byte-identical, inside the 5-minute window
        assert first[0] == 200 and again[0] == 401 and "replay" in again[1]
        fake.wait("chat.postMessage", 2)
        time.sleep(0.3)
        assert len(fake.calls("chat.postMessage")) == 2  # one diagnosis: parent + verdict
    finally:
        server.stop()
