"""Collateral-only failures: desync, silent ranks, stalled progress, outlier py-spy stacks."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from diagnoser.cli import app
from diagnoser.collect.pyspy import main_stack
from diagnoser.collect.scanner import Progress
from diagnoser.models import LogRecord, Role, SignatureMatch
from diagnoser.prefilter.collateral import CollateralBudget
from diagnoser.prefilter.collectives import RankTail, desync, silent_ranks, stalled_progress
from diagnoser.prefilter.scan import SourceResult
from diagnoser.triage import analyse

T = datetime(2026, 3, 4, 5, 0, tzinfo=UTC)
TIMEOUT = ("[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, "
           "NumelIn={n}, NumelOut={n}, Timeout(ms)=600000) ran for 600023 milliseconds before timing out.")


def timeout(r, seq=100, op="ALLREDUCE", n=1024):
    rec = LogRecord(source=f"rank{r}.log", line=10, text=TIMEOUT.format(r=r, seq=seq, op=op, n=n), rank=r,
                    node=f"gpu-{r // 8 + 1:03d}")
    return SignatureMatch(runbook_id="nccl-collective-timeout", record=rec, role=Role.COLLATERAL, priority=15)


def tail(r, step, t):
    return RankTail(r, f"gpu-{r // 8 + 1:03d}", f"rank{r}.log",
                    Progress(line=5, step=step, time=t, text=f"step {step}"), t)


def test_ranks_in_different_collectives_at_one_sequence_number_are_desynchronised():
    ms = [timeout(r) for r in range(7)] + [timeout(7, op="BROADCAST", n=8)]
    f = desync(ms)
    assert (f.category.value, f.subtype, f.ranks) == ("user_code", "collective_desync", [7])


def test_the_rank_that_did_not_time_out_is_the_one_everyone_waited_for():
    ms = [timeout(r) for r in range(16) if r != 11]
    tails = {r: tail(r, 500, T) for r in range(16)}
    f = silent_ranks(ms, tails, nranks=16)
    assert f.subtype == "hang" and f.ranks == [11] and f.nodes == ["gpu-002"]


def _budgeted(matches, keep):
    """The matches as the scan leaves them past its budget: `keep` whole per collective, the rest as facts."""
    results = [SourceResult(m.record.source, "log", m.record.node, matches=(m,), rank=m.record.rank) for m in matches]
    budget = CollateralBudget(keep)
    for r in reversed(results):  # arrival order does not matter
        budget.absorb(r)
    return [x for r in results for x in (*r.matches, *r.hits)]


def test_a_desync_among_thousands_of_timeouts_is_found_and_cited_from_facts():
    ms = [timeout(r) for r in range(4096) if r != 2049] + [timeout(2049, op="BROADCAST", n=8)]
    mixed = _budgeted(ms, keep=2)
    assert sum(isinstance(x, SignatureMatch) for x in mixed) == 3  # 2 of the big group, the odd one
    full, compact = desync(ms), desync(mixed)
    assert (compact.ranks, compact.nodes) == (full.ranks, full.nodes) == ([2049], ["gpu-257"])
    assert "OpType=BROADCAST" in compact.evidence[0].text and "OpType=ALLREDUCE" in compact.evidence[-1].text


def test_silent_ranks_are_found_when_most_timeouts_are_facts():
    ms = [timeout(r) for r in range(1024) if r != 700]
    tails = {r: tail(r, 500, T) for r in range(1024)}
    f = silent_ranks(_budgeted(ms, keep=4), tails, nranks=1024)
    assert f.ranks == [700] and f.nodes == ["gpu-088"] and "Watchdog" in f.evidence[-1].text


def test_many_silent_ranks_are_not_one_culprit():
    ms = [timeout(r) for r in range(8)]
    assert silent_ranks(ms, {}, nranks=16) is None


def test_stalled_progress_names_the_rank_that_stopped_first():
    tails = {r: tail(r, 900, T + timedelta(seconds=300)) for r in range(16)}
    tails[3] = tail(3, 640, T)
    f = stalled_progress(tails)
    assert f.ranks == [3] and "640" in f.root_cause


DUMP = """Process {pid}: /usr/bin/python3 train.py --config big.yaml
Python v3.11.7 (/usr/bin/python3.11)

