"""The vendor failure catalogs (diagnoser/data/catalog/*.yaml): every table names its source, every
entry proves itself on a realistic line, and the catalog adds verdicts without overruling runbooks."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from diagnoser.models import Action, Category
from diagnoser.prefilter.catalog import CATALOG_DIR, load_catalog_rules, parse_catalog
from diagnoser.prefilter.runbooks import RunbookError, load_runbooks

RULES = load_runbooks()
CATALOG = [r for r in RULES if r.catalog and not r.given_by]
JOB_WIDE = [r for r in RULES if r.catalog and r.given_by]  # verdicts of a comparison across lines, not of one line
FILES = sorted(CATALOG_DIR.glob("*.yaml"))


def winner(line: str):
    hits = [r for r in RULES if any(p.search(line) for p in r.compiled)]
    return max(hits, key=lambda r: r.priority) if hits else None


def test_the_catalogs_cover_the_published_vocabularies():
    assert len(CATALOG) >= 300
    by_file = Counter(r.catalog for r in CATALOG)
    for name in ("nvidia-xid.yaml", "cuda-errors.yaml", "nccl.yaml", "linux-errno-signals.yaml", "schedulers.yaml"):
        assert by_file[f"catalog/{name}"] >= 10, by_file
    cats = Counter(r.category for r in CATALOG)
    assert cats[Category.HARDWARE] >= 40 and cats[Category.INFRA] >= 40 and cats[Category.USER_CODE] >= 40


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_table_names_its_source(path: Path):
    catalog = parse_catalog(path)
    assert "http" in catalog.source or any("http" in (e.source or "") for e in catalog.entries), catalog.source


@pytest.mark.parametrize("rule", CATALOG, ids=lambda r: r.id)
def test_each_entry_matches_its_examples_and_its_class_decides(rule):
    assert rule.examples.match, f"{rule.id} has no example line"
    for line in rule.examples.match:
        assert any(p.search(line) for p in rule.compiled), f"{rule.id} does not match its example {line!r}"
        top = winner(line)
        assert (top.category, top.action) == (rule.category, rule.action), (
            f"{line!r}: {rule.id} says {rule.category}/{rule.action}, {top.id} wins with {top.category}/{top.action}")
    for line in rule.examples.no_match:
        assert not any(p.search(line) for p in rule.compiled), f"{rule.id} matches its no_match line {line!r}"


@pytest.mark.parametrize("rule", JOB_WIDE, ids=lambda r: r.id)
def test_each_job_wide_entry_decides_its_example_excerpts_and_not_its_counter_examples(rule, tmp_path: Path):
    """An entry given by a job-wide analysis has no patterns: its examples are whole excerpts, triaged as a job."""
    from diagnoser.triage import triage

    assert rule.examples.match and not rule.signatures, rule.id
    for n, excerpt in enumerate([*rule.examples.match, *rule.examples.no_match]):
        job = tmp_path / f"job{n}"
        job.mkdir()
        (job / "job.log").write_text(excerpt + "\n")
        verdict = triage([str(job)])
        if n < len(rule.examples.match):
            assert (verdict.rule, verdict.category, verdict.action) == (rule.id, rule.category, rule.action), excerpt
        else:
            assert verdict.rule != rule.id, excerpt


# What launchers, container runtimes, storage clients and cloud agents print while everything works: none of it
# may look like a failure (the launcher/container/storage/cloud tables match on their error wording only).
HEALTHY_INFRA_LINES = [
    "[2025-03-04 05:06:07,412] [INFO] [runner.py:568:main] cmd = pdsh -S -f 1024 -w worker-0,worker-1 export "
    "NCCL_DEBUG=INFO; cd /job; /usr/bin/python -u -m deepspeed.launcher.launch",
    "Unable to find hostfile, will proceed with training with local resources only.",
    "Warning: Permanently added 'gpu-n-017,10.1.4.17' (ED25519) to the list of known hosts.",
    '[gpu-n-001:01234] [[41245,0],0] plm:rsh: using "/usr/bin/ssh -x" for launching',
    "[proxy:0:0@gpu-n-001] got pmi command (from 4): init",
    "pdsh@worker-0: worker-3: ssh exited with exit code 0",
    "Lustre: scratch-OST0012-osc-ffff9d4c1a2b7000: Connection restored to 10.10.0.12@o2ib (at 10.10.0.12@o2ib)",
    "[ 8850.101233] nfs: server fs-home-01 OK",
    "INFO:    Could not find any nv files on this host!",
    "pyxis: imported docker image: nvcr.io#nvidia/pytorch:24.05-py3",
    "[INFO] Querying registry for permission grant",
    "Status: Downloaded newer image for nvcr.io/nvidia/pytorch:24.05-py3",
    "huggingface_hub: Fetching 12 files: 100%|##########| 12/12 [00:03<00:00,  3.52it/s]",
    "Requirement already satisfied: torch==2.4.0 in /usr/local/lib/python3.11/site-packages (2.4.0)",
    "  scheduling: {automaticRestart: false, onHostMaintenance: TERMINATE, preemptible: true}",
    '{"DocumentIncarnation": 2, "Events": []}',
]


@pytest.mark.parametrize("line", HEALTHY_INFRA_LINES)
def test_healthy_launcher_container_storage_and_cloud_output_matches_nothing(line: str):
    assert winner(line) is None, f"{winner(line).id} fires on a healthy line"


def test_a_runbook_overrides_a_catalog_entry_by_id(tmp_path: Path):
    books = load_runbooks(catalogs=False)
    some = CATALOG[0]
    clash = books[0].model_copy(update={"id": some.id})
    ids = [r.id for r in load_catalog_rules([clash, *books])]
    assert some.id not in ids and len(ids) == len(CATALOG) + len(JOB_WIDE) - 1


def test_a_broken_catalog_names_the_file(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: x\ntitle: t\nsource: 'somewhere, 2025'\nkind: keyed\ntemplate: 'no key here'\n"
                   "entries: [{key: 1, title: one}]\n")
    with pytest.raises(RunbookError, match="bad.yaml"):
        parse_catalog(bad)
    bad.write_text("- just\n- a list\n")
    with pytest.raises(RunbookError, match="mapping"):
        parse_catalog(bad)
    bad.write_text("id: x\ntitle: t\nsource: 'somewhere, 2025'\nkind: phrases\n"
                   "entries: [{title: one, patterns: ['{prefix:nope} failed']}]\n")
    with pytest.raises(RunbookError, match="undefined prefixes: \\['nope'\\]"):
        parse_catalog(bad)


def test_every_shipped_pattern_passes_the_full_runbook_validation():
    """Catalog rules skip the pattern check at start-up (it costs half a second); this is where it runs."""
    from diagnoser.prefilter.runbooks import Runbook

    for rule in CATALOG:
        Runbook.model_validate(rule.model_dump(mode="json"))  # compiles every signature, checks group names


def test_a_changed_table_is_read_again_not_served_from_the_cache(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("DIAGNOSER_CACHE", str(tmp_path / "cache"))
    tables = tmp_path / "catalog"
    tables.mkdir()
    table = tables / "t.yaml"
    body = ("id: t\ntitle: t\nsource: 'a vendor document, https://example.org/doc'\nkind: phrases\n"
            "entries:\n  - {{title: {title}, category: infra, subtype: s, action: restart, priority: 20,"
            " confidence: 0.5, patterns: ['{pattern}'], examples: ['{pattern}']}}\n")
    table.write_text(body.format(title="first", pattern="alpha failed"))
    books = load_runbooks(catalogs=False)
    assert [r.title for r in load_catalog_rules(books, tables)] == ["first"]
    assert list((tmp_path / "cache").glob("catalog-*.json"))  # parsed once, kept
    table.write_text(body.format(title="second version", pattern="beta failed"))
    [rule] = load_catalog_rules(books, tables)
    assert rule.title == "second version" and rule.compiled[0].search("beta failed")


def _table_naming(tables: Path, runbook: str, own: str = "") -> None:
    tables.mkdir(exist_ok=True)
    (tables / "t.yaml").write_text(
        "id: t\ntitle: t\nsource: 'a vendor document, https://example.org/doc'\nkind: phrases\n"
        "defaults: {category: user_code, action: stop_and_notify, priority: 40, confidence: 0.6}\n"
        f"entries:\n  - {{title: driver gone, subtype: s, runbook: {runbook}, patterns: ['driver gone'],"
        f" examples: ['driver gone']{own}}}\n")


def test_an_entry_naming_a_runbook_takes_its_decision_unless_it_says_its_own(tmp_path: Path, monkeypatch):
    """The decision lives once, in the runbook: an entry that names it and says nothing itself gets the
    runbook's category, action and localised action, not its table's defaults."""
    monkeypatch.setenv("DIAGNOSER_CACHE", str(tmp_path / "cache"))
    books = load_runbooks(catalogs=False)
    mismatch = next(b for b in books if b.id == "driver-mismatch")
    assert mismatch.localised_action is not None  # escalates; drains a node the evidence names
    tables = tmp_path / "catalog"
    _table_naming(tables, "driver-mismatch")
    [rule] = load_catalog_rules(books, tables)
    assert (rule.category, rule.action, rule.localised_action) == (
        mismatch.category, mismatch.action, mismatch.localised_action)
    assert rule.path == mismatch.path  # and its on-call text
    # an entry's own action wins, and the runbook's localisation of another action does not come with it
    _table_naming(tables, "driver-mismatch", own=", action: restart")
    [rule] = load_catalog_rules(books, tables)
    assert (rule.category, rule.action, rule.localised_action) == (mismatch.category, Action.RESTART, None)


def test_a_site_runbook_that_changes_the_action_changes_the_entries_naming_it(tmp_path: Path, monkeypatch):
    """A site that decides driver faults differently writes one runbook; every catalog entry that points at it
    follows (and the parsed-rules cache is not served stale)."""
    monkeypatch.setenv("DIAGNOSER_CACHE", str(tmp_path / "cache"))
    shipped = [r for r in RULES if r.catalog and r.path.endswith("driver-mismatch.md")]
    assert len(shipped) >= 10 and {r.action for r in shipped} == {Action.ESCALATE}
    site = tmp_path / "runbooks"
    site.mkdir()
    text = (Path(__file__).resolve().parents[1] / "runbooks" / "driver-mismatch.md").read_text(encoding="utf-8")
    assert "\naction: escalate\n" in text
    (site / "driver-mismatch.md").write_text(text.replace("\naction: escalate\n", "\naction: drain_and_restart\n"))
    ours = [r for r in load_runbooks(site) if r.catalog and r.path.endswith("driver-mismatch.md")]
    assert {r.id for r in ours} == {r.id for r in shipped}
    assert {r.action for r in ours} == {Action.DRAIN_AND_RESTART}


def test_every_runbook_a_shipped_entry_names_exists():
    books = {b.id for b in load_runbooks(catalogs=False)}
    named = {e.runbook for path in FILES for e in parse_catalog(path).entries if e.runbook}
    assert named and named <= books, sorted(named - books)


def test_a_named_prefix_is_expanded_in_every_pattern_that_uses_it(tmp_path: Path, monkeypatch):
    """A fragment many entries share (how printers introduce an error string) is written once."""
    monkeypatch.setenv("DIAGNOSER_CACHE", str(tmp_path / "cache"))
    tables = tmp_path / "catalog"
    tables.mkdir()
    (tables / "t.yaml").write_text(
        "id: t\ntitle: t\nsource: 'a vendor document, https://example.org/doc'\nkind: phrases\n"
        "prefixes: {err: '(?:CUDA error|cuda runtime error \\(\\d{1,4}\\) )'}\n"
        "entries:\n  - {title: one, category: user_code, subtype: s, action: stop_and_notify, priority: 20,"
        " confidence: 0.5, patterns: ['{prefix:err}: ?invalid argument'],"
        " examples: ['RuntimeError: cuda runtime error (1) : invalid argument at THCGeneral.cpp:12']}\n")
    [rule] = load_catalog_rules(load_runbooks(catalogs=False), tables)
    assert rule.compiled[0].search("RuntimeError: CUDA error: invalid argument")
    assert rule.compiled[0].search("RuntimeError: cuda runtime error (1) : invalid argument at THCGeneral.cpp:12")
    assert not rule.compiled[0].search("ValueError: invalid argument")


def test_a_prefix_may_use_one_defined_above_it(tmp_path: Path):
    """A list two fragments share (the programs that print a line) is written once; order keeps it acyclic."""
    table = tmp_path / "t.yaml"
    head = "id: t\ntitle: t\nsource: 'a vendor document, https://example.org/doc'\nkind: phrases\n"
    entries = "entries: [{title: one, patterns: ['{prefix:said}failed']}]\n"
    table.write_text(head + "prefixes: {prog: '(?:srun|sbatch)', said: '{prefix:prog}: error: '}\n" + entries)
    assert parse_catalog(table).prefixes["said"] == "(?:srun|sbatch): error: "
    table.write_text(head + "prefixes: {said: '{prefix:prog}: error: ', prog: '(?:srun|sbatch)'}\n" + entries)
    with pytest.raises(RunbookError, match="not defined above it: \\['prog'\\]"):
        parse_catalog(table)


WARNINGS_PRINTED_ON_HEALTHY_STARTS = [
    # NVSHMEM prints it whenever the module is missing, also on one node where NVLink/P2P serves every PE
    ("/opt/nvshmem/src/modules/transport/ibrc/ibrc.cpp:nvshmemt_init:1851: neither nv_peer_mem, or nvidia_peermem "
     "detected. Skipping transport.", "gpudirect_rdma_unavailable"),
    ("distributed.worker - WARNING - Memory use is high but worker has no data to store to disk.  Perhaps some other "
     "process is leaking memory?  Process memory: 19.20 GB -- Worker memory limit: 27.05 GB", "host_oom"),
]


@pytest.mark.parametrize(("warning", "alone"), WARNINGS_PRINTED_ON_HEALTHY_STARTS)
def test_a_warning_is_the_verdict_only_when_nothing_failed_louder(tmp_path: Path, warning: str, alone: str):
    from diagnoser.triage import triage

    quiet, loud = tmp_path / "quiet", tmp_path / "loud"
    for d in (quiet, loud):
        d.mkdir()
    (quiet / "rank0.log").write_text(f"{warning}\nepoch 3 step 1200 loss 2.31\n")
    (loud / "rank0.log").write_text(f"{warning}\nTraceback (most recent call last):\n  File \"train.py\", line 88, "
                                    "in <module>\n    route(tokens)\nKeyError: 'expert_7'\n")
    assert triage([str(quiet)]).subtype == alone
    assert triage([str(loud)]).subtype == "python_exception"
