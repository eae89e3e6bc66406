"""Many small files: batched worker processes give the per-file answer, and bad files stay local."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from diagnoser.classify.scope import all_records, scope_of
from diagnoser.collect.files import list_sources
from diagnoser.prefilter.collateral import KEEP
from diagnoser.prefilter.scan import BATCH_FILES, PARALLEL_MIN_FILES, plan_batches, scan_sources
from diagnoser.triage import analyse

FILES = 7_200
CULPRIT = 7_000


def _job(root: Path, files: int = FILES) -> Path:
    """`files` rank logs of a few lines on 8-rank nodes; rank CULPRIT raises, every other rank times out."""
    for rank in range(files):
        node = root / f"gpu-{rank // 8 + 1:04d}"
        node.mkdir(parents=True, exist_ok=True)
        lines = [f"[rank{rank}]:[2026-03-04 05:00:0{s},000] [INFO] step {s} | loss 2.{s}" for s in range(5)]
        if rank == CULPRIT:
            lines += [f"[rank{rank}]:Traceback (most recent call last):",
                      f'[rank{rank}]:  File "/workspace/train.py", line 88, in <module>',
                      f"[rank{rank}]:    batch = next(loader)",
                      f"[rank{rank}]:[2026-03-04 05:00:06,000] torch.OutOfMemoryError: CUDA out of memory. "
                      "Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.21 GiB is free."]
        else:
            lines.append(f"[rank{rank}]:[2026-03-04 05:30:0{rank % 10},000] [E ProcessGroupNCCL.cpp:632] [Rank {rank}] "
                         "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4097, OpType=ALLREDUCE, "
                         "NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800321 milliseconds before timing out.")
        (node / f"rank{rank}.log").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _job(tmp_path_factory.mktemp("many") / "job")


@pytest.fixture(scope="module")
def pooled(job: Path):
    return analyse([str(job)], workers=2)


def _per_source(analysis) -> list[tuple]:
    return [(s.source, s.bytes, s.lines, s.first_time, s.last_time, s.last_progress, s.counts, s.rank, s.warning,
             [m.model_dump() for m in s.matches], [(e.record.model_dump(), e.patterns) for e in s.weak],
             [r.model_dump() for r in s.tail], s.tail_ranks) for s in analysis.scan.sources]


def test_batched_workers_give_the_per_file_answer_on_a_job_of_many_files(job: Path, pooled) -> None:
    assert FILES >= PARALLEL_MIN_FILES  # the pool really runs
    one = analyse([str(job)], workers=1)
    d = pooled.diagnosis
    assert d.category.value == "user_code"
    assert d.first_failure is not None and d.first_failure.source == f"gpu-{CULPRIT // 8 + 1:04d}/rank{CULPRIT}.log"
    assert d.model_dump(exclude={"stats"}) == one.diagnosis.model_dump(exclude={"stats"})
    assert d.stats.files == FILES and d.stats.lines == one.diagnosis.stats.lines
    assert _per_source(pooled) == _per_source(one)


def test_the_policy_sees_every_rank_of_the_tails_without_unpacking_them(pooled) -> None:
    analysis = pooled
    records = all_records(analysis).values()
    scope = scope_of(analysis)
    assert scope.ranks == {r.rank for r in records if r.rank is not None} | set(scope.rank_nodes) | {
        s.rank for s in analysis.scan.sources if s.rank is not None}
    assert {r.rank: r.node for r in records if r.rank is not None and r.node}.items() <= scope.rank_nodes.items()
    assert len(scope.ranks) == FILES


def test_a_file_that_vanishes_or_turns_unreadable_mid_batch_is_named_and_the_others_are_kept(tmp_path: Path) -> None:
    root = _job(tmp_path / "job", files=PARALLEL_MIN_FILES + 8)
    sources, _ = list_sources([str(root)])
    gone, unreadable = sources[3], sources[5]  # both in the first batch of small files
    os.unlink(gone.path)
    os.unlink(unreadable.path)
    os.mkdir(unreadable.path)  # opening it now fails with EISDIR
    scan = scan_sources(sources, workers=2)
    assert {(w.source, w.message) for w in scan.warnings} == {
        (gone.name, "No such file or directory"), (unreadable.name, "Is a directory")}
    assert [s.source for s in scan.sources] == [s.name for s in sources]
    ok = [s for s in scan.sources if s.warning is None]
    assert len(ok) == len(sources) - 2 and all(s.bytes > 0 and s.lines == 6 for s in ok)
    # every rank's watchdog line (or the OOM) was matched: kept whole or, past the budget, as facts
    assert sum(len(s.matches) + len(s.hits) for s in ok) >= len(ok)


def test_the_earliest_collateral_lines_are_kept_whole_and_every_other_one_as_facts(pooled) -> None:
    scan = pooled.scan
    timeouts = [m for m in scan.matches if m.runbook_id == "nccl-collective-timeout"]
    hits = [h for h in scan.hits if h.runbook_id == "nccl-collective-timeout"]
    assert len(timeouts) == KEEP and len(timeouts) + len(hits) == FILES - 1  # every rank but the culprit
    # the earliest by time (then file name), whatever order the workers' batches arrived in
    every = sorted((rank % 10, f"gpu-{rank // 8 + 1:04d}/rank{rank}.log") for rank in range(FILES) if rank != CULPRIT)
    assert sorted((m.record.time.second, m.record.source) for m in timeouts) == every[:KEEP]
    assert {h.reporting_rank for h in hits} | {m.record.rank for m in timeouts} == set(range(FILES)) - {CULPRIT}
    assert all(h.work == (4097, "ALLREDUCE", "1") for h in hits)
    # counted in full: the verdict's collateral count is every line, not the kept ones
    assert pooled.diagnosis.collateral["nccl-collective-timeout"] == FILES - 1


def test_batches_hold_every_file_once_big_files_first_and_alone() -> None:
    sizes = [10_000] * 5_000 + [200 << 20, 50 << 20]
    batches = plan_batches(sizes, workers=2)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(sizes)))
    assert batches[0] == [5_000] and batches[1] == [5_001]
    assert all(len(b) <= BATCH_FILES for b in batches)
    assert len(batches) >= 2 * 4  # enough batches that neither worker idles at the end


def test_records_from_workers_can_be_copied_with_changes_without_touching_the_others(pooled) -> None:
    """Workers share identical pydantic field sets between records (memory): a copy with an update
    (as the year re-anchoring makes) must change only the copy."""
    matches = [m for s in pooled.scan.sources for m in s.matches][:2]
    a, b = (m.record for m in matches)
    before = set(b.model_fields_set)
    moved = a.model_copy(update={"time": None, "time_inferred": True})
    assert moved.time is None and a.time is not None
    assert set(b.model_fields_set) == before and b.time is not None


def test_workers_forked_before_the_listing_scan_the_job_and_exit_with_the_scan(job: Path, pooled) -> None:
    from diagnoser.prefilter import scan as scan_module

    with scan_module.preforked(2):
        pool = scan_module._preforked[1]
        forked = set(pool._processes)  # forked now, while this process holds no file list
        assert len(forked) == 2
        early = analyse([str(job)], workers=2)
        assert scan_module._preforked is None  # the scan took them ...
        assert not alive(forked)  # ... and they exited with it
    assert early.diagnosis.model_dump(exclude={"stats"}) == pooled.diagnosis.model_dump(exclude={"stats"})


def alive(pids: set[int]) -> list[int]:
    import psutil

    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def test_unused_preforked_workers_exit_and_small_inputs_are_not_forked_for(tmp_path: Path) -> None:
    from diagnoser.collect.files import holds_many_files
    from diagnoser.prefilter import scan as scan_module

    small = _job(tmp_path / "small", files=40)
    assert not holds_many_files([str(small)], PARALLEL_MIN_FILES)
    assert holds_many_files([str(small)], 40)
    with scan_module.preforked(2):
        pool = scan_module._preforked[1]
        forked = set(pool._processes)
        one = analyse([str(small)], workers=2)  # too small for workers: scanned here
        assert scan_module._preforked is not None
    assert scan_module._preforked is None and not alive(forked)
    assert one.diagnosis.category.value == "user_code"