Thread {pid} (active): "MainThread"
    {top} ({file}:{line})
    train_step (train.py:120)
    main (train.py:200)
    <module> (train.py:210)
Thread 99 (idle): "Thread-1 (_pin_memory_loop)"
    wait (threading.py:320)
"""


# Recorded `py-spy dump --pid P` output of the supported versions (thread headers differ: 0.3.x prints
# the thread id in hex; 0.4.x prints it in decimal and, run as root on some kernels, no thread name).
PY_SPY_DUMPS = {
    "0.3.14": """Process 4242: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 0x7F3A2B4C5740 (active): "MainThread"
    stuck_in_io (hang_sample.py:6)
    train_step (hang_sample.py:8)
    <module> (hang_sample.py:9)
Thread 0x7F3A1E7FC640 (idle): "Thread-1 (_pin_memory_loop)"
    worker (hang_sample.py:3)
""",
    "0.4.3 named": """Process 30954: /root/.pyenv/versions/3.11.7/bin/python3 /tmp/hang_sample.py
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 30954 (idle): "MainThread"
    stuck_in_io (hang_sample.py:6)
    train_step (hang_sample.py:8)
    <module> (hang_sample.py:9)
Thread 30996 (idle): "Thread-1 (_pin_memory_loop)"
    worker (hang_sample.py:3)
    Thread.run (threading.py:982)
    Thread._bootstrap_inner (threading.py:1045)
    Thread._bootstrap (threading.py:1002)
""",
    "0.4.3 unnamed": """Process 11340: /usr/bin/python3 /tmp/hang_sample.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 11340 (idle)
    stuck_in_io (hang_sample.py:6)
    train_step (hang_sample.py:8)
    <module> (hang_sample.py:9)
Thread 11341 (idle)
    worker (hang_sample.py:3)
    Thread.run (threading.py:982)
""",
}


@pytest.mark.parametrize("version", PY_SPY_DUMPS)
def test_every_py_spy_format_gives_the_main_threads_stack(version):
    s = main_stack(PY_SPY_DUMPS[version])
    assert s is not None and s.first_line == 4, version
    assert s.frames == ("stuck_in_io (hang_sample.py)", "train_step (hang_sample.py)", "<module> (hang_sample.py)")


def test_py_spy_dump_parsing():
    s = main_stack(DUMP.format(pid=7, top="all_reduce", file="torch/distributed/distributed_c10d.py", line=2050))
    assert s.frames[0] == "all_reduce (distributed_c10d.py)" and s.first_line == 4 and len(s.frames) == 4


def test_hang_with_py_spy_dumps_names_the_outlier_group(tmp_path):
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    for r in range(8):
        top, file = ("all_reduce", "torch/distributed/distributed_c10d.py")
        if r == 6:
            top, file = ("__next__", "torch/utils/data/dataloader.py")
        (stacks / f"py-spy-rank{r}.txt").write_text(DUMP.format(pid=100 + r, top=top, file=file, line=7))
    result = CliRunner().invoke(app, ["triage", str(tmp_path), "--json"])
    d = json.loads(result.stdout)
    assert (d["subtype"], d["culprit"]["ranks"]) == ("hang", [6]), d
    assert "__next__" in d["root_cause"]
    assert d["evidence"][0]["source"] == "stacks/py-spy-rank6.txt" and d["evidence"][0]["line"] == 5


def test_a_hung_rank_is_cited_by_its_own_last_progress_line(tmp_path):
    """16 rank logs without an error; rank 3 stopped at step 640. Its progress line is one of the
    file's last lines, kept once (in the packed tail): the evidence still quotes it verbatim."""
    for r in range(16):
        last = 640 if r == 3 else 900
        lines = [f"[rank{r}]:[2026-03-04 05:{s // 60:02d}:{s % 60:02d},000] [INFO] [train.py:412] step {s} | "
                 f"loss {2 + 1 / (s + 1):.4f} | lr 3.0000e-04" for s in range(last - 20, last + 1)]
        node = tmp_path / f"gpu-{r // 8 + 1:03d}"
        node.mkdir(exist_ok=True)
        (node / f"rank{r}.log").write_text("\n".join(lines) + "\n")
    analysis = analyse([str(tmp_path)], workers=1)
    d = analysis.diagnosis
    assert d.subtype == "hang" and d.culprit.ranks == [3]
    stuck = next(s for s in analysis.scan.sources if s.source == "gpu-001/rank3.log")
    assert stuck.progress_in_tail and stuck.last_progress.text == ""  # held once, in the tail
    quoted = {e.text for e in d.evidence if e.source == "gpu-001/rank3.log"}
    assert any(t.endswith("step 640 | loss 2.0016 | lr 3.0000e-04") for t in quoted), quoted


