"""On-disk memory of the LLM stage: answers by hash of (model, prompt version, evidence), and
which structured-output method each endpoint accepted.

The key covers the endpoint, the model, the prompt version and the full redacted prompt (which
holds the evidence), so a new template version, another model or one changed log line misses.
Writes are atomic (temp file + rename): concurrent triages never read half a file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from diagnoser import atomic
from diagnoser.classify.answer import LLMAnswer


def _write_atomic(path: Path, data: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(path, data)


def answer_key(base_url: str, model: str, prompt_version: str, messages: list[dict[str, str]]) -> str:
    """sha256 of what determines an answer."""
    blob = json.dumps([base_url.rstrip("/"), model, prompt_version, messages], ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class AnswerCache:
    """Validated answers under `<dir>/answers/<k[:2]>/<k>.json`; a `None` directory caches nothing."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory

    def _path(self, key: str) -> Path | None:
        return None if self.directory is None else self.directory / "answers" / key[:2] / f"{key}.json"

    def get(self, key: str) -> tuple[LLMAnswer, str] | None:
        """(answer, how it was obtained) or None; an unreadable entry counts as a miss."""
        path = self._path(key)
        if path is None or not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return LLMAnswer.model_validate(data["answer"]), str(data.get("method", "?"))
        except (OSError, ValueError, KeyError, TypeError, ValidationError):
            return None

    def put(self, key: str, answer: LLMAnswer, method: str, meta: dict[str, Any] | None = None) -> None:
        path = self._path(key)
        if path is None:
            return
        record = {"answer": answer.model_dump(mode="json"), "method": method, **(meta or {})}
        with contextlib.suppress(OSError):  # a cache that cannot be written only costs a later call
            _write_atomic(path, json.dumps(record, ensure_ascii=False, indent=1))


class MethodMemory:
    """Per endpoint (base URL + model), the structured-output method that last worked."""

    def __init__(self, directory: Path | None) -> None:
        self.path = None if directory is None else directory / "methods.json"
        self._mem: dict[str, str] = {}

    @staticmethod
    def endpoint(base_url: str, model: str) -> str:
        return f"{base_url.rstrip('/')}|{model}"

    def _load(self) -> dict[str, str]:
        if self.path is None or not self.path.is_file():
            return dict(self._mem)
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def get(self, endpoint: str) -> str | None:
        return self._load().get(endpoint, self._mem.get(endpoint))

    def put(self, endpoint: str, method: str) -> None:
        data = self._load()
        self._mem[endpoint] = method
        if self.path is None or data.get(endpoint) == method:
            return
        data[endpoint] = method
        with contextlib.suppress(OSError):
            _write_atomic(self.path, json.dumps(data, indent=1, sort_keys=True))
