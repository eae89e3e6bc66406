"""`llm_stage`: the rules + retrieval verdict, reviewed by an LLM, merged under the guardrails.

Order of work: off or refused endpoint -> notes only; the policy table on the rules + retrieval
verdict (`policy.police`); prompt within the token budget (redacted); cache; structured answer
(method chain); grounding and the same policy table (`guard.check`); merge (`merge.decide`).
Whatever goes wrong on the way (timeout, 5xx, 429, malformed or truncated answer, context
overflow, a bug) yields the incoming verdict with a note saying why: never
"no error found" because a model did not answer.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from diagnoser.classify.answer import FailureKind, LLMAnswer, LLMFailure
from diagnoser.classify.backends import Transport, make_transport
from diagnoser.classify.cache import AnswerCache, MethodMemory, answer_key
from diagnoser.classify.config import LLMConfig
from diagnoser.classify.guard import check
from diagnoser.classify.merge import decide
from diagnoser.classify.policy import JobScope, lines_of, policed, with_own_rule
from diagnoser.classify.prompt import REPAIR_RESERVE, Prompt, build_prompt
from diagnoser.classify.redact import RemoteRefused, check_endpoint, redact
from diagnoser.classify.structured import StructuredClient, schema_reserve
from diagnoser.models import Diagnosis, LogRecord, SimilarIncident
from diagnoser.prefilter.runbooks import Runbook, load_runbooks

if TYPE_CHECKING:
    from diagnoser.triage import Analysis

PROMPT_VERSION = "triage-v1"
SAFETY_MARGIN = 64  # tokens: chat template specials, estimator error


def _noted(d: Diagnosis, *notes: str) -> Diagnosis:
    return d.model_copy(update={"notes": [*d.notes, *notes]})


def runbook_texts(books: Iterable[Runbook]) -> dict[str, str]:
    """`{runbook path: text}` for the prompt, from loaded runbooks (e.g. the rule's and competitors')."""
    return {b.path or b.id: f"id: {b.id}\ncategory: {b.category.value}\nsubtype: {b.subtype}\n"
                            f"action: {b.action.value}\n{_localised(b)}---\n{b.body}" for b in books}


def _localised(b: Runbook) -> str:
    return f"action when the evidence names the node: {b.localised_action.value}\n" if b.localised_action else ""


def _runbook_of(texts: dict[str, str]) -> dict[str, str]:
    """subtype -> runbook path, for the runbooks the prompt was given."""
    out: dict[str, str] = {}
    for name, text in texts.items():
        m = re.search(r"^subtype:\s*['\"]?([\w-]+)", text, re.M)
        if m and name.endswith(".md"):
            out.setdefault(m.group(1), name)
    return out


def prompt_budget(config: LLMConfig) -> int:
    """Estimated prompt tokens allowed: context minus answer, schema, repair turn and margin."""
    return config.context_tokens - config.max_tokens - schema_reserve() - REPAIR_RESERVE - SAFETY_MARGIN


def prepare(rule: Diagnosis, window: list[LogRecord], similar: list[SimilarIncident],
            runbook_texts: dict[str, str], config: LLMConfig) -> Prompt:
    """The prompt the stage would send (redacted, within budget); raises ValueError if none fits."""
    prompt = build_prompt(rule, window, similar, runbook_texts, prompt_budget(config), PROMPT_VERSION)
    prompt.system, prompt.user = redact(prompt.system), redact(prompt.user)
    return prompt


def _priorities() -> dict[str, int]:
    try:
        return {b.id: b.priority for b in load_runbooks()}
    except Exception:  # noqa: BLE001 - an unreadable runbook directory must not lose the verdict
        return {}


def llm_stage(rule: Diagnosis, window: list[LogRecord], similar: list[SimilarIncident],
              runbook_texts: dict[str, str], config: LLMConfig, *, transport: Transport | None = None,
              scope: JobScope | None = None, records: dict[tuple[str, int], LogRecord] | None = None
              ) -> Diagnosis:
    """The merged verdict of rules + retrieval (`rule`) and the LLM, under the guardrails.

    `window`: the evidence records the model may see and cite (`window.evidence_window`);
    `similar`: retrieved incidents; `runbook_texts`: `{runbook path: text}` of the runbooks that
    matched (see `runbook_texts`); `scope`: the job's nodes, ranks and rule matches
    (`scope.scope_of(analysis)`; without it, the window's own fields); `records`: the job's records
    by (source, line), to find the lines behind the rule verdict. The result's `decided_by` says
    who decided; `notes` say what the LLM said, what was dropped, and why the stage did not run.
    """
    base = rule if rule.similar_incidents or not similar else rule.model_copy(update={"similar_incidents": similar})
    if not config.enabled:
        return _noted(base, config.describe())
    if scope is None:  # no Analysis at hand: the window's own node and rank fields
        scope = JobScope.of_records(window, base.culprit.nodes, _priorities())
    scope = with_own_rule(scope, base)
    known = {**(records or {}), **{(r.source, r.line): r for r in window}}
    rule_lines = lines_of(base, known)
    base = policed(base, rule_lines, scope)
    try:
        check_endpoint(config.base_url or "", config.no_remote)
        prompt = prepare(base, window, similar, runbook_texts, config)
    except RemoteRefused as exc:
        return _noted(base, f"LLM stage skipped: {exc}; verdict from rules + retrieval")
    except ValueError as exc:
        return _noted(base, f"LLM stage skipped ({FailureKind.CONTEXT_OVERFLOW.value}: {exc}); "
                            "verdict from rules + retrieval")
    started = time.monotonic()
    try:
        answer, source = _answer(prompt, config, transport)
    except LLMFailure as failure:
        return _noted(base, f"LLM stage failed ({failure}); verdict from rules + retrieval")
    except Exception as exc:  # a bug or an unexpected client error must not lose the verdict
        return _noted(base, f"LLM stage error ({type(exc).__name__}: {str(exc)[:200]}); "
                            "verdict from rules + retrieval")
    source += f", {time.monotonic() - started:.1f} s"
    evidence = {i: item.record for i, item in prompt.items.items()}
    flagged = {i for i, item in prompt.items.items() if item.flagged}
    checked = check(answer, evidence, flagged, scope)
    merged = decide(base, checked, scope, rule_lines, _runbook_of(runbook_texts), source)
    return _noted(merged, *prompt.notes) if prompt.notes else merged


def without_off_note(diagnosis: Diagnosis, config: LLMConfig) -> Diagnosis:
    """The verdict without the "LLM stage off" note when no endpoint is configured: that is the normal
    offline case, not news on every verdict (`diagnoser triage --verbose` keeps it)."""
    if config.enabled:
        return diagnosis
    return diagnosis.model_copy(update={"notes": [n for n in diagnosis.notes if n != config.describe()]})


def review(analysis: Analysis, config: LLMConfig, *, transport: Transport | None = None) -> Diagnosis:
    """The LLM stage on a triage `Analysis` (what `diagnoser triage` runs when an endpoint is set):
    the evidence window of `window.evidence_window`, the job scope of `scope.scope_of`."""
    from diagnoser.classify.scope import all_records, scope_of
    from diagnoser.classify.window import evidence_window

    if not config.enabled:  # no endpoint: say so, without building a window no model will read
        return llm_stage(analysis.diagnosis, [], list(analysis.diagnosis.similar_incidents), {}, config)
    d = analysis.demarcation
    books = [analysis.runbooks[m.runbook_id] for m in [d.root, *d.competing[:2]] if m]
    return llm_stage(analysis.diagnosis, evidence_window(analysis), list(analysis.diagnosis.similar_incidents),
                     runbook_texts(books), config, transport=transport, scope=scope_of(analysis),
                     records=all_records(analysis))


def _answer(prompt: Prompt, config: LLMConfig, transport: Transport | None) -> tuple[LLMAnswer, str]:
    """(answer, where it came from) from the cache or the endpoint; fills the cache."""
    transport = transport or make_transport(config)
    model = transport.resolve_model()
    messages = prompt.messages()
    key = answer_key(config.base_url or "", model, prompt.version, messages)
    cache = AnswerCache(config.cache_dir)
    hit = cache.get(key)
    if hit is not None:
        return hit[0], f"cached answer of {model} via {hit[1]}"
    client = StructuredClient(transport, MethodMemory(config.cache_dir))
    outcome = client.ask(messages)
    cache.put(key, outcome.answer, outcome.method.value,
              {"model": model, "prompt_version": prompt.version, "created": time.time()})
    repaired = " after one repair" if outcome.repaired else ""
    return outcome.answer, (f"{model} via {outcome.method.value} ({transport.name}), "
                            f"{outcome.calls} call(s){repaired}")
