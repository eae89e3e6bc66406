"""The LLM stage: grounded classification through any OpenAI-compatible endpoint.

    from diagnoser.classify import load_config, review
    verdict = review(analyse(paths), load_config())   # what `diagnoser triage` runs with an endpoint

Modules: config (endpoint settings), redact (secrets, --no-remote), window (the evidence the model
is shown), prompt (template + token budget), backends (openai / langchain transports), structured
(output method chain), answer (the answer model), scope (the job's nodes), policy (the one policy
table for rule, retrieval and LLM verdicts), guard (grounding), merge (rules + retrieval vs. the
model, by strength of evidence), cache (answers, methods), stage (the pipeline), rules + cli
(`diagnoser rules propose`).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from diagnoser.classify.config import LLMConfig, load_config
    from diagnoser.classify.stage import llm_stage, review, runbook_texts

__all__ = ["LLMConfig", "llm_stage", "load_config", "review", "runbook_texts"]
_LAZY = {"LLMConfig": "config", "load_config": "config", "llm_stage": "stage", "review": "stage",
         "runbook_texts": "stage"}


def __getattr__(name: str) -> Any:
    """Import the LLM stage on first use: `classify.redact` (used by every command) stays cheap."""
    if name in _LAZY:
        return getattr(import_module(f"diagnoser.classify.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
