"""The LLM stage: grounded classification through any OpenAI-compatible endpoint.

    from diagnoser.classify import load_config, llm_stage, runbook_texts
    verdict = llm_stage(rule_verdict, analysis.window(), similar, runbook_texts(books), load_config())

Modules: config (endpoint settings), redact (secrets, --no-remote), prompt (template + token budget),
backends (openai / langchain transports), structured (output method chain), answer (the answer
model), guard (grounding, policy, merge), cache (answers, methods), stage (the pipeline),
rules + cli (`diagnoser rules propose`).
"""

from diagnoser.classify.config import LLMConfig, load_config
from diagnoser.classify.stage import llm_stage, runbook_texts

__all__ = ["LLMConfig", "llm_stage", "load_config", "runbook_texts"]
