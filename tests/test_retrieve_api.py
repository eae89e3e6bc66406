"""What triage calls: fast, never failing, seed memory without a store, closest runbooks."""

import time

from diagnoser.models import SimilarIncident
from diagnoser.retrieve import api
from diagnoser.retrieve.runbook_index import RunbookIndex, read_runbook
from diagnoser.retrieve.seed import LabelledText, from_labelled, runbook_texts, shipped_seed

XID79 = "[Tue Mar  4 05:06:01 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus."
RUNBOOK = """---
id: gpu-xid-79
title: GPU fell off the bus (Xid 79)
category: hardware
subtype: gpu_xid_79
action: drain_and_restart
priority: 97
confidence: 0.97
signatures: ['GPU has fallen off the bus']
examples:
  match:
    - '[Mon Jan  6 04:27:08 2025] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.'
---
# GPU fell off the bus
## What it means
The GPU stopped answering on the PCIe bus; the node needs a reset.
"""
OOM_RUNBOOK = RUNBOOK.replace("gpu-xid-79", "cuda-oom").replace("gpu_xid_79", "cuda_oom").replace(
    "hardware", "user_code").replace("drain_and_restart", "stop_and_notify").replace(
    "GPU fell off the bus", "CUDA out of memory").replace(
    "[Mon Jan  6 04:27:08 2025] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")


def test_without_a_store_the_shipped_seed_answers_quickly(tmp_path, monkeypatch):
    monkeypatch.setenv("DIAGNOSER_STORE", str(tmp_path / "none"))
    api.neighbours("warm up")
    t = time.perf_counter()
    similar = api.similar_incidents(XID79)
    assert time.perf_counter() - t < 0.5
    assert similar and isinstance(similar[0], SimilarIncident)
    # the seed is the corpus of real incidents: the nearest is a real GPU-off-the-bus report
    assert similar[0].category.value == "hardware" and "bus" in similar[0].subtype
    assert similar[0].resolution and "github.com" in similar[0].resolution  # with the thread it came from
    assert similar[0].id.startswith("inc-") and 0.5 < similar[0].score <= 1.0
    vote = api.retrieval_verdict(XID79)
    assert vote is not None and vote.action.value == "drain_and_restart"
    assert not (tmp_path / "none").exists()  # reading never creates a store


def test_retrieval_never_breaks_triage(tmp_path, monkeypatch):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "store.json").write_text("{garbage")
    assert api.similar_incidents(XID79, store_path=broken) == []
    assert api.retrieval_verdict(XID79, store_path=broken) is None
    assert api.similar_incidents("", store_path=broken) == []
    monkeypatch.setattr(api, "signature_text", lambda text: 1 / 0)
    assert api.similar_incidents(XID79) == []


def test_runbook_index_returns_the_closest_runbooks(tmp_path):
    (tmp_path / "gpu-xid-79.md").write_text(RUNBOOK)
    (tmp_path / "cuda-oom.md").write_text(OOM_RUNBOOK)
    (tmp_path / "broken.md").write_text("no front matter")
    (tmp_path / "README.md").write_text("---\nid: readme\n---\n")
    index = RunbookIndex.from_dir(tmp_path)
    assert len(index) == 2
    hits = index.search("[Fri Feb 13 01:02:03 2026] NVRM: Xid (PCI:0000:af:00): 79, GPU has fallen off the bus.")
    assert [d.id for d, _ in hits][0] == "gpu-xid-79" and hits[0][0].path == "runbooks/gpu-xid-79.md"
    assert api.similar_runbooks("torch.OutOfMemoryError: CUDA out of memory", 1, tmp_path)[0][0].id == "cuda-oom"
    # a missing site directory adds nothing: the shipped runbooks still answer (site runbooks add to them)
    assert [d.id for d, _ in api.similar_runbooks(XID79, 1, tmp_path / "missing")] == ["gpu-xid-79"]


def test_seed_incidents_come_from_runbook_examples_and_labelled_texts(tmp_path):
    (tmp_path / "gpu-xid-79.md").write_text(RUNBOOK)
    items = runbook_texts([read_runbook(tmp_path / "gpu-xid-79.md")])
    items.append(LabelledText(origin="seed/fixture/x", text="step 1\n" + XID79, category="hardware",
                              subtype="gpu_xid_79", action="drain_and_restart"))
    items.append(LabelledText(origin="seed/fixture/empty", text="", category="unknown", subtype="x", action="escalate"))
    seed = from_labelled(items)
    assert [s.origin for s in seed] == ["seed/runbook/gpu-xid-79", "seed/fixture/x"]
    assert seed[0].runbook == "runbooks/gpu-xid-79.md" and seed[0].status.value == "seed"
    assert seed[0].fingerprint == seed[1].fingerprint  # the same failure, masked alike
    shipped = shipped_seed()
    assert len({s.id for s in shipped}) == len(shipped) and all(s.origin.startswith("seed/") for s in shipped)
