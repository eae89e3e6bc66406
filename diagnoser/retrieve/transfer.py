"""Export and import files (`incident/v1` JSONL), shared by the embedded and the server-backed store."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import IO

from diagnoser import atomic
from diagnoser.retrieve.incident import Incident
from diagnoser.retrieve.lines import read_lines


class ImportFileError(ValueError):
    """A line of an import file is not an `incident/v1` record; the whole file is refused."""


def write_export(incidents: Iterable[Incident], out: Path | IO[str]) -> int:
    """Write every incident as one `incident/v1` JSON line (sorted by id); returns the count.
    A file is written whole or not at all (a temporary file renamed over it)."""
    lines = [inc.model_dump_json(by_alias=True) + "\n" for inc in sorted(incidents, key=lambda i: i.id)]
    if isinstance(out, Path):
        atomic.write_text(out, "".join(lines))
    else:
        out.writelines(lines)
    return len(lines)


def read_import(source: Path | IO, max_line_bytes: int) -> tuple[list[Incident], list[str]]:
    """The incidents of an export or a journal, and a note for each line left out.

    Read line by line: a line over `max_line_bytes` is skipped unread, and a last line cut short
    (a writer that crashed mid-line) is left out. Any other line that is not an `incident/v1`
    record, or an unreadable file, raises ImportFileError.
    """
    if isinstance(source, Path):
        try:
            with source.open("rb") as fh:
                return read_import(fh, max_line_bytes)
        except OSError as exc:
            raise ImportFileError(f"cannot read {source}: {exc.strerror or exc}") from exc
    incidents, unread = [], []
    for line in read_lines(source, max_line_bytes):
        try:
            if line.text is None:
                raise ValueError(line.problem)
            incidents.append(Incident.model_validate_json(line.text))
        except ValueError as exc:
            if not line.whole:
                unread.append(f"line {line.number} is cut short (no newline: a writer stopped mid-line), left out")
            elif line.text is None and line.problem.startswith("longer"):
                unread.append(f"line {line.number} is {line.problem}")
            else:
                raise ImportFileError(f"line {line.number} is not an incident/v1 record: {str(exc)[:300]}") from exc
    return incidents, unread
