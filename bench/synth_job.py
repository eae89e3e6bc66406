"""Generate a synthetic failed training job: N nodes x 8 ranks of realistic logs, one root failure.

Layout: `<out>/<node>/rank<R>.log` (torchrun `[rankR]:` prefixed stderr+stdout), `<out>/dmesg/<node>.log`
(dmesg -T), `<out>/expected.json` (the verdict a correct triage gives). Noise: step lines, NCCL INFO
init lines with bus ids, Python warnings, tqdm bars with carriage returns. After the root failure the
other ranks log collateral NCCL watchdog timeouts. Node clocks can be skewed, and the dying rank's
own log can be cut short (as when a node loses power).

    python bench/synth_job.py OUT --nodes 16 --size 1G --kind xid79 [--skew 3] [--truncate] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

BUS_IDS = ["0000:18:00", "0000:2a:00", "0000:3a:00", "0000:5d:00", "0000:9a:00", "0000:ab:00", "0000:ba:00",
           "0000:db:00"]
T0 = datetime(2026, 3, 4, 5, 0, 0, tzinfo=UTC)
KINDS = ["xid79", "xid48", "xid95", "ib_link_down", "cuda_oom", "python_exception", "host_oom", "nccl_ib_peer",
         "storage_eio", "collective_desync", "hang"]


@dataclass(frozen=True)
class Rank:
    rank: int
    node: str
    local: int
    pid: int


def human(size: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(size[:-1]) * units[size[-1].upper()]) if size[-1].upper() in units else int(size)


def ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S,") + f"{t.microsecond // 1000:03d}"


def dmesg_t(t: datetime) -> str:
    return t.strftime("[%a %b ") + f"{t.day:2d}" + t.strftime(" %H:%M:%S %Y]")


def nccl_init(r: Rank, nranks: int) -> list[str]:
    bus = BUS_IDS[r.local].replace(":", "")[4:] + "0"
    pre = f"[rank{r.rank}]:{r.node}:{r.pid}:{r.pid} [{r.local}] NCCL INFO"
    return [f"{pre} Bootstrap : Using ib0:10.10.{int(r.node[-3:]) // 256}.{int(r.node[-3:]) % 256}<0>",
            f"{pre} NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.10.0.{int(r.node[-3:])}<0>",
            f"{pre} Using network IB", f"{pre} cudaDriverVersion 12040",
            f"{pre} comm 0x55{r.pid:06x} rank {r.rank} nranks {nranks} cudaDev {r.local} nvmlDev {r.local} "
            f"busId {bus} commId 0x7f3a9c2b11d04e5f - Init COMPLETE"]


def noise_block(r: Rank, rng: random.Random, start: datetime, step0: int, target: int) -> tuple[bytes, int]:
    """Training chatter of about `target` bytes; returns (bytes, steps written)."""
    out, size, step, t = [], 0, step0, start
    while size < target:
        t += timedelta(milliseconds=rng.randint(900, 1100))
        roll = rng.random()
        if roll < 0.9:
            line = (f"[rank{r.rank}]:[{ts(t)}] [INFO] [train.py:412] step {step} | loss {rng.uniform(1.8, 2.6):.4f}"
                    f" | lr 3.0000e-04 | grad_norm {rng.uniform(0.2, 1.5):.3f} | {rng.randint(380, 420)} TFLOPS")
            step += 1
        elif roll < 0.95:
            pct = rng.randint(0, 99)
            line = (f"[rank{r.rank}]:eval {pct:3d}%|{'#' * (pct // 10):<10}| {pct}/100 [00:{pct:02d}<00:30, 3.2it/s]"
                    f"\r[rank{r.rank}]:eval {pct + 1:3d}%|{'#' * ((pct + 1) // 10):<10}| {pct + 1}/100")
        elif roll < 0.98:
            line = (f"[rank{r.rank}]:/opt/conda/lib/python3.11/site-packages/torch/utils/checkpoint.py:91: "
                    "UserWarning: None of the inputs have requires_grad=True. Gradients will be None")
        else:
            line = (f"[rank{r.rank}]:{r.node}:{r.pid}:{r.pid + 7} [{r.local}] NCCL INFO Channel "
                    f"0{rng.randint(0, 7)}/0 : {r.rank} -> {(r.rank + 1) % 8} via P2P/CUMEM/read")
        out.append(line)
        size += len(line) + 1
    return ("\n".join(out) + "\n").encode(), step - step0


def desync_report(r: Rank, other: int, mine: str, theirs: str) -> str:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL: every rank checks fingerprints and names the first that differs."""
    return (f"[rank{r.rank}]:RuntimeError: Detected mismatch between collectives on ranks. Rank {r.rank} is running "
            f"collective: CollectiveFingerPrint(SequenceNumber=4097, OpType={mine}, TensorShape=[1024]), but Rank "
            f"{other} is running collective: CollectiveFingerPrint(SequenceNumber=4097, OpType={theirs}).")


