"""A tiny data-parallel trainer for diagnoser's end-to-end tests: CPU, gloo, torchrun, with faults.

    torchrun --standalone --nproc-per-node 2 tests/e2e/train.py --steps 12 --ckpt-dir CK --ckpt-every 3

It is also the reference for how a job cooperates with `diagnoser run`:
- it prints one progress line per step (`step 7 loss 0.1234`), which the hang watchdog follows;
- it saves `CK/step_000006/model.pt` then writes the `COMPLETE` marker last (a checkpoint without
  the marker is a partial write and is never resumed from);
- it resumes from `$DIAGNOSER_RESUME_FROM` when set (the controller chose a valid checkpoint) and
  otherwise starts from scratch; `--auto-resume` instead picks the newest `step_*` directory with
  a marker itself, without checking it (what a job under plain `torchrun --max-restarts` does).

Faults (env vars, `rank:step` or `step`); each fires once per `$FAULT_STATE_DIR` (one test), except
FAULT_EXCEPTION, a code bug that fires every time:
  FAULT_KILL=r:s       rank r SIGKILLs itself at step s
  FAULT_TRANSIENT=r:s  rank r fails reading a data shard: OSError [Errno 116] Stale file handle
  FAULT_NCCL=r:s       rank r's all-reduce fails as NCCL reports a transient ncclSystemError (socket call failed)
  FAULT_EXCEPTION=r:s  rank r raises KeyError('labels')
  FAULT_HANG=r:s       rank r blocks forever before step s's all-reduce (the others wait in it)
  FAULT_NAN=s          the weights go bad at step s (a loss spike) and the loss is NaN from step s+2
                       on, when the loop raises 'Loss is NaN'; checkpoints saved in between carry the
                       bad weights, so resuming from the newest one fails again: only a rollback helps
  FAULT_CORRUPT=s      the checkpoint of step s is written truncated, marker included (silent)
Rank 0 appends every completed step to `$TRAIN_STEPS_LOG` (JSON lines: attempt, step, time).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

FEATURES = 16


def fault(name: str, rank: int, step: int, once: bool = True) -> bool:
    """Whether fault `name` fires for this rank at this step (and mark it fired)."""
    spec = os.environ.get(name)
    if not spec:
        return False
    want_rank, _, want_step = spec.rpartition(":")
    if int(want_step) != step or (want_rank and int(want_rank) != rank):
        return False
    if not once:
        return True
    state = Path(os.environ.get("FAULT_STATE_DIR", "."))
    marker = state / f"fired-{name}-{step}"
    if marker.exists():
        return False
    state.mkdir(parents=True, exist_ok=True)
    marker.touch()
    return True


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The data of (step, rank): deterministic, so a resumed run computes the same numbers."""
    g = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(32, FEATURES, generator=g)
    return x, x.sum(dim=1, keepdim=True) * 0.5


def read_shard(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    if fault("FAULT_TRANSIENT", rank, step):
        raise OSError(116, "Stale file handle", f"/shared/datasets/train/shard-{step:05d}.bin")
    return batch(step, rank)


def wait_for_data(rank: int, step: int) -> None:
    if fault("FAULT_HANG", rank, step):
        while True:  # a stuck reader: never returns, the other ranks wait in the all-reduce
            time.sleep(1)


def newest_checkpoint(ckpt_dir: Path) -> str | None:
    done = sorted(p for p in ckpt_dir.glob("step_*") if (p / "COMPLETE").exists())
    return str(done[-1]) if done else None


def save(ckpt_dir: Path, step: int, model: torch.nn.Module, opt: torch.optim.Optimizer,
         poisoned_at: int | None) -> None:
    final = ckpt_dir / f"step_{step:06d}"
    tmp = ckpt_dir / f".tmp-step_{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": step, "poisoned_at": poisoned_at},
               tmp / "model.pt")
    if fault("FAULT_CORRUPT", -1, step):
        data = (tmp / "model.pt").read_bytes()
        (tmp / "model.pt").write_bytes(data[: len(data) // 2])
    (tmp / "COMPLETE").write_text(json.dumps({"step": step}))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    print(f"saved checkpoint {final}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--ckpt-dir", type=Path, required=True)
    ap.add_argument("--ckpt-every", type=int, default=3)
    ap.add_argument("--step-time", type=float, default=0.2)
    ap.add_argument("--resume", default=None, help="checkpoint dir (default: $DIAGNOSER_RESUME_FROM)")
    ap.add_argument("--auto-resume", action="store_true", help="resume from the newest marked checkpoint")
    ap.add_argument("--pg-timeout", type=float, default=600, help="collective timeout, seconds")
    args = ap.parse_args()

    dist.init_process_group("gloo", timeout=timedelta(seconds=args.pg_timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 1
    poisoned_at: int | None = None
    resume = args.resume or os.environ.get("DIAGNOSER_RESUME_FROM")
    if args.auto_resume:
        resume = newest_checkpoint(args.ckpt_dir)
    if resume:
        state = torch.load(Path(resume) / "model.pt", weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        start = state["step"] + 1
        poisoned_at = state.get("poisoned_at")
        print(f"resumed from {resume}", flush=True)
    attempt = os.environ.get("DIAGNOSER_ATTEMPT") or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    steps_log = os.environ.get("TRAIN_STEPS_LOG")

    for step in range(start, args.steps + 1):
        if fault("FAULT_KILL", rank, step):
            os.kill(os.getpid(), signal.SIGKILL)
        if fault("FAULT_EXCEPTION", rank, step, once=False):
            sample: dict[str, torch.Tensor] = {"input_ids": torch.zeros(1)}
            _ = sample["labels"]
        x, y = read_shard(step, rank)
        loss = torch.nn.functional.mse_loss(model(x), y)
        if poisoned_at is None and fault("FAULT_NAN", -1, step):
            poisoned_at = step  # a loss spike: the weights are bad from here on, NaN shows later
        if poisoned_at is not None and step >= poisoned_at + 2:
            loss = loss * float("nan")
        if not torch.isfinite(loss):
            raise RuntimeError(f"Loss is NaN at step {step}, aborting.")
        opt.zero_grad()
        loss.backward()
        wait_for_data(rank, step)
        if fault("FAULT_NCCL", rank, step):  # what ProcessGroupNCCL raises when a socket call fails mid-run
            print(f"{os.uname().nodename}:{os.getpid()}:{os.getpid()} [{rank}] misc/socket.cc:484 NCCL WARN "
                  "socketStartConnect: Connect to 10.0.0.2<43119> failed : Software caused connection abort",
                  flush=True)
            raise dist.DistBackendError(
                "NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error "
                "(run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\nncclSystemError: System call (e.g. "
                "socket, malloc) or external library call failed or device error.")
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        time.sleep(args.step_time)
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        if rank == 0 and steps_log:
            with open(steps_log, "a") as fh:
                fh.write(json.dumps({"attempt": attempt, "step": step, "time": time.time()}) + "\n")
        if step % args.ckpt_every == 0 and rank == 0:
            save(args.ckpt_dir, step, model, opt, poisoned_at)
        if step % args.ckpt_every == 0:
            dist.barrier()
    dist.destroy_process_group()
    print("training complete", flush=True)


if __name__ == "__main__":
    main()
