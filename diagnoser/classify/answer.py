"""What the model must answer (`LLMAnswer`), the JSON schemas sent for it, and the failures.

The answer is only an opinion: `guard.py` checks it against the evidence and the policy before
any of it reaches a verdict. Here it is only parsed and validated.
"""

from __future__ import annotations

import copy
import json
import re
from enum import StrEnum
from functools import cache
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from diagnoser.models import Action, Category

MAX_TEXT = 240  # characters of root_cause and explanation: two sentences, bounded output
MAX_ITEMS = 8
MAX_NODES = 4


class LLMAnswer(BaseModel):
    """The model's structured answer about one failed job."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    category: Category = Field(description="who owns the fault: hardware, infra, user_code or unknown")
    subtype: str = Field(description="short snake_case failure class, e.g. gpu_xid_79, cuda_oom",
                         max_length=64)
    action: Action = Field(description="recovery action from the closed list")
    culprit_nodes: list[Annotated[str, StringConstraints(max_length=64)]] = Field(
        default_factory=list, max_length=MAX_NODES, description="hostnames of the faulty nodes, as written in the logs")
    culprit_ranks: list[int] = Field(default_factory=list, max_length=MAX_ITEMS,
                                     description="global ranks where the failure started")
    root_cause: str = Field(description="one sentence: what failed first and why", max_length=MAX_TEXT)
    evidence: list[Annotated[str, StringConstraints(pattern=r"^E[0-9]{1,5}$")]] = Field(
        default_factory=list, max_length=MAX_ITEMS, description="ids of the evidence lines that prove it, e.g. E3")
    confidence: float = Field(ge=0.0, le=1.0, description="0..1, how sure you are")
    explanation: str = Field(default="", max_length=MAX_TEXT,
                             description="why the other lines are collateral, in two sentences at most")

    @field_validator("subtype", mode="before")
    @classmethod
    def _snake(cls, value: Any) -> str:
        text = re.sub(r"[^a-z0-9]+", "_", str(value).strip().lower()).strip("_")
        return (text or "unclassified")[:64]

    @field_validator("root_cause", "explanation", mode="before")
    @classmethod
    def _clip(cls, value: Any) -> str:
        return str(value if value is not None else "").strip()[:MAX_TEXT]

    @field_validator("evidence", mode="before")
    @classmethod
    def _ids(cls, value: Any) -> list[str]:
        if isinstance(value, str):
            value = re.findall(r"E\d+", value)
        return [m.group(0) for v in (value or []) if (m := re.search(r"E\d{1,5}", str(v).upper()))][:MAX_ITEMS]

    @field_validator("confidence", mode="before")
    @classmethod
    def _percent(cls, value: Any) -> Any:
        """Models often answer 75 for 0.75: a number in (1, 100] is read as a percentage."""
        if isinstance(value, int | float) and not isinstance(value, bool) and 1 < value <= 100:
            return value / 100
        return value

    @field_validator("culprit_nodes", mode="before")
    @classmethod
    def _nodes(cls, value: Any) -> list:
        items = value if isinstance(value, list | tuple) else ([] if value is None else [value])
        return [str(v).strip()[:64] for v in items if str(v).strip()][:MAX_NODES]

    @field_validator("culprit_ranks", mode="before")
    @classmethod
    def _ranks(cls, value: Any) -> list:
        items = value if isinstance(value, list | tuple) else ([] if value is None else [value])
        return list(items)[:MAX_ITEMS]


def _inline(schema: dict[str, Any]) -> dict[str, Any]:
    """Resolve `$ref`s into the one schema (some servers' grammar converters lack `$defs`)."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                target = copy.deepcopy(defs[node["$ref"].split("/")[-1]])
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return walk({**target, **rest})
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)


def _strip(node: Any, keys: frozenset[str]) -> Any:
    if isinstance(node, dict):
        return {k: _strip(v, keys) for k, v in node.items() if k not in keys}
    if isinstance(node, list):
        return [_strip(v, keys) for v in node]
    return node


def answer_schema(strict: bool = False) -> dict[str, Any]:
    """A fresh copy of the (cached) schema; see `_answer_schema`."""
    return copy.deepcopy(_answer_schema(strict))


@cache
def _answer_schema(strict: bool) -> dict[str, Any]:
    """The JSON schema of `LLMAnswer`, inlined; all fields required, no extra properties.

    `strict=True` drops the keywords OpenAI's strict structured outputs do not accept (lengths,
    defaults, titles); the bounds are then enforced by validation instead of by the grammar.
    """
    schema = _inline(LLMAnswer.model_json_schema())
    schema["required"] = list(schema["properties"])
    schema["additionalProperties"] = False
    schema = _strip(schema, frozenset({"title", "default"}))
    if strict:
        schema = _strip(schema, frozenset({"maxLength", "minLength", "maxItems", "minItems"}))
    return schema


class FailureKind(StrEnum):
    """Why an endpoint gave no usable answer."""

    TIMEOUT = "timeout"
    RATE_LIMITED = "rate limited (429)"
    SERVER_ERROR = "server error (5xx)"
    CONNECTION = "endpoint unreachable"
    AUTH = "authentication refused"
    MALFORMED = "malformed answer"
    CONTEXT_OVERFLOW = "prompt exceeds the model's context"
    TRUNCATED = "answer cut off at max_tokens"
    UNSUPPORTED = "request not supported by the endpoint"
    REFUSED = "endpoint refused by policy"
    OTHER = "endpoint error"


class LLMFailure(Exception):
    """The endpoint gave no usable answer; `kind` says why, the message has the detail."""

    def __init__(self, kind: FailureKind, detail: str = "", method_related: bool = False) -> None:
        super().__init__(f"{kind.value}: {detail}" if detail else kind.value)
        self.kind = kind
        self.detail = detail
        self.method_related = method_related  # the request shape may be what the endpoint rejected


def _json_candidates(text: str) -> list[str]:
    """The text itself, a fenced ```json block, and the outermost {...} span."""
    out = [text.strip()]
    fence = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.S)
    if fence:
        out.append(fence.group(1))
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        out.append(text[start:end + 1])
    return out


def parse_answer(text: str) -> LLMAnswer:
    """Parse and validate an answer; raises `LLMFailure(MALFORMED)` with a reason a model can act on."""
    last = "no JSON object found"
    for candidate in _json_candidates(text or ""):
        try:
            data = json.loads(candidate, strict=False)  # raw newlines inside strings are fine
        except json.JSONDecodeError as exc:
            last = f"invalid JSON: {exc.msg} at character {exc.pos}"
            continue
        if isinstance(data, dict) and isinstance(data.get("arguments"), dict):  # a tool call printed as text
            data = data["arguments"]
        if not isinstance(data, dict):
            last = "the answer must be a JSON object"
            continue
        try:
            return LLMAnswer.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'answer'}: {e['msg']}" for e in exc.errors()[:5])
            raise LLMFailure(FailureKind.MALFORMED, problems) from exc
    raise LLMFailure(FailureKind.MALFORMED, last)
