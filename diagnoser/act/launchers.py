"""Which launcher a command runs, and what that means for supervising it.

Recognised (after leading `env`, `VAR=value`, `uv run`, and a python interpreter):
- torchrun: `torchrun ...`, `python -m torch.distributed.run ...` (and the old `torch.distributed.launch`);
- DeepSpeed: `deepspeed ...`, `python -m deepspeed.launcher.runner ...`;
- Hugging Face Accelerate: `accelerate launch ...`, `accelerate-launch ...`, `python -m accelerate.commands.launch ...`;
- Slurm: `srun ...` (e.g. a `diagnoser run -- srun python train.py` line inside an sbatch script);
  `srun` around another launcher (`srun torchrun ...`) is treated as that launcher.
Anything else is `plain`: one process whose exit code is the job's.

Per-rank output: torchrun and accelerate get `--tee 3` (every line prefixed `[defaultN]:`), srun gets
`--label` (`N: `, N the global task id); DeepSpeed prefixes nothing on the console but writes per-rank
files with `--enable_each_rank_log DIR`, which the triage then reads. Options the user already gave
are never overridden.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

TORCHRUN, DEEPSPEED, ACCELERATE, SRUN, PLAIN = "torchrun", "deepspeed", "accelerate", "srun", "plain"

_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_DS_MODULES = ("deepspeed.launcher.runner", "deepspeed.launcher.launch")
_ACC_MODULES = ("accelerate.commands.launch",)
# options whose presence means the user chose how output is split already
_OWN_OUTPUT = {
    TORCHRUN: ("--tee", "-t", "--log-dir", "--log_dir", "--redirects", "-r", "--local-ranks-filter",
               "--local_ranks_filter"),
    ACCELERATE: ("--tee", "-t", "--log_dir"),
    SRUN: ("-l", "--label", "-o", "--output", "-e", "--error"),
    DEEPSPEED: (),
}
NPROC = {  # processes per node (torchrun, deepspeed), or in total (accelerate, srun)
    TORCHRUN: ("--nproc-per-node", "--nproc_per_node"),
    DEEPSPEED: ("--num_gpus", "--num-gpus"),
    ACCELERATE: ("--num_processes",),
    SRUN: ("-n", "--ntasks"),
}
NODE_RANK = {
    TORCHRUN: ("--node-rank", "--node_rank"),
    DEEPSPEED: ("--node_rank",),
    ACCELERATE: ("--machine_rank",),
}
MAX_RESTARTS = {TORCHRUN: ("--max-restarts", "--max_restarts"), ACCELERATE: ("--max_restarts",)}
RANK_LOG_DIR = {TORCHRUN: ("--log-dir", "--log_dir"), ACCELERATE: ("--log_dir",),
                DEEPSPEED: ("--enable_each_rank_log",)}


@dataclass(frozen=True)
class Launcher:
    """`kind` and where its own options start (`index`: the token after the launcher's name)."""

    kind: str
    index: int  # launcher options are command[index:]; for plain, 0

    def options(self, command: tuple[str, ...]) -> tuple[str, ...]:
        return command[self.index:] if self.kind != PLAIN else ()

    @property
    def distributed(self) -> bool:
        return self.kind != PLAIN


def _is_python(arg: str) -> bool:
    name = os.path.basename(arg)
    return name.startswith("python") and all(c.isdigit() or c == "." for c in name[6:])


def recognise(command: tuple[str, ...] | list[str]) -> Launcher:
    """The launcher of `command` (see the module docstring)."""
    args = tuple(command)
    i = 0
    while i < len(args) and i < 8:
        a, name = args[i], os.path.basename(args[i])
        if name == "env" or ("=" in a and not a.startswith("-") and i < 6):
            i += 1
            continue
        if name == "uv" and i + 1 < len(args) and args[i + 1] == "run":
            i += 2
            continue
        if _is_python(a):
            j = i + 1
            while j < len(args) and args[j].startswith("-") and args[j] != "-m":
                j += 1  # python -u -m ...
            if j + 1 < len(args) and args[j] == "-m":
                mod = args[j + 1]
                kind = (TORCHRUN if mod in _TORCHRUN_MODULES else DEEPSPEED if mod in _DS_MODULES
                        else ACCELERATE if mod in _ACC_MODULES else None)
                if kind:
                    return Launcher(kind, j + 2)
            return Launcher(PLAIN, 0)
        if name == "torchrun":
            return Launcher(TORCHRUN, i + 1)
        if name == "deepspeed":
            return Launcher(DEEPSPEED, i + 1)
        if name == "accelerate" and i + 1 < len(args) and args[i + 1] == "launch":
            return Launcher(ACCELERATE, i + 2)
        if name == "accelerate-launch":
            return Launcher(ACCELERATE, i + 1)
        if name == "srun":
            inner = _inner(args, i + 1)
            return inner if inner is not None else Launcher(SRUN, i + 1)
        return Launcher(PLAIN, 0)
    return Launcher(PLAIN, 0)


def _inner(args: tuple[str, ...], start: int) -> Launcher | None:
    """A launcher that srun starts (`srun --ntasks-per-node 1 torchrun ...`), if any."""
    for k in range(start, min(len(args), start + 40)):
        if not args[k].startswith("-") and (k == start or not _takes_value(args[k - 1])):
            found = recognise(args[k:])
            return Launcher(found.kind, found.index + k) if found.distributed else None
    return None


def _takes_value(opt: str) -> bool:
    """An srun option given as `--opt VALUE` (not `--opt=VALUE`, not a flag)."""
    flags = {"-l", "--label", "-u", "--unbuffered", "-Q", "--quiet", "-v", "--verbose", "-K", "--kill-on-bad-exit",
             "--exclusive", "-X", "--disable-status", "--overlap", "--mpi=none"}
    if opt in flags or not opt.startswith("-"):
        return False
    return "=" not in opt if opt.startswith("--") else len(opt) == 2  # -N2 carries its value


def flag_value(command: tuple[str, ...], names: tuple[str, ...]) -> tuple[int | None, str | None]:
    """(index of the value, value) of `--flag V` or `--flag=V`."""
    for i, arg in enumerate(command):
        for name in names:
            if arg == name and i + 1 < len(command):
                return i + 1, command[i + 1]
            if arg.startswith(name + "="):
                return i, arg.split("=", 1)[1]
    return None, None


def set_flag(command: tuple[str, ...], index: int, names: tuple[str, ...], value: str) -> tuple[str, ...]:
    args = list(command)
    if any(args[index].startswith(n + "=") for n in names):
        args[index] = args[index].split("=", 1)[0] + "=" + value
    else:
        args[index] = value
    return tuple(args)


def launcher_value(command: tuple[str, ...], launcher: Launcher, table: dict[str, tuple[str, ...]]) -> str | None:
    """The value of the launcher's own option named in `table` (never the training script's)."""
    names = table.get(launcher.kind)
    if not names:
        return None
    _, value = flag_value(_own_options(command, launcher), names)
    return value


def _own_options(command: tuple[str, ...], launcher: Launcher) -> tuple[str, ...]:
    """The launcher's options: up to the first positional argument (the script)."""
    opts = launcher.options(command)
    out: list[str] = []
    k = 0
    while k < len(opts):
        a = opts[k]
        if not a.startswith("-"):
            if out and out[-1].startswith("-") and "=" not in out[-1] and out[-1] not in _FLAGS:
                out.append(a)  # the value of the previous option
                k += 1
                continue
            break
        out.append(a)
        k += 1
    return tuple(out)


_FLAGS = {"--standalone", "--no-python", "--no_python", "-m", "--module", "--multi_gpu", "--cpu", "--no_ssh",
          "--no_local_rank", "--use_deepspeed", "--use_fsdp", "-l", "--label", "-u", "--unbuffered"}


def nproc(command: tuple[str, ...]) -> int | None:
    """Processes per node the launcher starts, when the command says."""
    launcher = recognise(command)
    value = launcher_value(command, launcher, NPROC)
    if value is None or not value.isdigit():
        return None
    if launcher.kind == ACCELERATE:
        machines = launcher_value(command, launcher, {ACCELERATE: ("--num_machines",)})
        if machines and machines.isdigit() and int(machines) > 0:
            return int(value) // int(machines)
    return int(value)


def rank_offset(command: tuple[str, ...]) -> int:
    """Global rank of this node's first process (node rank x processes per node)."""
    launcher = recognise(command)
    node_rank = launcher_value(command, launcher, NODE_RANK)
    per_node = nproc(command)
    if per_node and node_rank and node_rank.isdigit():
        return per_node * int(node_rank)
    return 0


def prepare(command: tuple[str, ...]) -> tuple[tuple[str, ...], str]:
    """Ask the launcher to name the rank of every line; (command, note for the user)."""
    launcher = recognise(command)
    note = ""
    restarts = launcher_value(command, launcher, MAX_RESTARTS)
    if restarts is not None and restarts != "0":
        note = (f"{launcher.kind} --max-restarts {restarts}: the launcher restarts workers itself, outside "
                "diagnoser's budgets and diagnosis; prefer --max-restarts 0")
    own = _OWN_OUTPUT.get(launcher.kind, ())
    opts = _own_options(command, launcher)
    if not own or any(a.split("=", 1)[0] in own for a in opts):
        return command, note
    i = launcher.index
    added = ("--label",) if launcher.kind == SRUN else ("--tee", "3")
    return (*command[:i], *added, *command[i:]), note
