"""The runbook library: every file valid, every example line proven, Hyperscan-compatible."""

import re
from collections import Counter

import pytest

from diagnoser.models import Category, Role
from diagnoser.prefilter.engine import HyperscanMatcher, hyperscan
from diagnoser.prefilter.runbooks import RunbookError, load_runbooks, parse_runbook

ALL_RULES = load_runbooks()  # runbooks, then the vendor catalogs' rules (tests/test_catalog.py)
BOOKS = [b for b in ALL_RULES if b.catalog is None]
ORDINARY_LINES = [
    "[rank0]: step 1200 | loss 2.314 | lr 3.0e-4 | 412 TFLOPS",
    "gpu-017:1234:1234 [0] NCCL INFO comm 0x55 rank 5 nranks 16 cudaDev 0 nvmlDev 0 busId 3b000 commId 0x1 - "
    "Init COMPLETE",
    "  0%|          | 0/387 [00:00<?, ?it/s]",
    "[2025-03-04 05:06:07,123] torch.distributed.run: [WARNING] Setting OMP_NUM_THREADS environment variable "
    "for each process to be 1",
    "Epoch 3: 45%|████▌     | 450/1000 [02:13<02:43, 3.37it/s, loss=0.321, v_num=12]",
]


def matching(line: str) -> list:
    return [b for b in ALL_RULES if any(r.search(line) for r in b.compiled)]


def test_library_covers_the_taxonomy():
    assert len(BOOKS) >= 30
    cats = Counter(b.category for b in BOOKS if b.role == Role.ROOT)
    assert cats[Category.HARDWARE] >= 8 and cats[Category.INFRA] >= 8 and cats[Category.USER_CODE] >= 8
    assert any(b.role == Role.COLLATERAL for b in BOOKS)


@pytest.mark.parametrize("book", BOOKS, ids=lambda b: b.id)
def test_examples_match_and_this_runbook_wins(book):
    assert book.examples.match, f"{book.id} has no examples"
    for line in book.examples.match:
        hits = matching(line)
        assert book in hits, f"{book.id} does not match its own example: {line}"
        rivals = [h for h in hits if h is not book and h.priority >= book.priority]
        # a catalog entry of the same class may tie or outrank the runbook: the verdict is the same
        assert all((h.category, h.action) == (book.category, book.action) and h.catalog for h in rivals), (
            f"{line!r} is won by {[h.id for h in rivals]}")
    for line in book.examples.no_match:
        assert not any(r.search(line) for r in book.compiled), f"{book.id} matches its no_match line: {line}"


@pytest.mark.parametrize("book", BOOKS, ids=lambda b: b.id)
def test_runbook_text_has_the_on_call_sections(book):
    for heading in ("What it means", "What to check", "How to fix"):
        assert book.section(heading), f"{book.id} lacks '## {heading}'"


def test_ordinary_training_output_matches_nothing():
    for line in ORDINARY_LINES:
        assert not matching(line), line


@pytest.mark.skipif(hyperscan is None, reason="Hyperscan not installed")
def test_every_signature_compiles_in_hyperscan():
    HyperscanMatcher([s for b in ALL_RULES for s in b.signatures])


def test_ids_match_file_names_and_subtypes_are_snake_case():
    for b in BOOKS:
        assert b.path == f"runbooks/{b.id}.md"
        assert re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)*", b.subtype)


def test_bad_runbook_gives_a_clear_error(tmp_path):
    bad = tmp_path / "bad.md"
    bad.write_text("---\nid: bad\ntitle: t\ncategory: hardware\nsubtype: s\naction: reboot\npriority: 5\n"
                   "confidence: 0.5\nsignatures: ['x(']\n---\n")
    with pytest.raises(RunbookError, match="bad.md"):
        parse_runbook(bad)
    (tmp_path / "none.md").write_text("no front matter")
    with pytest.raises(RunbookError, match="front matter"):
        parse_runbook(tmp_path / "none.md")


NOISE = [
    # no timestamps: the examples carry dates of their own, which must not fall outside a job span
    "[rank0]:[INFO] [train.py:412] step {i} | loss 2.31{i} | lr 3.0e-04 | 402 TFLOPS",
    "[rank0]:gpu-007:4242:4242 [0] NCCL INFO Channel 0{i}/0 : 0 -> 1 via P2P/CUMEM/read",
    "[rank0]:/opt/conda/lib/python3.11/site-packages/torch/utils/checkpoint.py:91: UserWarning: None of the "
    "inputs have requires_grad=True. Gradients will be None",
]


def _kernel_line(line: str) -> bool:
    return bool(re.match(r"^(\[\s*\d+\.\d+\]|\[(Mon|Tue|Wed|Thu|Fri|Sat|Sun) |[A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d )",
                         line))


@pytest.mark.parametrize("book", [b for b in BOOKS if b.role == Role.ROOT], ids=lambda b: b.id)
def test_each_root_runbook_decides_a_job_where_it_is_the_only_failure(book, tmp_path):
    """End to end per class: the example line inside ordinary noise, in the file a cluster would put it."""
    from diagnoser.triage import triage

    example = book.examples.match[0]
    noise = [n.format(i=i) for i in range(6) for n in NOISE]
    if _kernel_line(example):
        (tmp_path / "gpu-007").mkdir()
        (tmp_path / "gpu-007" / "rank0.log").write_text("\n".join(noise) + "\n")
        (tmp_path / "dmesg").mkdir()
        (tmp_path / "dmesg" / "gpu-007.log").write_text(example + "\n")
    else:
        (tmp_path / "gpu-007").mkdir()
        (tmp_path / "gpu-007" / "rank0.log").write_text("\n".join(noise + [example]) + "\n")
    d = triage([str(tmp_path)], workers=1)
    assert d.subtype == book.subtype, (book.id, d.root_cause)
    # a rule with a `localised_action` takes it when the evidence names the node (here the file's gpu-007)
    expected = book.localised_action if book.localised_action and d.culprit.nodes else book.action
    assert (d.category, d.action) == (book.category, expected)
    assert d.runbook == book.path


