"""Find the newest *valid* checkpoint of a job: complete, not a partial write, not abandoned.

Conventions recognised in the checkpoint directory (the step is the last number in the name):

- Directories: `step_000400/`, `step-400/`, `checkpoint-400/` (HF), `global_step400/` (DeepSpeed),
  `iter_0000400/` (Megatron), `epoch_3/`. A directory is complete when it holds a marker written
  last: `COMPLETE`, `.complete`, `DONE`, `.done`, or DCP's `.metadata` (the coordinator writes it
  after every rank finished). A marker holding JSON `{"files": {"model.pt": 12345, ...}}` also has
  its files' sizes checked.
- Trackers written after a save completes: DeepSpeed's `latest` (the tag, e.g. `global_step400`)
  and Megatron's `latest_checkpointed_iteration.txt` (the iteration, e.g. `400`). With a tracker, a
  directory without a marker is complete up to the tracked step (saves are sequential: the
  tracker moved past the older ones) and a newer one is a save still in progress.
- Files: `ckpt_400.pt`, `step_000400.pth`, `model-400.ckpt`, `step_400.safetensors`. When any file
  in the directory has a sibling marker (`ckpt_400.pt.done` / `.complete`), every file needs one.
- Every weights file found (`*.pt|*.pth|*.ckpt|*.bin|*.safetensors|*.distcp`) must be non-empty;
  torch zip archives (the default format since torch 1.6) must have their central directory
  (a truncated write has none) and pass the members' CRC check up to `crc_max_bytes`;
  a `.pt/.pth/.ckpt` that is not a zip must be a legacy torch file (pickled magic number) or a
  complete pickle (protocol 2-5, ending with STOP);
  safetensors files must be exactly as long as their header says.
- Optionally (`verify_load`), `torch.load(weights_only=True, mmap=True)` when torch is importable.
  Off by default: weights_only rejects checkpoints holding arbitrary objects (e.g. an argparse
  Namespace), and the controller never unpickles untrusted code.

Temporary names (`.tmp*`, `*.tmp`, `*.partial`, `*.incomplete`) are never candidates. Results are
cached per (path, size, mtime), so a checkpoint verified while the job ran costs nothing at restart.
"""

from __future__ import annotations

import json
import re
import struct
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DIR_MARKERS = ("COMPLETE", ".complete", "DONE", ".done", ".metadata")
TRACKERS = ("latest", "latest_checkpointed_iteration.txt")  # DeepSpeed, Megatron-LM
# torch.save's legacy (pre-1.6) format starts with the pickled magic number 0x1950a86a20f9469cfc6c
LEGACY_TORCH_MAGIC = b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")
FILE_MARKER_SUFFIXES = (".done", ".complete")
WEIGHT_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".safetensors", ".distcp")
_STEP = re.compile(r"(\d+)(?!.*\d)")
_TEMP = re.compile(r"^\.|\.(?:tmp|partial|incomplete)$|^tmp|\.tmp[-_.]", re.IGNORECASE)


@dataclass(frozen=True)
class Checkpoint:
    """A candidate checkpoint: a directory or a single file, with the step its name carries."""

    path: Path
    step: int
    mtime: float
    is_dir: bool


@dataclass(frozen=True)
class Validity:
    ok: bool
    reason: str = ""


@dataclass(frozen=True)
class Selection:
    """The chosen checkpoint (None: start from scratch) and the newer ones skipped, with why."""

    checkpoint: Checkpoint | None
    skipped: tuple[tuple[Checkpoint, str], ...] = ()

    def describe(self) -> str:
        chosen = f"resume from {self.checkpoint.path} (step {self.checkpoint.step})" if self.checkpoint \
            else "no valid checkpoint: start from scratch"
        skipped = "; ".join(f"skipped {c.path.name}: {why}" for c, why in self.skipped[:5])
        return chosen + (f"; {skipped}" if skipped else "")


def _step_of(name: str) -> int | None:
    stem = name
    for suffix in WEIGHT_SUFFIXES:
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    m = _STEP.search(stem)
    return int(m.group(1)) if m else None


def _zip_ok(path: Path, crc_max_bytes: int) -> Validity:
    try:
        with zipfile.ZipFile(path) as z:
            if not z.namelist():
                return Validity(False, f"{path.name}: empty archive")
            if path.stat().st_size <= crc_max_bytes:
                bad = z.testzip()
                if bad is not None:
                    return Validity(False, f"{path.name}: CRC mismatch in member {bad}")
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        return Validity(False, f"{path.name}: not a complete torch archive ({exc})")
    return Validity(True)


