"""Hostile or damaged triage input, injected for real: truncated and corrupt .gz beside good logs,
a NUL block at the head of a rank log, markup and escape sequences in file names, binary or gzip
on stdin, a closed stdin, and thousands of bad files."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ERROR = "[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered"
OOM = "[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def triage(*args: str, stdin: bytes | None = None, close_stdin: bool = False) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "diagnoser.cli", "triage", *args, "--llm", "none"]
    if close_stdin:
        return subprocess.run(["sh", "-c", '"$@" <&-', "sh", *cmd], capture_output=True, env=ENV, timeout=120,
                              check=False)
    return subprocess.run(cmd, input=stdin, capture_output=True, env=ENV, timeout=120, check=False)


def _noisy(n: int) -> bytes:
    return "".join(f"[rank1]: step {i} loss {i * 0.37 % 7:.5f} lr {i * 13 % 997}\n" for i in range(n)).encode()


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_a_damaged_gz_beside_good_logs_is_a_warning(tmp_path: Path, damage: str) -> None:
    (tmp_path / "rank0.log").write_text(f"[rank0]: step 1\n{ERROR}\n")
    data = gzip.compress(_noisy(20000) + b"[rank1]: ValueError: late line\n")
    if damage == "truncated":
        data = data[: len(data) // 2]
    else:
        half = len(data) // 2
        data = data[:half] + bytes(range(256)) * 4 + data[half + 1024:]
    (tmp_path / "rank1.log.gz").write_bytes(data)
    res = triage(str(tmp_path), "--json")
    assert res.returncode == 0, res.stderr.decode()[-800:]
    d = json.loads(res.stdout)
    assert d["subtype"] == "cuda_illegal_memory_access"
    (w,) = [w for w in d["warnings"] if w["source"] == "rank1.log.gz"]
    assert "damaged compressed data" in w["message"]
    assert d["stats"]["files"] == 2  # what the damaged file held before the damage still counts


def test_a_nul_block_at_the_head_of_a_rank_log_is_still_text(tmp_path: Path) -> None:
    for size in (4096, 8192 + 100):  # inside the sniffed head, and covering all of it
        d = tmp_path / str(size)
        d.mkdir()
        (d / "rank2.log").write_bytes(b"\0" * size + f"[rank2]: step 7\n{OOM}\n".encode())
        out = json.loads(triage(str(d), "--json").stdout)
        assert out["subtype"] == "cuda_oom" and out["evidence"][0]["source"] == "rank2.log"
        assert not out["warnings"]


def test_markup_and_escapes_in_file_names_never_reach_the_terminal(tmp_path: Path) -> None:
    name = "rank0-[bold red]x[reset]-\x1b]0;pwned\x07-\x1b[31m.log"
    (tmp_path / name).write_text(f"[rank0]: step 1\n{ERROR}\n")
    res = triage(str(tmp_path))
    out = res.stdout.decode()
    assert res.returncode == 0, res.stderr.decode()
    assert "\x1b" not in out and "\x07" not in out
    assert "[bold red]x[reset]" in out.replace("\n", "")  # shown literally, not as markup
    assert "\\x1b" in out


def test_stdin_is_sniffed_like_a_file() -> None:
    gz = triage("-", "--json", stdin=gzip.compress(f"[rank0]: step 1\n{ERROR}\n".encode()))
    assert gz.returncode == 0 and json.loads(gz.stdout)["subtype"] == "cuda_illegal_memory_access"
    binary = triage("-", stdin=bytes(range(256)) * 64)
    assert binary.returncode != 0 and b"Traceback" not in binary.stderr
    assert binary.stderr.decode().strip().count("\n") == 0 and "binary" in binary.stderr.decode()
    nul = triage("-", "--json", stdin=b"\0" * 5000 + f"{OOM}\n".encode())
    assert json.loads(nul.stdout)["subtype"] == "cuda_oom"


def test_a_closed_stdin_is_one_line() -> None:
    res = triage("-", close_stdin=True)
    err = res.stderr.decode().strip()
    assert res.returncode != 0 and "Traceback" not in err and "\n" not in err and "stdin" in err


def test_warnings_are_capped(tmp_path: Path) -> None:
    (tmp_path / "rank0.log").write_text(f"[rank0]: step 1\n{ERROR}\n")
    bad = tmp_path / "bad"
    bad.mkdir()
    for i in range(5000):
        os.symlink(f"/nonexistent/{i}", bad / f"rank{i}.log")
    res = triage(str(tmp_path), "--json")
    d = json.loads(res.stdout)
    assert len(d["warnings"]) == 50 and "4951 more" in d["warnings"][-1]["message"]
    assert len(res.stdout) < 20_000
