"""Incident memory: past failures, their verdicts and outcomes, retrievable offline.

Entry points (import the module you need; this package imports nothing, chromadb least of all):
- `api.similar_incidents` / `api.retrieval_verdict` / `api.similar_runbooks`: what triage calls;
- `store.IncidentStore`: the store itself (chromadb on disk, dedup, lock, journal, export/import);
- `cli.register`: the `diagnoser incidents ...` commands;
- `mask.mask_text`, `signature.signature_text`: how log text becomes a failure signature;
- `lexical.LexicalIndex` (the ranking), `embed.Embedder` (the vector channel), `vote.neighbour_vote`.
"""
