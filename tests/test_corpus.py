"""The corpus of real incidents: well-formed, sourced, balanced enough to learn from, and the seed memory."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from diagnoser.retrieve.corpus import ACTION_OF, CorpusError, corpus_incidents, load_corpus
from diagnoser.retrieve.seed import shipped_seed

CORPUS_DIR = Path(__file__).resolve().parents[1] / "diagnoser" / "data" / "corpus"
CASES = load_corpus(CORPUS_DIR)


def test_the_corpus_is_large_varied_and_sourced():
    assert len(CASES) >= 300
    cats = Counter(c.category.value for c in CASES)
    assert min(cats["hardware"], cats["infra"], cats["user_code"]) >= 40, cats
    assert len({c.source_repo for c in CASES}) >= 100  # leave-one-repo-out needs many sources
    assert sum(c.decoy for c in CASES) >= 30
    for c in CASES:
        assert c.source_url.startswith("https://") and c.rationale and c.log.strip(), c.id
        assert c.label_confidence in ("high", "medium", "low"), c.id


def test_each_thread_is_one_case():
    keys = Counter((c.source_url, c.log[:200]) for c in CASES)
    assert [k for k, n in keys.items() if n > 1] == []


def test_the_seed_memory_is_the_corpus():
    seed = shipped_seed()
    assert len(seed) >= 280 and all(i.origin.startswith("seed/corpus/") for i in seed)
    assert all(i.resolution and "https://" in i.resolution for i in seed)  # every seed incident cites its thread


def test_a_bad_corpus_line_names_the_file_and_line(tmp_path: Path):
    good = {"id": "x-1-a", "source_url": "https://github.com/o/r/issues/1", "log": "boom", "category": "infra",
            "subtype": "s", "expected_action": "retry_after_backoff"}
    bad = {**good, "expected_action": "reboot"}
    (tmp_path / "a.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(CorpusError, match="a.jsonl:2"):
        load_corpus(tmp_path)
    (tmp_path / "a.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(CorpusError, match="duplicate id"):
        load_corpus(tmp_path)
    (tmp_path / "a.jsonl").write_text(json.dumps(good) + "\n")
    [case] = load_corpus(tmp_path)
    assert case.source_repo == "o/r" and case.action is ACTION_OF["retry_after_backoff"]
    [incident] = corpus_incidents([case])
    assert incident.category.value == "infra" and incident.origin == "seed/corpus/x-1-a"