def _safetensors_ok(path: Path) -> Validity:
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            if n > size - 8 or n > 100 << 20:
                return Validity(False, f"{path.name}: header length {n} beyond the file ({size} bytes)")
            header = json.loads(fh.read(n))
    except (OSError, struct.error, json.JSONDecodeError, UnicodeDecodeError) as exc:
        return Validity(False, f"{path.name}: unreadable safetensors header ({exc})")
    end = max((v["data_offsets"][1] for k, v in header.items()
               if k != "__metadata__" and isinstance(v, dict) and "data_offsets" in v), default=0)
    if 8 + n + end != size:
        return Validity(False, f"{path.name}: {size} bytes, header says {8 + n + end} (truncated?)")
    return Validity(True)


def _load_ok(path: Path) -> Validity:
    try:
        import torch
    except ImportError:
        return Validity(True)
    try:
        torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except Exception as exc:  # noqa: BLE001 - any failure to load makes the checkpoint unusable
        return Validity(False, f"{path.name}: torch.load failed ({type(exc).__name__}: {str(exc)[:120]})")
    return Validity(True)


def check_weights_file(path: Path, crc_max_bytes: int, verify_load: bool) -> Validity:
    """Non-empty; structurally complete for the formats that allow checking it cheaply."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        return Validity(False, f"{path.name}: {exc.strerror or exc}")
    if size == 0:
        return Validity(False, f"{path.name}: empty file")
    name = path.name.lower()
    if name.endswith(".safetensors"):
        return _safetensors_ok(path)
    if name.endswith((".pt", ".pth", ".ckpt", ".bin")) and _looks_like_zip(path):
        v = _zip_ok(path, crc_max_bytes)
        if not v.ok:
            return v
    elif name.endswith((".pt", ".pth", ".ckpt")) and _has_zip_magic(path):
        return Validity(False, f"{path.name}: torch archive without its central directory (truncated write)")
    elif name.endswith((".pt", ".pth", ".ckpt")) and not _is_pickle(path, size):
        return Validity(False, f"{path.name}: not a torch checkpoint ({size} bytes: neither a zip archive nor a "
                        "legacy torch or pickle file)")
    if verify_load and name.endswith((".pt", ".pth", ".ckpt")):
        return _load_ok(path)
    return Validity(True)


def _has_zip_magic(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"PK\x03\x04"
    except OSError:
        return False


def _is_pickle(path: Path, size: int) -> bool:
    """A legacy torch.save file, or a whole pickle (protocol 2-5 header, STOP opcode at the end)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(LEGACY_TORCH_MAGIC))
            if head == LEGACY_TORCH_MAGIC:
                return True
            fh.seek(size - 1)
            last = fh.read(1)
    except OSError:
        return False
    return size >= 4 and head[:1] == b"\x80" and 2 <= head[1] <= 5 and last == b"."


def _looks_like_zip(path: Path) -> bool:
    return _has_zip_magic(path) and zipfile.is_zipfile(path)


