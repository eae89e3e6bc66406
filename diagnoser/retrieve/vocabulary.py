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


NOT = "#not"  # suffix of the documents made of an entry's `no_match` examples
SEARCHED = 8
# masking makes "<Response [403]>" and "<Response [500]>" the same text: only a counter-example this close (the
# same line but for what masking hides, at most) refuses its entry
REFUSED_AT = 0.9


def _index(rules: list[Runbook]) -> tuple[LexicalIndex, dict[str, Runbook]]:
    roots = [r for r in rules if r.role == Role.ROOT and not r.given_by]  # a job-wide verdict needs its analysis
    key = tuple(r.id for r in roots)
    if key not in _cache:
        _cache.clear()
        docs = [(r.id, signature_text("\n".join([r.title, *r.examples.match])) or r.title) for r in roots]
        # an entry's counter-examples are lines its authors said it must not match: text that is one of them is
        # not that entry's, however many words it shares with the entry's own examples
        docs += [(r.id + NOT, signature_text("\n".join(r.examples.no_match))) for r in roots if r.examples.no_match]
        _cache[key] = (LexicalIndex.build([d for d in docs if d[1]]), {r.id: r for r in roots})
    return _cache[key]


def closest_entry(error_text: str, rules: list[Runbook], min_score: float = MIN_SCORE) -> Closest | None:
    """The vocabulary entry closest to the error lines, if it is close enough and the lines are not one of
    that entry's counter-examples."""
    signature = signature_text(error_text)
    if not signature:
        return None
    index, by_id = _index(rules)
    refused: set[str] = set()
    for doc_id, score in index.search(signature, SEARCHED):
        if score < min_score:
            return None
        if doc_id.endswith(NOT):
            if score >= REFUSED_AT:
                refused.add(doc_id.removesuffix(NOT))
        elif doc_id not in refused:
            return Closest(by_id[doc_id], score)
    return None