def test_shared_memory_exhaustion_names_no_node(tmp_path):
    """/dev/shm is sized per container: a too-small shm is the job's container set-up, not the node's fault.
    NCCL's posix_fallocate failure (it sizes its /dev/shm segments with it) is that class, not a full disk."""
    from diagnoser.triage import triage

    (tmp_path / "gpu-044").mkdir()
    (tmp_path / "gpu-044" / "rank6.log").write_text(
        "step 10 loss 2.1\n"
        "gpu-044:81231:81231 [6] NCCL WARN Call to posix_fallocate failed : No space left on device\n"
        "[rank6]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), "
        "NCCL version 2.20.5\n")
    d = triage([str(tmp_path)], workers=1)
    assert (d.category.value, d.subtype, d.action.value) == ("infra", "shm_exhausted", "escalate")
    assert d.culprit.nodes == [] and "gpu-044" in d.root_cause  # where it happened is still said


def test_a_docker_container_hostname_is_not_a_culprit_node(tmp_path):
    """A container's default hostname is its id, a PC's is Windows' DESKTOP-XXXXXXX: nothing a scheduler can
    drain or exclude."""
    from diagnoser.triage import triage

    (tmp_path / "stderr.log").write_text(
        "bd73ab638b22:412:412 [0] NCCL INFO cudaDriverVersion 12040\n"
        "bd73ab638b22:412:430 [0] init.cc:1626 NCCL WARN Cuda failure 999 'unknown error'\n"
        "[rank0]: RuntimeError: CUDA error: unknown error\n")
    d = triage([str(tmp_path)], workers=1)
    assert d.category.value in ("hardware", "infra")
    assert d.culprit.nodes == []
    # a UUID hostname (a platform's container) is no machine either; the verdict still says where it ran
    (tmp_path / "stderr.log").write_text(
        "72bf7b08-26f3-4ebc-8b9d-85df3e4414c0:76786:76786 [0] NCCL INFO cudaDriverVersion 12040\n"
        "72bf7b08-26f3-4ebc-8b9d-85df3e4414c0:76786:77145 [3] init.cc:1626 NCCL WARN Cuda failure 999 "
        "'unknown error'\n")
    d = triage([str(tmp_path)], workers=1)
    assert d.culprit.nodes == [] and "72bf7b08" in d.root_cause
    # nor is a Windows PC's default name, which WSL passes on to NCCL's prefix
    (tmp_path / "stderr.log").write_text(
        "DESKTOP-VMBL43V:1201:1201 [0] NCCL INFO cudaDriverVersion 12040\n"
        "DESKTOP-VMBL43V:1201:1230 [0] init.cc:1626 NCCL WARN Cuda failure 999 'unknown error'\n")
    d = triage([str(tmp_path)], workers=1)
    assert d.culprit.nodes == [] and "DESKTOP-VMBL43V" in d.root_cause


def test_a_bus_error_names_no_node(tmp_path):
    """SIGBUS in a training job is a too-small /dev/shm or a truncated mmap'd file (the job's container and
    data); a bad DIMM shows as EDAC/MCE lines. torchrun's summary names the container's hostname: not a culprit."""
    from diagnoser.triage import triage

    (tmp_path / "stderr.log").write_text(
        "Epoch 3/10 step 900 loss 1.92\n"
        "[32a68c302449:2121 :0:7025] Caught signal 7 (Bus error: nonexistent physical address)\n"
        "==== backtrace (tid:   7025) ====\n"
        " 0 0x0000000000043090 killpg()  ???:0\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "train.py FAILED\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2025-04-14_06:35:35\n"
        "  host      : 32a68c302449\n"
        "  rank      : 0 (local_rank: 0)\n"
        "  exitcode  : -7 (pid: 3111)\n"
        "  error_file: <N/A>\n"
        "  traceback : Signal 7 (SIGBUS) received by PID 3111\n")
    d = triage([str(tmp_path)], workers=1)
    assert (d.category.value, d.subtype) == ("infra", "sigbus")
    assert d.culprit.nodes == []


def test_a_ray_driver_that_shows_only_the_wrapped_exception_class_is_the_jobs_error(tmp_path):
    """Ray re-raises a task's exception in the driver as `RayTaskError(<cause class>)` (ray/exceptions.py); when the
    driver log holds only that head line, the cause class in brackets is still an exception line of the job."""
    from diagnoser.triage import triage

    (tmp_path / "driver.log").write_text(
        "2026-03-04 05:06:07,123\tINFO worker.py:1642 -- Connected to Ray cluster.\n"
        "ray.exceptions.RayTaskError(KeyError): ray::preprocess_shard() (pid=4412, ip=10.0.3.17)\n")
    d = triage([str(tmp_path)], workers=1)
    assert (d.category.value, d.subtype) == ("user_code", "python_exception"), d.root_cause
    # a bracket that is no class name stays what it was
    (tmp_path / "driver.log").write_text("step 12 ValueError(s) counted: 3 (see report)\n")
    assert triage([str(tmp_path)], workers=1).subtype != "python_exception"