class CheckpointStore:
    """The checkpoints under one directory, validated (and cached) on demand. Thread-safe."""

    def __init__(self, root: str | Path, crc_max_bytes: int = 512 << 20, verify_load: bool = False,
                 markers: tuple[str, ...] = DIR_MARKERS) -> None:
        self.root = Path(root)
        self.markers = markers
        self.crc_max_bytes = crc_max_bytes
        self.verify_load = verify_load
        self._cache: dict[tuple[str, int, float], Validity] = {}
        self._lock = threading.Lock()

    def scan(self) -> list[Checkpoint]:
        """Candidates, oldest step first (ties: older mtime first)."""
        out: list[Checkpoint] = []
        try:
            entries = list(self.root.iterdir())
        except OSError:
            return []
        for p in entries:
            if _TEMP.search(p.name) or p.name.endswith(FILE_MARKER_SUFFIXES):
                continue
            step = _step_of(p.name)
            if step is None:
                continue
            try:
                st = p.stat()
            except OSError:
                continue
            is_dir = p.is_dir()
            if not is_dir and not p.name.lower().endswith(WEIGHT_SUFFIXES):
                continue
            out.append(Checkpoint(p, step, st.st_mtime, is_dir))
        return sorted(out, key=lambda c: (c.step, c.mtime))

    def check(self, ckpt: Checkpoint) -> Validity:
        key = self._key(ckpt)
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        result = self._check_dir(ckpt.path) if ckpt.is_dir else self._check_file(ckpt.path)
        with self._lock:
            self._cache[key] = result
        return result

    def select(self, below_step: int | None = None,
               exclude: Callable[[Checkpoint], str | None] | None = None) -> Selection:
        """The newest valid checkpoint (with step < `below_step` when given; `exclude` may veto
        a candidate with a reason, e.g. abandoned by a rollback)."""
        skipped: list[tuple[Checkpoint, str]] = []
        for ckpt in reversed(self.scan()):
            if below_step is not None and ckpt.step >= below_step:
                continue
            why = exclude(ckpt) if exclude else None
            if why:
                skipped.append((ckpt, why))
                continue
            v = self.check(ckpt)
            if v.ok:
                return Selection(ckpt, tuple(skipped))
            skipped.append((ckpt, v.reason))
        return Selection(None, tuple(skipped))

    @staticmethod
    def _key(ckpt: Checkpoint) -> tuple[str, int, float]:
        try:
            if ckpt.is_dir:
                stats = [f.stat() for f in ckpt.path.iterdir()]
                return (str(ckpt.path), sum(s.st_size for s in stats), max((s.st_mtime for s in stats), default=0))
            st = ckpt.path.stat()
            return (str(ckpt.path), st.st_size, st.st_mtime)
        except OSError:
            return (str(ckpt.path), -1, -1.0)

    def _check_file(self, path: Path) -> Validity:
        markers = [m for m in (path.with_name(path.name + s) for s in FILE_MARKER_SUFFIXES) if m.exists()]
        if not markers and self._dir_uses_file_markers():
            return Validity(False, "no completion marker (partial write?)")
        return check_weights_file(path, self.crc_max_bytes, self.verify_load)

    def _dir_uses_file_markers(self) -> bool:
        try:
            return any(p.name.endswith(FILE_MARKER_SUFFIXES) for p in self.root.iterdir())
        except OSError:
            return False

    def tracked(self) -> tuple[str, int] | None:
        """(tracker file, step) from DeepSpeed's `latest` or Megatron's `latest_checkpointed_iteration.txt`."""
        for name in TRACKERS:
            try:
                text = (self.root / name).read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError):
                continue
            step = int(text) if text.isdigit() else _step_of(text)
            if step is not None:
                return name, step
        return None

    def tracker_note(self) -> str | None:
        t = self.tracked()
        return f"{t[0]}: step {t[1]}" if t else None

    def _check_dir(self, path: Path) -> Validity:
        marker = next((path / m for m in self.markers if (path / m).is_file()), None)
        if marker is None:
            tracked = self.tracked()
            step = _step_of(path.name)
            if tracked is None:
                return Validity(False, f"no completion marker ({', '.join(self.markers)}) and no tracker "
                                f"({', '.join(TRACKERS)}): partial write?")
            if step is None or step > tracked[1]:
                return Validity(False, f"newer than {tracked[0]} (step {tracked[1]}): a save in progress?")
            return self._check_files(path)
        manifest = _manifest(marker)
        for name, size in manifest.items():
            f = path / name
            if not f.is_file():
                return Validity(False, f"{name}: listed in {marker.name} but missing")
            if f.stat().st_size != size:
                return Validity(False, f"{name}: {f.stat().st_size} bytes, {marker.name} says {size}")
        return self._check_files(path)

    def _check_files(self, path: Path) -> Validity:
        for f in sorted(path.rglob("*")):
            if f.is_file() and f.name.lower().endswith(WEIGHT_SUFFIXES):
                v = check_weights_file(f, self.crc_max_bytes, self.verify_load)
                if not v.ok:
                    return v
        return Validity(True)


def _manifest(marker: Path) -> dict[str, int]:
    """`{"files": {name: size}}` in a marker file, if it holds one."""
    if marker.name == ".metadata":
        return {}
    try:
        data = json.loads(marker.read_text(encoding="utf-8") or "{}")
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        return {}
    return {str(k): int(v) for k, v in files.items() if isinstance(v, int)}


class CheckpointWatcher:
    """Validates new checkpoints in a background thread while the job runs (so a restart finds the
    results cached); `poll()` on the caller's thread returns the ones newly found valid."""

    def __init__(self, store: CheckpointStore, since_mtime: float, known: set[str] | None = None,
                 exclude: Callable[[Checkpoint], str | None] | None = None) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.store = store
        self.since_mtime = since_mtime
        self.exclude = exclude
        self._known = set(known or ())
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-watch")
        self._future = None

    def _scan(self) -> list[Checkpoint]:
        found = []
        for ckpt in self.store.scan():
            if str(ckpt.path) in self._known or ckpt.mtime < self.since_mtime:
                continue
            if self.exclude is not None and self.exclude(ckpt):
                continue
            if self.store.check(ckpt).ok:
                found.append(ckpt)
        return found

    def poll(self) -> list[Checkpoint]:
        new: list[Checkpoint] = []
        if self._future is not None and self._future.done():
            try:
                new = [c for c in self._future.result() if str(c.path) not in self._known]
            except Exception:  # noqa: BLE001 - a failed scan is retried at the next poll
                new = []
            self._known.update(str(c.path) for c in new)
            self._future = None
        if self._future is None:
            self._future = self._pool.submit(self._scan)
        return new

    def final(self) -> list[Checkpoint]:
        """Wait for the scan in flight, then scan once more synchronously: everything still new."""
        new = []
        if self._future is not None:
            self._future.result()
            new = self.poll()
            self._future = None
        new += [c for c in self._scan() if str(c.path) not in self._known]
        self._known.update(str(c.path) for c in new)
        return new

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
