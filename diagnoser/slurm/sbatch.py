"""Split and edit an `sbatch [OPTIONS] SCRIPT [ARGS]` command line (pure).

The executor takes the user's submission as a command (`sbatch -N 2 train.sbatch --lr 3e-4`, or
just `train.sbatch --lr 3e-4`), adds what it needs (`--open-mode=append`, `--requeue`, an
`--output` it can follow) and records node exclusions as `--exclude=...` in the command itself,
so the command stays the one source of truth across controller restarts.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from diagnoser.slurm.records import expand_hostlist, join_hostlist

# sbatch short options that take a value (the rest are flags)
_SHORT_VALUE = set("AaBbCcDdeFGiJLMmNnopqStwx")
# long options that never take a separate value token (an optional one only as --opt=value)
_LONG_FLAGS = {
    "--contiguous", "--exclusive", "--get-user-env", "--hold", "--ignore-pbs", "--no-kill", "--no-requeue",
    "--requeue", "--overcommit", "--oversubscribe", "--parsable", "--quiet", "--reboot", "--spread-job",
    "--test-only", "--use-min-nodes", "--verbose", "--wait", "--help", "--usage", "--version", "--nice",
    "--propagate", "--mail-type-none",
}
_ALIASES = {"-x": "--exclude", "-o": "--output", "-e": "--error", "-N": "--nodes", "-w": "--nodelist",
            "-J": "--job-name", "-p": "--partition", "-D": "--chdir"}


@dataclass(frozen=True)
class Sbatch:
    """An sbatch command split in parts: options as (name, value) pairs, the script and its args."""

    options: tuple[tuple[str, str | None], ...]
    script: tuple[str, ...]  # script path and its arguments (empty with --wrap)

    def get(self, name: str) -> str | None:
        """The last value of a long option (short aliases count), e.g. get('--exclude')."""
        value = None
        for opt, val in self.options:
            if _ALIASES.get(opt, opt) == name:
                value = val if val is not None else ""
        return value

    def without(self, *names: str) -> Sbatch:
        keep = tuple((o, v) for o, v in self.options if _ALIASES.get(o, o) not in names)
        return Sbatch(keep, self.script)

    def with_option(self, name: str, value: str | None = None) -> Sbatch:
        return Sbatch((*self.without(name).options, (name, value)), self.script)

    @property
    def excluded(self) -> list[str]:
        return expand_hostlist(self.get("--exclude"))

    @property
    def required(self) -> list[str]:
        """Nodes the job must run on (`-w/--nodelist`)."""
        return expand_hostlist(self.get("--nodelist"))

    def argv(self) -> tuple[str, ...]:
        """The arguments after `sbatch` (options in `--name=value` form, then the script)."""
        out: list[str] = []
        for opt, val in self.options:
            name = _ALIASES.get(opt, opt)
            if val is None:
                out.append(name)
            elif name.startswith("--"):
                out.append(f"{name}={val}")
            else:
                out += [name, val]
        return (*out, *self.script)

    def command(self) -> tuple[str, ...]:
        return ("sbatch", *self.argv())


def parse_sbatch(command: tuple[str, ...] | list[str]) -> Sbatch:
    """`sbatch -N 2 -x n3 job.sh a b` (or `job.sh a b`) -> Sbatch; raises ValueError if unusable."""
    args = list(command)
    if args and os.path.basename(args[0]) == "sbatch":
        args = args[1:]
    options: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if eq:
                options.append((name, value))
            elif name in _LONG_FLAGS:
                options.append((name, None))
            elif i + 1 < len(args):
                options.append((name, args[i + 1]))
                i += 1
            else:
                raise ValueError(f"sbatch option {name} needs a value")
        else:
            flag = arg[:2]
            if flag[1] in _SHORT_VALUE:
                if len(arg) > 2:
                    options.append((flag, arg[2:].lstrip("=")))
                elif i + 1 < len(args):
                    options.append((flag, args[i + 1]))
                    i += 1
                else:
                    raise ValueError(f"sbatch option {flag} needs a value")
            else:
                options.append((arg, None))
        i += 1
    script = tuple(args[i:])
    parsed = Sbatch(tuple(options), script)
    if not script and parsed.get("--wrap") is None:
        raise ValueError("no batch script: give `sbatch [OPTIONS] SCRIPT [ARGS]` or `--wrap=CMD`")
    return parsed


def with_exclusions(command: tuple[str, ...], nodes: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The command with `nodes` added to its `--exclude` list (and taken out of its `--nodelist`:
    a job that must run on a node it excludes never starts)."""
    sb = parse_sbatch(command)
    merged = join_hostlist({*sb.excluded, *nodes})
    if sb.get("--nodelist") is not None:
        keep = [n for n in sb.required if n not in nodes]
        sb = sb.with_option("--nodelist", join_hostlist(keep)) if keep else sb.without("--nodelist")
    return sb.with_option("--exclude", merged).command()


def script_directives(path: str | Path) -> Sbatch | None:
    """The `#SBATCH` options at the top of a batch script (None if it cannot be read)."""
    tokens: list[str] = []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh):
                stripped = line.strip()
                if n == 0 and stripped.startswith("#!"):
                    continue
                if stripped.startswith("#SBATCH"):
                    body = stripped[len("#SBATCH"):].split(" #", 1)[0]
                    tokens += shlex.split(body, comments=False)
                elif stripped and not stripped.startswith("#"):
                    break
    except (OSError, ValueError):
        return None
    try:
        return parse_sbatch([*tokens, "--wrap=:"])
    except ValueError:
        return None


def required_nodes(sb: Sbatch) -> int:
    """The minimum node count the submission asks for (`-N 2`, `-N 2-4`, or the script's #SBATCH)."""
    value = sb.get("--nodes")
    if value is None and sb.script:
        directives = script_directives(sb.script[0])
        value = directives.get("--nodes") if directives else None
    if value:
        first = value.split("-")[0].split(":")[0]
        if first.isdigit():
            return int(first)
    return 1