def root_lines(kind: str, r: Rank, t: datetime, peer: Rank) -> tuple[list[str], list[str]]:
    """(lines for the culprit rank's log, lines for the culprit node's dmesg)."""
    p = f"[rank{r.rank}]:"
    bus = BUS_IDS[r.local]
    cuda_err = [f"{p}terminate called after throwing an instance of 'c10::DistBackendError'",
                f"{p}  what():  [PG 0 Rank {r.rank}] Process group watchdog thread terminated with exception: "
                "CUDA error: unknown error"]
    tb = [f"{p}Traceback (most recent call last):", f'{p}  File "/workspace/train.py", line 530, in <module>',
          f"{p}    main()", f'{p}  File "/workspace/train.py", line 488, in main',
          f"{p}    loss = step(model, batch)"]
    if kind == "xid79":
        return cuda_err, [f"{dmesg_t(t)} NVRM: Xid (PCI:{bus}): 79, pid={r.pid}, name=python, "
                          "GPU has fallen off the bus.",
                          f"{dmesg_t(t)} NVRM: GPU {bus}.0: GPU has fallen off the bus."]
    if kind == "xid48":
        return cuda_err, [f"{dmesg_t(t)} NVRM: Xid (PCI:{bus}): 48, pid={r.pid}, name=python, An uncorrectable "
                          "double bit error (DBE) has been detected on GPU in the framebuffer at partition 1, "
                          "subpartition 0."]
    if kind == "xid95":
        return cuda_err, [f"{dmesg_t(t)} NVRM: Xid (PCI:{bus}): 95, pid={r.pid}, name=python, Uncontained: FBHUB. "
                          "RST: Yes, D-RST: No"]
    if kind == "ib_link_down":
        return ([f"{p}{r.node}:{r.pid}:{r.pid + 9} [{r.local}] NCCL WARN NET/IB : Got async event : port error"],
                [f"{dmesg_t(t)} mlx5_core 0000:0c:00.0: mlx5_port_module_event:1164:(pid 0): Port module event: "
                 "module 0, Cable unplugged",
                 f"{dmesg_t(t)} mlx5_core 0000:0c:00.0 ib0: Link down"])
    if kind == "cuda_oom":
        return tb + [f'{p}  File "/workspace/model.py", line 211, in forward',
                     f"{p}    attn = torch.softmax(scores, dim=-1)",
                     f"{p}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU {r.local} has "
                     "a total capacity of 79.10 GiB of which 1.21 GiB is free."], []
    if kind == "python_exception":
        return tb + [f'{p}  File "/workspace/data/packing.py", line 77, in __getitem__',
                     f"{p}    sample = self.index[idx]", f"{p}KeyError: 'input_ids'"], []
    if kind == "host_oom":
        return [], [f"{dmesg_t(t)} python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), "
                    "order=0, oom_score_adj=0",
                    f"{dmesg_t(t)} Out of memory: Killed process {r.pid} (python) total-vm:412345678kB, "
                    "anon-rss:398765432kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:800000kB oom_score_adj:0"]
    if kind == "nccl_ib_peer":
        ip = f"10.10.0.{int(peer.node[-3:])}"
        return [f"{p}{r.node}:{r.pid}:{r.pid + 9} [{r.local}] transport/net_ib.cc:1696 NCCL WARN NET/IB : "
                f"Got completion from peer {ip}<{40000 + r.rank}> with status=12 opcode=0 len=0 vendor err 129 "
                "(Recv) localGid ::ffff:10.10.0.1 remoteGids::ffff:" + ip], []
    if kind == "storage_eio":
        return tb + [f'{p}  File "/workspace/ckpt.py", line 54, in save', f"{p}    torch.save(state, path)",
                     f"{p}OSError: [Errno 5] Input/output error: '/lustre/ckpt/step_004000/model_{r.rank}.pt'"], []
    if kind == "collective_desync":  # the culprit's own report; the others' are in desync_report()
        return [desync_report(r, 0, "BROADCAST", "ALLREDUCE")], []
    if kind == "hang":
        return [], []
    raise ValueError(f"unknown kind {kind}")


EXPECTED = {
    "xid79": ("hardware", "drain_and_restart"), "xid48": ("hardware", "drain_and_restart"),
    "xid95": ("hardware", "drain_and_restart"), "ib_link_down": ("hardware", "restart_excluding_nodes"),
    "cuda_oom": ("user_code", "stop_and_notify"), "python_exception": ("user_code", "stop_and_notify"),
    "host_oom": ("user_code", "stop_and_notify"), "nccl_ib_peer": ("infra", "restart_excluding_nodes"),
    "storage_eio": ("infra", "escalate"), "collective_desync": ("user_code", "stop_and_notify"),
    "hang": ("unknown", "restart_excluding_nodes"),
}


