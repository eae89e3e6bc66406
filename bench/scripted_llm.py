"""Scripted OpenAI-compatible endpoints on loopback, for measuring the LLM stage without a model.

A real HTTP server (`ThreadingHTTPServer` on 127.0.0.1) that speaks the chat-completions wire format
(GET /v1/models, POST /v1/chat/completions; a forced tool call is answered with a tool call, every
other request shape with the JSON as message content). What it answers is a policy of the case
the bench is triaging (`endpoint.case = ...`) and of the prompt it was actually sent:

- oracle: the case's true label (category, subtype, action; the labelled culprit when the prompt
  shows it), citing the prompt's lines that show a fault: the best any model could do;
- adversary: always hardware / drain_and_restart, confidence 0.99, a plausible word of the prompt
  (a token such as NVRM, python3, ERROR or a weekday) as the culprit node, citing the lines that
  look most like hardware: a broken or hostile model;
- random: a seeded random category, action, confidence, node word and citations;
- abstain: unknown / escalate, confidence 0.2, nothing cited.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from diagnoser.models import Action, Category
from diagnoser.retrieve.corpus import CorpusCase

_ITEM = re.compile(r'^(E\d+) \| .*? \| .*? \| .*? \| (".*?")(?: \[instruction-like\])?(?: \(\+\d+ similar[^)]*\))?$',
                   re.M)
_FAULT = re.compile(r"(?i)error|exception|fail|fatal|killed|abort|cancel|denied|refused|unable|cannot|can't|"
                    r"timed? ?out|no space|not found|invalid|illegal|panic|segfault|signal|oom|out of memory|"
                    r"xid|ecc|nan\b|overflow|mismatch|warn|terminat|lost|unreachable|corrupt")
_COLLATERAL = re.compile(r"(?i)Watchdog caught collective|closing signal|ChildFailedError|SIGTERM|"
                         r"^\s*File \"|^Traceback")
_HARDWAREISH = re.compile(r"(?i)xid|ecc|nvlink|pcie|mlx5|gpu|hardware|uncorrectable|fallen off|node failure|"
                          r"nvrm|cuda error")
_WORD = re.compile(r"\b[A-Za-z][A-Za-z0-9_.-]{2,30}\b")
MAX_CITED = 8


def evidence_lines(prompt: str) -> list[tuple[str, str]]:
    """(id, text) of the evidence lines in a prompt's log data block."""
    out = []
    for m in _ITEM.finditer(prompt):
        try:
            out.append((m.group(1), str(json.loads(m.group(2)))))
        except ValueError:
            continue
    return out


def _cite(lines: list[tuple[str, str]], score: Callable[[str], float]) -> list[str]:
    ranked = sorted(lines, key=lambda x: (-score(x[1]), int(x[0][1:])))
    return [i for i, t in ranked if score(t) > 0][:MAX_CITED] or [i for i, _ in ranked[:1]]


def oracle(case: CorpusCase, lines: list[tuple[str, str]], rng: random.Random) -> dict:
    def score(text: str) -> float:
        s = 2.0 if _FAULT.search(text) else 0.0
        if _COLLATERAL.search(text):
            s -= 1.5
        if case.category == Category.HARDWARE and _HARDWAREISH.search(text):
            s += 2
        if case.culprit and case.culprit in text:
            s += 1
        return s

    shown = " ".join(t for _, t in lines)
    culprit = case.culprit.strip() if case.culprit else ""
    nodes = [culprit] if culprit and " " not in culprit and culprit in shown else []
    return {"category": case.category.value, "subtype": case.subtype, "action": case.action.value,
            "culprit_nodes": nodes, "culprit_ranks": [], "root_cause": case.rationale[:200] or case.subtype,
            "evidence": _cite(lines, score) if lines else [], "confidence": 0.85,
            "explanation": "scripted oracle: the case's label"}


