"""Wrong input is an error: a checkpoint that is not one, trackers of DeepSpeed and Megatron-LM, a missing
checkpoint directory for `diagnoser run` / `diagnoser checkpoints`, `whatif --ckpt-write 0`."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from diagnoser.act.checkpoints import CheckpointStore
from diagnoser.cli import app

runner = CliRunner()


def test_two_byte_model_pt_is_not_a_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "model_100.pt").write_bytes(b"hi")
    store = CheckpointStore(tmp_path)
    (c,) = store.scan()
    v = store.check(c)
    assert not v.ok and "not a torch checkpoint" in v.reason
    assert store.select().checkpoint is None


def test_legacy_torch_and_plain_pickle_files_are_checkpoints(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.ones(3)}, tmp_path / "ckpt_1.pt", _use_new_zipfile_serialization=False)
    torch.save({"w": torch.ones(3)}, tmp_path / "ckpt_2.pt")
    with open(tmp_path / "ckpt_3.pth", "wb") as fh:
        pickle.dump({"step": 3}, fh, protocol=4)
    (tmp_path / "ckpt_4.pth").write_bytes(pickle.dumps({"step": 4}, protocol=4)[:-1])  # cut: no STOP
    store = CheckpointStore(tmp_path)
    assert {c.step: store.check(c).ok for c in store.scan()} == {1: True, 2: True, 3: True, 4: False}


def _ds_dir(root: Path, step: int) -> None:
    d = root / f"global_step{step}"
    d.mkdir(parents=True)
    with open(d / "mp_rank_00_model_states.pt", "wb") as fh:
        pickle.dump({"step": step}, fh)


def test_deepspeed_latest_tracker(tmp_path: Path) -> None:
    for step in (100, 200, 300):
        _ds_dir(tmp_path, step)
    store = CheckpointStore(tmp_path)
    assert store.select().checkpoint is None  # no marker and no tracker: nothing is known complete
    (tmp_path / "latest").write_text("global_step200")
    store = CheckpointStore(tmp_path)
    sel = store.select()
    assert sel.checkpoint is not None and sel.checkpoint.step == 200
    assert "save in progress" in sel.skipped[0][1] and sel.skipped[0][0].step == 300
    assert store.select(below_step=200).checkpoint.step == 100  # a rollback finds the older one


def test_megatron_tracker(tmp_path: Path) -> None:
    for it in (500, 1000):
        d = tmp_path / f"iter_{it:07d}" / "mp_rank_00"
        d.mkdir(parents=True)
        with open(d / "model_optim_rng.pt", "wb") as fh:
            pickle.dump({"iteration": it}, fh)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("500\n")
    assert CheckpointStore(tmp_path).select().checkpoint.step == 500
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("1000\n")
    assert CheckpointStore(tmp_path).select().checkpoint.step == 1000
    # a corrupt weights file is still caught under a tracker
    (tmp_path / "iter_0001000" / "mp_rank_00" / "model_optim_rng.pt").write_bytes(b"PK\x03\x04cut")
    assert CheckpointStore(tmp_path).select().checkpoint.step == 500


def test_checkpoints_command_on_a_missing_directory_exits_2(tmp_path: Path) -> None:
    res = runner.invoke(app, ["checkpoints", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "no such directory" in res.output
    (tmp_path / "file").write_text("x")
    res = runner.invoke(app, ["checkpoints", "--json", str(tmp_path / "file")])
    assert res.exit_code == 2 and "not a directory" in res.output


def test_checkpoints_command_reports_the_tracker(tmp_path: Path) -> None:
    _ds_dir(tmp_path, 7)
    (tmp_path / "latest").write_text("global_step7")
    res = runner.invoke(app, ["checkpoints", "--json", str(tmp_path)])
    out = json.loads(res.stdout)
    assert res.exit_code == 0 and out["tracker"] == "latest: step 7" and out["resume"].endswith("global_step7")


def test_run_warns_at_start_when_the_checkpoint_dir_does_not_exist(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "diagnoser.act.cli", "run", "--json", "--run-dir", str(tmp_path / "run"),
           "--checkpoint-dir", str(tmp_path / "missing"), "--", sys.executable, "-c", "print('step 1')"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "--checkpoint-dir" in proc.stderr and "does not exist" in proc.stderr
    assert "begin at step 0" in proc.stderr
    assert json.loads(proc.stdout)["status"] == "succeeded"


def test_whatif_accepts_free_checkpoint_writes() -> None:
    res = runner.invoke(app, ["whatif", "--ckpt-write", "0", "--gpus", "16384", "--restart", "10m", "--json"])
    assert res.exit_code == 0, res.output
    point = json.loads(res.stdout)["point"]
    lam = 2048 * 6.5 / 1000 / 86400  # failures per second at 2,048 nodes
    assert point["optimal_interval_s"] == 0 and point["ettr"] == pytest.approx(1 - lam * 600)
    res = runner.invoke(app, ["whatif", "--ckpt-write", "-1"])
    assert res.exit_code == 2
