"""Structured output with the strongest method an endpoint supports, falling back down the chain.

    json_schema  ->  forced tool call  ->  response_format json_object + schema  ->  plain JSON

The first method that answers is remembered per endpoint (a llama.cpp server rejects json_schema
with HTTP 500 but takes the other two). Every answer is validated; an invalid one gets one repair
turn that says what was wrong. A reply cut off at max_tokens, a timeout, a rate limit or an
overloaded server ends the attempt at once: retrying other methods would not help.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from diagnoser.classify.answer import FailureKind, LLMAnswer, LLMFailure, answer_schema, parse_answer
from diagnoser.classify.backends import Reply, Transport
from diagnoser.classify.cache import MethodMemory

TOOL_NAME = "submit_diagnosis"


class Method(StrEnum):
    JSON_SCHEMA = "json_schema"
    TOOL_CALL = "tool_call"
    JSON_OBJECT = "json_object"
    PLAIN = "plain_json"


CHAIN = [Method.JSON_SCHEMA, Method.TOOL_CALL, Method.JSON_OBJECT, Method.PLAIN]


def request_for(method: Method) -> tuple[dict[str, Any], str]:
    """(extra request parameters, text appended to the system message) for a method."""
    schema = answer_schema()
    if method == Method.JSON_SCHEMA:
        strict = answer_schema(strict=True)
        return {"response_format": {"type": "json_schema",
                                    "json_schema": {"name": "diagnosis", "schema": strict, "strict": True}}}, ""
    if method == Method.TOOL_CALL:
        tool = {"type": "function", "function": {"name": TOOL_NAME, "parameters": schema,
                                                 "description": "Submit the diagnosis of the failed job."}}
        return {"tools": [tool], "tool_choice": {"type": "function", "function": {"name": TOOL_NAME}}}, ""
    if method == Method.JSON_OBJECT:
        return {"response_format": {"type": "json_object", "schema": schema}}, ""
    compact = json.dumps(schema, separators=(",", ":"))
    return {}, f"\n\nThe JSON object must follow this JSON schema:\n{compact}"


def schema_reserve() -> int:
    """Tokens to keep free for the schema text the plain method adds (or a server injects)."""
    from diagnoser.classify.prompt import estimate_tokens

    return estimate_tokens(json.dumps(answer_schema(), separators=(",", ":"))) + 32


@dataclass(frozen=True)
class Outcome:
    answer: LLMAnswer
    method: Method
    calls: int
    repaired: bool
    usage: dict[str, int] | None


def _with_system_suffix(messages: list[dict[str, str]], suffix: str) -> list[dict[str, str]]:
    if not suffix:
        return messages
    out = [dict(m) for m in messages]
    out[0]["content"] += suffix
    return out


class StructuredClient:
    """Asks a transport for an `LLMAnswer` using the method chain and the per-endpoint memory."""

    def __init__(self, transport: Transport, memory: MethodMemory) -> None:
        self.transport = transport
        self.memory = memory
        self.calls = 0

    def _send(self, messages: list[dict[str, str]], params: dict[str, Any]) -> Reply:
        self.calls += 1
        reply = self.transport.complete(messages, params)
        if reply.finish_reason == "length":
            limit = self.transport.config.max_tokens
            raise LLMFailure(FailureKind.TRUNCATED, f"the reply stopped at max_tokens={limit}")
        return reply

    def attempt(self, method: Method, messages: list[dict[str, str]]) -> tuple[LLMAnswer, bool, Reply]:
        """One method: a request, and one repair turn if the answer does not validate."""
        params, suffix = request_for(method)
        sent = _with_system_suffix(messages, suffix)
        reply = self._send(sent, params)
        if method == Method.TOOL_CALL and not reply.tool_called and "{" not in reply.text:
            raise LLMFailure(FailureKind.UNSUPPORTED, "the endpoint did not call the forced tool", True)
        try:
            return parse_answer(reply.text), False, reply
        except LLMFailure as bad:
            self._raise_if_cut(reply)
            repair = {"role": "user", "content": f"Your previous reply was not valid: {bad.detail}. Reply again "
                                                 "with only the JSON object, following the schema exactly."}
            reply = self._send([*sent, repair], params)
            try:
                return parse_answer(reply.text), True, reply
            except LLMFailure:
                self._raise_if_cut(reply)
                raise

    def _raise_if_cut(self, reply: Reply) -> None:
        """Some servers (llama.cpp on tool calls) say `tool_calls`, not `length`, for a cut-off reply."""
        used = (reply.usage or {}).get("completion_tokens") or (reply.usage or {}).get("output_tokens") or 0
        limit = self.transport.config.max_tokens
        if used >= limit:
            raise LLMFailure(FailureKind.TRUNCATED, f"the reply used all max_tokens={limit} and is not valid JSON")

    def ask(self, messages: list[dict[str, str]]) -> Outcome:
        """An answer from the strongest working method; raises `LLMFailure` when none gives one."""
        model = self.transport.resolve_model()
        endpoint = MethodMemory.endpoint(self.transport.config.base_url or "", model)
        remembered = self.memory.get(endpoint)
        start = CHAIN.index(Method(remembered)) if remembered in set(CHAIN) else 0
        failures: list[LLMFailure] = []
        for method in CHAIN[start:]:
            try:
                answer, repaired, reply = self.attempt(method, messages)
            except LLMFailure as failure:
                if failure.method_related and not (failure.kind == FailureKind.SERVER_ERROR and method == remembered):
                    failures.append(failure)
                    continue  # the endpoint may not support this request shape: try the next one
                raise
            if method != remembered:
                self.memory.put(endpoint, method.value)
            return Outcome(answer, method, self.calls, repaired, reply.usage)
        last = failures[-1] if failures else LLMFailure(FailureKind.OTHER, "no method left to try")
        tried = ", ".join(f"{m.value}: {f.kind.value}" for m, f in zip(CHAIN[start:], failures, strict=False))
        raise LLMFailure(last.kind, f"every structured-output method failed ({tried}); last: {last.detail}")
