"""The LLM stage on real triage analyses against scripted OpenAI-compatible servers on loopback:
what the model is shown, which names may be drained, and how its opinion merges with the rules."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from test_classify_endpoint import Endpoint, completion

from diagnoser.classify.config import LLMConfig
from diagnoser.classify.scope import scope_of
from diagnoser.classify.stage import review
from diagnoser.models import Action, Category, DecidedBy, Diagnosis
from diagnoser.triage import analyse

OOM = ("[rank6]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
       "of 79.10 GiB of which 1.2 GiB is free.")
TIMEOUT = ("[rank{r}]:[E ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation timeout: "
           "WorkNCCL(SeqNum=77, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.")
ITER = ("iteration {i}/ 159576 | lm loss: {loss} | loss scale: 4096.0 | grad norm: {g} | number of skipped "
        "iterations: 0 | number of nan iterations: 0 |")


@pytest.fixture(autouse=True)
def _empty_store(tmp_path, monkeypatch):
    monkeypatch.setenv("DIAGNOSER_STORE", str(tmp_path / "store"))  # no incident memory of this machine


def oom_job(root: Path) -> Path:
    """rank 6 on gpu-018 runs out of GPU memory; four ranks on gpu-017 time out; Slurm's record names cn119."""
    (root / "gpu-017").mkdir(parents=True)
    (root / "gpu-018").mkdir()
    (root / "gpu-018" / "rank6.log").write_text(
        "[rank6]: step 1200 | loss 2.314\n[rank6]: Traceback (most recent call last):\n"
        '[rank6]:   File "train.py", line 88, in <module>\n[rank6]:     out = model(batch)\n' + OOM + "\n")
    for r in range(4):
        (root / "gpu-017" / f"rank{r}.log").write_text(
            f"gpu-017:1234:1234 [{r}] NCCL INFO comm 0x55 rank {r} nranks 8 cudaDev {r} busId 3b000 - Init COMPLETE\n"
            f"[rank{r}]: step 1200 | loss 2.314\n" + TIMEOUT.format(r=r) + "\n")
    (root / "slurm-7.out").write_text("slurmstepd: error: *** JOB 7 ON cn119 CANCELLED AT 2026-03-04T05:40:00 ***\n")
    return root


def plain_log(root: Path, text: str) -> Path:
    root.mkdir(parents=True)
    (root / "stderr.log").write_text(text)
    return root


def scripted(answer_of) -> Endpoint:
    """A server answering `answer_of(evidence lines {id: text})` in the shape each request asks for."""
    def respond(body: dict) -> tuple[int, dict]:
        user = body["messages"][-1]["content"]
        lines = {m.group(1): json.loads(m.group(2))
                 for m in re.finditer(r'^(E\d+) \| .*? \| .*? \| .*? \| (".*?")(?: \[|$| \(\+)', user, re.M)}
        answer = answer_of(lines)
        return 200, completion(tool_args=answer) if body.get("tools") else completion(json.dumps(answer))
    return Endpoint(respond)


def cite(lines: dict[str, str], *needles: str) -> list[str]:
    return [i for i, t in lines.items() if any(n in t for n in needles)]


def config(ep: Endpoint, tmp_path: Path, cache: bool = False) -> LLMConfig:
    return LLMConfig(base_url=ep.url, model="scripted", timeout=5.0, max_tokens=256, context_tokens=8192,
                     cache_dir=(tmp_path / "cache") if cache else None)


def adversary(node: str):
    def answer(lines: dict[str, str]) -> dict:
        return {"category": "hardware", "subtype": "gpu_xid_79", "action": "drain_and_restart",
                "culprit_nodes": [node], "culprit_ranks": [6], "root_cause": "the GPU failed",
                "evidence": list(lines)[:8], "confidence": 0.99, "explanation": ""}
    return answer


def user_prompt(ep: Endpoint) -> str:
    return ep.requests[-1]["messages"][-1]["content"]


def test_the_job_nodes_come_from_its_records_not_from_words(tmp_path):
    scope = scope_of(analyse([str(oom_job(tmp_path / "job"))], workers=1))
    assert {"gpu-017", "gpu-018", "cn119"} <= scope.nodes  # directory names, NCCL host field, Slurm's record
    assert not scope.nodes & {"NVRM", "python3", "ERROR", "rank6", "train.py", "Watchdog"}


