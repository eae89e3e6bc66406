"""Files written whole or not at all (diagnoser/atomic.py): state, caches, exports, approvals."""

import os
import stat
import threading
from pathlib import Path

import pytest

from diagnoser import atomic


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_write_replaces_the_file_with_the_mode_open_would_give(tmp_path):
    target = tmp_path / "store.json"
    target.write_text("old")
    old_mask = os.umask(0o027)
    try:
        atomic.write_text(target, '{"generation": 2}')
    finally:
        os.umask(old_mask)
    assert target.read_text() == '{"generation": 2}'
    assert _mode(target) == 0o640  # 0o666 less the umask, not mkstemp's 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["store.json"]


def test_a_failed_write_keeps_the_old_content_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "offsets.npy"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic.replacing(target) as tmp:
        tmp.write_bytes(b"half of the")
        raise RuntimeError("disk full")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["offsets.npy"]


def test_two_writers_of_one_file_never_share_a_temporary_name(tmp_path):
    target = tmp_path / "job.json"
    inside = threading.Barrier(2)
    temps: list[Path] = []

    def writer(text: str) -> None:
        with atomic.replacing(target) as tmp:
            temps.append(tmp)
            tmp.write_text(text)
            inside.wait(timeout=5)  # both temporaries exist at once

    threads = [threading.Thread(target=writer, args=(t,)) for t in ("a" * 1000, "b" * 1000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert temps[0] != temps[1]
    assert target.read_text() in ("a" * 1000, "b" * 1000)
    assert [p.name for p in tmp_path.iterdir()] == ["job.json"]


def test_an_explicit_mode_and_a_durable_write(tmp_path):
    target = tmp_path / "state.json"
    atomic.write_bytes(target, b"{}", mode=0o600, durable=True)
    assert target.read_bytes() == b"{}" and _mode(target) == 0o600


def test_a_missing_directory_is_an_oserror_and_creates_nothing(tmp_path):
    with pytest.raises(OSError):
        atomic.write_text(tmp_path / "gone" / "x.json", "{}")
    assert list(tmp_path.iterdir()) == []
