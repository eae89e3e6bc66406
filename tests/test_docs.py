"""The user docs in docs/ match the code: the policy tables are generated from it, the verdict contract names every
field, the vocabulary every value, and the README links them (not ../shared)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from diagnoser import policy_doc
from diagnoser.models import Action, Category, Culprit, DecidedBy, Diagnosis, Evidence, FirstFailure, SimilarIncident

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def test_policy_doc_is_generated_from_the_code() -> None:
    assert (DOCS / "policy.md").read_text() == policy_doc.render(), (
        "docs/policy.md is stale: python -m diagnoser.policy_doc > docs/policy.md")


def test_policy_doc_has_every_category_and_restart_rule() -> None:
    text = policy_doc.render()
    for cat in Category:
        assert f"| `{cat.value}` |" in text
    for rule in ("low_confidence", "user_code", "no_culprit", "crash_loop", "node_cap", "max_restarts", "budget"):
        assert f"`{rule}`" in text


def _table_fields(text: str) -> set[str]:
    return set(re.findall(r"^\| `(\w+)`", text, re.M)) | {f for row in re.findall(r"^\| `(\w+)`, `(\w+)`", text, re.M)
                                                         for f in row}


def test_the_verdict_contract_names_every_field() -> None:
    text = (DOCS / "diagnosis-v1.md").read_text()
    documented = _table_fields(text)
    for model in (Diagnosis, Culprit, Evidence, FirstFailure, SimilarIncident):
        for name, field in model.model_fields.items():
            assert (field.alias or name) in documented, f"{model.__name__}.{name} is not in docs/diagnosis-v1.md"
    example = json.loads(re.search(r"```json\n(.*?)```", text, re.S).group(1))
    Diagnosis.model_validate(example)  # the example is a valid verdict


def test_the_vocabulary_has_every_value() -> None:
    text = (DOCS / "concepts.md").read_text()
    for value in [*Category, *Action]:
        assert f"| `{value.value}` |" in text
    for value in DecidedBy:
        assert f"`{value.value}`" in text


def test_the_readme_links_the_docs_not_a_file_outside_the_repository() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "../shared/DESIGN.md" not in readme
    for name in ("concepts.md", "diagnosis-v1.md", "policy.md", "trust.md"):
        assert f"docs/{name}" in readme and (DOCS / name).is_file()
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).is_file(), link