def test_timeouts_in_the_first_collective_only_point_at_the_communication_path():
    from diagnoser.prefilter.collectives import analyse as analyse_collateral

    f = analyse_collateral([timeout(r, seq=1, op="BROADCAST") for r in range(8)], {}, nranks=8)
    assert (f.category.value, f.action.value, f.subtype) == ("infra", "escalate", "first_collective_never_completed")
    assert "SeqNum 1" in f.root_cause and "preprocessing" in f.root_cause  # says what else it could be


FIRST_TIMEOUT = ("[rank1]:[E1120 10:11:12.123456 1234 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective "
                 "operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
                 "ran for 600041 milliseconds before timing out.")


def triaged_rank_log(tmp_path, *lines):
    (tmp_path / "rank1.log").write_text("\n".join(lines) + "\n")
    return analyse([str(tmp_path)], workers=1).diagnosis


def test_a_restated_timeout_that_names_no_collective_does_not_hide_the_first_one(tmp_path):
    """PyTorch 2.x restates the watchdog's timeout as the C++ exception it throws; a restatement without the
    `WorkNCCL(SeqNum=...)` part neither decides nor vetoes: the lines that name the collective say SeqNum 1."""
    d = triaged_rank_log(tmp_path, FIRST_TIMEOUT, "c10::DistBackendError: [Rank 1] Watchdog caught collective "
                         "operation timeout", "process 1 terminated with signal SIGABRT")
    assert (d.category.value, d.subtype) == ("infra", "first_collective_never_completed"), d.subtype
    d = triaged_rank_log(tmp_path, *["[Rank 1] Watchdog caught collective operation timeout"] * 2)
    assert d.subtype == "collective_timeout_busy_rank", d.subtype  # nothing names the collective: no SeqNum 1 claim


def test_the_watchdogs_cpp_exception_is_the_timeouts_collateral_not_the_jobs_exception(tmp_path):
    """`c10::DistBackendError: ...` is the class torch.distributed.DistBackendError is bound to: a backend
    failure whose message decides, never a generic Python exception of the job's."""
    d = triaged_rank_log(tmp_path, FIRST_TIMEOUT, "c10::DistBackendError: watchdog thread terminated with exception",
                         "process 1 terminated with signal SIGABRT")
    assert (d.category.value, d.subtype) == ("infra", "first_collective_never_completed"), d.subtype


def test_timeouts_later_in_training_still_point_at_a_busy_rank():
    from diagnoser.prefilter.collectives import analyse as analyse_collateral

    f = analyse_collateral([timeout(r, seq=1 if r else 2) for r in range(8)], {}, nranks=8)
    assert (f.category.value, f.subtype) == ("user_code", "collective_timeout_busy_rank")
    f = analyse_collateral([timeout(r, seq=4213) for r in range(8)], {}, nranks=8)
    assert (f.category.value, f.subtype) == ("user_code", "collective_timeout_busy_rank")