def generate(out: Path, nodes: int, size: int, kind: str, seed: int = 1, skew: float = 0.0,
             truncate: bool = False) -> dict:
    rng = random.Random(seed)
    names = [f"gpu-{i + 1:03d}" for i in range(nodes)]
    ranks = [Rank(n * 8 + g, names[n], g, 40000 + n * 8 + g) for n in range(nodes) for g in range(8)]
    culprit = ranks[rng.randrange(len(ranks))]
    peer = ranks[(culprit.rank + 8) % len(ranks)] if nodes > 1 else culprit
    # a peer whose link fails is reported by every process connected to it: the culprit rank and its neighbour GPU
    # on the same node both name it (one reporter alone localises nothing: either end of its connection may be at fault)
    reporters = {culprit, ranks[culprit.rank ^ 1]} if kind == "nccl_ib_peer" else {culprit}
    offsets = {n: timedelta(seconds=rng.uniform(-skew, skew)) for n in names}  # node clock skew
    per_rank = max(4096, size // len(ranks))
    steps = None
    t_fail = None
    for r in ranks:
        # a realistic block of at most 2 MB, repeated to the size asked (generating GBs line by line is slow)
        body, steps = noise_block(r, rng, T0 + offsets[r.node], 0, min(per_rank, 2 << 20))
        repeats = max(1, per_rank // len(body))
        t_fail = T0 + timedelta(seconds=steps * 1.0 + 5)
        f = out / r.node / f"rank{r.rank}.log"
        f.parent.mkdir(parents=True, exist_ok=True)
        with open(f, "wb") as fh:
            fh.write(("\n".join(nccl_init(r, len(ranks))) + "\n").encode())
            for _ in range(repeats):
                fh.write(body)
            rest = per_rank - repeats * len(body)  # fill to the size asked, ending on a whole line
            if rest > 0:
                fh.write(body[:body.rfind(b"\n", 0, rest) + 1])
            local = t_fail + offsets[r.node]
            if r in reporters:
                own, _ = root_lines(kind, r, local, peer)
                if truncate:
                    continue  # the node died: its rank logs end with the noise, mid-run
                fh.write(("\n".join(own) + "\n").encode() if own else b"")
            elif kind == "collective_desync":
                fh.write((desync_report(r, culprit.rank, "ALLREDUCE", "BROADCAST") + "\n").encode())
            elif kind != "hang" or r != culprit:
                if kind == "hang":
                    stuck = T0 + timedelta(seconds=steps * 1.0 + 1805)
                else:
                    stuck = local + timedelta(seconds=1800 + rng.uniform(0, 3))
                fh.write((f"[rank{r.rank}]:[{ts(stuck)}] [E ProcessGroupNCCL.cpp:632] [Rank {r.rank}] Watchdog caught "
                          f"collective operation timeout: WorkNCCL(SeqNum=4097, OpType=ALLREDUCE, NumelIn=262144000, "
                          f"NumelOut=262144000, Timeout(ms)=1800000) ran for 1800{rng.randint(100, 999)} milliseconds "
                          "before timing out.\n").encode())
    for n in names:
        f = out / "dmesg" / f"{n}.log"
        f.parent.mkdir(parents=True, exist_ok=True)
        lines = [f"{dmesg_t(T0 - timedelta(hours=2))} nvidia-peermem: module loaded",
                 f"{dmesg_t(T0 - timedelta(hours=2))} IPv6: ADDRCONF(NETDEV_CHANGE): ib0: link becomes ready"]
        if n == culprit.node:
            _, kern = root_lines(kind, culprit, t_fail + offsets[n] - timedelta(seconds=1), peer)
            lines += kern
        f.write_text("\n".join(lines) + "\n")
    category, action = EXPECTED[kind]
    node_level = kind == "ib_link_down"  # a port going down is the node's fault, not one rank's
    expected = {"kind": kind, "category": category, "action": action,
                "culprit_rank": None if node_level else culprit.rank,
                "culprit_node": peer.node if kind == "nccl_ib_peer" else culprit.node, "ranks": len(ranks),
                "bytes": sum(p.stat().st_size for p in out.rglob("*.log"))}
    (out / "expected.json").write_text(json.dumps(expected, indent=2))
    return expected


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--size", default="100M", help="total bytes of rank logs, e.g. 100M, 2G")
    ap.add_argument("--kind", choices=KINDS, default="xid79")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--skew", type=float, default=0.0, help="max clock skew between nodes, seconds")
    ap.add_argument("--truncate", action="store_true", help="cut the culprit rank's own log before its error")
    args = ap.parse_args()
    print(json.dumps(generate(args.out, args.nodes, human(args.size), args.kind, args.seed, args.skew,
                              args.truncate)))


if __name__ == "__main__":
    main()
