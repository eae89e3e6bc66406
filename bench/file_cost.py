"""What one file costs before any byte is scanned: listing, stat, open+close, and a small read, warm
and with the file's data dropped from the page cache (POSIX_FADV_DONTNEED).

The basis for planning triage on a shared filesystem: on Lustre or GPFS each of these is a round trip
to a metadata or object server instead of a page-cache hit. Dentries and inodes stay cached here
(dropping them needs `echo 2 > /proc/sys/vm/drop_caches`, which would disturb everything else on the
machine), so "cold" is cold data only.

    python bench/file_cost.py TREE [--sample 5000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path


def per_file_us(paths: list[str], action) -> float:  # noqa: ANN001 - a callable on one path
    started = time.perf_counter()
    for p in paths:
        action(p)
    return round((time.perf_counter() - started) / len(paths) * 1e6, 1)


def open_close(path: str) -> None:
    os.close(os.open(path, os.O_RDONLY))


def open_read_close(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.read(fd, 16 << 10)
    finally:
        os.close(fd)


def drop_data(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def list_tree(root: str) -> list[str]:
    out, stack = [], [root]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for e in entries:
                (stack.append(e.path) if e.is_dir() else out.append(e.path))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tree", type=Path)
    ap.add_argument("--sample", type=int, default=5000)
    args = ap.parse_args()
    started = time.perf_counter()
    files = list_tree(str(args.tree))
    listing = (time.perf_counter() - started) / len(files) * 1e6
    sample = random.Random(1).sample(files, min(args.sample, len(files)))
    for p in sample:  # warm everything first
        open_read_close(p)
    result = {"files": len(files), "list_us_per_file": round(listing, 1),
              "stat_us": per_file_us(sample, os.stat), "open_close_us": per_file_us(sample, open_close),
              "open_read_close_warm_us": per_file_us(sample, open_read_close)}
    for p in sample:
        drop_data(p)
    result["open_read_close_cold_data_us"] = per_file_us(sample, open_read_close)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
