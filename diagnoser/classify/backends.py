"""Transports to any OpenAI-compatible chat endpoint: the `openai` client or langchain's ChatOpenAI.

A transport sends one chat request with extra API parameters (response_format, tools, ...) and
returns the reply text (message content, or the arguments of the first tool call) with its
finish reason. Every client error becomes an `LLMFailure` with a kind the stage can explain.
Both libraries are optional (`pip install 'diagnoser[llm]'`) and imported only when used.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from functools import cache
from typing import Any

from diagnoser.classify.answer import FailureKind, LLMFailure
from diagnoser.classify.config import LLMConfig

_OVERFLOW = re.compile(r"(?i)context (?:length|window|size)|maximum context|too many tokens|prompt is too long|"
                       r"exceeds? (?:the )?(?:context|max)|requested tokens|input is too long|n_ctx")


@dataclass(frozen=True)
class Reply:
    text: str
    finish_reason: str | None
    tool_called: bool = False
    usage: dict[str, int] | None = None


def map_error(exc: BaseException) -> LLMFailure:
    """Translate an openai/httpx exception into an `LLMFailure`."""
    if isinstance(exc, LLMFailure):
        return exc
    import httpx
    import openai

    detail = str(exc)[:300]
    if isinstance(exc, openai.APITimeoutError | httpx.TimeoutException):
        return LLMFailure(FailureKind.TIMEOUT, detail)
    if isinstance(exc, openai.APIConnectionError | httpx.TransportError):
        return LLMFailure(FailureKind.CONNECTION, detail)
    if isinstance(exc, openai.RateLimitError):
        return LLMFailure(FailureKind.RATE_LIMITED, detail)
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return LLMFailure(FailureKind.AUTH, detail)
    if isinstance(exc, openai.APIStatusError):
        if _OVERFLOW.search(detail):
            return LLMFailure(FailureKind.CONTEXT_OVERFLOW, detail)
        if exc.status_code in (500, 501) or 400 <= exc.status_code < 500:
            # llama.cpp answers 500 to a response_format it does not support; others 400/404/422
            kind = FailureKind.SERVER_ERROR if exc.status_code >= 500 else FailureKind.UNSUPPORTED
            return LLMFailure(kind, f"HTTP {exc.status_code}: {detail}", method_related=True)
        return LLMFailure(FailureKind.SERVER_ERROR, f"HTTP {exc.status_code}: {detail}")
    if isinstance(exc, openai.APIResponseValidationError | json.JSONDecodeError):
        return LLMFailure(FailureKind.MALFORMED, detail)
    return LLMFailure(FailureKind.OTHER, f"{type(exc).__name__}: {detail}")


@cache
def _ssl_context() -> Any:
    import ssl

    return ssl.create_default_context()  # loading the CA bundle takes ~0.1-0.5 s: once per process


def _http_client(config: LLMConfig) -> Any:
    """An httpx client; under --no-remote it ignores proxy variables (a proxy would be remote)."""
    import httpx

    https = (config.base_url or "").lower().startswith("https:")
    return httpx.Client(trust_env=not config.no_remote, timeout=config.timeout,
                        verify=_ssl_context() if https else False)


class Transport(ABC):
    """One chat request to an OpenAI-compatible endpoint."""

    name: str = "?"

    def __init__(self, config: LLMConfig) -> None:
        if config.base_url is None:
            raise ValueError("no endpoint configured")
        self.config = config
        self.model = config.model or ""

    @abstractmethod
    def complete(self, messages: list[dict[str, str]], params: dict[str, Any]) -> Reply:
        """Send the messages with extra request parameters; raise `LLMFailure`."""

    @abstractmethod
    def list_models(self) -> list[str]:
        """Model ids the endpoint serves."""

    def resolve_model(self) -> str:
        """The configured model, else the first one the endpoint lists."""
        if not self.model:
            models = self.list_models()
            if not models:
                raise LLMFailure(FailureKind.OTHER, "no model configured and the endpoint lists none")
            self.model = models[0]
        return self.model


class OpenAITransport(Transport):
    """Through the official `openai` client."""

    name = "openai"

    def __init__(self, config: LLMConfig) -> None:
        super().__init__(config)
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise LLMFailure(FailureKind.OTHER, "the openai package is not installed: pip install 'diagnoser[llm]'"
                             ) from exc
        self._client = openai.OpenAI(base_url=config.base_url, api_key=config.api_key or "not-needed",
                                     timeout=config.timeout, max_retries=config.max_retries,
                                     http_client=_http_client(config))
        self._token_param = "max_tokens"

    def complete(self, messages: list[dict[str, str]], params: dict[str, Any]) -> Reply:
        body = {"model": self.resolve_model(), "messages": messages, "temperature": self.config.temperature,
                self._token_param: self.config.max_tokens, **params}
        try:
            try:
                response = self._client.chat.completions.create(**body)
            except Exception as exc:  # newer OpenAI models reject max_tokens: switch once
                if self._token_param == "max_tokens" and "max_completion_tokens" in str(exc):
                    self._token_param = "max_completion_tokens"
                    body["max_completion_tokens"] = body.pop("max_tokens")
                    response = self._client.chat.completions.create(**body)
                else:
                    raise
        except Exception as exc:
            raise map_error(exc) from exc
        if not getattr(response, "choices", None):
            raise LLMFailure(FailureKind.MALFORMED, "the reply has no choices")
        choice = response.choices[0]
        usage = response.usage.model_dump() if getattr(response, "usage", None) else None
        calls = choice.message.tool_calls or []
        if calls:
            return Reply(calls[0].function.arguments or "", choice.finish_reason, True, usage)
        return Reply(choice.message.content or "", choice.finish_reason, False, usage)

    def list_models(self) -> list[str]:
        try:
            return [m.id for m in self._client.models.list()]
        except Exception as exc:
            raise map_error(exc) from exc


class LangChainTransport(Transport):
    """Through langchain's `ChatOpenAI` (langchain-openai)."""

    name = "langchain"

    def __init__(self, config: LLMConfig) -> None:
        super().__init__(config)
        try:
            from langchain_openai import ChatOpenAI
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise LLMFailure(FailureKind.OTHER, "langchain-openai is not installed: pip install 'diagnoser[llm]'"
                             ) from exc
        self._chat_cls = ChatOpenAI
        self._chat: Any = None
        self._both_limits = True  # ChatOpenAI sends max_completion_tokens; llama.cpp and older servers read max_tokens

    def _model(self) -> Any:
        if self._chat is None:
            c = self.config
            extra = {"max_tokens": c.max_tokens} if self._both_limits else None
            self._chat = self._chat_cls(
                base_url=c.base_url, api_key=c.api_key or "not-needed", model=self.resolve_model(),
                timeout=c.timeout, max_retries=c.max_retries, temperature=c.temperature, max_tokens=c.max_tokens,
                http_client=_http_client(c), extra_body=extra, stream_usage=False)
        return self._chat

    def complete(self, messages: list[dict[str, str]], params: dict[str, Any]) -> Reply:
        from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

        kinds = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}
        lc_messages = [kinds[m["role"]](content=m["content"]) for m in messages]
        try:
            try:
                message = self._model().invoke(lc_messages, **params)
            except Exception as exc:  # an endpoint that refuses both limits at once: keep the standard one
                if not (self._both_limits and "max_tokens" in str(exc)):
                    raise
                self._both_limits, self._chat = False, None
                message = self._model().invoke(lc_messages, **params)
        except Exception as exc:
            raise map_error(exc) from exc
        meta = message.response_metadata or {}
        usage = dict(message.usage_metadata) if message.usage_metadata else None
        finish = meta.get("finish_reason")
        if message.tool_calls:
            return Reply(json.dumps(message.tool_calls[0]["args"]), finish, True, usage)
        if message.invalid_tool_calls:
            return Reply(str(message.invalid_tool_calls[0].get("args") or ""), finish, True, usage)
        content = message.content if isinstance(message.content, str) else json.dumps(message.content)
        return Reply(content, finish, False, usage)

    def list_models(self) -> list[str]:
        import openai

        client = openai.OpenAI(base_url=self.config.base_url, api_key=self.config.api_key or "not-needed",
                               timeout=self.config.timeout, max_retries=0, http_client=_http_client(self.config))
        try:
            return [m.id for m in client.models.list()]
        except Exception as exc:
            raise map_error(exc) from exc


def make_transport(config: LLMConfig) -> Transport:
    return LangChainTransport(config) if config.backend == "langchain" else OpenAITransport(config)