def _plausible_node(lines: list[tuple[str, str]], rng: random.Random) -> str:
    words = [w for _, t in lines for w in _WORD.findall(t)]
    preferred = [w for w in words if w in {"NVRM", "python3", "python", "ERROR", "Wed", "Tue", "kernel", "localhost"}
                 or re.fullmatch(r"[a-z]+-?\d+", w)]
    return (preferred or words or ["gpu-017"])[0] if rng.random() < 0.8 else rng.choice(words or ["node-1"])


def adversary(case: CorpusCase, lines: list[tuple[str, str]], rng: random.Random) -> dict:
    def score(text: str) -> float:
        return (3.0 if _HARDWAREISH.search(text) else 0.0) + (1.0 if _FAULT.search(text) else 0.0) + 0.1

    return {"category": "hardware", "subtype": "gpu_xid_79", "action": "drain_and_restart",
            "culprit_nodes": [_plausible_node(lines, rng)], "culprit_ranks": [0],
            "root_cause": "The GPU on this node failed; drain it.", "evidence": _cite(lines, score),
            "confidence": 0.99, "explanation": "everything else is collateral"}


def chaotic(case: CorpusCase, lines: list[tuple[str, str]], rng: random.Random) -> dict:
    ids = [i for i, _ in lines]
    return {"category": rng.choice(list(Category)).value, "subtype": "random_guess",
            "action": rng.choice(list(Action)).value, "culprit_nodes": [_plausible_node(lines, rng)]
            if rng.random() < 0.5 else [], "culprit_ranks": [], "root_cause": "a guess",
            "evidence": rng.sample(ids, min(len(ids), rng.randint(0, 3))), "confidence": round(rng.random(), 2),
            "explanation": ""}


def abstain(case: CorpusCase, lines: list[tuple[str, str]], rng: random.Random) -> dict:
    return {"category": "unknown", "subtype": "not_sure", "action": "escalate", "culprit_nodes": [],
            "culprit_ranks": [], "root_cause": "The evidence does not show the cause.", "evidence": [],
            "confidence": 0.2, "explanation": ""}


POLICIES: dict[str, Callable[[CorpusCase, list[tuple[str, str]], random.Random], dict]] = {
    "oracle": oracle, "adversary": adversary, "random": chaotic, "abstain": abstain}


def completion(answer: dict, as_tool: bool) -> dict:
    message: dict = {"role": "assistant", "content": None if as_tool else json.dumps(answer)}
    if as_tool:
        message["tool_calls"] = [{"id": "call_1", "type": "function",
                                  "function": {"name": "submit_diagnosis", "arguments": json.dumps(answer)}}]
    return {"id": "chatcmpl-scripted", "object": "chat.completion", "created": 0, "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if as_tool else "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


class ScriptedEndpoint:
    """An OpenAI-compatible server on a free loopback port answering with `POLICIES[policy]`."""

    def __init__(self, policy: str, seed: int = 0) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; choose from {', '.join(POLICIES)}")
        self.policy, self.seed = policy, seed
        self.case: CorpusCase | None = None
        self.answers: list[dict] = []
        self.shown: list[int] = []  # evidence lines in each prompt
        self.digests: set[str] = set()  # distinct prompts
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send(200, {"object": "list", "data": [{"id": "scripted-" + policy, "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if not self.path.endswith("/chat/completions") or outer.case is None:
                    self._send(404, {"error": {"message": "no such route or no case set"}})
                    return
                prompt = "\n".join(str(m.get("content") or "") for m in body.get("messages", []))
                rng = random.Random(f"{outer.seed}:{outer.case.id}")
                lines = evidence_lines(prompt)
                outer.shown.append(len(lines))
                outer.digests.add(hashlib.sha256(prompt.encode()).hexdigest())
                answer = POLICIES[outer.policy](outer.case, lines, rng)
                outer.answers.append(answer)
                self._send(200, completion(answer, bool(body.get("tools"))))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> ScriptedEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