@pytest.mark.parametrize("word", ["NVRM", "python3", "ERROR", "Wed", "gpu-017", "gpu-018"])
def test_a_hostile_model_cannot_turn_user_code_into_a_node_action(tmp_path, word):
    a = analyse([str(oom_job(tmp_path / "job"))], workers=1)
    assert (a.diagnosis.category, a.diagnosis.rule) == (Category.USER_CODE, "cuda-oom")
    ep = scripted(adversary(word))
    try:
        d = review(a, config(ep, tmp_path))
    finally:
        ep.close()
    assert len(ep.requests) == 1
    assert (d.category, d.action, d.decided_by) == (Category.USER_CODE, Action.STOP_AND_NOTIFY, DecidedBy.RULE)
    assert word not in d.culprit.nodes or word == "gpu-018"  # the rule's own culprit stays, nothing is added


def test_the_prompt_holds_the_exception_first_failure_and_scheduler_record_once_per_shape(tmp_path):
    a = analyse([str(oom_job(tmp_path / "job"))], workers=1)
    ep = scripted(lambda lines: {"category": "unknown", "subtype": "x", "action": "escalate", "culprit_nodes": [],
                                 "culprit_ranks": [], "root_cause": "", "evidence": [], "confidence": 0.1,
                                 "explanation": ""})
    try:
        d = review(a, config(ep, tmp_path))
    finally:
        ep.close()
    user = user_prompt(ep)
    data = user[user.index("<<<LOG DATA"):user.index("<<<END LOG DATA")]
    assert "torch.OutOfMemoryError" in data and "JOB 7 ON cn119" in data
    assert data.count("Watchdog caught collective operation timeout") == 2 and "similar lines" in data
    assert d == a.diagnosis.model_copy(update={"notes": d.notes}) and "LLM abstained" in "\n".join(d.notes)


def test_with_no_rule_the_model_still_sees_the_log_and_a_grounded_answer_decides(tmp_path):
    log = "".join(ITER.format(i=6900 + 10 * i, loss=f"{6.3 + i * 1.7:.3f}E+00", g=95313 * (i + 1)) + "\n"
                  for i in range(4))
    a = analyse([str(plain_log(tmp_path / "job", log))], workers=1)
    assert a.diagnosis.decided_by != DecidedBy.RULE  # no rule fired (retrieval may have guessed)
    ep = scripted(lambda lines: {"category": "user_code", "subtype": "loss_divergence",
                                 "action": "rollback_and_restart", "culprit_nodes": [], "culprit_ranks": [],
                                 "root_cause": "the loss diverged", "evidence": cite(lines, "lm loss"),
                                 "confidence": 0.8, "explanation": ""})
    try:
        d = review(a, config(ep, tmp_path))
    finally:
        ep.close()
    assert user_prompt(ep).count("lm loss") >= 2
    assert (d.category, d.action, d.decided_by) == (Category.USER_CODE, Action.ROLLBACK_AND_RESTART, DecidedBy.LLM)
    assert d.evidence and all("lm loss" in e.text for e in d.evidence) and d.rule is None


def test_two_logs_without_a_rule_never_share_a_cached_answer(tmp_path):
    seen: list[str] = []

    def answer(lines: dict[str, str]) -> dict:
        text = " ".join(lines.values())
        seen.append(text)
        infra = "orted" in text
        return {"category": "infra" if infra else "user_code", "subtype": "x",
                "action": "escalate" if infra else "stop_and_notify", "culprit_nodes": [], "culprit_ranks": [],
                "root_cause": "", "evidence": list(lines)[:2], "confidence": 0.8, "explanation": ""}

    ep = scripted(answer)
    try:
        verdicts: list[Diagnosis] = []
        for name, text in (("a", "bash: orted: command not found\nORTE was unable to reliably start daemons\n"),
                           ("b", "Server is not up yet. Retrying in 2.0 seconds...\n")):
            a = analyse([str(plain_log(tmp_path / name, text))], workers=1)
            verdicts.append(review(a, config(ep, tmp_path, cache=True)))
    finally:
        ep.close()
    assert len(ep.requests) == 2 and "orted" in seen[0] and "Server is not up" in seen[1]
    assert [v.category for v in verdicts] == [Category.INFRA, Category.USER_CODE]


