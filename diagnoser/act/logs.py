"""An attempt's output: split per rank into bounded, rotated files, and read for progress lines.

The launcher's combined stdout+stderr is routed line by line:
- lines with a launcher rank prefix (`[default3]:` from `torchrun --tee`, `[rank3]:`, `srun --label`
  `3: `) go to `rank<N>.log` without the outer prefix (the file name says the rank);
- everything else (the launcher's own lines, ChildFailedError) goes to `launcher.log`.
Each file rotates to `<name>.1` past `max_bytes` (one backup: a file never exceeds 2 x max_bytes on
disk); a line longer than `MAX_LINE` is cut. The triage reads the attempt directory as is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from diagnoser.collect.prefixes import split_prefix

MAX_LINE = 64 << 10
DEFAULT_PROGRESS = (
    # "step 120", "step: 120", "global_step=120", "iteration 120/1000", "iter 120", "[step 120]"
    r"(?i)\b(?:global[_ ]step|step|iter(?:ation)?)\b\s*[:=#]?\s*\[?\s*(?P<step>\d+)",
    # tqdm / Lightning / HF progress bars: "45/1000 [00:10<02:11, 7.2it/s]"
    r"(?P<step>\d+)/\d+ \[\d",
)
FATAL = re.compile(r"\bChildFailedError\b")  # the launcher gave up: it must exit now
WORKER_FAILED = re.compile(r"failed \(exitcode: -?\d+\)|\bChildFailedError\b")  # when the launcher saw it


class RotatingFile:
    """Append-only file rotated to `<path>.1` when it would exceed `max_bytes`."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max(max_bytes, 1024)
        self._fh = open(path, "ab")  # noqa: SIM115 - closed by close()
        self._size = self._fh.tell()

    def write(self, data: bytes) -> None:
        if self._size + len(data) > self.max_bytes and self._size > 0:
            self._fh.close()
            self.path.replace(self.path.with_name(self.path.name + ".1"))
            self._fh = open(self.path, "ab")  # noqa: SIM115
            self._size = 0
        self._fh.write(data)
        self._size += len(data)

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


@dataclass(frozen=True, slots=True)
class Line:
    rank: int | None  # global rank, None for launcher lines
    text: str  # without the launcher prefix and line end


class LogRouter:
    """Feed raw output chunks; get complete lines back; rank files are written as a side effect.

    `rank_offset` turns torchrun's local ranks (`[default3]:`) into global ranks (node_rank x nproc).
    """

    def __init__(self, out_dir: Path, max_bytes: int = 64 << 20, rank_offset: int = 0) -> None:
        self.out_dir = out_dir
        self.max_bytes = max_bytes
        self.rank_offset = rank_offset
        self._files: dict[int | None, RotatingFile] = {}
        self._partial = b""
        out_dir.mkdir(parents=True, exist_ok=True)

    def feed(self, chunk: bytes) -> list[Line]:
        data = self._partial + chunk
        *complete, self._partial = data.split(b"\n")
        if len(self._partial) > MAX_LINE:  # a runaway line without newline: cut it here
            complete.append(self._partial[:MAX_LINE])
            self._partial = b""
        return self._route(complete)

    def finish(self) -> list[Line]:
        """The last line, if the output did not end with a newline; then flush."""
        rest, self._partial = self._partial, b""
        lines = self._route([rest]) if rest else []
        for f in self._files.values():
            f.flush()
        return lines

    def _route(self, raw_lines: Iterable[bytes]) -> list[Line]:
        out = []
        for raw in raw_lines:
            text = raw[:MAX_LINE].decode("utf-8", errors="replace").rstrip("\r")
            p = split_prefix(text)
            rank = p.rank if p.rank is not None else (
                p.local_rank + self.rank_offset if p.local_rank is not None else None)
            body = p.rest if rank is not None else text
            self._file(rank).write(body.encode("utf-8", errors="replace") + b"\n")
            out.append(Line(rank, body))
        for f in self._files.values():
            f.flush()
        return out

    def _file(self, rank: int | None) -> RotatingFile:
        f = self._files.get(rank)
        if f is None:
            name = "launcher.log" if rank is None else f"rank{rank}.log"
            f = self._files[rank] = RotatingFile(self.out_dir / name, self.max_bytes)
        return f

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()


class ProgressMatcher:
    """The training step a line reports, if it is a progress line."""

    def __init__(self, patterns: Iterable[str] = DEFAULT_PROGRESS) -> None:
        self.patterns = [re.compile(p) for p in patterns]
        for p in self.patterns:
            if "step" not in p.groupindex and p.groups < 1:
                raise ValueError(f"progress pattern {p.pattern!r} needs a (?P<step>...) or a group")

    def step(self, text: str) -> int | None:
        text = text.rsplit("\r", 1)[-1] if "\r" in text else text  # tqdm redraws: the last frame
        for p in self.patterns:
            m = p.search(text)
            if m:
                try:
                    return int(m.group("step") if "step" in p.groupindex else m.group(1))
                except (TypeError, ValueError):
                    continue
        return None
