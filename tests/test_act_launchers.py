"""Launchers `diagnoser run` recognises and how it supervises each: per-rank line prefixes, processes per
node, global rank offsets, per-rank log files; and a real `python -m torch.distributed.run` job whose
ranks' lines land in their own files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from diagnoser.act import launchers as ln
from diagnoser.act.executors import LocalExecutor

PY = sys.executable
TRAIN = Path(__file__).parent / "e2e" / "train.py"


@pytest.mark.parametrize(("command", "kind", "options_start"), [
    (("torchrun", "--nproc-per-node", "2", "t.py"), ln.TORCHRUN, 1),
    (("/opt/conda/bin/torchrun", "t.py"), ln.TORCHRUN, 1),
    ((PY, "-m", "torch.distributed.run", "--nproc_per_node=2", "t.py"), ln.TORCHRUN, 3),
    (("python3.11", "-u", "-m", "torch.distributed.launch", "t.py"), ln.TORCHRUN, 4),
    (("deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", "ds.json"), ln.DEEPSPEED, 1),
    (("python", "-m", "deepspeed.launcher.runner", "--num_gpus=2", "t.py"), ln.DEEPSPEED, 3),
    (("accelerate", "launch", "--multi_gpu", "--num_processes", "8", "t.py"), ln.ACCELERATE, 2),
    (("accelerate-launch", "t.py"), ln.ACCELERATE, 1),
    (("python", "-m", "accelerate.commands.launch", "t.py"), ln.ACCELERATE, 3),
    (("srun", "--ntasks", "4", "python", "t.py"), ln.SRUN, 1),
    (("srun", "-N", "2", "--ntasks-per-node", "1", "torchrun", "--nproc-per-node", "8", "t.py"), ln.TORCHRUN, 6),
    (("env", "OMP_NUM_THREADS=1", "torchrun", "t.py"), ln.TORCHRUN, 3),
    (("uv", "run", "deepspeed", "t.py"), ln.DEEPSPEED, 3),
    (("python", "train.py", "--launcher", "torchrun"), ln.PLAIN, 0),
    (("bash", "run.sh"), ln.PLAIN, 0),
    (("accelerate", "config"), ln.PLAIN, 0),
])
def test_recognise(command: tuple[str, ...], kind: str, options_start: int) -> None:
    got = ln.recognise(command)
    assert (got.kind, got.index) == (kind, options_start)


@pytest.mark.parametrize(("command", "expected"), [
    (("torchrun", "--nproc-per-node", "2", "t.py"), ("torchrun", "--tee", "3", "--nproc-per-node", "2", "t.py")),
    (("accelerate", "launch", "--num_processes", "2", "t.py"),
     ("accelerate", "launch", "--tee", "3", "--num_processes", "2", "t.py")),
    (("srun", "-n", "4", "python", "t.py"), ("srun", "--label", "-n", "4", "python", "t.py")),
    (("srun", "-N2", "torchrun", "t.py"), ("srun", "-N2", "torchrun", "--tee", "3", "t.py")),
    (("deepspeed", "--num_gpus", "2", "t.py"), ("deepspeed", "--num_gpus", "2", "t.py")),  # no console prefix
    # the user's own choice is kept, and the training script's options are not the launcher's
    (("srun", "-l", "python", "t.py"), ("srun", "-l", "python", "t.py")),
    (("accelerate", "launch", "--log_dir", "d", "t.py"), ("accelerate", "launch", "--log_dir", "d", "t.py")),
    (("torchrun", "--tee=1", "t.py"), ("torchrun", "--tee=1", "t.py")),
    (("torchrun", "t.py", "--tee", "x"), ("torchrun", "--tee", "3", "t.py", "--tee", "x")),
    (("python", "t.py"), ("python", "t.py")),
])
def test_prepare_asks_for_rank_prefixes(command: tuple[str, ...], expected: tuple[str, ...]) -> None:
    assert LocalExecutor().prepare(command)[0] == expected


def test_max_restarts_note_for_launchers_that_restart_themselves() -> None:
    assert "max-restarts 3" in ln.prepare(("torchrun", "--max-restarts=3", "t.py"))[1]
    assert "accelerate" in ln.prepare(("accelerate", "launch", "--max_restarts", "2", "t.py"))[1]
    assert ln.prepare(("torchrun", "--max-restarts", "0", "t.py"))[1] == ""
    assert ln.prepare(("torchrun", "t.py", "--max-restarts", "5"))[1] == ""  # the script's own option


@pytest.mark.parametrize(("command", "per_node", "offset"), [
    (("torchrun", "--nproc-per-node=4", "--node-rank", "2", "t.py"), 4, 8),
    (("deepspeed", "--num_gpus", "8", "--node_rank", "1", "--no_ssh", "t.py"), 8, 8),
    (("accelerate", "launch", "--num_processes", "16", "--num_machines", "2", "--machine_rank", "1", "t.py"), 8, 8),
    (("srun", "--ntasks", "4", "python", "t.py"), 4, 0),
    (("torchrun", "t.py", "--nproc-per-node", "9"), None, 0),
    (("python", "t.py"), None, 0),
])
def test_processes_per_node_and_rank_offset(command: tuple[str, ...], per_node: int | None, offset: int) -> None:
    assert ln.nproc(command) == per_node
    assert LocalExecutor().rank_offset(command) == offset


def test_deepspeed_per_rank_log_files_are_collected(tmp_path: Path) -> None:
    old = tmp_path / "20260101000000_rank0.log"
    old.write_text("old run\n")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    since = datetime.now(UTC)
    for r in (0, 1):
        (tmp_path / f"20260304050607_rank{r}.log").write_text(f"rank {r}\n")
    got = LocalExecutor().launcher_logs(("deepspeed", "--enable_each_rank_log", str(tmp_path), "t.py"), since)
    assert [p.name for p in got] == ["20260304050607_rank0.log", "20260304050607_rank1.log"]


def test_only_torchrun_can_shrink_onto_fewer_devices() -> None:
    p = LocalExecutor().exclude(("deepspeed", "--num_gpus", "2", "t.py"), {}, (), (1,))
    assert not p.ok and "deepspeed" in p.detail


def test_python_m_torch_distributed_run_is_supervised_per_rank(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    env = {**os.environ, "FAULT_STATE_DIR": str(tmp_path / "state"), "TRAIN_STEPS_LOG": str(tmp_path / "s.jsonl"),
           "PYTHONUNBUFFERED": "1", "FAULT_EXCEPTION": "1:3"}
    cmd = [PY, "-m", "diagnoser.act.cli", "run", "--json", "--run-dir", str(tmp_path / "run"), "--kill-grace", "3s",
           "--", PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(TRAIN),
           "--steps", "5", "--ckpt-dir", str(tmp_path / "ck"), "--ckpt-every", "2", "--step-time", "0.05"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, check=False)
    summary = json.loads(proc.stdout)
    assert summary["status"] == "stopped", proc.stderr[-2000:]  # a KeyError in rank 1: user code
    logs = tmp_path / "run" / "attempt-001" / "logs"
    rank1 = (logs / "rank1.log").read_text()
    assert "KeyError" in rank1 and "KeyError" not in (logs / "rank0.log").read_text()
    record = json.loads((tmp_path / "run" / "attempt-001" / "launcher.json").read_text())
    assert record["command"][3:5] == ["--tee", "3"]
    diagnosis = json.loads((tmp_path / "run" / "attempt-001" / "diagnosis.json").read_text())
    assert diagnosis["culprit"]["ranks"] == [1] and diagnosis["category"] == "user_code"
    assert "rank 1 (pid" in (logs / "launcher-exit.log").read_text()