def test_agreement_raises_the_rule_verdicts_confidence(tmp_path):
    a = analyse([str(oom_job(tmp_path / "job"))], workers=1)
    ep = scripted(lambda lines: {"category": "user_code", "subtype": "cuda_oom", "action": "stop_and_notify",
                                 "culprit_nodes": [], "culprit_ranks": [6], "root_cause": "OOM",
                                 "evidence": cite(lines, "OutOfMemoryError"), "confidence": 0.7,
                                 "explanation": ""})
    try:
        d = review(a, config(ep, tmp_path))
    finally:
        ep.close()
    assert (d.decided_by, d.rule, d.category) == (DecidedBy.RULE, "cuda-oom", Category.USER_CODE)
    assert d.confidence > a.diagnosis.confidence and "LLM agrees" in "\n".join(d.notes)


def test_a_kernel_hardware_line_lets_a_grounded_model_drain_the_node_it_came_from(tmp_path):
    job = oom_job(tmp_path / "job")
    (job / "gpu-018" / "dmesg.log").write_text(
        "[Wed Mar  4 05:39:01 2026] NVRM: Xid (PCI:0000:3b:00): 48, pid=4242, name=python, "
        "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 1\n")
    a = analyse([str(job)], workers=1)
    ep = scripted(lambda lines: {"category": "hardware", "subtype": "gpu_xid_48", "action": "drain_and_restart",
                                 "culprit_nodes": ["gpu-018", "NVRM"], "culprit_ranks": [],
                                 "root_cause": "DBE on gpu-018", "evidence": cite(lines, "Xid", "OutOfMemory"),
                                 "confidence": 0.4 + 0.5, "explanation": ""})
    try:
        d = review(a, config(ep, tmp_path))
    finally:
        ep.close()
    assert (d.category, d.action) == (Category.HARDWARE, Action.DRAIN_AND_RESTART)
    assert d.culprit.nodes == ["gpu-018"]  # "NVRM" is a word of the line, not a node of the job
    assert "not a node of this job" in "\n".join(d.notes)


def test_the_stage_is_what_triage_runs_with_an_endpoint(tmp_path):
    from typer.testing import CliRunner

    from diagnoser.cli import app

    ep = scripted(adversary("NVRM"))
    try:
        result = CliRunner().invoke(app, ["triage", str(oom_job(tmp_path / "job")), "--json", "--llm-base-url", ep.url,
                                          "--llm-model", "scripted"],
                                    env={**os.environ, "DIAGNOSER_LLM_CACHE_DIR": "none"})
    finally:
        ep.close()
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)
    assert (verdict["category"], verdict["action"], verdict["rule"]) == ("user_code", "stop_and_notify", "cuda-oom")
    assert len(ep.requests) == 1


def test_rule_verdicts_pass_the_same_policy_table(tmp_path):
    from diagnoser.classify.scope import police_verdict
    from diagnoser.models import Culprit

    a = analyse([str(oom_job(tmp_path / "job"))], workers=1)
    assert police_verdict(a, a.diagnosis) is a.diagnosis  # what triage returned already passed it
    drain = a.diagnosis.model_copy(update={"category": Category.INFRA, "action": Action.RESTART_EXCLUDING_NODES,
                                           "culprit": Culprit(nodes=["NVRM", "gpu-017", "gpu-018"])})
    d = police_verdict(a, drain)
    # NVRM is no node of the job; gpu-017 only timed out; the OOM line comes from gpu-018
    assert d.culprit.nodes == ["gpu-018"] and d.action == Action.RESTART_EXCLUDING_NODES
    assert "NVRM" in "\n".join(d.notes)
    hw = a.diagnosis.model_copy(update={"category": Category.HARDWARE, "action": Action.DRAIN_AND_RESTART,
                                        "rule": None})
    assert (police_verdict(a, hw).category, police_verdict(a, hw).action) == (Category.UNKNOWN, Action.ESCALATE)
