"""The last step before `unknown`: the closest entry of the failure vocabularies to the job's error lines.

When no signature fired, no collective analysis explained the failure and the incident memory has
no confident neighbour, the error lines are compared (TF-IDF cosine over masked tokens, the same
index as the incident memory) with every root rule's title and example lines: the runbooks and
the vendor catalogs, whose labels come from the vendors' documents. A close enough entry lends its
category and action at a low confidence; `decided_by` is `retrieval` and the note names the entry.

`MIN_SCORE` was measured on the corpus cases where nothing else fired (bench/corpus_eval.py):
above 0.2 the closest entry's category was right 14 times in 20, above 0.3 9 in 10; the threshold is 0.2
and the confidence stays at most 0.5, so such a verdict reads as the weak guess it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnoser.models import Role
from diagnoser.prefilter.runbooks import Runbook
from diagnoser.retrieve.lexical import LexicalIndex
from diagnoser.retrieve.signature import signature_text

MIN_SCORE = 0.2
MAX_CONFIDENCE = 0.5
_cache: dict[tuple[str, ...], tuple[LexicalIndex, dict[str, Runbook]]] = {}


@dataclass(frozen=True)
class Closest:
    rule: Runbook
    score: float


def _index(rules: list[Runbook]) -> tuple[LexicalIndex, dict[str, Runbook]]:
    roots = [r for r in rules if r.role == Role.ROOT]
    key = tuple(r.id for r in roots)
    if key not in _cache:
        _cache.clear()
        docs = ((r.id, signature_text("\n".join([r.title, *r.examples.match])) or r.title) for r in roots)
        _cache[key] = (LexicalIndex.build(docs), {r.id: r for r in roots})
    return _cache[key]


def closest_entry(error_text: str, rules: list[Runbook], min_score: float = MIN_SCORE) -> Closest | None:
    """The vocabulary entry closest to the error lines, if it is close enough."""
    signature = signature_text(error_text)
    if not signature:
        return None
    index, by_id = _index(rules)
    hits = index.search(signature, 1)
    if not hits or hits[0][1] < min_score:
        return None
    return Closest(by_id[hits[0][0]], hits[0][1])
